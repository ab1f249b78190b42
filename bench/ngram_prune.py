"""Size against perplexity of relative-entropy pruning (``afp ngram --prune``) on the 67.6M-word
books/ + books-large/ 4-gram: the model is built once, then pruned at each threshold; each pruned
model is written as an n-gram model directory and measured.

  python -m bench.ngram_prune [--data runs/books-large/data] [--thresholds 0 1e-9 1e-8 ...]
                              [--keep 3e-8]   # also keep that threshold's directory in runs/
  python -m bench.ngram_prune --mix-with runs/books-large/gru-h256-rho4/resume
      # then: each kept 4-gram mixed with that AFP model (EM weights on Little Men, books/valid.txt
      # lines 1-4406), the mixture's perplexity added to the rows

``--data`` is the ``afp prepare`` directory of ``bench/books_large.sh`` (44,122 words of
``models/librispeech``); the script prepares it when missing. Perplexities: The Portrait of a Lady
(lines 10572-17246 of ``books/valid.txt``, the clean held-out book: see
``bench/results/books_large_mixture.json``) and the whole ``books/valid.txt``. Writes
``bench/results/ngram_prune.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import (BOOKS_EM_LINES, BOOKS_PORTRAIT_LINES, REPO_ROOT, RESULTS, SHARED_DATA, afp, afp_ppl, environment,
                          line_range, write_json)

RUNS = REPO_ROOT / "runs" / "ngram_prune"
VALID = SHARED_DATA / "books" / "valid.txt"
PORTRAIT, EM_LINES = BOOKS_PORTRAIT_LINES, BOOKS_EM_LINES


def ppl(model: Path, text: Path) -> float:
    return float(afp_ppl(model, text)["ppl"])


def ensure_data(data: Path) -> Path:
    if not (data / "meta.json").is_file():
        subprocess.run(["bash", "bench/books_large.sh", "--prepare-only"], cwd=REPO_ROOT, check=True)
    return data


def mix_kept(model: Path) -> None:
    """Add to ``ngram_prune.json``'s rows whose directory was kept: the EM mixture of ``model``
    and that 4-gram (``afp mix`` on Little Men), its weights and perplexities (``afp ppl``)."""
    results = RESULTS / "ngram_prune.json"
    data = json.loads(results.read_text())
    portrait = line_range(VALID, *PORTRAIT, RUNS / "portrait.txt")
    em_text = line_range(VALID, *EM_LINES, RUNS / "littlemen.txt")
    alone = {"portrait": ppl(model, portrait), "books_valid": ppl(model, VALID)}
    for row in data["rows"]:
        directory = RUNS / f"prune-{row['threshold']:g}"
        if not (directory / "ngram.json").is_file():
            continue
        mixed = json.loads(afp("mix", "--text", str(em_text), "--out", str(RUNS / "mix"), str(model), str(directory)))
        row["mixture"] = {"model": str(model), "weights": mixed["weights"],
                          "ppl": {"portrait": ppl(RUNS / "mix", portrait), "books_valid": ppl(RUNS / "mix", VALID)}}
        print(json.dumps(row["mixture"]), flush=True)
    data["mixtures"] = {"command": f"python -m bench.ngram_prune --mix-with {model}", "model_alone": alone,
                        "em_text": f"books/valid.txt lines {EM_LINES[0]}-{EM_LINES[1]} (Little Men)"}
    write_json(results, data)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO_ROOT / "runs" / "books-large" / "data")
    parser.add_argument("--order", type=int, default=4)
    parser.add_argument("--thresholds", type=float, nargs="+", default=[0.0, 1e-9, 3e-9, 1e-8, 3e-8, 1e-7, 3e-7])
    parser.add_argument("--keep", type=float, nargs="*", default=[], help="keep these thresholds' directories")
    parser.add_argument("--mix-with", type=Path, help="mix each kept 4-gram with this model (no building)")
    args = parser.parse_args(argv)
    if args.mix_with:
        return mix_kept(args.mix_with)

    from lm.ngram import kneser_ney
    from lm.ngram.prune import all_divergences, prune
    from lm.ngram.store import save_store
    from lm.shards import open_prepared

    RUNS.mkdir(parents=True, exist_ok=True)
    portrait = line_range(VALID, *PORTRAIT, RUNS / "portrait.txt")
    prepared = open_prepared(str(ensure_data(args.data)), verify=False)
    vocab = prepared.vocab
    predictable = np.array(vocab.predictable_mask())
    started = time.perf_counter()
    model = kneser_ney.build(kneser_ney.chunks_of([(s.tokens, s.offsets) for s in prepared.train.shards],
                                                  vocab.bos_id, vocab.eos_id, vocab.unk_id),
                             args.order, vocab.size, vocab.bos_id, predictable)
    build_seconds = time.perf_counter() - started
    started = time.perf_counter()
    divergence = all_divergences(model, vocab.bos_id, vocab.eos_id)  # once: every threshold uses them
    divergence_seconds = time.perf_counter() - started
    rows = []
    for threshold in args.thresholds:
        started = time.perf_counter()
        pruned = prune(model, threshold, vocab.bos_id, vocab.eos_id, divergence) if threshold > 0 else model
        prune_seconds = time.perf_counter() - started + (divergence_seconds if threshold > 0 else 0.0)
        directory = RUNS / f"prune-{threshold:g}"
        store = kneser_ney.to_store(pruned, vocab.words, vocab.bos_id, predictable)
        save_store(store, directory)
        row = {"threshold": threshold, "ngrams": {f"{n}-grams": c for n, c in enumerate(store.counts, 1)},
               "total_ngrams": int(sum(store.counts)), "store_mib": store.nbytes() / 2**20,
               "prune_seconds": prune_seconds,
               "ppl": {"portrait": ppl(directory, portrait), "books_valid": ppl(directory, VALID)}}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if threshold not in args.keep:
            shutil.rmtree(directory)
    write_json(RESULTS / "ngram_prune.json", {
        "command": "python -m bench.ngram_prune " + " ".join(sys.argv[1:] if argv is None else argv),
        "environment": environment(),
        "data": {"words": prepared.train.words, "vocab_size": vocab.size, "order": args.order},
        "texts": {"portrait": f"books/valid.txt lines {PORTRAIT[0]}-{PORTRAIT[1]} (The Portrait of a Lady)",
                  "books_valid": "books/valid.txt (its Sherlock Holmes part is partly inside books-large)"},
        "build_seconds": build_seconds, "divergence_seconds": divergence_seconds,
        "note": "prune_seconds include the divergences (computed once, divergence_seconds) as afp ngram --prune does",
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rows": rows})


if __name__ == "__main__":
    main()
