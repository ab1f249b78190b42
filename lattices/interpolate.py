"""Linear interpolation of finite-context scorers: itself a finite-context scorer.

``P(w | h) = sum_i weight_i P_i(w | h)``, computed as ``logsumexp_i(log weight_i + log P_i(w | h))``.
Its context size is the largest of the parts', so one expansion of the lattice serves them all
and rescoring with the mixture stays exact; each part cuts the contexts it is given to its own
``context_size`` (as every ``ContextScorer`` does).

Words and ids: the parts have their own vocabularies and id spaces. The interpolated scorer keeps
its own word table, ``<s>`` = 0 and ``</s>`` = 1, then the words in the order
:meth:`InterpolatedScorer.word_ids` first sees them; for every part a look-up tensor maps these
ids to the part's ids (``<s>``/``</s>`` to the part's ``bos_id``/``eos_id``, every other word
through the part's own ``word_ids`` of its spelling). The table only grows.

Unknown words: a part scores a word it does not know exactly as its ``word_ids`` maps it, i.e. as
its ``<unk>`` (for an ARPA n-gram without ``<unk>``, :class:`lm.ngram.store.StoreScorer`, the floor ``-99 * ln 10``).
So over the union ``U`` of the parts' predictable vocabularies, context by context,

    sum_{w in U} P(w | h) = sum_i weight_i * (1 + |U \\ V_i| * P_i(<unk> | h)),

which is 1 exactly when every part knows every word of ``U``. :meth:`InterpolatedScorer.known`
is true for a word any part knows, so the engine's unknown-word count and penalty apply only to
words no part knows.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

import torch
from torch import Tensor

from lattices.scorer import ContextScorer

BOS = "<s>"
EOS = "</s>"
UNK = "<unk>"
#: how far the weights may sum from 1 (they are then normalised exactly)
WEIGHT_TOLERANCE = 1e-6


class InterpolatedScorer:
    """A weighted mixture of :class:`~lattices.scorer.ContextScorer` objects (see the module docstring).

    Args:
      scorers: the parts; each must have a finite ``context_size``.
      weights: one per part, non-negative, summing to 1 (within :data:`WEIGHT_TOLERANCE`; they are
        normalised). A part with weight 0 is dropped: the mixture is then the other parts alone
        (its context size and vocabulary included).
    Raises:
      ValueError: no parts, a count mismatch, bad weights, or a part with an unbounded context.

    Attributes:
      scorers, weights: the parts kept (weight > 0) and their normalised weights.
      context_size: the largest ``context_size`` of the parts.
      bos_id, eos_id: 0 and 1; unk_id: the id of ``<unk>`` in its table.
      words: ``list[str]``, the interpolated scorer's word table (id -> word).
    """

    def __init__(self, scorers: Sequence[ContextScorer], weights: Sequence[float]) -> None:
        scorers, weights = list(scorers), [float(w) for w in weights]
        if not scorers:
            raise ValueError("give at least one scorer to interpolate")
        if len(weights) != len(scorers):
            raise ValueError(f"{len(weights)} weights for {len(scorers)} scorers")
        if not all(math.isfinite(w) and w >= 0 for w in weights):
            raise ValueError(f"interpolation weights must be non-negative numbers, got {weights}")
        if abs(sum(weights) - 1.0) > WEIGHT_TOLERANCE:
            raise ValueError(f"interpolation weights must sum to 1, got {weights} (sum {sum(weights)})")
        sizes = [s.context_size for s in scorers]
        if any(size is None for size in sizes):
            raise ValueError(f"every interpolated scorer needs a finite context_size (got {sizes}): exact lattice "
                             "expansion needs finite contexts")
        kept = [(s, w) for s, w in zip(scorers, weights) if w > 0]
        total = sum(w for _, w in kept)
        self.scorers: tuple[ContextScorer, ...] = tuple(s for s, _ in kept)
        self.weights: tuple[float, ...] = tuple(w / total for _, w in kept)
        self.context_size: int | None = max(s.context_size for s in self.scorers)  # type: ignore[type-var]
        self.bos_id, self.eos_id = 0, 1
        self.words: list[str] = [BOS, EOS]
        self._index = {BOS: 0, EOS: 1}
        self._log_weights = torch.tensor([math.log(w) for w in self.weights], dtype=torch.float64)
        self._tables = [torch.tensor([s.bos_id, s.eos_id], dtype=torch.int64) for s in self.scorers]
        self._lock = threading.Lock()

    #: what ``afp info`` and ``GET /v1/models`` say of the output layer's precision
    precision = "per part (a mixture)"

    def word_ids(self, words: Sequence[str]) -> Tensor:
        """int64 ``(len(words),)``: this scorer's ids, new words added to its table."""
        with self._lock:
            fresh = [w for w in dict.fromkeys(words) if w not in self._index]
            if fresh:
                for word in fresh:
                    self._index[word] = len(self.words)
                    self.words.append(word)
                self._tables = [torch.cat([table, part.word_ids(fresh).to(torch.int64).cpu()])
                                for table, part in zip(self._tables, self.scorers)]
            return torch.tensor([self._index[w] for w in words], dtype=torch.int64)

    @property
    def unk_id(self) -> int:
        """The id of ``<unk>`` in this scorer's table (each part maps it to its own ``<unk>``)."""
        return int(self.word_ids([UNK])[0])

    def known(self, words: Sequence[str]) -> Tensor:
        """bool ``(len(words),)``: known to at least one part (``<unk>`` is known to none)."""
        words = list(words)
        masks = [part.known(words).to(device="cpu", dtype=torch.bool) for part in self.scorers]
        return torch.stack(masks).any(dim=0) if words else torch.zeros(0, dtype=torch.bool)

    def score(self, contexts: Tensor, lengths: Tensor, targets: Tensor, target_context: Tensor) -> Tensor:
        """float64 ``(M,)`` natural-log mixture probabilities, on the device of ``targets``; ids
        are this scorer's (from :meth:`word_ids`)."""
        tables = self._tables
        size = tables[0].shape[0]
        for name, ids in (("contexts", contexts), ("targets", targets)):
            if ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < size):
                raise ValueError(f"{name} hold ids outside [0, {size}): ids must come from word_ids")
        device = targets.device
        parts = []
        for part, table, log_weight in zip(self.scorers, tables, self._log_weights.tolist()):
            table = table.to(contexts.device)
            values = part.score(table[contexts], lengths, table.to(targets.device)[targets], target_context)
            parts.append(values.to(device=device, dtype=torch.float64) + log_weight)
        return torch.logsumexp(torch.stack(parts), dim=0)
