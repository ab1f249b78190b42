"""A back-off ARPA n-gram in compact numpy arrays, scored in batches: the store behind
``--model LM.arpa[.gz]``.

Per order ``n`` the store holds the n-grams' word-id rows packed into one sorted key each
(:class:`lm.kneser_ney.Packer`: ``uint64`` when ``n * bits`` fits, else big-endian bytes), their
natural-log probabilities and back-off weights (float32): about 16 bytes per n-gram, against the
hundreds of the dict-based reader (:class:`lm.ngram.NgramModel`). A batch of (history, word)
queries is scored by the back-off definition of :mod:`lm.ngram` (same numbers) order by order over
the whole batch: a ``searchsorted`` for the n-grams ``h w`` still unanswered, then one for the
back-off weights of their contexts.

Reading follows :mod:`lm.ngram`'s format rules (and reuses its word conventions: ``<s>`` is never
predicted, an unknown word is ``<unk>``, or :data:`lm.ngram.LOG_FLOOR` when the file has none).
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from lm.kneser_ney import Packer
from lm.ngram import BOS, EOS, LOG10, LOG_FLOOR, UNK, ArpaFormatError, _NGRAM_LINE


@dataclass(frozen=True, eq=False)
class NgramStore:
    """A back-off n-gram model (see the module docstring). ``keys[n - 1]``, ``logprobs[n - 1]``
    and ``backoffs[n - 1]`` are order ``n``'s sorted keys and their float32 natural-log
    probabilities and back-off weights (0 where the file gives none)."""

    words: tuple[str, ...]
    order: int
    keys: list[np.ndarray]
    logprobs: list[np.ndarray]
    backoffs: list[np.ndarray]
    num_file_words: int
    source: str = "ARPA"

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {w: i for i, w in enumerate(self.words)})
        object.__setattr__(self, "bits", max(1, (len(self.words) - 1).bit_length()))

    @property
    def bos_id(self) -> int:
        return self._index[BOS]  # type: ignore[attr-defined]

    @property
    def eos_id(self) -> int:
        return self._index[EOS]  # type: ignore[attr-defined]

    @property
    def unk_id(self) -> int:
        return self._index[UNK]  # type: ignore[attr-defined]

    @property
    def has_unk(self) -> bool:
        return self.unk_id < self.num_file_words

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(int(k.shape[0]) for k in self.keys)

    def id(self, word: str) -> int:
        return self._index.get(word, self.unk_id)  # type: ignore[attr-defined]

    def is_known(self, word: str) -> bool:
        """A unigram of the file other than ``<unk>`` (the definition of a known word)."""
        return self._index.get(word, self.num_file_words) < self.num_file_words and word != UNK  # type: ignore[attr-defined]

    def nbytes(self) -> int:
        return sum(a.nbytes for group in (self.keys, self.logprobs, self.backoffs) for a in group)

    def score(self, histories: np.ndarray, lengths: np.ndarray, words: np.ndarray) -> np.ndarray:
        """float64 ``(M,)``: ``ln P(words[i] | history i)``; ``histories`` int64 ``(M, C)``
        right-aligned with ``lengths`` (only the last ``order - 1`` ids count)."""
        m = words.shape[0]
        out = np.zeros(m, dtype=np.float64)
        active = np.ones(m, dtype=bool)
        floor = (words == self.bos_id) | ((words == self.unk_id) & (not self.has_unk))
        out[floor], active[floor] = LOG_FLOOR, False
        width = histories.shape[1] if histories.ndim == 2 else 0
        for n in range(self.order, 0, -1):
            need = n - 1
            rows = np.flatnonzero(active & (lengths >= need)) if need else np.flatnonzero(active)
            if rows.size == 0:
                continue
            gram = np.concatenate([histories[rows, width - need:] if need else np.zeros((rows.size, 0), np.int64),
                                   words[rows, None]], axis=1)
            at, found = _find(self.keys[n - 1], Packer(n, self.bits).pack(gram))
            out[rows[found]] += self.logprobs[n - 1][at[found]]
            active[rows[found]] = False
            missed = rows[~found]
            if need and missed.size:  # back off: add the context's weight (0 when it has none)
                ctx_at, ctx_found = _find(self.keys[need - 1], Packer(need, self.bits).pack(gram[~found, :-1]))
                out[missed[ctx_found]] += self.backoffs[need - 1][ctx_at[ctx_found]]
        out[active] += LOG_FLOOR  # a word with no unigram at all (cannot happen for file words)
        return out


def _find(keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of ``wanted`` in sorted ``keys`` and whether each is there."""
    if keys.shape[0] == 0:
        return np.zeros(wanted.shape[0], dtype=np.int64), np.zeros(wanted.shape[0], dtype=bool)
    at = np.minimum(np.searchsorted(keys, wanted), keys.shape[0] - 1)
    return at, keys[at] == wanted


def read_arpa_store(path: str | os.PathLike[str]) -> NgramStore:
    """Read an ARPA file (plain or gzip) into an :class:`NgramStore`; errors name the file and
    line (:class:`lm.ngram.ArpaFormatError`)."""
    source = str(path)
    try:
        with open(path, "rb") as probe:
            gz = probe.read(2) == b"\x1f\x8b"
        handle = gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8")
    except OSError as err:
        raise ArpaFormatError(f"{source}: cannot read ARPA file: {err}") from err
    with handle as lines:
        try:
            return _read(lines, source)
        except UnicodeDecodeError as err:
            raise ArpaFormatError(f"{source}: not UTF-8 text: {err.reason}") from err
        except (OSError, EOFError) as err:
            raise ArpaFormatError(f"{source}: broken gzip data: {err}") from err


def _read(lines, source: str) -> NgramStore:
    number = 0
    for line in lines:  # up to \data\
        number += 1
        if line.strip() == "\\data\\":
            break
    else:
        raise ArpaFormatError(f"{source}: no \\data\\ line")
    declared: list[int] = []
    line = ""
    for line in lines:
        number += 1
        text = line.strip()
        if not text:
            if declared:
                break
            continue
        match = _NGRAM_LINE.fullmatch(text)
        if not match:
            break
        if int(match.group(1)) != len(declared) + 1:
            raise ArpaFormatError(f"{source}:{number}: expected ngram {len(declared) + 1}=..., got {text!r}")
        declared.append(int(match.group(2)))
    if not declared:
        raise ArpaFormatError(f"{source}:{number}: no 'ngram N=count' lines after \\data\\")
    order = len(declared)
    index: dict[str, int] = {}
    rows_by_order: list[np.ndarray] = []
    logprobs: list[np.ndarray] = []
    backoffs: list[np.ndarray] = []
    pending = line.strip() if line.strip().startswith("\\") else None
    for n in range(1, order + 1):
        header = pending
        pending = None
        while header is None or not header:
            header = next(lines, None)
            number += 1
            if header is None:
                raise ArpaFormatError(f"{source}: the file ends before the \\{n}-grams: section")
            header = header.strip()
        if header != f"\\{n}-grams:":
            raise ArpaFormatError(f"{source}:{number}: expected \\{n}-grams:, got {header!r}")
        count = declared[n - 1]
        ids = np.zeros((count, n), dtype=np.int64)
        probs = np.zeros(count, dtype=np.float64)
        bows = np.zeros(count, dtype=np.float64)
        filled = 0
        for line in lines:
            number += 1
            parts = line.split()
            if not parts:
                if filled == count:
                    break
                continue
            if parts[0].startswith("\\"):  # the next section (or \end\), no blank line before it
                if filled != count:
                    raise ArpaFormatError(f"{source}:{number}: the header declares {count} {n}-grams, the section "
                                          f"has {filled}")
                pending = line.strip()
                break
            if filled == count:
                raise ArpaFormatError(f"{source}:{number}: the header declares {count} {n}-grams, the section has more")
            if len(parts) not in (n + 1, n + 2) or (len(parts) == n + 2 and n == order):
                raise ArpaFormatError(f"{source}:{number}: expected a log-probability, {n} word(s)"
                                      f"{'' if n == order else ' and an optional back-off weight'}, got {line.strip()!r}")
            try:
                probs[filled] = float(parts[0])
                if len(parts) == n + 2:
                    bows[filled] = float(parts[-1])
            except ValueError:
                raise ArpaFormatError(f"{source}:{number}: not a number in {line.strip()!r}") from None
            if n == 1:
                word = parts[1]
                if word in index:
                    raise ArpaFormatError(f"{source}:{number}: unigram {word!r} is listed twice")
                index[word] = filled
                ids[filled, 0] = filled
            else:
                try:
                    ids[filled] = [index[w] for w in parts[1:n + 1]]
                except KeyError as err:
                    raise ArpaFormatError(f"{source}:{number}: word {err.args[0]!r} is not among the unigrams") from None
            filled += 1
        if filled != count:
            raise ArpaFormatError(f"{source}:{number}: the header declares {count} {n}-grams, the section has {filled}")
        rows_by_order.append(ids)
        logprobs.append(probs)
        backoffs.append(bows)
    if EOS not in index:
        raise ArpaFormatError(f"{source}: {EOS} is not among the unigrams")
    words = list(index)
    num_file_words = len(words)
    for extra in (BOS, UNK):
        if extra not in index:
            index[extra] = len(words)
            words.append(extra)
    bits = max(1, (len(words) - 1).bit_length())
    keys, probs32, bows32 = [], [], []
    for n, (rows, probs, bows) in enumerate(zip(rows_by_order, logprobs, backoffs), 1):
        packed = Packer(n, bits).pack(rows)
        order_ = np.argsort(packed, kind="stable")
        packed = packed[order_]
        if packed.shape[0] > 1 and bool((packed[1:] == packed[:-1]).any()):
            raise ArpaFormatError(f"{source}: an {n}-gram is listed twice")
        keys.append(packed)
        probs32.append((probs[order_] * LOG10).astype(np.float32))
        bows32.append((bows[order_] * LOG10).astype(np.float32))
    return NgramStore(words=tuple(words), order=order, keys=keys, logprobs=probs32, backoffs=bows32,
                      num_file_words=num_file_words, source=source)


class StoreScorer:
    """An :class:`NgramStore` as a ``lattices.scorer.ContextScorer`` (the interface of
    :class:`lm.ngram.NgramScorer`, batched in numpy)."""

    #: float32 log-probabilities, summed in float64
    precision = "fp32"

    def __init__(self, store: NgramStore) -> None:
        self.store = store
        self.context_size: int | None = store.order - 1  # as lm.ngram.NgramScorer
        self.bos_id, self.eos_id, self.unk_id = store.bos_id, store.eos_id, store.unk_id

    def word_ids(self, words: Sequence[str]) -> Tensor:
        return torch.tensor([self.store.id(w) for w in words], dtype=torch.int64)

    def known(self, words: Sequence[str]) -> Tensor:
        return torch.tensor([self.store.is_known(w) for w in words], dtype=torch.bool)

    def score(self, contexts: Tensor, lengths: Tensor, targets: Tensor, target_context: Tensor) -> Tensor:
        rows = target_context.cpu().numpy()
        histories = contexts.cpu().numpy()[rows]
        values = self.store.score(histories, lengths.cpu().numpy()[rows], targets.cpu().numpy())
        return torch.from_numpy(values)


def load_store(path: str | Path) -> NgramStore:
    """An n-gram model directory (:func:`save_store`, arrays mapped), else an ARPA file."""
    return _open_store(Path(path)) if is_store_dir(path) else read_arpa_store(path)


STORE_FILE = "ngram.json"
STORE_FORMAT = "afp-ngram-store/1"


def save_store(store: NgramStore, directory: str | os.PathLike[str]) -> Path:
    """Write ``store`` as an n-gram model directory: ``ngram.json`` (format, order, words, counts)
    and per order ``keys-N.npy``, ``logprobs-N.npy``, ``backoffs-N.npy``; :func:`load_store`
    maps the arrays back without parsing (``--model DIR`` loads it in a second where the ARPA
    text takes minutes)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for n in range(1, store.order + 1):
        if store.keys[n - 1].dtype.kind == "V":
            raise ValueError(f"{directory}: keys wider than 64 bits are kept in ARPA form only")
        np.save(directory / f"keys-{n}.npy", store.keys[n - 1])
        np.save(directory / f"logprobs-{n}.npy", store.logprobs[n - 1])
        np.save(directory / f"backoffs-{n}.npy", store.backoffs[n - 1])
    meta = {"format": STORE_FORMAT, "order": store.order, "counts": list(store.counts), "words": list(store.words),
            "num_file_words": store.num_file_words, "source": store.source}
    (directory / STORE_FILE).write_text(json.dumps(meta) + "\n", encoding="utf-8")  # last: a complete directory
    return directory


def is_store_dir(path: str | os.PathLike[str]) -> bool:
    return (Path(path) / STORE_FILE).is_file()


def _open_store(directory: Path) -> NgramStore:
    meta = json.loads((directory / STORE_FILE).read_text(encoding="utf-8"))
    if meta.get("format") != STORE_FORMAT:
        raise ArpaFormatError(f"{directory / STORE_FILE}: not an {STORE_FORMAT} directory")
    order = int(meta["order"])

    def load(name: str) -> np.ndarray:
        return np.load(directory / name, mmap_mode="r")

    return NgramStore(words=tuple(meta["words"]), order=order,
                      keys=[load(f"keys-{n}.npy") for n in range(1, order + 1)],
                      logprobs=[load(f"logprobs-{n}.npy") for n in range(1, order + 1)],
                      backoffs=[load(f"backoffs-{n}.npy") for n in range(1, order + 1)],
                      num_file_words=int(meta["num_file_words"]), source=str(directory))


def is_arpa_path(path: str | os.PathLike[str]) -> bool:
    """Whether ``--model``/``--interpolate`` names an ARPA file (by its name: ``.arpa``, ``.arpa.gz``)."""
    return str(path).endswith((".arpa", ".arpa.gz"))


@dataclass(frozen=True)
class _NgramConfig:
    """What the front ends ask of a model's config, for an n-gram (never a window model)."""

    order: int
    counts: tuple[int, ...]
    is_window: bool = False
    rho: int | None = None
    future: int = 0

    @property
    def context_size(self) -> int:
        return self.order - 1

    def describe(self) -> str:
        return f"ARPA {self.order}-gram ({sum(self.counts):,} n-grams)"


@dataclass(frozen=True)
class _NgramVocab:
    unk: str = UNK


@dataclass(frozen=True, eq=False)
class LoadedNgram:
    """An ARPA model loaded for the front ends (``--model LM.arpa``), with the members of
    :class:`lm.checkpoint.LoadedModel` they use: ``config``, ``vocab.unk``, ``device`` (the CPU:
    look-ups are numpy), ``default_unk_penalty`` (0: the file's own ``<unk>`` probability is the
    unknown word's), ``path`` and :meth:`info`."""

    store: NgramStore
    path: Path

    @property
    def config(self) -> _NgramConfig:
        return _NgramConfig(order=self.store.order, counts=self.store.counts)

    @property
    def vocab(self) -> _NgramVocab:
        return _NgramVocab()

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def default_unk_penalty(self) -> float:
        return 0.0

    @property
    def training(self) -> dict:
        return {}

    def info(self) -> dict:
        return {"path": str(self.path), "name": self.config.describe(), "arch": "ngram", "cell": "ngram",
                "layers": 0, "hidden": 0, "rho": None, "parameters": sum(self.store.counts), "order": self.store.order,
                "context_size": self.store.order - 1, "future": 0, "vocab_size": len(self.store.words),
                "ngrams": list(self.store.counts), "has_unk": self.store.has_unk, "bytes": self.store.nbytes(),
                "device": "cpu", "default_unk_penalty": 0.0, "scores": "causal: next-word log-probabilities",
                "training": {}}


def load_ngram(path: str | os.PathLike[str]) -> LoadedNgram:
    """An ARPA file or an n-gram model directory (:func:`save_store`) as a model for the front ends."""
    return LoadedNgram(store=load_store(path), path=Path(path))
