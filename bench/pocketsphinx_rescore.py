"""Exact lattice rescoring of a real decoder's lattices: speed of every step and the first WER.

    python -m bench.pocketsphinx_set --ref .../dev_clean/ref_wer.trn --name dev_clean   # the sets first
    python -m bench.pocketsphinx_set --ref .../dev_other/ref_wer.trn --name dev_other
    python -m bench.pocketsphinx_rescore                       # the defaults, every lattice, tuned
    python -m bench.pocketsphinx_rescore --no-tune --target 20000 --target 50000 [--limit 100]
    python -m bench.pocketsphinx_rescore --no-tune --out bench/results/pocketsphinx_speed.json \
        --note "otherwise idle"                                # the speed table alone, on a quiet machine

For each PocketSphinx set (runs/pocketsphinx/NAME: lattices as the decoder wrote them, its 1-best,
the references) and target size of a dense lattice's expansion (``--target``: the engine's
``target_expanded_arcs``; default: the engine's own default, as a user runs it), one CPU thread,
the model loaded once (its time counted):

* the speed table: per lattice the seconds of reading, of each stage before expansion
  (lattices/reduce.py: determinize, minimize, fit), of expansion, LM scoring and search; the
  expanded arcs, distinct contexts and (context, word) pairs; the lattice oracle (errors of the
  best path of the input and of the lattice that was rescored); the real-time factor against the
  audio and against the decoder's own decoding time; the process's peak memory after the
  rescoring runs (before any tuning, which keeps every scored lattice);
* the WER: weights tuned with ``afp tune``'s joint search on one set and applied with ``afp
  rescore``'s engine to the other (:func:`afp.transfer.transfer`), against the decoder's own
  1-best (hyp.trn), with the matched-pairs test and bootstrap (afp.significance).

The audio is synthetic (text-to-speech, bench/pocketsphinx_set.py): say so wherever a number from
it is reported. Results: bench/results/pocketsphinx_rescore.json.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path
from typing import Any

import torch

from bench.common import RESULTS, environment, write_json

SETS = REPO_SETS = Path("runs/pocketsphinx")


def _peak_mib() -> float:
    """The process's peak resident memory (VmHWM), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load_set(name: str, limit: int | None, sets: Path | None = None) -> dict[str, Any]:
    """A set's lattice paths, references, decoder 1-best and audio/decoding seconds (first ``limit``);
    ``sets``: the folder of the sets (default ``runs/pocketsphinx``)."""
    import json

    from afp.wer import read_hypotheses, read_references

    root = (SETS if sets is None else Path(sets)) / name
    info = json.loads((root / "set.json").read_text())
    utts = info["utterances"][:limit] if limit else info["utterances"]
    return {"name": name, "root": root, "utterances": utts, "refs": read_references(root / "ref.trn"),
            "hyps": read_hypotheses(root / "hyp.trn"), "synthetic": info.get("synthetic", True),
            "paths": [root / "lattices" / f"{u['key']}.slf" for u in utts]}


def speed_run(data: dict[str, Any], model: Any, options: Any) -> dict[str, Any]:
    """Rescore every lattice of a set once with ``options``; the per-step seconds and sizes."""
    from lattices.formats import read_lattice_file
    from lattices.oracle import oracle_errors
    from lattices.rescore import rescore

    rows = []
    for utt, path in zip(data["utterances"], data["paths"]):
        tick = time.perf_counter()
        (lattice,) = read_lattice_file(path)
        read = time.perf_counter() - tick
        (result,) = rescore(lattice, model.scorer, options)
        ref = data["refs"][utt["key"]]
        stats = result.stats
        stages = {s["stage"]: s["seconds"] for s in stats.get("stages", [])}
        rows.append({
            "key": utt["key"], "audio_seconds": utt["audio_seconds"], "decode_seconds": utt["decode_seconds"],
            "links": lattice.num_arcs, "read": read,
            **{f"{k}_seconds": stages.get(k, 0.0) for k in ("determinize", "minimize", "fit")},
            "expand_seconds": result.seconds["expand"], "score_seconds": result.seconds["score"],
            "search_seconds": result.seconds["search"], "total_seconds": read + result.seconds["total"],
            "rescored_arcs": stats["lattice_arcs"], "expanded_arcs": stats["expanded_arcs"],
            "contexts": stats["unique_contexts"], "pairs": stats["scored_pairs"],
            "oracle_input": oracle_errors(lattice, ref)[0], "oracle_rescored": oracle_errors(result.searched, ref)[0],
            "ref_words": len(ref)})
    audio = sum(r["audio_seconds"] for r in rows)
    total = {k: sum(r[k] for r in rows) for k in rows[0] if k.endswith("_seconds") or k in (
        "read", "expanded_arcs", "contexts", "pairs", "links", "rescored_arcs", "oracle_input", "oracle_rescored",
        "ref_words")}
    return {"utterances": len(rows), "audio_seconds": audio, "totals": total,
            "rtf_rescoring": total["total_seconds"] / audio, "rtf_decoding": total["decode_seconds"] / audio,
            "oracle_wer_input": 100.0 * total["oracle_input"] / total["ref_words"],
            "oracle_wer_rescored": 100.0 * total["oracle_rescored"] / total["ref_words"],
            "median_expanded_arcs": sorted(r["expanded_arcs"] for r in rows)[len(rows) // 2], "rows": rows}


def tuned_and_applied(sets: dict[str, dict[str, Any]], model: Any, options: Any, restarts: int,
                      folds: int) -> dict[str, Any]:
    """Weights tuned on each set by ``afp tune``'s joint search (its report: the chosen point is what
    ``--save`` writes) and applied to the other (:func:`afp.transfer.transfer`: each lattice rescored
    with the weights as ``afp rescore --weights`` does), against the decoder's own 1-best
    (``hyp.trn``, also the search's baseline); keyed by direction."""
    from afp.transfer import BASELINE, transfer
    from afp.tune import Tuner
    from lattices.formats import read_lattice_file

    tuners, lattices = {}, {}
    for name, data in sets.items():
        lattices[name] = [lattice for path in data["paths"] for lattice in read_lattice_file(path)]
        tuners[name] = Tuner(model.scorer, options, data["refs"])
        tuners[name].add(lattices[name])
    out: dict[str, Any] = {}
    for applied in transfer(tuners, restarts=restarts, folds=folds, baselines={n: d["hyps"] for n, d in sets.items()},
                            inputs=lattices):
        report = applied.tuned.report
        if applied.decoded is None:  # worse than the decoder's 1-best on the tuning set
            out[f"tuned on {applied.tuned_on}"] = {"tune": report["chosen"]}
            continue
        against = applied.decoded.against[BASELINE]
        out[f"tuned on {applied.tuned_on}, applied to {applied.applied_to}"] = {
            "tune": {k: report[k] for k in ("first_pass_wer", "best", "chosen", "cross_validated", "baseline")
                     if k in report},
            "decoder_wer": against.wer_a, "rescored_wer": against.wer_b, "ref_words": against.ref_words,
            "against_decoder": against.to_json()}
    return out


def main(argv: list[str] | None = None) -> None:
    from afp import load_model
    from afp.options import build_options

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/librispeech")
    parser.add_argument("--sets", nargs=2, default=["dev_clean", "dev_other"])
    parser.add_argument("--target", type=int, action="append",
                        help="target_expanded_arcs values (repeat; default: the engine's default)")
    parser.add_argument("--limit", type=int, help="the first N utterances of each set")
    parser.add_argument("--no-tune", action="store_true", help="the speed table only")
    parser.add_argument("--restarts", type=int, default=1, help="afp tune's random restarts (default 1)")
    parser.add_argument("--folds", type=int, default=1, help="afp tune's cross-validation folds (default 1: none)")
    parser.add_argument("--out", default=str(RESULTS / "pocketsphinx_rescore.json"))
    parser.add_argument("--note", help="what else the machine ran (recorded with the results)")
    parser.add_argument("--determinize-beam", type=float,
                        help="the determinization's beam (default: the engine's, lattices.rescore)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    tick = time.perf_counter()
    model = load_model(args.model, device="cpu")
    load_seconds = time.perf_counter() - tick
    sets = {name: load_set(name, args.limit) for name in args.sets}
    report: dict[str, Any] = {"command": "python -m bench.pocketsphinx_rescore " + " ".join(argv or []),
                              "model": args.model, "model_load_seconds": load_seconds, "environment": environment(),
                              "audio": "synthetic (text-to-speech voices, bench/pocketsphinx_set.py)", "targets": {}}
    if args.note:
        report["machine"] = args.note
    if Path(args.out).is_file():  # keep the other targets' runs (each entry records its own command)
        import json

        report["targets"] = json.loads(Path(args.out).read_text()).get("targets", {})
    from lattices.rescore import DEFAULT_TARGET_EXPANDED_ARCS

    for budget in args.target or [DEFAULT_TARGET_EXPANDED_ARCS]:
        fields = {"target_arcs": budget, **({"determinize_beam": args.determinize_beam}
                                            if args.determinize_beam is not None else {})}
        base = build_options(fields, unk_default=model.loaded.default_unk_penalty)
        entry: dict[str, Any] = {"speed": {}, "wer": {}, "command": report["command"], "limit": args.limit,
                                 "determinize_beam": base.determinize_beam}
        for name, data in sets.items():
            entry["speed"][name] = speed_run(data, model, base)
            print(budget, name, {k: v for k, v in entry["speed"][name].items() if k != "rows"}, flush=True)
        entry["peak_memory_mib"] = _peak_mib()  # rescoring's own, before tuning keeps every scored lattice
        if not args.no_tune:
            entry["wer"] = tuned_and_applied(sets, model, base, args.restarts, args.folds)
            for direction, result in entry["wer"].items():
                print(budget, direction, {k: v for k, v in result.items() if k not in ("tune", "against_decoder")},
                      flush=True)
        entry["peak_memory_mib_with_tuning"] = _peak_mib()
        report["targets"][str(budget)] = entry
        write_json(Path(args.out), report)


if __name__ == "__main__":
    main()
