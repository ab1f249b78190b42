"""Training time per epoch of AFP-rho against exact BPTT, side by side in one run.

Every configuration trains (forward, backward, Adam step) on the same fixed sample of PTB
batches; the configurations take turns, round after round, so that machine noise hits them
alike. The median round time is scaled to a full epoch, and each configuration is reported as a
ratio to exact BPTT. On a GPU the sequential recurrence of BPTT costs one kernel chain per time
step, while AFP-rho needs rho steps for all positions at once.

  python -m bench.epoch_timing                      # CPU
  python -m bench.epoch_timing --device cuda        # GPU, when there is one
  python -m bench.epoch_timing --precision fp32 bf16 # also under bfloat16 autocast ("... bf16" rows)

Writes ``bench/results/epoch_timing_<device>.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from bench.common import RESULTS, SHARED_DATA, environment, pyplot, save_figure, write_json

CONFIGS: dict[str, dict[str, Any]] = {
    "exact (BPTT)": {"mode": "exact"},
    **{f"AFP-{r} FPI": {"mode": "afp", "rho": r} for r in (1, 2, 4, 8)},
    **{f"AFP-{r} FPI|θ": {"mode": "afp", "rho": r, "detach": True} for r in (2, 4, 8)},
}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_round(model, optimizer, sample, detach: bool, precision: str, device: torch.device) -> float:
    from lm.train import train_step

    sync(device)
    started = time.perf_counter()
    for batch in sample:
        train_step(model, optimizer, batch, detach, clip=1.0, precision=precision)
    sync(device)
    return time.perf_counter() - started


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    names = list(result["configs"])
    ratios = [result["configs"][n]["ratio_to_exact"] for n in names]
    fig, ax = plt.subplots(figsize=(max(8.0, 0.6 * len(names)), 4))
    colors = ["gray" if i == 0 else "C1" if n.endswith(" bf16") else "C0" for i, n in enumerate(names)]
    bars = ax.bar(names, ratios, color=colors)
    ax.bar_label(bars, fmt="%.2f")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylabel("epoch time / exact BPTT epoch time")
    ax.set_title(f"Training time per epoch, PTB hidden {result['hidden']}, batch {result['batch_size']}, "
                 f"{result['device_name']}")
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    save_figure(fig, path)


def main() -> None:
    from lm.checkpoint import prepare_model
    from lm.config import ModelConfig, TrainConfig
    from lm.corpus import batches
    from lm.model import build_model
    from lm.device import resolve_device
    from lm.train import load_data, make_optimizer

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batches", type=int, default=60, help="batches per round (a fixed random sample)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--precision", nargs="+", choices=("fp32", "bf16"), default=["fp32"],
                        help="training precisions to time; ratios are to exact BPTT in the first one")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    device = resolve_device(args.device)
    train_path = SHARED_DATA / "ptb" / "ptb.train.txt"
    if not train_path.is_file():
        raise SystemExit(f"{train_path} is missing: this benchmark needs ../shared/data")
    data = load_data(TrainConfig(train=str(train_path)))
    all_batches = list(batches(data.train, args.batch_size, shuffle=True, seed=7))
    step = max(1, len(all_batches) // args.batches)
    sample = [b.to(device) for b in all_batches[::step][: args.batches]]
    scale = len(all_batches) / len(sample)

    models = {}
    for precision in args.precision:
        for base, spec in CONFIGS.items():
            spec = dict(spec)
            detach = spec.pop("detach", False)
            name = base if precision == args.precision[0] else f"{base} {precision}"
            torch.manual_seed(0)
            model = build_model(ModelConfig(vocab_size=data.vocab.size, hidden=args.hidden, **spec))
            model.reset_parameters(0.05)
            prepare_model(model, data.vocab).to(device).train()
            optimizer = make_optimizer(model, 1e-3)
            time_round(model, optimizer, sample[:5], detach, precision, device)  # warm-up
            models[name] = (model, optimizer, detach, precision)

    times: dict[str, list[float]] = {name: [] for name in models}
    for round_index in range(args.rounds):
        for name, (model, optimizer, detach, precision) in models.items():
            times[name].append(time_round(model, optimizer, sample, detach, precision, device))
        print(f"round {round_index + 1}/{args.rounds}: " +
              ", ".join(f"{n} {times[n][-1]:.2f}s" for n in models), flush=True)

    exact = statistics.median(times["exact (BPTT)"])
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    result = {
        "benchmark": "bench.epoch_timing", "device": str(device), "device_name": device_name,
        "hidden": args.hidden, "batch_size": args.batch_size, "batches_per_round": len(sample),
        "precisions": args.precision,
        "rounds": args.rounds, "epoch_batches": len(all_batches), "epoch_tokens": data.train.tokens,
        "configs": {name: {"round_seconds": t, "median_round_seconds": statistics.median(t),
                           "seconds_per_epoch": statistics.median(t) * scale,
                           "ratio_to_exact": statistics.median(t) / exact} for name, t in times.items()},
        "environment": environment(),
    }
    out = args.out or RESULTS / f"epoch_timing_{device.type}.json"
    write_json(out, result)
    plot(result, out.with_suffix(".png"))
    for name, row in result["configs"].items():
        print(f"{name:>14}: {row['seconds_per_epoch']:8.1f} s/epoch   ratio to exact {row['ratio_to_exact']:.2f}")


if __name__ == "__main__":
    main()
