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

    Every member is required, and every wrapper (the server's batcher and its deadline view, a
    mixture) forwards all of them: the engine never guesses, so every front end gets the same answer.

    Attributes:
      context_size: tokens of history a prediction depends on (AFP's rho, an n-gram's n-1).
        ``None`` means unbounded: such a model cannot rescore a lattice exactly by expansion.
      bos_id, eos_id, unk_id: ids of ``<s>``, ``</s>`` and ``<unk>``.

    Unknown words, defined once: a word is *unknown* to a scorer when the scorer scores it as its
    ``<unk>``: a word it does not have, and the literal ``<unk>`` itself. :meth:`known` says which
    words are not unknown; the engine's ``unk`` count (and ``unk_penalty``), a result's ``oov``
    words and ``afp ppl``'s ``oov`` all use this definition.
    """

    context_size: int | None
    bos_id: int
    eos_id: int
    unk_id: int

    def word_ids(self, words: Sequence[str]) -> Tensor:
        """int64 ``(len(words),)``: the model's id of each word (unknown words -> its ``<unk>`` id)."""
        ...

    def known(self, words: Sequence[str]) -> Tensor:
        """bool ``(len(words),)``: False for the unknown words (see above), True for the rest."""
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


class ForwardingScorer:
    """The word side of a :class:`ContextScorer` answered by ``inner``: its ``context_size``, the
    ids of ``<s>``, ``</s>`` and ``<unk>``, :meth:`word_ids` and :meth:`known`. A subclass gives
    :meth:`ContextScorer.score` (the server's batcher, its deadline view, a baseline's zeros)."""

    def __init__(self, inner: ContextScorer) -> None:
        self.inner = inner
        self.context_size: int | None = inner.context_size
        self.bos_id, self.eos_id, self.unk_id = inner.bos_id, inner.eos_id, inner.unk_id

    def word_ids(self, words: Sequence[str]) -> Tensor:
        return self.inner.word_ids(words)

    def known(self, words: Sequence[str]) -> Tensor:
        return self.inner.known(words)


@runtime_checkable
class WindowScorer(Protocol):
    """An acausal window model seen from the lattice engine (a rescoring *feature*): it scores a
    word from the ``rho`` LM tokens before it and the ``future`` after it, the word itself masked
    (:mod:`lm.window`; the LM's implementation is :class:`lm.scorer.WindowScorer`).

    Attributes:
      rho, future: the window's left and right widths.
      bos_id, eos_id, unk_id, mask_id: ids of ``<s>``, ``</s>``, ``<unk>`` and the mask input.
    """

    rho: int
    future: int
    bos_id: int
    eos_id: int
    unk_id: int
    mask_id: int

    def word_ids(self, words: Sequence[str]) -> Tensor:
        """int64 ``(len(words),)``: the model's id of each word (unknown words -> its ``<unk>`` id)."""
        ...

    def known(self, words: Sequence[str]) -> Tensor:
        """bool ``(len(words),)``: False for the words scored as ``<unk>``."""
        ...

    def score_windows(self, windows: Tensor, valid: Tensor, targets: Tensor, target_window: Tensor) -> Tensor:
        """float ``(M,)``: log-probability of each target given its window.

        Args:
          windows: int64 ``(N, rho + 1 + future)`` model ids, ``mask_id`` in column ``rho``.
          valid: bool ``(N, rho + 1 + future)``: false where the window falls outside the sentence.
          targets: int64 ``(M,)``.
          target_window: int64 ``(M,)``: the row of ``windows`` of each target (the word is
            masked, so one window serves every word that can stand in it).
        """
        ...
