"""Sentence scoring and perplexity.

Sentences are independent: each starts from the model's initial state at ``<s>``. The token
count of a sentence is its words plus one ``</s>``; out-of-vocabulary words are scored as the
unknown-word symbol and counted in ``oov``.

Memory is bounded by a logits budget (``max_elements``), as in rescoring
(:meth:`lm.model.LanguageModel.score_contexts`): batches hold as many positions as fit, and the
model's output layer splits whatever does not (:meth:`lm.model.LanguageModel.target_log_probs`),
so a 200k-word vocabulary never meets a 16k-position batch in one logits tensor.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist

from lm.config import DEFAULT_EVAL_ELEMENTS
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
        return TextScore(logprob=self.logprob, tokens=self.tokens, sentences=self.sentences, oov=self.oov).to_json()


@dataclass(frozen=True)
class TextScore:
    """What ``afp ppl`` prints: perplexity over ``tokens`` (words and one ``</s>`` per
    sentence), natural-log ``logprob``, ``oov`` unknown words (scored as ``<unk>``)."""

    logprob: float
    tokens: int
    sentences: int
    oov: int

    @property
    def ppl(self) -> float:
        return math.exp(-self.logprob / self.tokens) if self.tokens else float("nan")

    def to_json(self) -> dict[str, float | int]:
        return {"ppl": self.ppl, "tokens": self.tokens, "sentences": self.sentences, "oov": self.oov,
                "logprob": self.logprob}


def plan_batches(model: LanguageModel, corpus: Corpus, batch_size: int = 64, max_tokens: int = 16384,
                 max_elements: int = DEFAULT_EVAL_ELEMENTS) -> list[list[int]]:
    """Sentence indices of each evaluation batch, shortest sentences first.

    A batch holds at most ``batch_size`` sentences and ``min(max_tokens, model.rows_within(max_elements))``
    padded positions, so its output-layer logits (positions x :attr:`LanguageModel.logit_width`)
    stay within ``max_elements``; a sentence longer than that is a batch of its own, and the model
    splits its positions (:meth:`LanguageModel.target_log_probs`). The plan depends on the corpus
    and the budget only, so every process of a distributed run computes the same one.
    """
    if batch_size < 1 or max_tokens < 1 or max_elements < 1:
        raise ValueError(f"batch_size, max_tokens and max_elements must be positive, got {batch_size}, "
                         f"{max_tokens} and {max_elements}")
    positions = min(max_tokens, model.rows_within(max_elements))
    sizes = (corpus.lengths() + 2).tolist()  # [<s>, words, </s>]
    order = sorted(range(corpus.sentences), key=lambda i: sizes[i])
    groups, start = [], 0
    while start < len(order):
        longest = sizes[order[min(start + batch_size, len(order)) - 1]]
        size = max(1, min(batch_size, positions // max(longest, 1)))
        groups.append(order[start:start + size])
        start += size
    return groups


@contextmanager
def _eval_mode(model: LanguageModel) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@torch.no_grad()
def _score_group(model: LanguageModel, corpus: Corpus, group: list[int],
                 max_elements: int) -> list[torch.Tensor]:
    """Token log-probabilities of the sentences ``group``: one float64 CPU tensor of shape
    ``(n_i + 1,)`` per sentence (words then ``</s>``)."""
    batch = collate_flat(*corpus.take(group)).to(model.device)
    scores = model.token_logprobs(batch.inputs, batch.targets, batch.lengths, max_elements=max_elements)
    scores = scores.double().cpu()
    return [scores[row, : int(batch.lengths[row])] for row in range(len(group))]


def score_corpus(model: LanguageModel, corpus: Corpus, batch_size: int = 64, max_tokens: int = 16384,
                 max_elements: int = DEFAULT_EVAL_ELEMENTS) -> CorpusScore:
    """Score every sentence with the model's configured forward pass, in the batches of
    :func:`plan_batches` (at most ``max_elements`` logits at a time); results come back in corpus
    order."""
    results: list[torch.Tensor | None] = [None] * corpus.sentences
    with _eval_mode(model):
        for group in plan_batches(model, corpus, batch_size, max_tokens, max_elements):
            for index, values in zip(group, _score_group(model, corpus, group, max_elements)):
                results[index] = values
    return CorpusScore(token_logprobs=[r for r in results if r is not None], tokens=corpus.tokens, oov=corpus.oov)


def corpus_logprob(model: LanguageModel, corpus: Corpus, rank: int = 0, world_size: int = 1,
                   batch_size: int = 64, max_tokens: int = 16384,
                   max_elements: int = DEFAULT_EVAL_ELEMENTS) -> tuple[float, int]:
    """Summed natural-log probability and token count of the whole corpus, shared among processes.

    With ``world_size > 1`` (``torch.distributed`` initialised; every rank calls this) rank ``r``
    scores batches ``r, r + world_size, ...`` of :func:`plan_batches` and the float64 totals are
    all-reduced, so every rank returns the corpus's totals. Each sentence is scored in the same
    batch as by :func:`score_corpus`, so the sum differs from its :attr:`CorpusScore.logprob` only
    by float64 summation order.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, {world_size})")
    groups = plan_batches(model, corpus, batch_size, max_tokens, max_elements)[rank::world_size]
    logprob, tokens = 0.0, 0
    with _eval_mode(model):
        for group in groups:
            for values in _score_group(model, corpus, group, max_elements):
                logprob += float(values.sum())
                tokens += values.numel()
    if world_size > 1:
        totals = torch.tensor([logprob, float(tokens)], dtype=torch.float64, device=model.device)
        dist.all_reduce(totals)
        logprob, tokens = float(totals[0]), int(totals[1])
    return logprob, tokens
