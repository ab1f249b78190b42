"""Sentence scoring (``afp ppl``, ``afp score``, ``POST /v1/perplexity``): the shared-context path
against the sentence forward pass it replaced, side by side in one run.

  python -m bench.sentence_scoring                      # CPU, fp32, every set in full
  python -m bench.sentence_scoring --limit 20000        # the first 20,000 sentences of each set
  python -m bench.sentence_scoring --device cuda

Sets, each scored with the bundled model of its domain:

  * ``dev_other_nbest``: every hypothesis of the ESPnet 30-best lists of LibriSpeech dev_other, one
    per line, each utterance's hypotheses together (what ``afp score`` gets from an n-best
    list), ``models/librispeech``;
  * ``books_valid``: ``books/valid.txt``, running text with little sharing, ``models/librispeech``;
  * ``switchboard_valid``: ``switchboard/valid.txt``, ``models/conversational``.

Modes: ``forward`` is :func:`lm.evaluate.score_corpus` (one forward pass per sentence, in
length-sorted batches of 64: what ``afp ppl`` and ``afp score`` ran before); ``shared`` is
:func:`lm.scorer.text_score` (each distinct (context, word) pair once per chunk). For each:
seconds, tokens/s, the perplexity (they must agree) and the largest per-sentence log-probability
difference. Writes ``bench/results/sentence_scoring_<device>.json``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS, SHARED_DATA, bundled_afp, environment, write_json

NBEST = SHARED_DATA / "nbest" / "librispeech-espnet" / "dev_other"


def nbest_sentences() -> list[list[str]]:
    """Every hypothesis of the dev_other 30-best lists, grouped by utterance (rank order within)."""
    by_key: dict[str, list[list[str]]] = {}
    for rank in range(1, 31):
        for line in (NBEST / f"{rank}best_recog" / "text").read_text(encoding="utf-8").splitlines():
            key, _, words = line.partition(" ")
            by_key.setdefault(key, []).append(words.split())
    return [words for key in sorted(by_key) for words in by_key[key]]


def sets() -> dict[str, tuple[str, Any]]:
    from lm.corpus import read_sentences

    return {"dev_other_nbest": ("librispeech", nbest_sentences),
            "books_valid": ("librispeech", lambda: read_sentences(SHARED_DATA / "books" / "valid.txt")),
            "switchboard_valid": ("conversational", lambda: read_sentences(SHARED_DATA / "switchboard" / "valid.txt"))}


def measure(name: str, model: str, sentences: list[list[str]], device: str) -> dict[str, Any]:
    import torch

    from lm.checkpoint import load_checkpoint
    from lm.corpus import encode
    from lm.evaluate import score_corpus
    from lm.scorer import LMScorer, text_score

    loaded = load_checkpoint(bundled_afp(model), device=device)
    scorer = LMScorer(loaded, precision="fp32")
    text_score(scorer, sentences[:200])  # warm-up
    tick = time.perf_counter()
    per_sentence: list[float] = []
    shared = text_score(scorer, sentences, on_sentence=lambda _, v: per_sentence.append(float(v.sum())))
    shared_s = time.perf_counter() - tick
    tick = time.perf_counter()
    forward = score_corpus(loaded.model, encode(sentences, loaded.vocab))
    forward_s = time.perf_counter() - tick
    diff = max(abs(a - float(b.sum())) for a, b in zip(per_sentence, forward.token_logprobs))
    tokens = shared.tokens
    row = {"set": name, "model": model, "sentences": len(sentences), "tokens": tokens,
           "shared": {"seconds": shared_s, "tokens_per_s": tokens / shared_s, "ppl": shared.ppl},
           "forward": {"seconds": forward_s, "tokens_per_s": tokens / forward_s, "ppl": forward.summary()["ppl"]},
           "speedup": forward_s / shared_s, "max_sentence_logprob_diff": diff, "threads": torch.get_num_threads()}
    print(f"{name}: {len(sentences)} sentences, {tokens} tokens: shared {tokens / shared_s:,.0f} tok/s, forward "
          f"{tokens / forward_s:,.0f} tok/s ({forward_s / shared_s:.2f}x); ppl {shared.ppl:.3f} vs "
          f"{row['forward']['ppl']:.3f}; max diff {diff:.2e}", flush=True)
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--limit", type=int, help="the first N sentences of each set")
    parser.add_argument("--sets", nargs="+", help="which sets (default: all)")
    parser.add_argument("--out", type=Path, help="JSON output (default bench/results/sentence_scoring_<device>.json)")
    args = parser.parse_args(argv)
    rows = []
    for name, (model, read) in sets().items():
        if args.sets and name not in args.sets:
            continue
        sentences = read()[: args.limit]
        rows.append(measure(name, model, sentences, args.device))
    write_json(args.out or RESULTS / f"sentence_scoring_{args.device.split(':')[0]}.json",
               {"command": "python -m bench.sentence_scoring" + (f" --limit {args.limit}" if args.limit else ""),
                "environment": environment(), "results": rows})


if __name__ == "__main__":
    main()
