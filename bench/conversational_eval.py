"""Compare conversational models on every conversational validation set, fairly.

  python -m bench.conversational_eval models/conversational-text models/conversational/afp models/conversational

(any model ``--model`` takes: a model directory, an n-gram, a mixture directory)

Models with different vocabularies cannot be compared by their own perplexities (a small
vocabulary maps more words to ``<unk>``, whose probability is high, and looks better). Besides
each model's own perplexity and OOV rate, this reports a *shared-vocabulary* perplexity: only
tokens whose word every compared model knows (and ``</s>``) are counted, the same tokens for
every model; the other words still stand in the histories, as each model sees them.

Writes ``bench/results/conversational_eval.json``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import torch

from bench.common import RESULTS, SHARED_DATA, environment, write_json

SETS = {"switchboard": "switchboard/valid.txt", "meetings": "meetings/valid.txt",
        "conversational-text": "conversational-text/valid.txt"}


def known_words(loaded: Any) -> set[str]:
    """The words a model (a model directory, an n-gram, or a mixture: every part) predicts as
    themselves, not as ``<unk>``."""
    if hasattr(loaded, "parts"):
        return set.intersection(*(known_words(p) for p in loaded.parts))
    if hasattr(loaded, "store"):
        return {w for w in loaded.store.words if loaded.store.is_known(w)}
    return {w for w in loaded.vocab.words if w and w != loaded.vocab.unk}


def evaluate(models: list[Path], threads: int) -> dict[str, Any]:
    from afp.mixtures import open_model, scorer_of
    from lm.corpus import load_corpus
    from lm.scorer import score_sentences

    torch.set_num_threads(threads)
    loaded = {str(m): open_model(m) for m in models}
    known = {name: known_words(m) for name, m in loaded.items()}
    shared = set.intersection(*known.values())
    report: dict[str, Any] = {"models": {name: m.info() for name, m in loaded.items()},
                              "shared_vocabulary": len(shared), "sets": {}, "environment": environment()}
    for set_name, relative in SETS.items():
        path = SHARED_DATA / relative
        if not path.is_file():
            raise SystemExit(f"{path} is missing: this needs ../shared/data")
        sentences = load_corpus(path)
        counted = [[w in shared for w in s] + [True] for s in sentences]
        shared_tokens = sum(sum(c) for c in counted)
        total_tokens = sum(len(s) + 1 for s in sentences)
        row: dict[str, Any] = {"sentences": len(sentences), "tokens": total_tokens, "shared_tokens": shared_tokens}
        for name, m in loaded.items():
            scored = score_sentences(scorer_of(m, precision="fp32"), sentences)
            total = sum(float(lp.sum()) for lp in scored)
            logprob = sum(float(lp[torch.tensor(c)].sum()) for lp, c in zip(scored, counted))
            oov = sum(w not in known[name] for s in sentences for w in s)
            row[name] = {"ppl": math.exp(-total / total_tokens), "oov": oov, "oov_rate": oov / total_tokens,
                         "shared_vocab_ppl": math.exp(-logprob / shared_tokens)}
        report["sets"][set_name] = row
        print(set_name, {k: v for k, v in row.items()}, flush=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS / "conversational_eval.json")
    args = parser.parse_args()
    write_json(args.out, evaluate(args.models, args.threads))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
