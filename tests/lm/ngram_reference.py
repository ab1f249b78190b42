"""The tests' reference for ARPA back-off n-grams: a dict-based model and its scorer.

:class:`NgramModel` is a dict view of what the one ARPA reader (:func:`lm.ngram.store.read_arpa_store`,
the format and its checks in :mod:`lm.ngram.arpa`) reads, scored by one dictionary look-up per
back-off step: the direct reading of the back-off definition in :mod:`lm.ngram.arpa`, against which
the tests check :class:`lm.ngram.store.StoreScorer` (the batched scorer every door uses),
mixtures, ``--old-lm`` and the Kneser-Ney builder. No serving path uses it (it was
``lm/ngram/model.py``), so it lives beside its tests. Malformed input raises
:class:`lm.ngram.arpa.ArpaFormatError` naming the source and line, from the one reader.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from numpy.typing import DTypeLike
from torch import Tensor

from lm.ngram.arpa import BOS, EOS, LOG_FLOOR, UNK
from lm.ngram.store import NgramStore, read_arpa_store

Gram = tuple[int, ...]


@dataclass(frozen=True, eq=False)
class NgramModel:
    """A back-off n-gram model read from an ARPA file (see the module docstring for semantics).

    Attributes:
      words: ``tuple[str, ...]``; ``words[i]`` is the word with id ``i``: the unigrams in file
        order, then ``<s>`` if the file lacks it and ``<unk>`` if the file lacks it.
      order: the highest n-gram order N.
      logprobs: context ``(h_1 .. h_{n-1})`` of word ids -> ``{word id: ln p(h w)}``, for every
        listed n-gram of every order (the unigrams under the empty context ``()``).
      backoffs: n-gram of word ids -> its natural-log back-off weight, for n-grams whose weight is
        not 0 (a weight of 0 and no weight are the same model).
      counts: ``(N,)`` number of n-grams of each order, as in the file.
      num_file_words: how many of ``words`` are unigrams of the file (the rest were added).
      source: where it was read from, for messages.
    """

    words: tuple[str, ...]
    order: int
    logprobs: dict[Gram, dict[int, float]]
    backoffs: dict[Gram, float]
    counts: tuple[int, ...]
    num_file_words: int
    source: str = "ARPA"
    unk: str = UNK
    _index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {w: i for i, w in enumerate(self.words)})
        for required in (BOS, EOS, self.unk):
            assert required in self._index, f"{self.source}: model words lack {required!r}"

    @classmethod
    def from_store(cls, store: NgramStore) -> NgramModel:
        """The dicts of ``store``'s n-grams (read it with ``dtype=np.float64`` for the file's exact
        numbers: the dicts hold its values as Python floats)."""
        logprobs: dict[Gram, dict[int, float]] = {}
        backoffs: dict[Gram, float] = {}
        for n in range(1, store.order + 1):
            grams = store.grams(n)
            # key order is lexicographic, so the n-grams of one context are consecutive
            new_context = np.ones(grams.shape[0], dtype=bool)
            new_context[1:] = (grams[1:, :-1] != grams[:-1, :-1]).any(axis=1)
            starts = np.flatnonzero(new_context)
            ends = np.append(starts[1:], grams.shape[0]).tolist()
            targets, values = grams[:, -1].tolist(), np.asarray(store.logprobs[n - 1], dtype=np.float64).tolist()
            for context, first, end in zip(_tuples(grams[starts, :-1]), starts.tolist(), ends):
                logprobs[context] = dict(zip(targets[first:end], values[first:end]))
            weights = np.asarray(store.backoffs[n - 1], dtype=np.float64)
            listed = np.flatnonzero(weights)
            backoffs.update(zip(_tuples(grams[listed]), weights[listed].tolist()))
        logprobs.setdefault((), {})
        return cls(store.words, store.order, logprobs, backoffs, store.counts, store.num_file_words, store.source,
                   store.unk)

    @property
    def bos_id(self) -> int:
        return self._index[BOS]

    @property
    def eos_id(self) -> int:
        return self._index[EOS]

    @property
    def unk_id(self) -> int:
        return self._index[self.unk]

    @property
    def has_unk(self) -> bool:
        """Whether ``<unk>`` is a unigram of the file (else unknown words get :data:`LOG_FLOOR`)."""
        return self.unk_id < self.num_file_words

    def __contains__(self, word: object) -> bool:
        """Known words: the unigrams of the file (``<unk>`` included when listed)."""
        return self._index.get(word, self.num_file_words) < self.num_file_words  # type: ignore[call-overload]

    def id(self, word: str) -> int:
        """The id of ``word``; unknown words get the ``<unk>`` id."""
        return self._index.get(word, self._index[self.unk])

    def logprob(self, history: Sequence[int], word: int) -> float:
        """``ln P(word | history)`` by the recursive back-off definition (the reference; the
        scorer computes the same numbers in batches). Only the last ``order - 1`` ids count."""
        if word == self.bos_id or word not in self.logprobs[()]:
            return LOG_FLOOR
        keep = self.order - 1
        return self._backoff(tuple(history)[-keep:] if keep else (), word)

    def _backoff(self, history: Gram, word: int) -> float:
        listed = self.logprobs.get(history, {}).get(word)
        if listed is not None:
            return listed
        return self.backoffs.get(history, 0.0) + self._backoff(history[1:], word)


def _tuples(rows: np.ndarray) -> list[Gram]:
    """int ``(R, n)`` -> ``R`` tuples of Python ints (made column by column: no list per row)."""
    if rows.shape[1] == 0:
        return [()] * rows.shape[0]
    return list(zip(*(rows[:, j].tolist() for j in range(rows.shape[1]))))


# ----------------------------------------------------------------------------------- reading
def arpa_store(data: str | bytes, source: str = "<ARPA text>", dtype: DTypeLike = np.float32) -> NgramStore:
    """:func:`lm.ngram.store.read_arpa_store` of ARPA text or of a file's bytes (plain or gzip),
    written to a temporary file first; errors name ``source`` (and the line, counted from 1)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "lm.arpa"
        path.write_bytes(bytes(data) if isinstance(data, (bytes, bytearray)) else data.encode("utf-8"))
        return read_arpa_store(path, source, dtype=dtype)


def read_arpa(path_or_text: str | os.PathLike[str] | bytes, source: str | None = None) -> NgramModel:
    """Read an ARPA model from a path (plain or gzip), from ARPA text, or from file bytes.

    A ``str`` is taken as ARPA text when it contains a newline, else as a path. ``source`` names
    the input in error messages (default: the path, ``<ARPA text>`` or ``<ARPA bytes>``).
    Raises :class:`ArpaFormatError` for unreadable or malformed input.
    """
    if isinstance(path_or_text, (bytes, bytearray)):
        store = arpa_store(path_or_text, source or "<ARPA bytes>", dtype=np.float64)
    elif isinstance(path_or_text, str) and "\n" in path_or_text:
        store = arpa_store(path_or_text, source or "<ARPA text>", dtype=np.float64)
    else:
        path = Path(path_or_text)
        store = read_arpa_store(path, source or str(path), dtype=np.float64)
    return NgramModel.from_store(store)


def parse_arpa(text: str, source: str = "<ARPA text>") -> NgramModel:
    """Parse ARPA text (see :mod:`lm.ngram.arpa`); errors name ``source`` and the line."""
    return NgramModel.from_store(arpa_store(text, source, dtype=np.float64))


# ----------------------------------------------------------------------------------- scoring
def sentence_logprob(model: NgramModel, words: Sequence[str]) -> float:
    """Natural-log probability of ``words`` and ``</s>`` after ``<s>`` (the direct reference:
    one :meth:`NgramModel.logprob` per token)."""
    ids = [model.bos_id, *(model.id(w) for w in words), model.eos_id]
    keep = model.order - 1
    return sum(model.logprob(ids[max(0, t - keep):t], ids[t]) for t in range(1, len(ids)))


class NgramScorer:
    """An :class:`NgramModel` as a ``lattices.scorer.ContextScorer`` (structurally).

    ``context_size`` is ``order - 1``; contexts wider than that are cut to their last
    ``order - 1`` tokens. Scores are computed on the CPU with dictionary look-ups: per context
    row, the chain of listed suffix contexts and their accumulated back-off weights is built
    once per call, then each target walks that chain.
    """

    def __init__(self, model: NgramModel) -> None:
        self.model = model
        self.context_size: int | None = model.order - 1
        self.bos_id, self.eos_id, self.unk_id = model.bos_id, model.eos_id, model.unk_id

    def word_ids(self, words: Sequence[str]) -> Tensor:
        """int64 ``(len(words),)``; unknown words get the ``<unk>`` id."""
        index, unk = self.model._index, self.model.unk_id
        return torch.tensor([index.get(w, unk) for w in words], dtype=torch.int64)

    def known(self, words: Sequence[str]) -> Tensor:
        """bool ``(len(words),)``: unigrams of the file other than ``<unk>`` (an unknown word,
        scored as ``<unk>`` or the floor, and ``<unk>`` itself are not known)."""
        return torch.tensor([w in self.model and w != self.model.unk for w in words], dtype=torch.bool)

    def score(self, contexts: Tensor, lengths: Tensor, targets: Tensor, target_context: Tensor) -> Tensor:
        """float64 ``(M,)`` natural-log ``P(targets[j] | context row target_context[j])`` (see
        ``ContextScorer.score``), on the device of ``targets``."""
        model = self.model
        if contexts.dim() != 2 or lengths.shape != contexts.shape[:1] or targets.shape != target_context.shape:
            raise ValueError(f"shapes do not fit: contexts {tuple(contexts.shape)}, lengths {tuple(lengths.shape)}, "
                             f"targets {tuple(targets.shape)}, target_context {tuple(target_context.shape)}")
        size = len(model.words)
        for name, ids in (("contexts", contexts), ("targets", targets)):
            if ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < size):
                raise ValueError(f"{name} hold ids outside [0, {size}) of {model.source}")
        keep = model.order - 1
        width = contexts.shape[1]
        rows = contexts[:, max(0, width - keep):].tolist() if keep else [[]] * contexts.shape[0]
        take = lengths.clamp(min=0, max=min(keep, width)).tolist()
        logprobs, backoffs, bos = model.logprobs, model.backoffs, model.bos_id
        chains: dict[int, list[tuple[dict[int, float], float]]] = {}
        out = []
        append = out.append
        for word, row in zip(targets.tolist(), target_context.tolist()):
            chain = chains.get(row)
            if chain is None:
                tokens = rows[row]
                chain = chains[row] = _chain(tuple(tokens[len(tokens) - take[row]:]), logprobs, backoffs)
            if word == bos:
                append(LOG_FLOOR)
                continue
            for table, backoff in chain:
                listed = table.get(word)
                if listed is not None:
                    append(backoff + listed)
                    break
            else:
                append(LOG_FLOOR)
        return torch.tensor(out, dtype=torch.float64).to(targets.device)


def _chain(history: Gram, logprobs: dict[Gram, dict[int, float]],
           backoffs: dict[Gram, float]) -> list[tuple[dict[int, float], float]]:
    """``(table of h', sum of bo over the longer suffixes of history)`` for each suffix ``h'`` of
    ``history`` that has listed continuations, longest first; the unigram table is last."""
    chain = []
    total = 0.0
    for start in range(len(history) + 1):
        suffix = history[start:]
        table = logprobs.get(suffix)
        if table is not None:
            chain.append((table, total))
        total += backoffs.get(suffix, 0.0)
    return chain
