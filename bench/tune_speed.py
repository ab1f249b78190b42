"""How long ``afp tune`` takes against ``afp rescore --weights`` on the same lattices, before and
after a change, and what its restarts and folds buy (issue 40).

On the first ``--limit`` lattices of each PocketSphinx dev set (``bench.pocketsphinx_set``), with
``models/librispeech``, one torch thread, one process at a time:

1. ``afp tune --save W.json`` with its defaults (3 restarts, 5 folds searched without restarts), timed (wall, and the
   report's search seconds), by this tree's code and, with ``--before REF``, by the code of
   ``REF`` (a git worktree) in the same run: the chosen point, its WER on the set, the
   cross-validated WER, the line searches.
2. ``afp rescore --weights W.json`` on the same lattices, timed (the target: tuning at most 1.5x
   this; with ``--before``, by the ``REF`` code too), with its peak memory and real-time factor
   (audio seconds from the set's ``set.json``; the target: 0.05), beside ``afp rescore`` with the
   untuned defaults, and on the other set's lattices (the weights' held-out WER).
3. ``afp tune`` with ``--fold-restarts 3`` or ``--restarts 0`` (``--study``): what each default
   buys (``--folds 1``, no cross-validation, was measured before: ``git log bench/results/tune_speed.json``).
4. ``afp rescore --weights W.json`` on every lattice of the set (``--every-lattice``; the issue's
   measure of the real-time factor, weights tuned on the first ``--limit``), by this tree's code
   and ``--before``'s alternately, ``--rounds`` times each: the least wall of each, its WER and
   peak memory.

    .venv/bin/python -m bench.tune_speed --limit 100 --before d7c2ad6 --study
    .venv/bin/python -m bench.tune_speed --limit 100 --before 1631d38 --every-lattice --rounds 2

Results: ``bench/results/tune_speed.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, RESULTS, environment, python_path, write_json

SETS = ("dev_clean", "dev_other")
STUDY = (("restarts 3, folds 5 without restarts (defaults)", ()),
         ("restarts 3, folds 5 with 3 restarts each", ("--fold-restarts", "3")),
         ("restarts 0, folds 5", ("--restarts", "0")))


def lattices_of(set_dir: Path, limit: int | None) -> list[Path]:
    files = sorted((set_dir / "lattices").glob("*.slf"))
    if not files:
        raise SystemExit(f"no lattices in {set_dir / 'lattices'}: build the set first (python -m bench.pocketsphinx_set)")
    return files[:limit] if limit else files


def afp(tree: Path, *argv: str) -> tuple[float, str, float]:
    """Run ``afp`` from ``tree``'s code (one torch thread); wall seconds, standard output and the
    process's peak resident memory in MiB (its own rusage)."""
    env = {**os.environ, "PYTHONPATH": python_path(tree), "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        process = subprocess.Popen([sys.executable, "-m", "service.cli", *argv], cwd=tree, env=env,
                                   stdout=subprocess.PIPE, stderr=err)
        with process.stdout as stdout:  # type: ignore[union-attr]
            out = stdout.read().decode()
        _, status, usage = os.wait4(process.pid, 0)  # reaped here, with its own rusage
        wall = time.perf_counter() - started
        code = process.returncode = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            raise SystemExit(f"afp {' '.join(argv[:6])} ... failed ({code}): {err.read().decode()[-2000:]}")
    return wall, out, usage.ru_maxrss / 1024


def tune(tree: Path, model: Path, refs: Path, lattices: list[Path], save: Path, *flags: str) -> dict[str, Any]:
    wall, out, rss = afp(tree, "tune", "--model", str(model), "--refs", str(refs), "--save", str(save), "--json",
                         "--workers", "1", *flags, *map(str, lattices))
    report = json.loads(out)
    cv = report.get("cross_validated") or {}
    return {"wall_s": round(wall, 2), "search_s": round(report["seconds"], 2), "peak_rss_mib": round(rss),
            "line_searches": report["line_searches"],
            "first_pass_wer": report["first_pass_wer"], "tuned_wer": report["best"]["wer"],
            "cross_validated_wer": cv.get("wer"), "chosen": report["chosen"]["point"],
            "chosen_is_first_pass": report["chosen"]["is_first_pass"],
            "point": {k: v for k, v in report["best"].items() if k not in ("wer", "errors", "against_first_pass")}}


def audio_seconds(set_dir: Path, lattices: list[Path]) -> float:
    """The audio behind ``lattices`` (``set.json`` of bench.pocketsphinx_set), for the real-time factor."""
    seconds = {u["key"]: u["audio_seconds"] for u in json.loads((set_dir / "set.json").read_text())["utterances"]}
    return sum(seconds[p.name.removesuffix(".slf")] for p in lattices)


def rescore_wer(model: Path, refs: Path, lattices: list[Path], weights: Path | None, work: Path,
                audio: float, tree: Path = REPO_ROOT) -> dict[str, Any]:
    """``afp rescore`` by ``tree``'s code (with ``weights``; None: the untuned defaults) timed, its
    WER, real-time factor and peak memory."""
    flags = ["--weights", str(weights)] if weights is not None else []
    wall, out, rss = afp(tree, "rescore", "--model", str(model), *flags, "--workers", "1", "--json",
                         *map(str, lattices))
    hyps = work / "hyps.jsonl"
    hyps.write_text(out)
    _, report, _ = afp(REPO_ROOT, "wer", "--refs", str(refs), "--json", str(hyps))
    (system,) = json.loads(report)["systems"]
    return {"wall_s": round(wall, 2), "wer": system["wer"], "audio_s": round(audio, 2), "rtf": round(wall / audio, 4),
            "peak_rss_mib": round(rss)}


def rescore_every(model: Path, refs: Path, lattices: list[Path], weights: Path, work: Path, audio: float,
                  before: Path | None, rounds: int) -> dict[str, Any]:
    """:func:`rescore_wer` of every lattice by this tree's code and ``before``'s (None: this tree's
    only), alternately, ``rounds`` times each: the run of the least wall of each code, with every
    round's wall (``walls_s``) and, with ``before``, the ratio of the least walls."""
    trees = {"after": REPO_ROOT, **({"before": before} if before is not None else {})}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for _ in range(max(1, rounds)):
        for name, tree in trees.items():
            runs[name].append(rescore_wer(model, refs, lattices, weights, work, audio, tree))
    out: dict[str, Any] = {"lattices": len(lattices), "rounds": max(1, rounds)}
    for name, done in runs.items():
        out[name] = {**min(done, key=lambda run: run["wall_s"]), "walls_s": [run["wall_s"] for run in done]}
    if before is not None:
        out["speedup"] = round(out["before"]["wall_s"] / out["after"]["wall_s"], 3)
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.tune_speed", description=__doc__.split("\n")[0])
    parser.add_argument("--sets", type=Path, nargs=2, default=[REPO_ROOT / "runs" / "pocketsphinx" / s for s in SETS])
    parser.add_argument("--model", type=Path, default=REPO_ROOT / "models" / "librispeech")
    parser.add_argument("--limit", type=int, help="the first N lattices of each set (default: all)")
    parser.add_argument("--before", metavar="REF", help="also tune with the code of this commit (a git worktree)")
    parser.add_argument("--study", action="store_true", help="also tune without restarts and/or folds")
    parser.add_argument("--every-lattice", action="store_true",
                        help="also rescore every lattice of each set with the tuned weights (and by --before's code)")
    parser.add_argument("--rounds", type=int, default=1, help="--every-lattice runs of each code, alternating")
    parser.add_argument("--work", type=Path, default=REPO_ROOT / "runs" / "tune_speed")
    parser.add_argument("--out", type=Path, default=RESULTS / "tune_speed.json")
    parser.add_argument("--note", default="")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    before = None
    if args.before:
        before = args.work / "before"
        if not before.exists():
            subprocess.run(["git", "worktree", "add", "--detach", str(before), args.before], cwd=REPO_ROOT, check=True,
                           capture_output=True)
        subprocess.run(["git", "checkout", "--detach", args.before], cwd=before, check=True, capture_output=True)
    model = args.model.resolve()
    record: dict[str, Any] = {"command": "python -m bench.tune_speed " + " ".join(argv if argv is not None else sys.argv[1:]),
                              "model": str(args.model.relative_to(REPO_ROOT) if args.model.is_relative_to(REPO_ROOT)
                                           else args.model), "limit": args.limit, "before": args.before,
                              "environment": environment(), "note": args.note, "defaults": STUDY[0][0], "sets": {}}
    for index, set_dir in enumerate(args.sets):
        other = args.sets[1 - index]
        lattices, held_out = lattices_of(set_dir, args.limit), lattices_of(other, args.limit)
        refs, other_refs = set_dir / "ref.trn", other / "ref.trn"
        entry: dict[str, Any] = {"lattices": len(lattices)}
        save = args.work / f"weights-{set_dir.name}.json"
        entry["tune"] = tune(REPO_ROOT, model, refs, lattices, save)
        print(json.dumps({set_dir.name: entry["tune"]}), file=sys.stderr, flush=True)
        audio, other_audio = audio_seconds(set_dir, lattices), audio_seconds(other, held_out)
        entry["rescore_untuned"] = rescore_wer(model, refs, lattices, None, args.work, audio)
        entry["rescore_same"] = rescore_wer(model, refs, lattices, save, args.work, audio)
        entry["rescore_held_out"] = {"set": other.name, **rescore_wer(model, other_refs, held_out, save, args.work,
                                                                      other_audio)}
        entry["tune_over_rescore"] = round(entry["tune"]["wall_s"] / entry["rescore_same"]["wall_s"], 3)
        if before is not None:
            entry["before"] = tune(before, model, refs, lattices, args.work / f"weights-before-{set_dir.name}.json")
            entry["before"]["held_out"] = rescore_wer(model, other_refs, held_out,
                                                      args.work / f"weights-before-{set_dir.name}.json", args.work,
                                                      other_audio)
            # the same weights file rescored by the before code: its real-time factor and memory
            entry["before"]["rescore_same"] = rescore_wer(model, refs, lattices, save, args.work, audio, before)
            before_rescore = entry["before"]["rescore_same"]["wall_s"]
            entry["before"]["tune_over_rescore"] = round(entry["before"]["wall_s"] / before_rescore, 3)
            entry["speedup_search"] = round(entry["before"]["search_s"] / max(entry["tune"]["search_s"], 1e-9), 2)
            entry["speedup_wall"] = round(entry["before"]["wall_s"] / entry["tune"]["wall_s"], 2)
            print(json.dumps({set_dir.name: {"before": entry["before"]}}), file=sys.stderr, flush=True)
        if args.every_lattice:
            entry["rescore_every"] = rescore_every(model, refs, lattices_of(set_dir, None), save, args.work,
                                                   audio_seconds(set_dir, lattices_of(set_dir, None)), before,
                                                   args.rounds)
            print(json.dumps({set_dir.name: {"rescore_every": entry["rescore_every"]}}), file=sys.stderr, flush=True)
        if args.study:
            entry["study"] = {}
            for name, flags in STUDY[1:]:
                entry["study"][name] = tune(REPO_ROOT, model, refs, lattices, args.work / "weights-study.json", *flags)
                print(json.dumps({set_dir.name: {name: entry["study"][name]}}), file=sys.stderr, flush=True)
        record["sets"][set_dir.name] = entry
        write_json(args.out, record)
    return record


if __name__ == "__main__":
    main()
