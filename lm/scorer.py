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


class LMScorer:
    """Scores (context, next word) pairs with a loaded model, in bounded-memory chunks."""

    def __init__(self, loaded: LoadedModel, max_elements: int = DEFAULT_SCORE_ELEMENTS) -> None:
        self.loaded = loaded
        self.max_elements = max_elements
        vocab = loaded.vocab
        self.context_size: int | None = loaded.config.context_size
        self.bos_id, self.eos_id = vocab.bos_id, vocab.eos_id

    def word_ids(self, words: Sequence[str]) -> Tensor:
        return torch.tensor(self.loaded.vocab.encode(list(words)), dtype=torch.int64)

    def known(self, words: Sequence[str]) -> Tensor:
        return torch.tensor([w in self.loaded.vocab for w in words], dtype=torch.bool)

    def score(self, contexts: Tensor, lengths: Tensor, targets: Tensor, target_context: Tensor) -> Tensor:
        return self.loaded.model.score_contexts(contexts, lengths, targets, target_context,
                                                max_elements=self.max_elements)
