"""Exact AFP-rho lattice rescoring against today's approximate methods, on the real AMI lattices.

For rho = 1..5, side by side in one run, on every lattice of ``../shared/data/lattices/ami-htk``
and ``ami-kaldi/1.lat``:

  * AFP-rho (this project): expansion to order rho+1, every (context, word) pair scored once,
    search. Exact for every path.
  * (a) n-best rescoring with a same-size full-recurrence RNN (icefall's way), N = 10, 100, 1000:
    exact for the N listed hypotheses only; the lattice holds far more paths (reported).
  * (b) Kaldi-style rescoring with the same RNN on an n-gram-history expansion (n-1 = rho words
    of history; a state keeps the RNN state of the first history to arrive): approximate; the
    difference between its LM scores and the RNN's true sentence scores is reported.

Every system goes through the engine's preparation and search (:mod:`bench.baselines` puts the
RNN's scores in the engine's expansion) with the options ``afp rescore`` builds
(:func:`afp.options.build_options`, each model's own unknown-word penalty); the RNN replaces the
first-pass LM at weight 1.

Models: Elman RNNs, 128 units, trained on ``conversational-text`` (AFP-rho for each rho, and one
exact BPTT model), trained here when missing. Each measurement is the median of ``--repeats``
runs after a warm-up. Writes ``bench/results/rescoring_<device>.json`` and ``.png``.

  python -m bench.rescoring_speed                 # CPU
  python -m bench.rescoring_speed --device cuda   # GPU
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench.common import RESULTS, SHARED_DATA, ami_lattice_files, environment, pyplot, read_metrics, save_figure, \
    trained, write_json

MODEL_FIELDS = {"cell": "elman", "hidden": 128, "dropout": 0.3}
TRAIN_OPTIONS = {"batch_size": 20, "lr": 1e-3, "lr_decay": 0.5, "clip": 1.0, "init_range": 0.05, "seed": 1,
                 "epochs": 20}
MODEL_DIR = RESULTS / "rescoring" / "models"


def ensure_model(name: str, fields: dict[str, Any], device: str) -> Path:
    """Train ``name`` on conversational text unless a finished run with its weights is there."""
    from lm.config import ModelConfig, TrainConfig
    from lm.train import train

    run = MODEL_DIR / name
    if not trained(run, TRAIN_OPTIONS["epochs"]):  # a fresh clone has the metrics, not the weights
        print(f"training {name} {fields}", flush=True)
        data = SHARED_DATA / "conversational-text"
        cfg = TrainConfig(train=str(data / "train.txt"), valid=str(data / "valid.txt"), device=device, **TRAIN_OPTIONS)
        train(ModelConfig(**MODEL_FIELDS, **fields), cfg, run, resume=True, progress=False,
              record={"command": "python -m bench.rescoring_speed", "model": name})
    best = min(m["valid_ppl"] for m in read_metrics(run))
    print(f"{name}: valid ppl {best:.2f}", flush=True)
    return run


def paths_log10(lattice) -> float:
    """log10 of the number of complete paths (forward counting in the log domain)."""
    from lattices.search import Dag

    zeros = torch.zeros(lattice.num_arcs, dtype=torch.float64)
    dag = Dag(lattice.num_states, lattice.start, lattice.src, lattice.dst, zeros, lattice.finals,
              torch.zeros(len(lattice.finals), dtype=torch.float64), lattice.levels)
    alpha = dag.forward(log_sum=True)
    return float(torch.logsumexp(alpha[lattice.finals], 0)) / math.log(10)


def timed(fn: Callable[[], Any], repeats: int) -> tuple[Any, float]:
    fn()  # warm-up
    times, result = [], None
    for _ in range(repeats):
        result = fn()
        times.append(result["seconds"]["total"] if isinstance(result, dict) else result[0].seconds["total"])
    return result, statistics.median(times)


def plot(report: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    rhos = sorted(int(r[3:]) for r in report["afp"])
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    ax.plot(rhos, [report["afp"][f"rho{r}"]["total_seconds"] for r in rhos], "o-", label="AFP-ρ exact (this project)")
    ax.plot(rhos, [report["kaldi_style"][f"history{r}"]["total_seconds"] for r in rhos], "s--",
            label="(b) Kaldi-style, n-1 = ρ, RNN (approximate)")
    for name, row in report["nbest"].items():
        ax.axhline(row["total_seconds"], linestyle=":", color="gray")
        ax.annotate(f"(a) n-best {name}, RNN", (rhos[0], row["total_seconds"]), fontsize=8, va="bottom")
    ax.set_yscale("log")
    ax.set_xlabel("ρ (history words)")
    ax.set_ylabel(f"seconds for all {len(report['lattices'])} lattices")
    ax.set_title(f"Lattice rescoring time, {report['device_name']}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def main() -> None:
    from afp.options import build_options
    from bench.baselines import first_pass_nbest, kaldi_style_scored, nbest_scored, sentence_logprobs
    from lattices.formats import read_lattice_file
    from lattices.rescore import rescore, rescore_scored
    from lm.checkpoint import load_checkpoint
    from lm.device import resolve_device
    from lm.scorer import LMScorer

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rhos", nargs="*", type=int, default=[1, 2, 3, 4, 5])
    parser.add_argument("--nbest", nargs="*", type=int, default=[10, 100, 1000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    device = resolve_device(args.device)
    files = ami_lattice_files()
    if not files:
        raise SystemExit("the AMI lattices of ../shared/data/lattices are missing")
    lattices = [lat for f in files for lat in read_lattice_file(f)]
    rnn = load_checkpoint(ensure_model("rnn-bptt", {"mode": "exact"}, str(device)), device)
    afp_models = {rho: load_checkpoint(ensure_model(f"afp-rho{rho}", {"mode": "afp", "rho": rho}, str(device)), device)
                  for rho in args.rhos}
    # the RNN replaces the first-pass LM at weight 1; the lattices' own acoustic scale and word penalty
    rnn_options = build_options({"lm_weight": 1.0, "old_lm_weight": 0.0, "nbest": 10},
                                unk_default=rnn.default_unk_penalty)
    report: dict[str, Any] = {
        "benchmark": "bench.rescoring_speed", "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
        "models": {"architecture": MODEL_FIELDS, "train": TRAIN_OPTIONS,
                   "rnn_valid_ppl": rnn.training.get("best_valid_ppl"),
                   "afp_valid_ppl": {f"rho{r}": m.training.get("best_valid_ppl") for r, m in afp_models.items()}},
        "lattices": [{"key": lat.key, "arcs": lat.num_arcs, "states": lat.num_states,
                      "paths_log10": round(paths_log10(lat), 2)} for lat in lattices],
        "afp": {}, "nbest": {}, "kaldi_style": {}, "environment": environment(),
    }

    for rho, loaded in afp_models.items():
        scorer, rows = LMScorer(loaded), []
        options = build_options({}, unk_default=loaded.default_unk_penalty)
        for lat in lattices:
            result, seconds = timed(lambda: rescore(lat, scorer, options, device=device), args.repeats)
            r = result[0]
            rows.append({"key": lat.key, **{k: r.stats[k] for k in ("expanded_states", "expanded_arcs",
                                                                     "unique_contexts", "scored_pairs")},
                         "seconds": seconds, "timing": r.seconds})
        report["afp"][f"rho{rho}"] = {"per_lattice": rows, "total_seconds": sum(x["seconds"] for x in rows),
                                      **{k: sum(x[k] for x in rows) for k in ("expanded_states", "expanded_arcs",
                                                                               "unique_contexts", "scored_pairs")}}
        print(f"AFP rho={rho}: {report['afp'][f'rho{rho}']['total_seconds']:.3f}s, "
              f"{report['afp'][f'rho{rho}']['expanded_arcs']} expanded arcs", flush=True)

    def nbest_run(lat: Any, n: int) -> list[Any]:  # listing the n best, scoring them, the search
        tick = time.perf_counter()
        listed = first_pass_nbest(lat, n, *rnn_options.scales_for(lat), rnn_options.skip_words)
        return rescore_scored(nbest_scored(listed, lat, rnn, rnn_options), rnn_options, tick)

    def kaldi_run(lat: Any, history: int) -> list[Any]:  # the merged-history expansion, the RNN, the search
        tick = time.perf_counter()
        return rescore_scored(kaldi_style_scored(lat, rnn, history, rnn_options), rnn_options, tick)

    for n in args.nbest:
        rows = []
        for lat in lattices:
            _, seconds = timed(lambda: nbest_run(lat, n), args.repeats)
            listed = first_pass_nbest(lat, n, *rnn_options.scales_for(lat), rnn_options.skip_words)
            rows.append({"key": lat.key, "hypotheses": len(listed.hypotheses), "seconds": seconds})
        report["nbest"][f"N={n}"] = {"per_lattice": rows, "total_seconds": sum(x["seconds"] for x in rows),
                                     "hypotheses": sum(x["hypotheses"] for x in rows)}
        print(f"n-best N={n}: {report['nbest'][f'N={n}']['total_seconds']:.3f}s", flush=True)

    for rho in args.rhos:
        rows, errors = [], []
        for lat in lattices:
            (result,), seconds = timed(lambda: kaldi_run(lat, rho), args.repeats)
            true = sentence_logprobs(rnn, [h.words for h in result.nbest])
            diffs = [abs(h.lm_logprob - t) for h, t in zip(result.nbest, true)]
            errors += diffs
            rows.append({"key": lat.key, "expanded_arcs": result.stats["expanded_arcs"], "seconds": seconds,
                         "max_abs_lm_error": max(diffs), "best_lm_error": result.nbest[0].lm_logprob - true[0]})
        report["kaldi_style"][f"history{rho}"] = {
            "per_lattice": rows, "total_seconds": sum(x["seconds"] for x in rows),
            "lm_error_vs_true_rnn": {"hypotheses": len(errors), "mean_abs": statistics.fmean(errors),
                                     "max_abs": max(errors), "exact_fraction": sum(e < 1e-4 for e in errors) / len(errors)}}
        print(f"Kaldi-style n-1={rho}: {report['kaldi_style'][f'history{rho}']['total_seconds']:.3f}s, "
              f"mean |LM error| {statistics.fmean(errors):.3f}", flush=True)

    report["ratios"] = {
        f"rho{rho}": {**{f"nbest_{n}_over_afp": report["nbest"][n]["total_seconds"] / report["afp"][f"rho{rho}"]["total_seconds"]
                         for n in report["nbest"]},
                      "kaldi_style_over_afp": report["kaldi_style"][f"history{rho}"]["total_seconds"]
                      / report["afp"][f"rho{rho}"]["total_seconds"]}
        for rho in args.rhos}
    out = args.out or RESULTS / f"rescoring_{device.type}.json"
    write_json(out, report)
    plot(report, out.with_suffix(".png"))
    for rho, ratios in report["ratios"].items():
        print(rho, {k: round(v, 2) for k, v in ratios.items()})


if __name__ == "__main__":
    main()
