"""The language model as a context scorer: what the lattice engine needs, nothing more.

:class:`LMScorer` satisfies ``lattices.scorer.ContextScorer`` structurally (``lm`` does not import
``lattices``); ``service`` hands one to the rescoring engine.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from lm.checkpoint import LoadedModel
from lm.model import DEFAULT_SCORE_ELEMENTS
from lm.output import resolve_score_precision


class LMScorer:
    """Scores (context, next word) pairs with a loaded model, in bounded-memory chunks.

    ``precision`` is the output layer's (:mod:`lm.output`): ``fp32``, ``bf16`` (a bfloat16 matmul
    refined to within 1e-3 nats), or ``auto`` (bf16 on CUDA, fp32 elsewhere)."""

    def __init__(self, loaded: LoadedModel, max_elements: int = DEFAULT_SCORE_ELEMENTS,
                 precision: str = "auto") -> None:
        self.loaded = loaded
        self.max_elements = max_elements
        self.precision = resolve_score_precision(precision, loaded.device)
        vocab = loaded.vocab
        self.context_size: int | None = loaded.config.context_size
        self.bos_id, self.eos_id, self.unk_id = vocab.bos_id, vocab.eos_id, vocab.unk_id

    @property
    def device(self) -> torch.device:
        """Where the model runs (and :meth:`score` returns its scores)."""
        return self.loaded.device

    def word_ids(self, words: Sequence[str]) -> Tensor:
        return torch.tensor(self.loaded.vocab.encode(list(words)), dtype=torch.int64)

    def known(self, words: Sequence[str]) -> Tensor:
        return torch.tensor([self.loaded.vocab.is_known(w) for w in words], dtype=torch.bool)

    def score(self, contexts: Tensor, lengths: Tensor, targets: Tensor, target_context: Tensor) -> Tensor:
        return self.loaded.model.score_contexts(contexts, lengths, targets, target_context,
                                                max_elements=self.max_elements, precision=self.precision)


def sentence_pairs(sentence_ids: Sequence[Sequence[int]], bos_id: int, eos_id: int,
                   context_size: int | None) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Every prediction of every sentence as a (context, next token) pair, equal contexts shared.

    Args:
      sentence_ids: word ids of each sentence, without boundaries.
      context_size: tokens of history a prediction sees (None: the whole sentence so far).
    Returns:
      contexts int64 ``(N, C)`` right-aligned, lengths ``(N,)``, targets ``(M,)``,
      target_context ``(M,)`` and target_sentence ``(M,)``; the targets of a sentence are its
      words then ``</s>``, in order.
    """
    index: dict[tuple[int, ...], int] = {}
    targets, target_context, target_sentence = [], [], []
    for number, words in enumerate(sentence_ids):
        tokens = [bos_id, *words, eos_id]
        for t in range(1, len(tokens)):
            context = tuple(tokens[max(0, t - context_size) if context_size else 0: t])
            target_context.append(index.setdefault(context, len(index)))
            targets.append(tokens[t])
            target_sentence.append(number)
    width = max((len(c) for c in index), default=1)
    contexts = torch.zeros(len(index), width, dtype=torch.int64)
    lengths = torch.zeros(len(index), dtype=torch.int64)
    for context, row in index.items():
        contexts[row, width - len(context):] = torch.tensor(context)
        lengths[row] = len(context)
    as_tensor = lambda values: torch.tensor(values, dtype=torch.int64)  # noqa: E731
    return contexts, lengths, as_tensor(targets), as_tensor(target_context), as_tensor(target_sentence)


def score_sentences(scorer: LMScorer | object, sentences: Sequence[Sequence[str]]) -> list[Tensor]:
    """Token log-probabilities (words then ``</s>``) of each sentence through ``scorer.score``.

    ``scorer`` is an :class:`LMScorer` or anything with its members (a batching wrapper); the
    numbers equal the sentence forward pass (:func:`lm.evaluate.score_corpus`).
    """
    ids = [scorer.word_ids(list(s)).tolist() for s in sentences]
    contexts, lengths, targets, target_context, target_sentence = sentence_pairs(
        ids, scorer.bos_id, scorer.eos_id, scorer.context_size)
    values = scorer.score(contexts, lengths, targets, target_context).double().cpu()
    return list(torch.split(values, [len(s) + 1 for s in ids]))
