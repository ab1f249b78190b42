"""Text corpora for language-model training and evaluation.

A corpus is a list of sentences, each a list of words without boundary symbols. Sentences are
independent: every model restarts from its initial state at ``<s>`` (this is what makes a
sentence-level AFP-rho model an exact (rho+1)-gram model).

Sources:
  * plain text, one sentence per line, words separated by white space (PTB, WikiText-2, Kaldi
    ``text`` without the utterance id: see ``skip_first_field``);
  * the supervision texts of a lhotse ``CutSet`` or ``SupervisionSet`` manifest.

:func:`encode` turns sentences into id tensors with ``<s>``/``</s>`` (an :class:`EncodedCorpus`, in
memory; :mod:`lm.shards` gives the same from memory-mapped files) and :func:`batches` groups any
:class:`Corpus` into padded mini-batches of similar length: ``batch_size`` sentences each, or as
many as fit a token budget, split between DDP ranks. The readers stream (:func:`iter_corpus`).
"""

from __future__ import annotations

import gzip
import math
import random
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from lm.vocab import BOS, EOS, Vocabulary

Sentence = list[str]


class CorpusError(ValueError):
    """A corpus file cannot be read; the message names the file (and line where it applies)."""


def read_sentences(path: str | Path, skip_first_field: bool = False, keep_empty: bool = False) -> list[Sentence]:
    """All sentences of a text file, as :func:`iter_sentences` reads them."""
    return list(iter_sentences(path, skip_first_field=skip_first_field, keep_empty=keep_empty))


def iter_sentences(path: str | Path, skip_first_field: bool = False, keep_empty: bool = False) -> Iterator[Sentence]:
    """Read one sentence per line, streaming (memory does not grow with the file); blank lines are
    skipped unless ``keep_empty``.

    A gzip-compressed file (recognised by its magic bytes, whatever its name) is decompressed as
    it is read. Lines end where ``str.splitlines`` ends them. Boundary symbols already present at either end
    (``<s> a b </s>``) are removed, so text that marks them is read the same as text that does not.
    Errors (raised when iteration reaches them) name the file, and the line for bad UTF-8.
    """
    path = Path(path)
    try:
        file = path.open("rb")
    except FileNotFoundError:
        raise CorpusError(f"{path}: no such file") from None
    except OSError as err:
        raise CorpusError(f"{path}: cannot read: {err.strerror}") from None
    with file:
        stream = gzip.GzipFile(fileobj=file) if file.peek(2)[:2] == b"\x1f\x8b" else file
        lineno = 0
        try:
            for lineno, raw in enumerate(stream, 1):
                yield from _line_sentences(raw, path, lineno, skip_first_field, keep_empty)
        except (OSError, EOFError) as err:  # a damaged or truncated gzip stream
            raise CorpusError(f"{path}: cannot decompress after line {lineno}: {err}") from None


def _line_sentences(raw: bytes, path: Path, lineno: int, skip_first_field: bool,
                    keep_empty: bool) -> Iterator[Sentence]:
    """The sentences of one raw line of ``path`` (see :func:`iter_sentences`)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorpusError(f"{path}: not UTF-8 text at line {lineno} ({err.reason} at byte {err.start} "
                          f"of the line)") from None
    for line in text.splitlines():
        words = line.split()
        if skip_first_field:
            words = words[1:]
        words = strip_boundaries(words)
        if words or keep_empty:
            yield words


def strip_boundaries(words: list[str]) -> list[str]:
    """``words`` without a ``<s>`` at the start and a ``</s>`` at the end (text that marks its
    sentence boundaries reads the same as text that does not)."""
    if words and words[0] == BOS:
        words = words[1:]
    if words and words[-1] == EOS:
        words = words[:-1]
    return words


def iter_lhotse_texts(path: str | Path) -> Iterator[Sentence]:
    """Sentences from the supervision texts of a lhotse ``CutSet`` or ``SupervisionSet`` manifest.

    Every supervision with a non-empty ``text`` gives one sentence (split on white space); for a
    ``CutSet`` these are the supervisions of all cuts, in order. A ``.jsonl(.gz)`` manifest is read
    lazily (one item at a time); a ``.json(.gz)`` one is loaded whole, as lhotse must.
    """
    from lhotse import load_manifest, load_manifest_lazy
    from lhotse.cut import CutSet
    from lhotse.supervision import SupervisionSet

    path = Path(path)
    try:
        manifest = load_manifest_lazy(path) if ".jsonl" in path.name else load_manifest(path)
        if manifest is None:  # an empty JSONL manifest
            return
        if isinstance(manifest, CutSet):
            supervisions = (s for cut in manifest for s in cut.supervisions)
        elif isinstance(manifest, SupervisionSet):
            supervisions = iter(manifest)
        else:
            raise CorpusError(f"{path}: expected a CutSet or SupervisionSet, got {type(manifest).__name__}")
        for s in supervisions:
            if s.text and s.text.strip():
                yield strip_boundaries(s.text.split())
    except CorpusError:
        raise
    except Exception as err:  # lhotse raises many types for unreadable manifests
        raise CorpusError(f"{path}: not a readable lhotse manifest: {err}") from None


def load_corpus(path: str | Path) -> list[Sentence]:
    """All sentences of a corpus file, as :func:`iter_corpus` reads them."""
    return list(iter_corpus(path))


def iter_corpus(path: str | Path) -> Iterator[Sentence]:
    """Stream a corpus, choosing the reader by file name: lhotse manifests end in ``.jsonl(.gz)``
    or ``.json(.gz)`` and name cuts or supervisions; anything else is plain text."""
    name = Path(path).name
    is_manifest = any(name.endswith(ext) for ext in (".jsonl", ".jsonl.gz", ".json", ".json.gz"))
    if is_manifest and ("cuts" in name or "supervisions" in name):
        return iter_lhotse_texts(path)
    return iter_sentences(path)


class Corpus(Protocol):
    """What training and evaluation read from an encoded corpus: :class:`EncodedCorpus` (in
    memory) and :class:`lm.shards.ShardedCorpus` (memory-mapped) are both one.

    Attributes:
      sentences: number of sentences.
      tokens: words plus one ``</s>`` per sentence (the perplexity denominator).
      oov: words that were not in the vocabulary (mapped to the unknown-word id).
    """

    @property
    def sentences(self) -> int: ...

    @property
    def tokens(self) -> int: ...

    @property
    def oov(self) -> int: ...

    def __getitem__(self, index: int) -> torch.Tensor:
        """Sentence ``index``: int64 ``(n + 2,)``, ``[<s>, w_1, ..., w_n, </s>]``."""
        ...

    def lengths(self) -> np.ndarray:
        """int64 ``(sentences,)``: the number of words ``n`` of every sentence (no boundaries)."""
        ...

    def take(self, indices: Sequence[int] | np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Sentences ``indices``, concatenated (the input of :func:`collate_flat`): int64
        ``(sum(n_i + 2),)``, each ``[<s>, w_1, ..., w_n, </s>]``, and their sizes, int64 ``(B,)``."""
        ...


@dataclass(frozen=True)
class EncodedCorpus:
    """Sentences as id sequences with boundaries: ``ids[i] = [<s>, w_1, ..., w_n, </s>]``; a
    :class:`Corpus` held in memory (about 115 bytes per word: use :mod:`lm.shards` for large ones).

    Attributes:
      ids: list of int64 tensors, ``ids[i]`` of shape ``(n_i + 2,)``.
      tokens: words plus one ``</s>`` per sentence (the perplexity denominator).
      oov: words that were not in the vocabulary (mapped to the unknown-word id).
    """

    ids: list[torch.Tensor]
    tokens: int
    oov: int

    @property
    def sentences(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.ids[index]

    def lengths(self) -> np.ndarray:
        return np.fromiter((len(s) - 2 for s in self.ids), dtype=np.int64, count=len(self.ids))

    def take(self, indices: Sequence[int] | np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        chosen = [self.ids[i] for i in indices]
        return torch.cat(chosen), torch.tensor([len(s) for s in chosen], dtype=torch.long)


def encode(sentences: Sequence[Sentence], vocab: Vocabulary) -> EncodedCorpus:
    """Map words to ids and add ``<s>``/``</s>`` to every sentence."""
    ids = [torch.tensor([vocab.bos_id, *vocab.encode(s), vocab.eos_id], dtype=torch.long) for s in sentences]
    tokens = sum(len(s) + 1 for s in sentences)
    oov = sum(vocab.count_oov(s) for s in sentences)
    return EncodedCorpus(ids=ids, tokens=tokens, oov=oov)


@dataclass(frozen=True)
class Batch:
    """A padded mini-batch of sentences.

    Attributes:
      inputs: int64 ``(B, T)``: ``<s> w_1 ... w_n`` then padding (id 0).
      targets: int64 ``(B, T)``: ``w_1 ... w_n </s>`` then padding.
      lengths: int64 ``(B,)``: number of real positions per row (``n + 1``).
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    lengths: torch.Tensor

    @property
    def mask(self) -> torch.Tensor:
        """bool ``(B, T)``: True at real (non-padding) positions."""
        steps = torch.arange(self.inputs.shape[1], device=self.lengths.device)
        return steps.unsqueeze(0) < self.lengths.unsqueeze(1)

    @property
    def num_tokens(self) -> int:
        return int(self.lengths.sum())

    def to(self, device: torch.device | str) -> Batch:
        return Batch(self.inputs.to(device), self.targets.to(device), self.lengths.to(device))


def collate_flat(ids: torch.Tensor, sizes: torch.Tensor) -> Batch:
    """Pad sentences given one after another into one :class:`Batch` (what :meth:`Corpus.take` gives).

    Args:
      ids: int64 ``(sum(sizes),)``: the sentences ``[<s>, w_1, ..., w_n, </s>]`` concatenated.
      sizes: int64 ``(B,)``: each sentence's ``n + 2``.
    """
    lengths = sizes - 1
    rows = torch.repeat_interleave(torch.arange(len(sizes)), sizes)
    cols = torch.arange(len(ids)) - (sizes.cumsum(0) - sizes)[rows]
    padded = torch.zeros(len(sizes), int(lengths.max()) + 1, dtype=torch.long)
    padded[rows, cols] = ids
    real = torch.arange(padded.shape[1] - 1).unsqueeze(0) < lengths.unsqueeze(1)
    return Batch(padded[:, :-1].masked_fill(~real, 0), padded[:, 1:].contiguous(), lengths)


#: batches whose sentences are sorted by length together (shuffled, padding kept small): the plan's default
BUCKET = 50


@dataclass(frozen=True)
class BatchPlan:
    """One epoch's mini-batches for one rank, as sentence indices (no sentence is read yet).

    Attributes:
      order: int64 ``(S,)``: sentence indices, batch after batch.
      bounds: int64 ``(G + 1,)``: batch ``g`` is ``order[bounds[g]:bounds[g + 1]]``.
      schedule: int64 ``(G_rank,)``: the batches this rank visits, in visiting order.
    """

    order: np.ndarray
    bounds: np.ndarray
    schedule: np.ndarray

    def __len__(self) -> int:
        return len(self.schedule)

    def __iter__(self) -> Iterator[np.ndarray]:
        """The sentence indices of each scheduled batch, int64 ``(B,)``."""
        for g in self.schedule.tolist():
            yield self.order[self.bounds[g]:self.bounds[g + 1]]


def plan_batches(
    lengths: np.ndarray,
    batch_size: int,
    shuffle: bool = False,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
    bucket: int = BUCKET,
    max_tokens: int | None = None,
) -> BatchPlan:
    """Group sentences into mini-batches from their lengths alone (see :func:`batches`).

    Args:
      lengths: int64 ``(sentences,)``: words per sentence (:meth:`Corpus.lengths`).
      batch_size: sentences per batch; ignored when ``max_tokens`` is given.
      max_tokens: the token budget: a batch holds at most this many padded positions
        (rows times the longest row's ``n + 1``).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
    lengths = np.asarray(lengths, dtype=np.int64)
    if max_tokens is None:
        order, bounds, schedule = _plan_by_count(lengths, batch_size, shuffle, seed, bucket)
    else:
        order, bounds, schedule = _plan_by_tokens(lengths, max_tokens, shuffle, seed, bucket)
    if world_size > 1:
        schedule = schedule[: len(schedule) - len(schedule) % world_size][rank::world_size]
    return BatchPlan(order=order, bounds=bounds, schedule=np.ascontiguousarray(schedule))


def _plan_by_count(lengths: np.ndarray, batch_size: int, shuffle: bool, seed: int,
                   bucket: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``batch_size`` sentences per batch. Shuffles with Python's ``random.Random(seed)`` on
    8-byte arrays: the same orders as the list-based code that trained the models before shards."""
    n = len(lengths)
    rng = random.Random(seed)
    order = array("q", range(n))
    if shuffle:
        rng.shuffle(order)  # a shuffle's draws depend only on the length: as shuffling a list
    order_np = np.frombuffer(order, dtype=np.int64)  # shares the array's memory
    if shuffle:
        pool = batch_size * bucket
        for start in range(0, n, pool):
            part = order_np[start:start + pool]
            part[:] = part[np.argsort(lengths[part], kind="stable")]  # stable, as sorted() is
    bounds = np.append(np.arange(0, n, batch_size, dtype=np.int64), np.int64(n))
    schedule = array("q", range(len(bounds) - 1))
    if shuffle:
        rng.shuffle(schedule)
    return order_np, bounds, np.frombuffer(schedule, dtype=np.int64)


def _plan_by_tokens(lengths: np.ndarray, max_tokens: int, shuffle: bool, seed: int,
                    bucket: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batches of at most ``max_tokens`` padded positions. With ``shuffle``: a random order
    (numpy, from ``seed``), sorted by length within pools of about ``bucket`` batches, packed
    greedily, the batches shuffled again; without: corpus order, packed greedily."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    n = len(lengths)
    widths = lengths + 1  # a row's positions: <s> w_1 ... w_n
    if n and int(widths.max()) > max_tokens:
        longest = int(widths.argmax())
        raise ValueError(f"sentence {longest} has {int(lengths[longest])} words: its {int(widths[longest])} positions "
                         f"exceed the token budget of {max_tokens}; raise batch_tokens")
    rng = np.random.default_rng(seed)
    order = rng.permutation(n).astype(np.int64) if shuffle else np.arange(n, dtype=np.int64)
    if shuffle and n:
        per_batch = max(1, max_tokens // math.ceil(float(widths.mean())))
        pool = bucket * per_batch
        for start in range(0, n, pool):
            part = order[start:start + pool]
            part[:] = part[np.argsort(lengths[part], kind="stable")]
    bounds = [0]
    rows, width = 0, 0
    chunk = 1 << 16  # widths are read chunk by chunk: no Python int per sentence at once
    for start in range(0, n, chunk):
        for offset, w in enumerate(widths[order[start:start + chunk]].tolist()):
            if rows and (rows + 1) * max(width, w) > max_tokens:
                bounds.append(start + offset)
                rows, width = 0, 0
            rows, width = rows + 1, max(width, w)
    if rows:
        bounds.append(n)
    schedule = rng.permutation(len(bounds) - 1).astype(np.int64) if shuffle else np.arange(len(bounds) - 1)
    return order, np.asarray(bounds, dtype=np.int64), schedule


class Batches:
    """An epoch's padded mini-batches: iterating collates each batch of a :class:`BatchPlan` from
    the corpus as it is reached; ``len()`` is the number of batches."""

    def __init__(self, corpus: Corpus, plan: BatchPlan) -> None:
        self.corpus = corpus
        self.plan = plan

    def __len__(self) -> int:
        return len(self.plan)

    def __iter__(self) -> Iterator[Batch]:
        for indices in self.plan:
            yield collate_flat(*self.corpus.take(indices))


def batches(
    corpus: Corpus,
    batch_size: int,
    shuffle: bool = False,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
    bucket: int = BUCKET,
    max_tokens: int | None = None,
) -> Batches:
    """Mini-batches of ``batch_size`` sentences, or of at most ``max_tokens`` padded positions.

    With ``shuffle``, sentences are shuffled (by ``seed``), then sorted by length within pools of
    ``bucket`` batches so that padding stays small, and the batches are shuffled again. Without
    it, order is kept. With ``max_tokens`` (a token budget), ``batch_size`` is ignored: each batch
    takes as many sentences as fit, so batches of short sentences have more rows (a sentence
    longer than the budget is a ``ValueError``). With ``world_size > 1`` every rank plans the same
    epoch and gets every ``world_size``-th batch (the count is made equal across ranks by dropping
    the remainder, as DDP needs); a rank reads only its own batches' sentences.
    """
    return Batches(corpus, plan_batches(corpus.lengths(), batch_size, shuffle=shuffle, seed=seed, rank=rank,
                                        world_size=world_size, bucket=bucket, max_tokens=max_tokens))
