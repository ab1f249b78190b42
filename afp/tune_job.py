"""``afp tune`` as one library call: score a dev set once, choose the weights (the joint search,
or a grid), save and plot them, and the report's text.

    from afp.rescore_job import RescoreSetup
    from afp.tune_job import TuneJob, run_tune_job

    report = run_tune_job(TuneJob(RescoreSetup(), inputs=("dev.lats",), refs="dev.trn", save="w.json"))

The report is :func:`afp.tune.joint_tune`'s (or :func:`afp.tune.tune`'s with a grid), what
``afp tune --json`` prints; :func:`joint_report_lines` and :func:`grid_report_lines` are the lines
``afp tune`` prints without ``--json``.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from afp.rescore_job import RescoreSetup
from afp.tune import Grid, Tuner, joint_tune
from lattices.formats import AUTO as AUTO_FORMAT

__all__ = ["DEFAULT_FOLD_RESTARTS", "DEFAULT_FOLDS", "DEFAULT_RESTARTS", "DEFAULT_SEED", "GRID_DEFAULTS", "GRID_TOP", "NothingSaved", "TuneJob",
           "TuneJobError", "comparison_text", "grid_report_lines", "joint_report_lines", "load_tuner", "parse_values",
           "run_tune_job"]

#: a grid's rows ``afp tune`` prints, best first (``--top``)
GRID_TOP = 15
#: a grid's values where its option is not given (``--lm-weights`` ...), as the options' texts
GRID_DEFAULTS = {"lm_weights": "0:1:0.1", "old_lm_weights": "0,0.5,1", "word_penalties": "0", "unk_penalties": "0"}
#: the joint search's defaults, :func:`afp.tune.joint_tune`'s own: random restarts, cross-validation
#: folds and each fold's own restarts, the seed of the restarts and the bootstrap
_SEARCH = inspect.signature(joint_tune).parameters
DEFAULT_RESTARTS: int = _SEARCH["restarts"].default
DEFAULT_FOLDS: int = _SEARCH["folds"].default
DEFAULT_FOLD_RESTARTS: int = _SEARCH["fold_restarts"].default
DEFAULT_SEED: int = _SEARCH["seed"].default
_GRID_POINT = ("lm_weight", "old_lm_weight", "word_penalty", "unk_penalty")


class TuneJobError(ValueError):
    """Options of a tuning job that cannot be used; the message names the option."""


class NothingSaved(ValueError):
    """``save`` was asked for and no point was chosen (the chosen point is worse than the baseline):
    nothing was written. ``report``: the job's report."""

    def __init__(self, message: str, report: dict[str, Any]) -> None:
        super().__init__(message)
        self.report = report


def parse_values(text: str, flag: str) -> tuple[float, ...]:
    """``0,0.1,0.2`` or a range ``0:1:0.1`` (start:stop:step, stop included) -> the values;
    :class:`TuneJobError` naming ``flag`` otherwise."""
    try:
        if ":" in text:
            start, stop, step = (float(x) for x in text.split(":"))
            if step <= 0 or stop < start:
                raise ValueError
            count = int(round((stop - start) / step)) + 1
            return tuple(round(start + i * step, 10) for i in range(count))
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise TuneJobError(f"{flag} {text!r}: expected numbers separated by commas, or start:stop:step") from None


@dataclass(frozen=True)
class TuneJob:
    """An ``afp tune`` job (the fields are its flags).

    ``setup``: the model, old LM, features and fixed options; ``inputs`` in ``format``: the dev
    set's lattices or n-best lists; ``refs``: its references (:func:`afp.wer.read_references`).
    The joint search: ``tune_score_weights`` (``NAME,...``: named scores tuned too),
    ``restarts``, ``folds`` (cross-validation; 1: none), ``fold_restarts`` (each fold's own random
    restarts), ``seed``, ``baseline`` (the recogniser's own
    1-best: reported, and nothing saved when the chosen point is worse). A grid instead with
    ``grid``, ``mbr`` or any of ``lm_weights``, ``old_lm_weights``, ``word_penalties``,
    ``unk_penalties`` (comma lists or ``start:stop:step``; unset: :data:`GRID_DEFAULTS`); ``plot``:
    a PNG of the grid. ``save``: the weights file to write (:class:`afp.weights.TunedWeights`);
    ``command``: recorded in it. ``progress``: progress bars (None: when stderr is a terminal).
    ``workers``: lattices scored at a time, in worker processes on a CPU
    (:meth:`afp.rescore_job.LoadedSetup.scored`)."""

    setup: RescoreSetup
    inputs: tuple[str, ...]
    refs: str
    format: str = AUTO_FORMAT
    tune_score_weights: str | None = None
    restarts: int = DEFAULT_RESTARTS
    folds: int = DEFAULT_FOLDS
    fold_restarts: int = DEFAULT_FOLD_RESTARTS
    seed: int = DEFAULT_SEED
    baseline: str | None = None
    save: str | None = None
    grid: bool = False
    lm_weights: str | None = None
    old_lm_weights: str | None = None
    word_penalties: str | None = None
    unk_penalties: str | None = None
    mbr: bool = False
    plot: str | None = None
    command: str | None = None
    progress: bool | None = None
    workers: int = 1

    @property
    def grid_mode(self) -> bool:
        """Whether a grid is evaluated instead of the joint search."""
        return self.grid or self.mbr or any(getattr(self, name) is not None for name in GRID_DEFAULTS)

    def grid_of(self) -> Grid:
        """The grid (:class:`afp.tune.Grid`), its values parsed and checked."""
        values = {name: parse_values(getattr(self, name) or default, "--" + name.replace("_", "-"))
                  for name, default in GRID_DEFAULTS.items()}
        grid = Grid(**values)
        grid.points()  # validate before the long part
        return grid


def run_tune_job(job: TuneJob) -> dict[str, Any]:
    """Score the dev set, search, and write ``save`` (and ``plot``); the report (``saved``: the
    file written by the joint search). Raises :class:`NothingSaved` (with the report) when
    ``save`` is asked for and the joint search chose no point."""
    from afp.wer import read_references

    progress = sys.stderr.isatty() if job.progress is None else job.progress
    grid = job.grid_of() if job.grid_mode else None  # checked before the long part
    tuner = load_tuner(job, read_references(job.refs), progress)
    if grid is not None:
        return _grid_search(job, tuner, grid)
    return _joint_search(job, tuner, progress)


def load_tuner(job: TuneJob, refs: dict[str, list[str]], progress: bool = False) -> Tuner:
    """The job's dev set scored once (:class:`afp.tune.Tuner`): the model, the options of
    ``job.setup`` (:meth:`RescoreSetup.rescore_options`, the model's unknown-word penalty filled
    in), the old LM and the features, and every input added against ``refs``."""
    from afp.jobs import iter_lattices
    from afp.rescore_job import LoadedSetup

    with LoadedSetup(job.setup, workers=job.workers) as ready:
        tuner = Tuner(ready.scorer, ready.options, refs, device=ready.device, old_lm=ready.old_lm,
                      features=ready.features, mbr=job.mbr)
        tuner.add(iter_lattices(list(job.inputs), job.format, ready.symbols), progress=progress, score=ready.scored)
    return tuner


def _joint_search(job: TuneJob, tuner: Tuner, progress: bool) -> dict[str, Any]:
    from afp.tune import chosen_weights
    from afp.wer import read_hypotheses

    scores = tuple(n.strip() for n in (job.tune_score_weights or "").split(",") if n.strip())
    baseline = read_hypotheses(job.baseline) if job.baseline else None
    report = joint_tune(tuner, scores, restarts=job.restarts, folds=job.folds, seed=job.seed, progress=progress,
                        baseline=baseline, fold_restarts=job.fold_restarts)
    if job.save:
        best, chosen = report["best"], report["chosen"]
        record = {"wer": best["wer"], "first_pass_wer": report["first_pass_wer"],
                  "cross_validated_wer": report.get("cross_validated", {}).get("wer"),
                  "utterances": report["utterances"], "inputs": inputs_record(job.inputs, tuner), "refs": job.refs,
                  "model": str(job.setup.model.model or "bundled default"), "command": job.command,
                  "chosen": chosen["reason"]}
        if chosen["point"] is None:
            raise NothingSaved(f"--save {job.save}: nothing written: {chosen['reason']}", report)
        chosen_weights(tuner, report, record).write(job.save)
        report["saved"] = job.save
    return report


def inputs_record(inputs: Sequence[str], tuner: Tuner) -> dict[str, Any]:
    """What a weights file says of the dev set it was tuned on: how many inputs, and a digest
    (SHA-256) of the utterance keys tuned on, sorted (the same dev set gives the same digest
    wherever its files are), not the file list (a corpus would write megabytes)."""
    import hashlib

    keys = sorted(u.key for u in tuner.utterances)
    return {"count": len(inputs), "utterances": len(keys),
            "keys_sha256": hashlib.sha256("\n".join(keys).encode()).hexdigest()}


def _grid_search(job: TuneJob, tuner: Tuner, grid: Grid) -> dict[str, Any]:
    from afp.tune import chosen_weights, plot, tune

    report = tune(tuner, grid, mbr=job.mbr, seed=job.seed)
    best = report["best"]
    if job.save:
        chosen_weights(tuner, report, {"wer": best["wer"], "first_pass_wer": report["first_pass_wer"],
                                       "grid": True}).write(job.save)
    if job.plot:
        plot(report, job.plot, title=f"afp tune: {' '.join(job.inputs)}"[:90])
    return report


# ------------------------------------------------------------------------------- the report's text
def comparison_text(c: dict[str, Any]) -> str:
    """A significance comparison (:meth:`afp.significance.Comparison.to_json`) in one line."""
    return (f"{c['wer_a']:.2f}% -> {c['wer_b']:.2f}% ({c['difference']:+.2f}), matched pairs p={c['mapsswe']['p']:.3g}, "
            f"bootstrap 95% [{c['bootstrap']['low']:+.2f}, {c['bootstrap']['high']:+.2f}], P(better)="
            f"{c['bootstrap']['poi']:.3f}" + (" (significant)" if c["significant"] else " (not significant)"))


def _header(report: dict[str, Any]) -> list[str]:
    from afp.wer import CASE_NOTE

    oracle = f", oracle {report['oracle_wer']:.2f}%" if report["oracle_wer"] is not None else ""
    return ([f"note: {CASE_NOTE}"] if report["ignore_case"] else []) + [
        f"{report['utterances']} utterances, {report['ref_words']} reference words; first pass WER "
        f"{report['first_pass_wer']:.2f}%{oracle}"]


def joint_report_lines(report: dict[str, Any], baseline: str | None = None) -> list[str]:
    """The joint search's report as ``afp tune`` prints it (``baseline``: the baseline file's name)."""

    def shown(p: dict[str, float]) -> str:
        return " ".join(f"{k.removeprefix('score:')} {v:.4g}" for k, v in p.items())

    best, chosen, start = report["best"], report["chosen"], report["start"]
    point = {k: v for k, v in best.items() if k not in ("wer", "errors", "against_first_pass")}
    agree = start["reproduces_first_pass"]
    lines = _header(report) + [
        f"start, the first pass's own weights (reproducing {agree:.1%} of its choices): WER {start['wer']:.2f}%  "
        f"[{shown(start['point'])}]" if agree == agree else f"start: WER {start['wer']:.2f}%  [{shown(start['point'])}]",
        f"tuned: WER {best['wer']:.2f}%  [{shown(point)}]",
        f"  against the first pass: {comparison_text(best['against_first_pass'])}"]
    if "cross_validated" in report:
        cv = report["cross_validated"]
        lines += [f"cross-validated ({cv['folds']} folds, each decoded with weights tuned on the others): WER "
                  f"{cv['wer']:.2f}%", f"  against the first pass: {comparison_text(cv['against_first_pass'])}"]
    if "baseline" in report:
        b = report["baseline"]
        lines.append(f"baseline ({baseline}): WER {b['wer']:.2f}%; the chosen point against it: "
                     f"{comparison_text(b['chosen_against_baseline'])}")
    shown_point = chosen["point"] is not None and not chosen["is_first_pass"]
    lines.append(f"chosen: {chosen['reason']}" + (f"  [{shown(chosen['point'])}]" if shown_point else ""))
    if report["at_edge"]:
        lines.append(f"warning: {', '.join(report['at_edge'])} ended at the edge of its range: the best value may "
                     "lie beyond")
    lines.append(f"{report['line_searches']} line searches in {report['seconds']:.1f} s "
                 f"({report['evaluations_per_second']:.1f} evaluations/s; {report['method']})")
    if "saved" in report:
        lines.append(f"saved {report['saved']}: afp rescore --weights {report['saved']} ... applies them")
    return lines


def grid_report_lines(report: dict[str, Any], mbr: bool = False, top: int = GRID_TOP) -> list[str]:
    """A grid's report as ``afp tune --grid`` prints it: the ``top`` rows, best first, and the best point."""

    def flags(point: dict[str, Any]) -> str:
        return " ".join(f"--{k.replace('_', '-')} {point[k]:g}" for k in _GRID_POINT)

    best = report["best"]
    lines = _header(report) + ["lm_weight old_lm_weight word_penalty unk_penalty    WER" + ("    MBR" if mbr else "")]
    for row in sorted(report["grid"], key=lambda r: r["errors"])[:top]:
        line = (f"{row['lm_weight']:9g} {row['old_lm_weight']:13g} {row['word_penalty']:12g} "
                f"{row['unk_penalty']:11g} {row['wer']:6.2f}")
        lines.append(line + (f" {row['mbr_wer']:6.2f}" if mbr else ""))
    lines += [f"best: {flags(best)}  (WER {best['wer']:.2f}%)",
              f"  against the first pass: {comparison_text(best['against_first_pass'])}"]
    if best["wer"] > report["first_pass_wer"]:
        lines.append("warning: no grid point reaches the first pass's WER: keep the first pass (--lm-weight 0 "
                     "--old-lm-weight 1), or tune without a grid (the default search starts at the first pass)")
    if mbr:
        b = report["best_mbr"]
        lines.append(f"best MBR: {flags(b)} --decode mbr  (WER {b['wer']:.2f}%)")
    return lines
