"""Sentence scoring and perplexity.

Sentences are independent: each starts from the model's initial state at ``<s>``. The token
count of a sentence is its words plus one ``</s>``; out-of-vocabulary words are scored as the
unknown-word symbol and counted in ``oov``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from lm.corpus import Corpus, collate_flat
from lm.model import LanguageModel


@dataclass(frozen=True)
class CorpusScore:
    """Per-sentence token log-probabilities (natural log) of a corpus.

    Attributes:
      token_logprobs: list of float64 tensors; entry ``i`` has shape ``(n_i + 1,)``, one value per
        word of sentence ``i`` and one for ``</s>``.
    """

    token_logprobs: list[torch.Tensor]
    tokens: int
    oov: int

    @property
    def sentences(self) -> int:
        return len(self.token_logprobs)

    @property
    def logprob(self) -> float:
        return float(sum(float(t.sum()) for t in self.token_logprobs))

    @property
    def ppl(self) -> float:
        return math.exp(-self.logprob / self.tokens) if self.tokens else float("nan")

    def summary(self) -> dict[str, float | int]:
        """``{"ppl", "tokens", "sentences", "oov", "logprob"}`` (what ``afp ppl --json`` prints)."""
        return {"ppl": self.ppl, "tokens": self.tokens, "sentences": self.sentences, "oov": self.oov,
                "logprob": self.logprob}


@torch.no_grad()
def score_corpus(model: LanguageModel, corpus: Corpus, batch_size: int = 64,
                 max_tokens: int = 16384) -> CorpusScore:
    """Score every sentence with the model's configured forward pass.

    Sentences are sorted by length and packed into batches of at most ``batch_size`` sentences and
    about ``max_tokens`` padded positions; results come back in corpus order.
    """
    was_training = model.training
    model.eval()
    device = model.device
    lengths = corpus.lengths().tolist()
    order = sorted(range(corpus.sentences), key=lambda i: lengths[i])
    results: list[torch.Tensor | None] = [None] * corpus.sentences
    start = 0
    while start < len(order):
        longest = lengths[order[min(start + batch_size, len(order)) - 1]] + 2
        size = max(1, min(batch_size, max_tokens // max(longest, 1)))
        group = order[start:start + size]
        batch = collate_flat(*corpus.take(group)).to(device)
        scores = model.token_logprobs(batch.inputs, batch.targets, batch.lengths).double().cpu()
        for row, index in enumerate(group):
            results[index] = scores[row, : int(batch.lengths[row])]
        start += size
    model.train(was_training)
    return CorpusScore(token_logprobs=[r for r in results if r is not None], tokens=corpus.tokens, oov=corpus.oov)
