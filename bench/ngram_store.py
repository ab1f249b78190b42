"""ARPA readers side by side: the dict-based reader (``lm.ngram``) against the compact numpy store
(``lm.ngram.store``), and KenLM's Python module when it is installed, on one ARPA file.

  bash bench/books_large.sh --prepare-only   # the 67.6M-word shards
  afp ngram --data runs/books-large/data --order 4 --prune 7e-9 --out runs/logs/books-large-7e-9.arpa.gz  # 22.9M
  python -m bench.ngram_store runs/logs/books-large-7e-9.arpa.gz [--text ../shared/data/books/valid.txt]

Each reader runs in a subprocess of its own (one thread): load time, peak RSS (its own ``VmHWM``), and
the (history, word) lookups per second of scoring every token of the text (as ``afp ppl`` does:
sentence pairs, the scorer's batch interface; KenLM: ``full_scores`` per sentence), with the
total log-probability, which must agree. ``store-dir`` maps the n-gram model directory
(``afp ngram --store``; made from the file before the measurement when missing) instead of
parsing the ARPA text. Writes ``bench/results/ngram_store.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from bench.common import RESULTS, SHARED_DATA, environment, write_json

READERS = ("dict", "store", "store-dir", "kenlm")


def store_dir(arpa: str) -> Path:
    """Where the model directory of ``arpa`` is kept (made from it on first use)."""
    path = Path(arpa + ".store")
    if not (path / "ngram.json").is_file():
        from lm.ngram.store import read_arpa_store, save_store

        save_store(read_arpa_store(arpa), path)
    return path


def measure(reader: str, arpa: str, text: str) -> dict:
    import math
    import time

    import torch

    torch.set_num_threads(1)
    sentences = [line.split() for line in Path(text).read_text(encoding="utf-8").splitlines() if line.split()]
    tick = time.perf_counter()
    if reader == "kenlm":
        import kenlm

        model = kenlm.Model(arpa)
        loaded = time.perf_counter()
        total, lookups = 0.0, 0
        for words in sentences:
            for logp, _, _ in model.full_scores(" ".join(words), bos=True, eos=True):
                total += logp * math.log(10.0)
                lookups += 1
    else:
        from lm.ngram import NgramScorer, read_arpa
        from lm.ngram.store import StoreScorer, load_store, read_arpa_store
        from lm.scorer import sentence_pairs

        if reader == "dict":
            scorer = NgramScorer(read_arpa(arpa))
        elif reader == "store":
            scorer = StoreScorer(read_arpa_store(arpa))
        else:  # the n-gram model directory beside the file (afp ngram --store), arrays mapped
            scorer = StoreScorer(load_store(store_dir(arpa)))
        loaded = time.perf_counter()
        ids = [scorer.word_ids(s).tolist() for s in sentences]
        contexts, lengths, targets, target_context, _ = sentence_pairs(ids, scorer.bos_id, scorer.eos_id,
                                                                       scorer.context_size)
        values = scorer.score(contexts, lengths, targets, target_context)
        total, lookups = float(values.double().sum()), int(targets.shape[0])
    done = time.perf_counter()
    return {"reader": reader, "load_s": loaded - tick, "score_s": done - loaded, "lookups": lookups,
            "lookups_per_s": lookups / (done - loaded), "logprob": total,
            "peak_rss_mib": peak_rss_mib()}


def peak_rss_mib() -> float:
    """This process's peak resident memory: ``VmHWM`` (of its own address space since its
    ``exec``). Not ``ru_maxrss``: Linux carries the parent's peak into it across ``fork`` and
    ``exec``, so every reader would report at least the parent's memory."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("arpa")
    parser.add_argument("--text", default=str(SHARED_DATA / "books" / "valid.txt"))
    parser.add_argument("--readers", default=",".join(READERS))
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a subprocess: measure this reader, print JSON
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args.arpa, args.text)))
        return
    if "store-dir" in args.readers.split(","):
        store_dir(args.arpa)  # made before the measurements, not inside one
    rows = []
    for reader in args.readers.split(","):
        done = subprocess.run([sys.executable, "-m", "bench.ngram_store", args.arpa, "--text", args.text, "--one",
                               reader], capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{reader}: failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else '?'}")
            rows.append({"reader": reader, "error": done.stderr.strip().splitlines()[-1:]})
            continue
        row = json.loads(done.stdout.splitlines()[-1])
        rows.append(row)
        print(f"{reader:>6}: load {row['load_s']:.1f} s, peak RSS {row['peak_rss_mib']:.0f} MiB, "
              f"{row['lookups_per_s']:,.0f} lookups/s, logprob {row['logprob']:.2f}", flush=True)
    from lm.ngram.store import read_arpa_store

    counts = read_arpa_store(args.arpa).counts if any(r.get("reader") == "store" and "error" not in r for r in rows) \
        else None
    write_json(RESULTS / "ngram_store.json", {"command": "python -m bench.ngram_store " + " ".join(argv or sys.argv[1:]),
                                              "arpa": args.arpa, "ngrams": counts, "text": args.text,
                                              "environment": environment(), "rows": rows})


if __name__ == "__main__":
    main()
