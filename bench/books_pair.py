"""Keep the WER table's two finished GRUs (``bash bench/books_pair.sh exact|afp``) for the table.

  python -m bench.books_pair keep          # each finished run of runs/books-pair, as bfloat16

A run is finished when its ``metrics.jsonl`` holds every epoch of the recipe (``EPOCHS``). Its
best weights go to ``bench/results/books-pair/<name>/`` in bfloat16 (half the size; loaded as
float32) with ``config.json`` and ``metrics.jsonl``; the training record gains the books/valid
perplexity of the weights as trained and as stored, the data's sources and licence. The WER table
(``bench.pocketsphinx_wer_table``) loads them from there.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, RESULTS, SHARED_DATA, afp_ppl, read_metrics, store_bf16

RUNS = REPO_ROOT / "runs" / "books-pair"
KEPT = RESULTS / "books-pair"
NAMES = ("gru-h256-exact", "gru-h256-rho4")
EPOCHS = 2  # bench/books_pair.sh's --epochs
LICENCE = ("Project Gutenberg public-domain books (books/: see ../shared/data/SOURCES.md); the model carries "
           "no licence restriction from its data")


def keep(name: str, runs: Path = RUNS, kept: Path = KEPT) -> dict[str, Any] | None:
    """Store run ``name``'s best weights in ``kept/name``; None when the run has not finished."""
    run = runs / name
    metrics = read_metrics(run) if (run / "metrics.jsonl").is_file() else []
    if len([m for m in metrics if "valid_ppl" in m]) < EPOCHS:
        print(f"{name}: {len(metrics)} of {EPOCHS} epochs trained (bash bench/books_pair.sh)", flush=True)
        return None
    target = kept / name
    target.mkdir(parents=True, exist_ok=True)
    store_bf16(run / "model.safetensors", target / "model.safetensors")
    shutil.copy2(run / "metrics.jsonl", target / "metrics.jsonl")
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    (target / "config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    valid = SHARED_DATA / "books" / "valid.txt"
    trained, stored = afp_ppl(run, valid)["ppl"], afp_ppl(target, valid)["ppl"]
    config["training"].update({
        "command": f"bash bench/books_pair.sh {'exact' if name.endswith('exact') else 'afp'}",
        "trained_valid_ppl": trained, "best_valid_ppl": stored, "stored_dtype": "bfloat16",
        "stored_relative_ppl_change": abs(stored / trained - 1.0), "data_licence": LICENCE,
        "train_sources": ["data/books/train.txt"], "valid_sources": ["data/books/valid.txt"]})
    (target / "config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    print(f"{name}: kept in {target} (books/valid ppl {trained:.2f} trained, {stored:.2f} stored)", flush=True)
    return config["training"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["keep"])
    parser.add_argument("--names", nargs="+", default=list(NAMES), choices=list(NAMES))
    args = parser.parse_args(argv)
    for name in args.names:
        keep(name)


if __name__ == "__main__":
    main()
