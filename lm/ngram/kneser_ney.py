"""Interpolated modified Kneser-Ney n-gram models (Chen & Goodman 1999) built with numpy: what
``afp ngram`` writes, the model SRILM's ``ngram-count -kndiscount -interpolate`` and KenLM's
``lmplz`` build, with the exact numbers of a small dict-based reference estimator kept with the
tests as the specification (``tests/lm/kn_reference.py``; ``tests/lm/test_kneser_ney.py`` compares the two).

Sentences are ``[<s>, w_1 .. w_n, </s>]`` (unknown words as ``<unk>``) and independent. For
order ``n`` the model interpolates::

    p_n(w | h) = max(a_n(h w) - D_n(a_n(h w)), 0) / a_n(h .) + gamma_n(h) p_{n-1}(w | h'),
    gamma_n(h) = (D_n1 N_1(h .) + D_n2 N_2(h .) + D_n3+ N_3+(h .)) / a_n(h .),

``a_n`` being the raw count at the highest order and for n-grams starting with ``<s>``, else the
number of distinct words seen before the n-gram; three discounts per order from its
count-of-counts; ``p_0`` uniform over the predictable words. The back-off ARPA form (:func:`write_arpa`)
stores ``p_n(w | h)`` for every n-gram seen and ``gamma`` as the back-off weight of each context,
which gives the same probabilities under back-off look-up (:mod:`lm.ngram.arpa`).

How it scales: n-grams are rows of word ids packed into one sortable key each (``uint64`` when
``order * bits`` fits in 64 bits, else big-endian bytes compared as ``void``), counted chunk by
chunk with ``np.unique`` and merged; every later step (continuation counts, context totals,
the lower order's probability of each n-gram's suffix) is a sort, a ``reduceat`` or a
``searchsorted`` over whole arrays. Memory is a few tens of bytes per distinct n-gram.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lm.ngram.arpa import LOG10, unk_symbol, write_arpa_file
from lm.ngram.keys import Packer, find_keys
from lm.ngram.store import NgramStore

#: tokens counted per chunk before its n-grams are merged into the totals
CHUNK_TOKENS = 8_000_000


def _merge(keys: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique keys and the summed counts of each."""
    order = np.argsort(keys, kind="stable")
    keys, counts = keys[order], counts[order]
    if keys.shape[0] == 0:
        return keys, counts
    starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    return keys[starts], np.add.reduceat(counts, starts)


def sentence_stream(tokens: np.ndarray, offsets: np.ndarray, bos: int, eos: int,
                    unk: int) -> tuple[np.ndarray, np.ndarray]:
    """One shard's sentences as one id stream with ``<s>``/``</s>`` added, and each position's
    sentence start: int64 ``(W + 2S,)`` each. ``tokens``: ``-1`` for OOV words (-> ``unk``)."""
    s = offsets.shape[0] - 1
    w = int(offsets[-1] - offsets[0])
    out = np.empty(w + 2 * s, dtype=np.int64)
    starts = offsets[:-1] - offsets[0] + 2 * np.arange(s)
    ends = offsets[1:] - offsets[0] + 2 * np.arange(s) + 1
    is_word = np.ones(w + 2 * s, dtype=bool)
    is_word[starts] = False
    is_word[ends] = False
    words = np.asarray(tokens[offsets[0]:offsets[-1]], dtype=np.int64)
    out[is_word] = np.where(words < 0, unk, words)
    out[starts], out[ends] = bos, eos
    start_of = np.repeat(starts, ends - starts + 1)
    return out, start_of


@dataclass(frozen=True)
class Order:
    """One order's n-grams: sorted ``keys``, adjusted counts, and each n-gram's ``p_n`` (float64)."""

    n: int
    keys: np.ndarray
    counts: np.ndarray
    discounts: tuple[float, float, float]
    probs: np.ndarray


@dataclass(frozen=True)
class KneserNeyModel:
    """An interpolated modified-KN model: ``orders[n - 1]`` is order ``n``; ``gammas[n - 1]``
    is the back-off weight (``gamma_{n+1}``) of each n-gram of order ``n`` that is a context at
    order ``n + 1``, NaN for the others (for order 1 by word id, ``<s>`` included; for higher
    orders aligned with the keys); none for the highest order."""

    orders: list[Order]
    gammas: list[np.ndarray]
    num_words: int
    bits: int
    unigram_probs: np.ndarray  # float64 (vocab,): p_1 of every id (unseen ones from the floor)

    @property
    def order(self) -> int:
        return len(self.orders)

    def packer(self, n: int) -> Packer:
        return Packer(n, self.bits)


def count_ngrams(chunks: Iterable[tuple[np.ndarray, np.ndarray]], order: int, bits: int,
                 bos: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Raw counts of every order: ``(sorted keys, counts)`` per order ``1 .. order``, from chunks
    ``(stream, start_of)`` of :func:`sentence_stream`. Targets are never ``<s>``."""
    totals: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(order)]
    for stream, start_of in chunks:
        positions = np.flatnonzero(np.arange(stream.shape[0]) != start_of)  # the targets: all but each <s>
        for n in range(1, order + 1):
            ends = positions[positions - (n - 1) >= start_of[positions]]
            rows = np.stack([stream[ends - (n - 1) + k] for k in range(n)], axis=1)
            keys, counts = np.unique(Packer(n, bits).pack(rows), return_counts=True)
            totals[n - 1].append((keys, counts.astype(np.int64)))
            if len(totals[n - 1]) >= 4:  # keep the pending parts few: merge
                merged = _merge(np.concatenate([k for k, _ in totals[n - 1]]),
                                np.concatenate([c for _, c in totals[n - 1]]))
                totals[n - 1] = [merged]
    out = []
    for parts in totals:
        if not parts:
            out.append((np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)))
        else:
            out.append(_merge(np.concatenate([k for k, _ in parts]), np.concatenate([c for _, c in parts]))
                       if len(parts) > 1 else parts[0])
    return out


def discounts_of(counts: np.ndarray) -> tuple[float, float, float]:
    """Chen & Goodman's modified-KN discounts from the count-of-counts n_1..n_4, clamped into
    ``(0, k)`` (the reference's rule)."""
    n1, n2, n3, n4 = (int(np.count_nonzero(counts == k)) for k in (1, 2, 3, 4))
    y = n1 / (n1 + 2 * n2) if n1 + 2 * n2 else 0.5
    raw = (1 - 2 * y * n2 / n1 if n1 else 0.5, 2 - 3 * y * n3 / n2 if n2 else 1.0, 3 - 4 * y * n4 / n3 if n3 else 1.5)
    return tuple(min(max(d, 1e-3), k - 1e-3) for k, d in zip((1, 2, 3), raw, strict=True))  # type: ignore[return-value]


def _groups(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start index of each run of equal context (all columns but the last) in sorted ``rows``,
    and each row's group number."""
    if rows.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if rows.shape[1] == 1:
        return np.zeros(1, dtype=np.int64), np.zeros(rows.shape[0], dtype=np.int64)
    context = rows[:, :-1]
    new = np.concatenate([[True], (context[1:] != context[:-1]).any(axis=1)])
    starts = np.flatnonzero(new)
    return starts, np.cumsum(new) - 1


def _lookup(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray, missing: float) -> np.ndarray:
    """``values`` of each of ``wanted`` in sorted ``keys`` (``missing`` where absent)."""
    out = np.full(wanted.shape[0], missing, dtype=np.result_type(values.dtype, np.asarray(missing).dtype))
    at, found = find_keys(keys, wanted)
    out[found] = values[at[found]]
    return out


def build(chunks: Iterable[tuple[np.ndarray, np.ndarray]], order: int, vocab_size: int, bos: int,
          predictable: np.ndarray, words: Sequence[str] | None = None) -> KneserNeyModel:
    """Fit an ``order``-gram model. ``chunks``: :func:`sentence_stream` outputs; ``predictable``:
    bool ``(vocab_size,)``, the ids that can be predicted (``p_0``'s support); ``words`` name
    them in errors (a text that holds an unpredictable symbol is refused)."""
    if order < 1:
        raise ValueError(f"order must be at least 1, got {order}")
    bits = max(1, int(vocab_size - 1).bit_length())
    raw = count_ngrams(chunks, order, bits, bos)
    seen = Packer(1, bits).unpack(raw[0][0])[:, 0]
    blocked = seen[~predictable[seen]]
    if blocked.size:  # <eps>, #0 ... in the text: the model could not predict them, ARPA cannot list them
        name = repr(words[int(blocked[0])]) if words is not None else f"id {int(blocked[0])}"
        raise ValueError(f"the text holds {name}, a symbol the model never predicts (<s>, <eps>, #k or a gap of "
                         f"the vocabulary; {blocked.size} such symbol(s) in all): remove it from the text")
    adjusted: list[np.ndarray] = [raw[order - 1][1]]
    for n in range(order - 1, 0, -1):  # continuation counts: distinct left extensions
        higher = Packer(n + 1, bits).unpack(raw[n][0])
        left_keys, left_counts = np.unique(Packer(n, bits).pack(higher[:, 1:]), return_counts=True)
        keys, counts = raw[n - 1]
        rows = Packer(n, bits).unpack(keys)
        continuation = _lookup(left_keys, left_counts, keys, 0)  # every n-gram not starting with <s> has one
        adjusted.insert(0, np.where(rows[:, 0] == bos, counts, continuation).astype(np.int64))
    num_words = int(predictable.sum())
    orders: list[Order] = []
    gammas: list[np.ndarray] = []
    context_stats: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # per order: context rows, total, mass
    for n in range(1, order + 1):
        keys, counts = raw[n - 1][0], adjusted[n - 1]
        rows = Packer(n, bits).unpack(keys)
        d = discounts_of(counts)
        discount = np.where(counts <= 0, 0.0, np.array(d)[np.clip(counts, 1, 3) - 1])
        starts, group = _groups(rows)
        total = np.add.reduceat(counts, starts).astype(np.float64) if counts.shape[0] else np.zeros(0)
        mass = np.add.reduceat(discount, starts) if counts.shape[0] else np.zeros(0)
        if n == 1:
            lower = np.full(keys.shape[0], 1.0 / num_words)
        else:
            below = orders[-1]
            suffix = Packer(n - 1, bits).pack(rows[:, 1:])
            lower = below.probs[np.searchsorted(below.keys, suffix)]
        probs = (np.maximum(counts - discount, 0.0) + mass[group] * lower) / total[group]
        orders.append(Order(n=n, keys=keys, counts=counts, discounts=d, probs=probs))
        context_stats.append((rows[starts, :-1], total, mass))
    for n in range(1, order):  # gamma_{n+1} of the n-grams that are contexts at order n + 1
        contexts, total, mass = context_stats[n]
        if n == 1:  # by id: the context <s> is no unigram of the counts (it is never a target)
            gamma = np.full(vocab_size, np.nan)
            gamma[contexts[:, 0]] = mass / total
        else:  # every longer context ends at a target, so it is an n-gram of order n
            gamma = _lookup(Packer(n, bits).pack(contexts), mass / total, orders[n - 1].keys, np.nan)
        gammas.append(gamma)
    first = orders[0]
    unigram = np.zeros(vocab_size)
    context_total, context_mass = context_stats[0][1], context_stats[0][2]
    if context_total.shape[0]:
        unigram[:] = context_mass[0] / num_words / context_total[0]
        unigram[Packer(1, bits).unpack(first.keys)[:, 0]] = first.probs
    else:
        unigram[:] = 1.0 / num_words
    unigram[~predictable] = 0.0
    return KneserNeyModel(orders=orders, gammas=gammas, num_words=num_words, bits=bits, unigram_probs=unigram)


def write_arpa(model: KneserNeyModel, words: Sequence[str], bos: int, predictable: np.ndarray,
               path: str | Path, lines_per_chunk: int = 1_000_000) -> dict[str, int]:
    """Write ``model`` as back-off ARPA (gzip when ``path`` ends in ``.gz``) with
    :func:`lm.ngram.arpa.write_arpa_file`: unigrams are ``<s>`` (``-99``) and every predictable
    word; higher orders every n-gram seen, in key order; ``log10 gamma`` after each n-gram that is
    a context of the next order. Returns the number of n-grams of each order."""
    unigram_ids = _unigram_ids(bos, predictable)
    counts = [int(unigram_ids.shape[0]), *(int(o.keys.shape[0]) for o in model.orders[1:])]
    word_array = np.array(words, dtype=object)

    def sections() -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        gamma1 = model.gammas[0] if model.order > 1 else np.full(len(words), np.nan)  # gamma_2 by id
        logp = np.log10(np.where(unigram_ids == bos, 1.0, model.unigram_probs[unigram_ids]))
        logp[unigram_ids == bos] = -99.0
        yield 1, logp, word_array[unigram_ids][:, None], np.log10(gamma1[unigram_ids])
        for n in range(2, model.order + 1):
            level = model.orders[n - 1]
            gamma = model.gammas[n - 1] if n < model.order else np.full(level.keys.shape[0], np.nan)
            for first in range(0, level.keys.shape[0], lines_per_chunk):
                rows = model.packer(n).unpack(level.keys[first:first + lines_per_chunk])
                yield (n, np.log10(level.probs[first:first + lines_per_chunk]), word_array[rows],
                       np.log10(gamma[first:first + lines_per_chunk]))

    write_arpa_file(path, counts, sections())
    return {f"{n}-grams": c for n, c in enumerate(counts, 1)}


def _unigram_ids(bos: int, predictable: np.ndarray) -> np.ndarray:
    """The vocabulary ids of the ARPA form's unigrams, in file order: ``<s>`` then every
    predictable word."""
    return np.concatenate([[bos], np.flatnonzero(predictable)]).astype(np.int64)


def to_store(model: KneserNeyModel, words: Sequence[str], bos: int, predictable: np.ndarray):
    """The model as the :class:`lm.ngram.store.NgramStore` that reading its :func:`write_arpa`
    file gives (word ids in the file's unigram order; float32 natural logs), straight from the
    arrays: seconds where writing and parsing the ARPA text of a large model take minutes."""
    unigram_ids = _unigram_ids(bos, predictable)
    store_words = [words[i] for i in unigram_ids.tolist()]
    num_file_words = len(store_words)
    unk = unk_symbol(store_words)  # as reading the ARPA file decides it
    if unk not in store_words:
        store_words.append(unk)
    renumber = np.full(len(words), -1, dtype=np.int64)
    renumber[unigram_ids] = np.arange(unigram_ids.shape[0])
    bits = max(1, (len(store_words) - 1).bit_length())
    with np.errstate(divide="ignore"):
        unigram_logp = np.where(unigram_ids == bos, -99.0 * LOG10, np.log(model.unigram_probs[unigram_ids]))
    gamma1 = model.gammas[0][unigram_ids] if model.order > 1 else np.full(unigram_ids.shape[0], np.nan)
    keys = [Packer(1, bits).pack(np.arange(unigram_ids.shape[0])[:, None])]
    logprobs = [unigram_logp.astype(np.float32)]
    backoffs = [np.nan_to_num(np.log(gamma1), nan=0.0).astype(np.float32)]
    for n in range(2, model.order + 1):
        level = model.orders[n - 1]
        rows = renumber[model.packer(n).unpack(level.keys)]
        packed = Packer(n, bits).pack(rows)
        order = np.argsort(packed, kind="stable")
        gamma = model.gammas[n - 1][order] if n < model.order else np.full(order.shape[0], np.nan)
        keys.append(packed[order])
        logprobs.append(np.log(level.probs[order]).astype(np.float32))
        backoffs.append(np.nan_to_num(np.log(gamma), nan=0.0).astype(np.float32))
    return NgramStore(words=tuple(store_words), order=model.order, keys=keys, logprobs=logprobs,
                      backoffs=backoffs, num_file_words=num_file_words, source="afp ngram", unk=unk)


def chunks_of(shards: Iterable[tuple[np.ndarray, np.ndarray]], bos: int, eos: int, unk: int,
              chunk_tokens: int = CHUNK_TOKENS) -> Iterable[tuple[np.ndarray, np.ndarray]]:
    """:func:`sentence_stream` of each shard ``(tokens, offsets)`` in pieces of about
    ``chunk_tokens`` words, split at sentence boundaries."""
    for tokens, offsets in shards:
        s = offsets.shape[0] - 1
        first = 0
        while first < s:
            last = int(np.searchsorted(offsets, offsets[first] + chunk_tokens, side="right")) - 1
            last = min(max(last, first + 1), s)
            yield sentence_stream(tokens, offsets[first:last + 1], bos, eos, unk)
            first = last
