"""Rescoring throughput on every real lattice: one model call per lattice against many lattices'
(context, word) pairs merged into one model call, side by side in one run.

  python -m bench.merged_rescoring                              # CPU, fp32
  python -m bench.merged_rescoring --device cuda --precisions fp32 bf16   # GPU, both output layers
  python -m bench.merged_rescoring --limit 200                  # a quick look

Sets (each read once into memory, so only rescoring is timed):

  * ``ami``: the 4 AMI HTK lattices, the 10 of ``ami-kaldi/1.lat`` and the TheanoLM lattice,
    with the bundled ``models/conversational`` (meetings and conversations);
  * ``dev_clean``, ``dev_other``: the ESPnet 30-best lists of LibriSpeech as lattices (one per
    utterance: the lists share prefixes once expanded), with the bundled ``models/librispeech``.

Modes, each run after a warm-up on the same lattices, through ``afp.jobs.rescore_all`` as
``afp rescore`` runs them:

  * ``per_lattice``: ``--workers 1``, one model call (or a few chunks) per lattice;
  * ``merged_W`` for each of ``--workers`` (2 and 8): W lattices in flight in threads, their
    pairs merged by the batcher into one call of up to ``--batch-pairs`` pairs (``afp rescore
    --workers W``).

For each: lattices/s, distinct contexts/s and (context, word) pairs/s, the number of model calls
(merged: batches), and whether the results are the same: the same best word sequence for every
lattice, and the largest difference of its LM log-probability (float rounding of a different
matmul shape; with ``bf16`` the output layer's own 1e-3 nats per word on top). Writes
``bench/results/merged_rescoring_<device>.json``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from afp.batching import DEFAULT_BATCH_PAIRS
from bench.common import REPO_ROOT, RESULTS, SHARED_DATA, ami_lattice_files, bundled_afp, environment, write_json

NBEST = SHARED_DATA / "nbest" / "librispeech-espnet"
THEANOLM = SHARED_DATA / "lattices" / "theanolm" / "lattice.slf"


def load_sets(limit: int | None) -> dict[str, tuple[Path, list[Any]]]:
    """Set name -> (model directory, lattices)."""
    from lattices.formats import read_lattice_file
    from lattices.formats.nbest import nbest_to_lattice, read_espnet_nbest

    sets: dict[str, tuple[Path, list[Any]]] = {}
    files = ami_lattice_files() + ([THEANOLM] if THEANOLM.is_file() else [])
    if files:
        sets["ami"] = (REPO_ROOT / "models" / "conversational", [lat for f in files for lat in read_lattice_file(f)])
    for name in ("dev_clean", "dev_other"):
        if (NBEST / name).is_dir():
            lists = read_espnet_nbest(NBEST / name)[:limit]
            sets[name] = (bundled_afp("librispeech"), [nbest_to_lattice(n) for n in lists])
    if not sets:
        raise SystemExit(f"no lattices under {SHARED_DATA}: this benchmark needs ../shared/data")
    return sets


def run_mode(lattices: list[Any], scorer: Any, workers: int, batch_pairs: int, device: str) -> dict[str, Any]:
    """Rescore every lattice once through ``rescore_all``; wall time, counts and each lattice's best."""
    from lattices.rescore import RescoreOptions
    from afp.jobs import Failure, rescore_all

    calls = {"n": 0}
    counting = _CountingScorer(scorer, calls)
    started = time.perf_counter()
    results = list(rescore_all(iter(lattices), counting, RescoreOptions(), device=device, progress=False,
                               workers=workers, batch_pairs=batch_pairs))
    seconds = time.perf_counter() - started
    failures = [r.key for r in results if isinstance(r, Failure)]
    done = [r[0] for r in results if not isinstance(r, Failure)]
    contexts = sum(r.stats["unique_contexts"] for r in done)
    pairs = sum(r.stats["scored_pairs"] for r in done)
    return {"workers": workers, "seconds": seconds, "lattices": len(lattices), "failed": failures,
            "model_calls": calls["n"], "unique_contexts": contexts, "scored_pairs": pairs,
            "lattices_per_s": len(lattices) / seconds, "contexts_per_s": contexts / seconds,
            "pairs_per_s": pairs / seconds,
            "best": {r.key: (tuple(r.best.words), r.best.lm_logprob) for r in done}}


class _CountingScorer:
    """A context scorer that counts the model calls of the scorer it wraps (the batcher calls it
    once per merged batch)."""

    def __init__(self, inner: Any, calls: dict[str, int]) -> None:
        self.inner, self.calls = inner, calls

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def score(self, *args: Any) -> Any:
        self.calls["n"] += 1
        return self.inner.score(*args)


def main() -> None:
    import torch

    from lm.checkpoint import load_checkpoint
    from lm.scorer import LMScorer
    from lm.device import resolve_device

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precisions", nargs="+", default=["fp32"], choices=["fp32", "bf16"],
                        help="output-layer precisions to measure (bf16 is emulated, slow, on most CPUs)")
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 8],
                        help="lattices in flight in the merged modes (one mode each)")
    parser.add_argument("--batch-pairs", type=int, default=DEFAULT_BATCH_PAIRS, help="largest merged model call (pairs)")
    parser.add_argument("--limit", type=int, help="utterances per LibriSpeech set (default: all)")
    parser.add_argument("--warmup", type=int, default=20, help="lattices rescored before timing each mode")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    device = resolve_device(args.device)
    report: dict[str, Any] = {"benchmark": "bench.merged_rescoring", "device": str(device),
                              "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                              "environment": environment(), "sets": {}}
    for name, (model_dir, lattices) in load_sets(args.limit).items():
        loaded = load_checkpoint(model_dir, device=device)
        entry: dict[str, Any] = {"model": str(model_dir.relative_to(REPO_ROOT)), "lattices": len(lattices),
                                 "arcs": sum(lat.num_arcs for lat in lattices), "precisions": {}}
        for precision in args.precisions:
            scorer = LMScorer(loaded, precision=precision)
            modes: dict[str, Any] = {}
            for mode, workers in (("per_lattice", 1), *((f"merged_{w}", w) for w in args.workers)):
                run_mode(lattices[: args.warmup], scorer, workers, args.batch_pairs, device.type)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                modes[mode] = run_mode(lattices, scorer, workers, args.batch_pairs, device.type)
                print(f"{name} {precision} {mode}: {modes[mode]['lattices_per_s']:.1f} lattices/s, "
                      f"{modes[mode]['contexts_per_s']:.0f} contexts/s, {modes[mode]['model_calls']} model calls",
                      flush=True)
            one = modes["per_lattice"].pop("best")
            for w in args.workers:
                merged = modes[f"merged_{w}"]
                best = merged.pop("best")
                merged["same_best_words"] = all(one[k][0] == best[k][0] for k in one)
                merged["max_abs_lm_logprob_diff"] = max((abs(one[k][1] - best[k][1]) for k in one), default=0.0)
                merged["speed_over_per_lattice"] = merged["lattices_per_s"] / modes["per_lattice"]["lattices_per_s"]
            entry["precisions"][precision] = {**modes, "best_lm_logprob": one}
        if len(args.precisions) > 1:  # the output layers' results, per lattice, side by side
            base = entry["precisions"][args.precisions[0]]["best_lm_logprob"]
            for precision in args.precisions[1:]:
                other = entry["precisions"][precision]["best_lm_logprob"]
                entry["precisions"][precision][f"vs_{args.precisions[0]}"] = {
                    "same_best_words": all(base[k][0] == other[k][0] for k in base),
                    "max_abs_lm_logprob_diff": max(abs(base[k][1] - other[k][1]) for k in base),
                    "speed_ratio_per_lattice": entry["precisions"][precision]["per_lattice"]["lattices_per_s"]
                    / entry["precisions"][args.precisions[0]]["per_lattice"]["lattices_per_s"]}
        for precision in args.precisions:
            entry["precisions"][precision].pop("best_lm_logprob")
        report["sets"][name] = entry
    out = args.out or RESULTS / f"merged_rescoring_{device.type}.json"
    write_json(out, report)
    for name, entry in report["sets"].items():
        for precision, modes in entry["precisions"].items():
            for w in args.workers:
                merged = modes[f"merged_{w}"]
                print(name, precision, f"merged ({w} workers) / per-lattice {merged['speed_over_per_lattice']:.2f}x",
                      f"same best {merged['same_best_words']}", f"max |dLM| {merged['max_abs_lm_logprob_diff']:.2e}")


if __name__ == "__main__":
    main()
