"""How the lattice engine talks to a language model: a small structural protocol.

``lattices`` never imports ``lm``; any object with these members can rescore lattices (the
LM's implementation is :class:`lm.scorer.LMScorer`, wired up by ``service``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from torch import Tensor


@runtime_checkable
class ContextScorer(Protocol):
    """A finite-context language model seen from the lattice engine.

    Attributes:
      context_size: tokens of history a prediction depends on (AFP's rho, an n-gram's n-1).
        ``None`` means unbounded: such a model cannot rescore a lattice exactly by expansion.
      bos_id, eos_id: ids of ``<s>`` and ``</s>``.

    A scorer may also have ``unk_id``, the id it scores unknown words as; the engine then counts
    a word as unknown (for ``unk_penalty``) when it maps to that id, a literal ``<unk>`` in the
    input included. Without it, the words ``known`` says no to are counted.
    """

    context_size: int | None
    bos_id: int
    eos_id: int

    def word_ids(self, words: Sequence[str]) -> Tensor:
        """int64 ``(len(words),)``: the model's id of each word (unknown words -> its ``<unk>`` id)."""
        ...

    def known(self, words: Sequence[str]) -> Tensor:
        """bool ``(len(words),)``: which words the model has in its vocabulary."""
        ...

    def score(self, contexts: Tensor, lengths: Tensor, targets: Tensor, target_context: Tensor) -> Tensor:
        """Natural-log probabilities of next tokens.

        Args:
          contexts: int64 ``(N, C)``, right-aligned model ids; row ``i``'s tokens are
            ``contexts[i, C - lengths[i]:]`` (the rest is padding), starting with ``<s>`` when the
            sentence start is within ``context_size`` tokens.
          lengths: int64 ``(N,)``.
          targets: int64 ``(M,)`` next-token ids.
          target_context: int64 ``(M,)`` row of ``contexts`` for each target.
        Returns:
          float ``(M,)``.
        """
        ...
