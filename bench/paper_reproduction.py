"""Reproduce Wang & Ragni's AFP experiments (Table 3 / Figure 1 on PTB, Table 4 / Figure 2 on WikiText-2).

Trains, with one shared set-up (Adam, batch 20 sentences, uniform init +-0.05, best validation
checkpoint, learning rate halved after an epoch without validation gain):

  rnn-bptt                exact Elman RNN, full backpropagation through each sentence
  afp-fpi-rho{1..8}       AFP-rho trained by fixed-point iteration
  afp-fpi-detach-rho{..}  AFP-rho trained by FPI|theta (no gradient through earlier iterations)
  ffnn-2gram              feed-forward bigram model (the paper's FFNN_2)
  lstm-bptt               exact LSTM
  kn-5gram                interpolated modified Kneser-Ney 5-gram (counted in seconds; a reference
                          that places our validation perplexities next to the paper's test ones)

Every run writes ``bench/results/<dataset>/runs/<name>/metrics.jsonl`` and is resumable: run the
command again and finished runs are skipped, interrupted ones continue from their last epoch.
After each run the table ``summary.json`` and the plot ``ppl_vs_rho.png`` are rewritten.

  python -m bench.paper_reproduction --dataset ptb                  # everything, in order
  python -m bench.paper_reproduction --dataset ptb --only rnn-bptt afp-fpi-rho4
  python -m bench.paper_reproduction --dataset wikitext2 --rhos 1 2 4 8
  python -m bench.paper_reproduction --dataset ptb --summary        # tabulate the runs so far
  python -m bench.paper_reproduction --dataset ptb --precision bf16 --jobs 2 --threads 1
                                     # bfloat16 autocast, two runs at a time: results in ptb-bf16/
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import multiprocessing
import signal
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from bench.common import RESULTS, SHARED_DATA, environment, pyplot, read_metrics, save_figure, write_json, write_text

PRESETS: dict[str, dict[str, Any]] = {
    "ptb": {
        "train": SHARED_DATA / "ptb" / "ptb.train.txt",
        "valid": SHARED_DATA / "ptb" / "ptb.valid.txt",
        "hidden": 100, "epochs": 20,
        "paper": {"rnn-bptt": 142.1, "afp-fpi": 129.4, "afp-fpi-detach": 136.4, "ffnn-2gram": 179.0,
                  "kn-5gram": 141.2, "note": "test-set perplexities from the paper's Table 3"},
    },
    "wikitext2": {
        "train": SHARED_DATA / "wikitext-2" / "wiki.train.tokens",
        "valid": SHARED_DATA / "wikitext-2" / "wiki.valid.tokens",
        "hidden": 200, "epochs": 40,
        "paper": {"rnn-bptt": 153.48, "afp-fpi": 149.35, "afp-fpi-detach": 172.05, "lstm-bptt": 132.32,
                  "note": "perplexities from the paper's Table 4"},
    },
}


def run_specs(rhos: list[int]) -> dict[str, dict[str, Any]]:
    """Run name -> model fields (plus ``detach``) for every configuration of the study.

    FPI|theta needs rho >= 2: with one iteration there is nothing to detach, and the run would
    repeat ``afp-fpi-rho1`` bit for bit (the plot draws that point on both curves).
    """
    specs: dict[str, dict[str, Any]] = {"rnn-bptt": {"mode": "exact"}}
    for rho in rhos:
        specs[f"afp-fpi-rho{rho}"] = {"mode": "afp", "rho": rho}
    for rho in rhos:
        if rho >= 2:
            specs[f"afp-fpi-detach-rho{rho}"] = {"mode": "afp", "rho": rho, "detach": True}
    specs["ffnn-2gram"] = {"arch": "ffnn", "order": 2}
    specs["lstm-bptt"] = {"cell": "lstm", "mode": "exact"}
    specs["kn-5gram"] = {"arch": "kn", "order": 5}  # counted, not trained: one "epoch"
    return specs


def run_epochs(spec: dict[str, Any], epochs: int) -> int:
    """Epochs that complete a run: a count-based model has one."""
    return 1 if spec.get("arch") == "kn" else epochs


def summarize(dataset: str, out: Path, specs: dict[str, dict[str, Any]], epochs: int) -> dict[str, Any]:
    """Collect every run's best validation perplexity and timing into ``summary.json`` and the plot."""
    runs = {}
    for name, spec in specs.items():
        metrics = read_metrics(out / "runs" / name)
        if not metrics:
            continue
        valid = [m["valid_ppl"] for m in metrics]
        runs[name] = {
            "spec": spec, "epochs_done": len(metrics), "complete": len(metrics) >= run_epochs(spec, epochs),
            "best_valid_ppl": min(valid), "best_epoch": valid.index(min(valid)) + 1,
            "seconds_per_epoch": sum(m["seconds"] for m in metrics) / len(metrics),
            "device": metrics[-1]["device"], "precision": metrics[-1].get("precision", "fp32"),
        }
    summary = {"dataset": dataset, "epochs": epochs, "paper": PRESETS[dataset]["paper"], "runs": runs,
               "environment": environment()}
    write_json(out / "summary.json", summary)
    plot(summary, out / "ppl_vs_rho.png")
    return summary


def plot(summary: dict[str, Any], path: Path) -> None:
    """Validation perplexity against rho for FPI and FPI|theta, baselines as horizontal lines.

    Runs that have not finished their epochs are drawn hollow.
    """
    plt = pyplot()
    runs = summary["runs"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    rhos: set[int] = set()
    for prefix, label, marker in (("afp-fpi-rho", "AFP, FPI", "o"), ("afp-fpi-detach-rho", "AFP, FPI|θ", "s")):
        points = sorted((int(n[len(prefix):]), r["best_valid_ppl"], r["complete"]) for n, r in runs.items()
                        if n.startswith(prefix) and n[len(prefix):].isdigit())
        if prefix == "afp-fpi-detach-rho" and points and "afp-fpi-rho1" in runs:  # rho 1: FPI|theta is FPI
            points.insert(0, (1, runs["afp-fpi-rho1"]["best_valid_ppl"], runs["afp-fpi-rho1"]["complete"]))
        if not points:
            continue
        xs, ys, done = zip(*points)
        rhos.update(xs)
        line, = ax.plot(xs, ys, marker=marker, markerfacecolor="white", label=label)
        finished = [(x, y) for x, y, d in zip(xs, ys, done, strict=True) if d]
        if finished:
            ax.plot(*zip(*finished), linestyle="none", marker=marker, color=line.get_color())
    for name, label, style, color in (("rnn-bptt", "RNN, BPTT", "--", "black"), ("lstm-bptt", "LSTM, BPTT", ":", "C4"),
                                      ("ffnn-2gram", "FFNN bigram", "-.", "gray"),
                                      ("kn-5gram", "KN 5-gram", (0, (1, 1)), "C2")):
        if name in runs:
            ax.axhline(runs[name]["best_valid_ppl"], linestyle=style, color=color,
                       label=label + ("" if runs[name]["complete"] else " (incomplete)"))
    if rhos:
        ax.set_xticks(range(1, max(rhos) + 1))
    ax.set_xlabel("ρ (fixed-point iterations = tokens of context); hollow: run incomplete")
    ax.set_ylabel("validation perplexity")
    precisions = ", ".join(sorted({r.get("precision", "fp32") for r in runs.values() if r["spec"].get("arch") != "kn"}))
    ax.set_title(f"{summary['dataset']} ({precisions} training): perplexity against ρ")
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, path)


def priority(names: list[str]) -> list[str]:
    """Training order: the study's order, but rho 3, 5, 6, 7 last, so an interrupted study still spans the range."""
    def late(name: str) -> bool:
        return "-rho" in name and int(name.rsplit("-rho", 1)[1]) not in (1, 2, 4, 8)

    return [n for n in names if not late(n)] + [n for n in names if late(n)]


def count_kn(name: str, spec: dict[str, Any], dataset: str, out: Path) -> float:
    """Count ``afp ngram``'s Kneser-Ney model (:mod:`lm.ngram.kneser_ney`) on the training text, with
    the neural models' vocabulary, and record its validation perplexity (words and ``</s>``)."""
    import numpy as np

    from lm.config import TrainConfig
    from lm.ngram import kneser_ney
    from lm.ngram.store import StoreScorer
    from lm.scorer import text_score
    from lm.train import load_data

    preset = PRESETS[dataset]
    started = time.perf_counter()
    data = load_data(TrainConfig(train=str(preset["train"]), valid=str(preset["valid"])))
    assert data.valid is not None
    vocab, predictable = data.vocab, np.array(data.vocab.predictable_mask())
    words = [s[1:-1] for s in data.train.ids]  # [<s>, w_1 .. w_n, </s>] -> the words
    shard = (np.concatenate([w.numpy() for w in words]), np.cumsum([0, *(len(w) for w in words)]))
    model = kneser_ney.build(kneser_ney.chunks_of([shard], vocab.bos_id, vocab.eos_id, vocab.unk_id), spec["order"],
                             vocab.size, vocab.bos_id, predictable, vocab.words)
    scorer = StoreScorer(kneser_ney.to_store(model, vocab.words, vocab.bos_id, predictable))

    def ppl(ids: list[Any]) -> float:
        return text_score(scorer, ([vocab.words[i] for i in s.tolist()[1:-1]] for s in ids)).ppl

    valid_ppl = ppl(data.valid.ids)
    metrics = {"epoch": 1, "valid_ppl": valid_ppl, "train_ppl": ppl(data.train.ids),
               "seconds": time.perf_counter() - started, "device": "cpu", "precision": "fp64",
               "discounts": [list(level.discounts) for level in model.orders]}
    write_text(out / "runs" / name / "metrics.jsonl", json.dumps(metrics) + "\n")
    print(f"{name}: valid ppl {valid_ppl:.2f} ({metrics['seconds']:.0f}s)", flush=True)
    return valid_ppl


def train_run(name: str, spec: dict[str, Any], dataset: str, epochs: int, out: Path, device: str,
              threads: int | None, precision: str) -> float | None:
    """Train (or resume) one run of the study; returns its best validation perplexity."""
    from lm.config import ModelConfig, TrainConfig
    from lm.train import train

    preset, spec = PRESETS[dataset], dict(spec)
    detach = bool(spec.pop("detach", False))
    cfg = TrainConfig(train=str(preset["train"]), valid=str(preset["valid"]), epochs=epochs, batch_size=20,
                      lr=1e-3, lr_decay=0.5, clip=1.0, init_range=0.05, detach=detach, seed=1,
                      device=device, num_threads=threads, precision=precision)
    print(f"{name}: training ({spec}, detach={detach}, {precision})", flush=True)
    started = time.perf_counter()
    result = train(ModelConfig(hidden=preset["hidden"], **spec), cfg, out / "runs" / name, resume=True,
                   record={"benchmark": f"bench.paper_reproduction --dataset {dataset} --precision {precision}",
                           "run": name},
                   progress=False,
                   on_epoch=lambda m: print(f"  {name} epoch {m['epoch']}: valid ppl {m['valid_ppl']:.2f} "
                                            f"({m['seconds']:.0f}s)", flush=True))
    print(f"{name}: best valid ppl {result.best_valid_ppl:.2f} in {time.perf_counter() - started:.0f}s", flush=True)
    return result.best_valid_ppl


def die_with_parent() -> None:
    """Pool worker initializer: on Linux, a killed driver takes its training workers with it."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=sorted(PRESETS), default="ptb")
    parser.add_argument("--only", nargs="*", help="run names to train (default: all)")
    parser.add_argument("--rhos", nargs="*", type=int, default=list(range(1, 9)))
    parser.add_argument("--epochs", type=int, help="override the preset's epochs")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, help="torch CPU threads per job")
    parser.add_argument("--jobs", type=int, default=1, help="runs trained at once, in separate processes")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="bf16: bfloat16 autocast in the training forward pass (validation stays float32)")
    parser.add_argument("--out", type=Path,
                        help="results directory (default: bench/results/<dataset>, or <dataset>-bf16 with bf16)")
    parser.add_argument("--summary", action="store_true",
                        help="only rewrite summary.json and the plot from the runs so far (no training)")
    args = parser.parse_args()

    preset = PRESETS[args.dataset]
    if not Path(preset["train"]).is_file():
        raise SystemExit(f"{preset['train']} is missing: this benchmark needs ../shared/data")
    epochs = args.epochs or preset["epochs"]
    out = args.out or RESULTS / (args.dataset + ("" if args.precision == "fp32" else f"-{args.precision}"))
    specs = run_specs(args.rhos)
    names = [] if args.summary else args.only or priority(list(specs))
    unknown = sorted(set(names) - set(specs))
    if unknown:
        raise SystemExit(f"unknown run(s) {unknown}; known: {list(specs)}")
    todo = [n for n in names if len(read_metrics(out / "runs" / n)) < run_epochs(specs[n], epochs)]
    for name in sorted(set(names) - set(todo)):
        print(f"{name}: done")
    for name in [n for n in todo if specs[n].get("arch") == "kn"]:
        count_kn(name, specs[name], args.dataset, out)
        todo.remove(name)
    run = functools.partial(train_run, dataset=args.dataset, epochs=epochs, out=out, device=args.device,
                            threads=args.threads, precision=args.precision)
    if args.jobs <= 1:
        for name in todo:
            run(name, specs[name])
            summarize(args.dataset, out, specs, epochs)
    else:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=args.jobs, mp_context=context, initializer=die_with_parent) as pool:
            futures = [pool.submit(run, name, specs[name]) for name in todo]
            for future in as_completed(futures):
                future.result()
                summarize(args.dataset, out, specs, epochs)
    summary = summarize(args.dataset, out, specs, epochs)
    for name, row in summary["runs"].items():
        print(f"{name:>24}  {row['best_valid_ppl']:8.2f}  ({row['epochs_done']} epochs, {row['device']})")


if __name__ == "__main__":
    main()
