"""Train the bundled models: candidates per preset, the best by validation perplexity is installed.

  python -m bench.train_bundled conversational    # the default model, models/conversational/
  python -m bench.train_bundled ptb               # models/ptb/

Every candidate trains into ``bench/results/bundled/<preset>/<candidate>/`` (resumable: run again
to continue). The winner, among candidates with ``rho <= max_rho``, is copied to
``models/<preset>/`` (config.json + model.safetensors) with ``TRAINING.md`` saying how it was
trained; ``bench/results/bundled/<preset>.json`` holds every candidate's numbers.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, RESULTS, SHARED_DATA, environment, read_metrics, write_json

COMMON_TRAIN = {"batch_size": 20, "lr": 1e-3, "lr_decay": 0.5, "clip": 1.0, "init_range": 0.05, "seed": 1}

PRESETS: dict[str, dict[str, Any]] = {
    "conversational": {
        "train": SHARED_DATA / "conversational-text" / "train.txt",
        "valid": SHARED_DATA / "conversational-text" / "valid.txt",
        "epochs": 30,
        "max_rho": 4,  # lattice expansion grows with rho: keep the default model cheap to apply
        "candidates": {
            **{f"elman-h128-rho{r}": {"cell": "elman", "hidden": 128, "mode": "afp", "rho": r, "dropout": 0.3}
               for r in (2, 3, 4)},
            **{f"lstm-h200-rho{r}": {"cell": "lstm", "hidden": 200, "mode": "afp", "rho": r, "dropout": 0.4,
                                     "tie_weights": True} for r in (2, 3, 4)},
            **{f"gru-h200-rho{r}": {"cell": "gru", "hidden": 200, "mode": "afp", "rho": r, "dropout": 0.4,
                                    "tie_weights": True} for r in (3, 4)},
        },
    },
    "ptb": {
        "train": SHARED_DATA / "ptb" / "ptb.train.txt",
        "valid": SHARED_DATA / "ptb" / "ptb.valid.txt",
        "epochs": 15,
        "max_rho": 12,
        "train_options": {"batch_size": 32},
        "candidates": {  # the conversational study's winner (tied GRU), scaled up for PTB's longer sentences
            "gru-h256-rho6": {"cell": "gru", "hidden": 256, "mode": "afp", "rho": 6, "dropout": 0.4,
                              "tie_weights": True},
        },
    },
}


def training_note(preset: str, name: str, fields: dict[str, Any], options: dict[str, Any], metrics: list[dict],
                  table: dict[str, Any]) -> str:
    best = min(metrics, key=lambda m: m["valid_ppl"])
    lines = [
        f"# Bundled model `{preset}`", "",
        f"Chosen candidate: `{name}` ({json.dumps(fields)}).", "",
        f"- Data: `{PRESETS[preset]['train'].relative_to(SHARED_DATA.parent)}`, validation "
        f"`{PRESETS[preset]['valid'].relative_to(SHARED_DATA.parent)}` (from `../shared/`).",
        f"- Training options: {json.dumps(options)}, {len(metrics)} epochs on `{metrics[-1]['device']}`.",
        f"- Best validation perplexity {best['valid_ppl']:.2f} at epoch {best['epoch']} (this checkpoint).",
        f"- Command: `python -m bench.train_bundled {preset}` (trains every candidate below, keeps the best "
        f"with rho <= {PRESETS[preset]['max_rho']}).", "",
        "| candidate | best valid ppl | epochs |", "|---|---|---|",
    ]
    for cand, row in sorted(table.items(), key=lambda kv: kv[1]["best_valid_ppl"]):
        lines.append(f"| {cand} | {row['best_valid_ppl']:.2f} | {row['epochs']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    from lm.config import TrainConfig
    from lm.train import train

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("preset", choices=sorted(PRESETS))
    parser.add_argument("--only", nargs="*", help="candidates to train (default: all)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--no-install", action="store_true", help="train and report, do not copy to models/")
    args = parser.parse_args()

    preset = PRESETS[args.preset]
    if not Path(preset["train"]).is_file():
        raise SystemExit(f"{preset['train']} is missing: this needs ../shared/data")
    options = {**COMMON_TRAIN, **preset.get("train_options", {}), "epochs": preset["epochs"]}
    out = RESULTS / "bundled" / args.preset
    for name in args.only or list(preset["candidates"]):
        fields = preset["candidates"][name]
        if len(read_metrics(out / name)) >= preset["epochs"]:
            continue
        cfg = TrainConfig(train=str(preset["train"]), valid=str(preset["valid"]), device=args.device,
                          num_threads=args.threads, **options)
        print(f"{name}: training {fields}", flush=True)
        result = train(fields, cfg, out / name, resume=True, progress=False,
                       record={"command": f"python -m bench.train_bundled {args.preset}", "candidate": name})
        print(f"{name}: best valid ppl {result.best_valid_ppl:.2f}", flush=True)

    table = {}
    for name, fields in preset["candidates"].items():
        metrics = read_metrics(out / name)
        if metrics:
            table[name] = {"fields": fields, "best_valid_ppl": min(m["valid_ppl"] for m in metrics),
                           "epochs": len(metrics), "seconds_per_epoch": sum(m["seconds"] for m in metrics) / len(metrics)}
    write_json(RESULTS / "bundled" / f"{args.preset}.json",
               {"preset": args.preset, "train_options": options, "candidates": table, "environment": environment()})
    eligible = {n: r for n, r in table.items() if (r["fields"].get("rho") or 0) <= preset["max_rho"]}
    if not eligible:
        raise SystemExit("no trained candidate yet")
    winner = min(eligible, key=lambda n: eligible[n]["best_valid_ppl"])
    print(json.dumps({n: round(r["best_valid_ppl"], 2) for n, r in table.items()}, indent=1))
    print(f"best: {winner} ({eligible[winner]['best_valid_ppl']:.2f})")
    if args.no_install:
        return
    if table[winner]["epochs"] < preset["epochs"]:
        raise SystemExit(f"{winner} has {table[winner]['epochs']} of {preset['epochs']} epochs: not installed")
    target = REPO_ROOT / "models" / args.preset
    target.mkdir(parents=True, exist_ok=True)
    for file in ("config.json", "model.safetensors"):
        shutil.copy2(out / winner / file, target / file)
    (target / "TRAINING.md").write_text(training_note(args.preset, winner, preset["candidates"][winner], options,
                                                      read_metrics(out / winner), table), encoding="utf-8")
    shutil.copy2(out / winner / "metrics.jsonl", target / "metrics.jsonl")
    print(f"installed {target}")


if __name__ == "__main__":
    main()
