"""Prepared training data: a corpus tokenized once into memory-mapped shards.

Reading a corpus into :class:`lm.corpus.EncodedCorpus` costs about 115 bytes per word (Python
lists, one tensor per sentence), so ``afp train --train`` cannot hold a corpus of a few hundred
million words. ``afp prepare`` (:func:`prepare`) tokenizes it once, streaming, into flat integer
files, and :func:`open_prepared` maps them read-only: a :class:`ShardedCorpus` is a
:class:`lm.corpus.Corpus` whose memory does not grow with the corpus (the operating system pages
the files in and out; an epoch's batch plan costs 8 bytes per sentence).

On-disk format (version 1) of a prepared directory ``DIR``::

    meta.json                   what is here (below); written last, so a directory without it is an
                                unfinished preparation
    words.txt                   the vocabulary, a Kaldi symbol table ``WORD ID`` per line
                                (:meth:`Vocabulary.to_words_txt`; its unknown-word symbol is in meta.json)
    train-00000.tokens.int32    int32, little-endian, shape ``(W_k,)``: the word ids of shard k's
                                sentences one after another, without ``<s>``/``</s>``; ``-1`` marks a
                                word that is not in the vocabulary (read as the unknown-word id)
    train-00000.offsets.int64   int64, little-endian, shape ``(S_k + 1,)``: sentence j of shard k is
                                ``tokens[offsets[j]:offsets[j + 1]]``; ``offsets[0] = 0``,
                                ``offsets[S_k] = W_k``, strictly increasing (no sentence is empty)
    train-00001.tokens.int32    ... one pair per shard; shards split at sentence boundaries, each
    ...                         holds at most ``shard_tokens`` words (a longer sentence gets a shard alone)
    valid-00000.tokens.int32    the validation text (``--valid``), same format and vocabulary
    valid-00000.offsets.int64

Sentences are numbered across the shards of a split in order (shard 0's first). Boundaries are
not stored: every sentence has them, so the reader adds them and gives the tensor
``[<s>, w_1, ..., w_n, </s>]`` that :class:`EncodedCorpus` holds and :func:`lm.corpus.collate_flat`
pads. OOV words are stored as ``-1`` rather than the unknown-word id so that the OOV count of
any part (``max_train_sentences``) can be counted, and a literal ``<unk>`` in the text (which is
in the vocabulary, so not OOV) stays distinct.

``meta.json``::

    {"format": "afp-shards", "version": 1, "shard_tokens": 50000000,
     "vocab": {"file": "words.txt", "size": V, "unk": "<unk>",
               "words_txt": null | "path/words.txt", "min_count": 1, "max_vocab": null},
     "splits": {"train": {"sources": ["a.txt", ...], "sentences": S, "words": W,
                          "tokens": W + S, "oov": K,
                          "shards": [{"tokens": "train-00000.tokens.int32",
                                      "offsets": "train-00000.offsets.int64",
                                      "sentences": S_0, "words": W_0, "oov": K_0}, ...]},
                "valid": {... the same, only with --valid}}}

``tokens`` is words plus one ``</s>`` per sentence, the perplexity denominator, as
:attr:`EncodedCorpus.tokens`; ``oov`` counts words mapped to the unknown-word id.
"""

from __future__ import annotations

import json
import os
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lm.config import PrepareConfig, read_json_file
from lm.corpus import CorpusError, iter_corpus
from lm.vocab import Vocabulary

FORMAT = "afp-shards"
VERSION = 1
META = "meta.json"
VOCAB = "words.txt"
OOV_ID = -1
TOKEN_DTYPE = np.dtype("<i4")
OFFSET_DTYPE = np.dtype("<i8")
SPLITS = ("train", "valid")
_CHUNK = 1 << 22  # values per read or write: files are streamed in pieces of this size


class ShardError(ValueError):
    """A prepared directory is missing, unfinished or inconsistent; the message names the file."""


# ---------------------------------------------------------------------------- writing
def prepare(cfg: PrepareConfig) -> dict[str, Any]:
    """Tokenize ``cfg.text`` (and ``cfg.valid``) into ``cfg.out`` in the format of the module
    docstring; returns the ``meta.json`` contents.

    Memory does not grow with the corpus: a first pass counts words when the vocabulary is built
    from the text (a ``Counter``, which grows with the vocabulary), a second writes ids chunk by
    chunk. Raises :class:`CorpusError` for an unreadable source and :class:`ShardError` when
    ``out`` already holds prepared data.
    """
    out = Path(cfg.out)
    sources = [*cfg.text, *([cfg.valid] if cfg.valid else []), *([cfg.words_txt] if cfg.words_txt else [])]
    for source in sources:  # fail now, not after an hour of counting
        if not Path(source).is_file():
            raise CorpusError(f"{source}: no such file")
    out.mkdir(parents=True, exist_ok=True)
    existing = sorted(p.name for p in out.iterdir() if p.name == META or _is_shard_file(p))
    if existing:
        raise ShardError(f"{out}: already holds prepared data ({', '.join(existing[:3])}); choose an empty directory")
    if cfg.words_txt:
        vocab = Vocabulary.from_words_txt(cfg.words_txt)
    else:
        counts: Counter[str] = Counter()
        for path in cfg.text:
            for words in iter_corpus(path):
                counts.update(words)
        vocab = Vocabulary.from_counts(counts, max_size=cfg.max_vocab, min_count=cfg.min_count)
        del counts
    try:
        splits = {"train": _write_split(out, "train", cfg.text, vocab, cfg.shard_tokens)}
        if cfg.valid:
            splits["valid"] = _write_split(out, "valid", (cfg.valid,), vocab, cfg.shard_tokens)
    except BaseException:  # leave no half-written shards behind: they would block the next try
        for path in out.iterdir():
            if _is_shard_file(path):
                path.unlink()
        raise
    vocab.to_words_txt(out / VOCAB)
    meta = {"format": FORMAT, "version": VERSION, "shard_tokens": cfg.shard_tokens,
            "vocab": {"file": VOCAB, "size": vocab.size, "unk": vocab.unk, "words_txt": cfg.words_txt,
                      "min_count": cfg.min_count, "max_vocab": cfg.max_vocab},
            "splits": splits}
    tmp = out / f"{META}.tmp"
    tmp.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    tmp.replace(out / META)
    return meta


def _is_shard_file(path: Path) -> bool:
    return path.name.startswith(tuple(f"{split}-" for split in SPLITS))


def _write_split(out: Path, split: str, sources: Sequence[str], vocab: Vocabulary, shard_tokens: int) -> dict[str, Any]:
    writer = _ShardWriter(out, split, shard_tokens)
    unknown: set[str] = set()  # the distinct words mapped to <unk> (a literal <unk> aside)
    try:
        for path in sources:
            for words in iter_corpus(path):
                ids = vocab.encode(words, oov_id=OOV_ID)
                if OOV_ID in ids:
                    unknown.update(w for w, i in zip(words, ids) if i == OOV_ID and w != vocab.unk)
                writer.add(ids)
    finally:
        shards = writer.close()
    if not shards:
        raise CorpusError(f"{', '.join(sources)}: no sentences")
    sentences = sum(s["sentences"] for s in shards)
    words = sum(s["words"] for s in shards)
    return {"sources": [str(s) for s in sources], "sentences": sentences, "words": words, "tokens": words + sentences,
            "oov": sum(s["oov"] for s in shards), "unk_types": len(unknown), "shards": shards}


class _ShardWriter:
    """Appends sentences' ids to the shard files of one split, in chunks of ``_CHUNK`` values."""

    def __init__(self, out: Path, split: str, shard_tokens: int) -> None:
        self.out, self.split, self.shard_tokens = out, split, shard_tokens
        self.shards: list[dict[str, Any]] = []
        self.files: tuple[Any, Any] | None = None
        self.ids, self.offsets = array("i"), array("q")
        self.sentences = self.words = self.oov = 0

    def add(self, ids: list[int]) -> None:
        """Append one sentence (non-empty; ``-1`` for OOV words)."""
        if self.files is None or (self.words and self.words + len(ids) > self.shard_tokens):
            self._open_next()
        self.ids.extend(ids)
        self.words += len(ids)
        self.sentences += 1
        self.offsets.append(self.words)
        if len(self.ids) >= _CHUNK or len(self.offsets) >= _CHUNK:
            self._flush()

    def close(self) -> list[dict[str, Any]]:
        """Finish the last shard; returns the shards' meta.json entries."""
        self._finish()
        return self.shards

    def _open_next(self) -> None:
        self._finish()
        stem = f"{self.split}-{len(self.shards):05d}"
        names = (f"{stem}.tokens.int32", f"{stem}.offsets.int64")
        self.files = (open(self.out / names[0], "wb"), open(self.out / names[1], "wb"))
        self.shards.append({"tokens": names[0], "offsets": names[1]})
        self.sentences = self.words = self.oov = 0
        self.offsets.append(0)

    def _flush(self) -> None:
        assert self.files is not None
        ids = np.frombuffer(self.ids, dtype=np.int32)
        self.oov += int(np.count_nonzero(ids == OOV_ID))
        ids.astype(TOKEN_DTYPE, copy=False).tofile(self.files[0])
        if self.offsets:
            np.frombuffer(self.offsets, dtype=np.int64).astype(OFFSET_DTYPE, copy=False).tofile(self.files[1])
        self.ids, self.offsets = array("i"), array("q")

    def _finish(self) -> None:
        if self.files is None:
            return
        self._flush()
        for file in self.files:
            file.close()
        self.shards[-1].update(sentences=self.sentences, words=self.words, oov=self.oov)
        self.files = None


# ---------------------------------------------------------------------------- reading
@dataclass(frozen=True)
class Shard:
    """One shard of a split, mapped read-only.

    Attributes:
      tokens: int32 ``(W,)``: word ids, ``-1`` for OOV words (a read-only view of a ``np.memmap``).
      offsets: int64 ``(S + 1,)``: sentence ``j`` is ``tokens[offsets[j]:offsets[j + 1]]``.
      oov: how many of ``tokens`` are ``-1``.
    """

    tokens: np.ndarray
    offsets: np.ndarray
    oov: int

    @property
    def sentences(self) -> int:
        return len(self.offsets) - 1

    def head(self, sentences: int) -> Shard:
        """The first ``sentences`` sentences (views of the same maps; OOV words counted again)."""
        end = int(self.offsets[sentences])
        tokens = self.tokens[:end]
        oov = sum(int(np.count_nonzero(tokens[i:i + _CHUNK] == OOV_ID)) for i in range(0, end, _CHUNK))
        return Shard(tokens=tokens, offsets=self.offsets[: sentences + 1], oov=oov)


class ShardedCorpus:
    """A :class:`lm.corpus.Corpus` read from memory-mapped shards (see the module docstring).

    Sentences are read from the maps when asked for; the object holds the maps and one start
    index per shard, so its memory does not depend on the corpus size. :meth:`lengths` makes an
    int64 array of one entry per sentence.

    Attributes:
      shards: the :class:`Shard` s, in sentence order.
      bos_id, eos_id, unk_id: the ids added around every sentence and put in place of ``-1``.
    """

    def __init__(self, shards: Sequence[Shard], bos_id: int, eos_id: int, unk_id: int) -> None:
        self.shards = tuple(shards)
        self.bos_id, self.eos_id, self.unk_id = bos_id, eos_id, unk_id
        # int64 (shards + 1,): the index of each shard's first sentence, then the total
        self._starts = np.cumsum([0, *(s.sentences for s in self.shards)], dtype=np.int64)

    @property
    def sentences(self) -> int:
        return int(self._starts[-1])

    @property
    def words(self) -> int:
        return sum(len(s.tokens) for s in self.shards)

    @property
    def tokens(self) -> int:
        """Words plus one ``</s>`` per sentence (the perplexity denominator)."""
        return self.words + self.sentences

    @property
    def oov(self) -> int:
        return sum(s.oov for s in self.shards)

    def __len__(self) -> int:
        return self.sentences

    def __getitem__(self, index: int) -> torch.Tensor:
        """Sentence ``index``: int64 ``(n + 2,)``, ``[<s>, w_1, ..., w_n, </s>]``, OOV words as ``unk_id``."""
        return self.take([index + self.sentences if index < 0 else index])[0]

    def take(self, indices: Sequence[int] | np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Sentences ``indices`` concatenated, int64 ``(sum(n_i + 2),)``, and their sizes ``n_i + 2``,
        int64 ``(B,)`` (:meth:`lm.corpus.Corpus.take`); one gather per shard, no loop per sentence."""
        index = np.asarray(indices, dtype=np.int64)
        bad = (index < 0) | (index >= self.sentences)
        if bad.any():
            raise IndexError(f"sentence {int(index[bad][0])} out of range for a corpus of {self.sentences}")
        shard = np.searchsorted(self._starts, index, side="right") - 1
        local = index - self._starts[shard]
        begin, count = np.empty_like(index), np.empty_like(index)
        for k in np.unique(shard).tolist():
            rows = shard == k
            offsets = self.shards[k].offsets
            begin[rows] = offsets[local[rows]]
            count[rows] = offsets[local[rows] + 1] - begin[rows]
        sizes = count + 2
        starts = np.cumsum(sizes) - sizes  # where each sentence starts in the result
        within = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)  # word j of its sentence
        ids = np.empty(int(sizes.sum()), dtype=np.int64)
        ids[starts], ids[starts + sizes - 1] = self.bos_id, self.eos_id
        word_shard = np.repeat(shard, count)
        slots, sources = np.repeat(starts + 1, count) + within, np.repeat(begin, count) + within
        for k in np.unique(shard).tolist():
            words = word_shard == k
            ids[slots[words]] = self.shards[k].tokens[sources[words]]
        ids[ids == OOV_ID] = self.unk_id
        return torch.from_numpy(ids), torch.from_numpy(sizes)

    def lengths(self) -> np.ndarray:
        """int64 ``(sentences,)``: words per sentence."""
        if not self.shards:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.diff(s.offsets) for s in self.shards]).astype(np.int64, copy=False)

    def head(self, sentences: int) -> ShardedCorpus:
        """The first ``sentences`` sentences (all of them when there are fewer), sharing the maps."""
        shards: list[Shard] = []
        left = sentences
        for shard in self.shards:
            if left <= 0:
                break
            shards.append(shard if shard.sentences <= left else shard.head(left))
            left -= shard.sentences
        return ShardedCorpus(shards, self.bos_id, self.eos_id, self.unk_id)


@dataclass(frozen=True)
class PreparedData:
    """A prepared directory, opened: its ``meta.json``, vocabulary and splits."""

    directory: Path
    meta: dict[str, Any]
    vocab: Vocabulary
    train: ShardedCorpus
    valid: ShardedCorpus | None


def open_prepared(directory: str | Path, verify: bool = True) -> PreparedData:
    """Open a directory written by :func:`prepare`; every problem is a :class:`ShardError` (or a
    ``VocabularyError`` for ``words.txt``) that names the file.

    File sizes are always checked against ``meta.json``. With ``verify`` every file is also read
    once, in chunks: ids must lie in ``[-1, vocabulary size)`` and offsets must increase, so that a
    damaged file fails here and not as an out-of-range index inside the model.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ShardError(f"{directory}: no such directory (prepare one with afp prepare)")
    meta = read_json_file(directory / META, ShardError,
                          hint=" (not a directory written by afp prepare, or its preparation did not finish)")
    where = directory / META
    found = meta.get("format") if isinstance(meta, dict) else None
    if found != FORMAT:
        raise ShardError(f"{where}: not an {FORMAT} meta file (format {found!r})")
    if meta.get("version") != VERSION:
        raise ShardError(f"{where}: format version {meta.get('version')!r}; this afp reads version {VERSION}")
    try:
        vocab_meta = meta["vocab"]
        vocab = Vocabulary.from_words_txt(directory / vocab_meta["file"], unk=vocab_meta["unk"])
        if vocab.size != vocab_meta["size"]:
            raise ShardError(f"{directory / vocab_meta['file']}: {vocab.size} ids, {META} says {vocab_meta['size']}")
        splits = {name: _open_split(directory, name, meta["splits"][name], vocab, verify)
                  for name in SPLITS if name in meta["splits"]}
    except (KeyError, TypeError) as err:
        raise ShardError(f"{where}: missing or malformed field {err}") from None
    if "train" not in splits:
        raise ShardError(f"{where}: no train split")
    return PreparedData(directory=directory, meta=meta, vocab=vocab, train=splits["train"], valid=splits.get("valid"))


def _open_split(directory: Path, name: str, meta: dict[str, Any], vocab: Vocabulary, verify: bool) -> ShardedCorpus:
    shards = [_open_shard(directory, entry, vocab.size, verify) for entry in meta["shards"]]
    corpus = ShardedCorpus(shards, vocab.bos_id, vocab.eos_id, vocab.unk_id)
    if (corpus.sentences, corpus.words) != (meta["sentences"], meta["words"]):
        raise ShardError(f"{directory / META}: split {name} says {meta['sentences']} sentences and {meta['words']} "
                         f"words, its shards hold {corpus.sentences} and {corpus.words}")
    return corpus


def _open_shard(directory: Path, entry: dict[str, Any], vocab_size: int, verify: bool) -> Shard:
    sentences, words = int(entry["sentences"]), int(entry["words"])
    token_path, offset_path = directory / entry["tokens"], directory / entry["offsets"]
    tokens = _map(token_path, TOKEN_DTYPE, words)
    offsets = _map(offset_path, OFFSET_DTYPE, sentences + 1)
    if int(offsets[0]) != 0 or int(offsets[-1]) != words:
        raise ShardError(f"{offset_path}: offsets run from {int(offsets[0])} to {int(offsets[-1])}, "
                         f"expected 0 to {words}")
    if verify:  # plain reads, not through the maps: the scan leaves nothing of the files mapped in
        for start in range(0, sentences, _CHUNK):
            part = np.fromfile(offset_path, dtype=OFFSET_DTYPE, count=_CHUNK + 1, offset=start * OFFSET_DTYPE.itemsize)
            if not np.all(np.diff(part) > 0):
                raise ShardError(f"{offset_path}: offsets do not increase near sentence {start} (an empty or "
                                 f"damaged entry)")
        for start in range(0, words, _CHUNK):
            part = np.fromfile(token_path, dtype=TOKEN_DTYPE, count=_CHUNK, offset=start * TOKEN_DTYPE.itemsize)
            low, high = int(part.min()), int(part.max())
            if low < OOV_ID or high >= vocab_size:
                raise ShardError(f"{token_path}: id {low if low < OOV_ID else high} near token {start} is outside "
                                 f"[-1, {vocab_size}) (damaged, or not from this vocabulary)")
    return Shard(tokens=tokens, offsets=offsets, oov=int(entry["oov"]))


def _map(path: Path, dtype: np.dtype, count: int) -> np.ndarray:
    """Map ``count`` values of ``dtype`` read-only; the file must hold exactly that many."""
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        raise ShardError(f"{path}: no such file (listed in {META})") from None
    if count < 1 or size != count * dtype.itemsize:
        raise ShardError(f"{path}: {size} bytes, but {META} says {count} {dtype.name} values "
                         f"({count * dtype.itemsize} bytes): truncated or from another preparation")
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,)).view(np.ndarray)  # plain indexing: faster

