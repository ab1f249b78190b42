"""A back-off ARPA n-gram in compact numpy arrays, scored in batches: the store behind
``--model LM.arpa[.gz]``, and the one ARPA reader.

Per order ``n`` the store holds the n-grams' word-id rows packed into one sorted key each
(:class:`lm.ngram.kneser_ney.Packer`: ``uint64`` when ``n * bits`` fits, else big-endian bytes), their
natural-log probabilities and back-off weights (float32 by default): about 16 bytes per n-gram,
against the hundreds of a dict-based model (the tests' reference, ``tests/lm/ngram_reference.py``,
is built from a float64 store). A batch of (history, word) queries is scored by the back-off
definition of :mod:`lm.ngram.arpa` order by order over the whole batch: a ``searchsorted`` for the
n-grams ``h w`` still unanswered, then one for the back-off weights of their contexts.

:func:`read_arpa_store` (a path, plain or gzip) reads the format of :mod:`lm.ngram.arpa`, with all
of its checks, and its word conventions: ``<s>`` is never predicted, an unknown word is ``<unk>``,
or :data:`lm.ngram.arpa.LOG_FLOOR` when the file has none.
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
import re
import zlib
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from numpy.typing import DTypeLike
from torch import Tensor

from lm.ngram.arpa import BOS, EOS, LOG10, LOG_FLOOR, NGRAM_COUNT_LINE, UNK, ArpaFormatError, unk_symbol
from lm.ngram.keys import Packer, find_keys


@dataclass(frozen=True, eq=False)
class NgramStore:
    """A back-off n-gram model (see the module docstring).

    Attributes:
      words: ``tuple[str, ...]``; ``words[i]`` is the word with id ``i``: the unigrams in file
        order, then ``<s>`` if the file lacks it and ``<unk>`` if the file has no unknown-word
        symbol (:data:`lm.ngram.arpa.UNK_SYMBOLS`: ``<unk>``, ``<UNK>``, ``[unk]``, ``<SPOKEN_NOISE>``).
      order: the highest n-gram order N.
      keys: ``keys[n - 1]`` order ``n``'s packed word-id rows, sorted ``(count_n,)``
        (:meth:`grams` unpacks them).
      logprobs: ``logprobs[n - 1]`` float32 (float64 when read so) ``(count_n,)`` natural-log
        probabilities, aligned with ``keys[n - 1]``.
      backoffs: the same for back-off weights (0 where the file gives none).
      num_file_words: how many of ``words`` are unigrams of the file (the rest were added).
      source: where it was read from, for messages.
      unk: the unknown-word symbol: every word not among ``words`` is scored as it.
    """

    words: tuple[str, ...]
    order: int
    keys: list[np.ndarray]
    logprobs: list[np.ndarray]
    backoffs: list[np.ndarray]
    num_file_words: int
    source: str = "ARPA"
    unk: str = UNK

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
        return self._index[self.unk]  # type: ignore[attr-defined]

    @property
    def has_unk(self) -> bool:
        return self.unk_id < self.num_file_words

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(int(k.shape[0]) for k in self.keys)

    def id(self, word: str) -> int:
        return self._index.get(word, self.unk_id)  # type: ignore[attr-defined]

    def grams(self, n: int) -> np.ndarray:
        """int64 ``(count_n, n)``: order ``n``'s word-id rows, in key order (lexicographic by id)."""
        return Packer(n, self.bits).unpack(self.keys[n - 1])  # type: ignore[attr-defined]

    def is_known(self, word: str) -> bool:
        """A unigram of the file other than its unknown-word symbol (the definition of a known word)."""
        return self._index.get(word, self.num_file_words) < self.num_file_words and word != self.unk  # type: ignore[attr-defined]

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
            at, found = find_keys(self.keys[n - 1], Packer(n, self.bits).pack(gram))
            out[rows[found]] += self.logprobs[n - 1][at[found]]
            active[rows[found]] = False
            missed = rows[~found]
            if need and missed.size:  # back off: add the context's weight (0 when it has none)
                ctx_at, ctx_found = find_keys(self.keys[need - 1], Packer(need, self.bits).pack(gram[~found, :-1]))
                out[missed[ctx_found]] += self.backoffs[need - 1][ctx_at[ctx_found]]
        out[active] += LOG_FLOOR  # a word with no unigram at all (cannot happen for file words)
        return out


GZIP_MAGIC = b"\x1f\x8b"


def read_arpa_store(path: str | os.PathLike[str], source: str | None = None,
                    dtype: DTypeLike = np.float32) -> NgramStore:
    """Read an ARPA file (plain or gzip, streamed line by line) into an :class:`NgramStore` whose
    probabilities and back-off weights have ``dtype`` (float64 keeps the file's numbers exactly).
    ``source`` names the file in errors (default: the path); every error is an
    :class:`lm.ngram.arpa.ArpaFormatError` naming it and, where there is one, the line."""
    source = source or str(path)
    try:
        with open(path, "rb") as probe:
            gz = probe.read(2) == GZIP_MAGIC
        handle = gzip.open(path, "rt", encoding="utf-8", newline="\n") if gz else \
            open(path, encoding="utf-8", newline="\n")
    except OSError as err:
        raise ArpaFormatError(f"{source}: cannot read ARPA file: {err}") from err
    with handle as lines:
        try:
            return _read(lines, source, dtype)
        except UnicodeDecodeError as err:
            raise ArpaFormatError(f"{source}:{_undecodable_line(path, gz)}: not UTF-8 text: {err.reason}") from err
        except (OSError, EOFError, zlib.error) as err:
            raise ArpaFormatError(f"{source}: {'broken gzip data' if gz else 'cannot read ARPA file'}: {err}") from err


def _undecodable_line(path: str | os.PathLike[str], gz: bool) -> int:
    """The number of the first line of the file that is not UTF-8 (read again, on the error path
    only: the streaming decoder fails a whole chunk ahead of the line being parsed)."""
    number = 0
    with (gzip.open(path, "rb") if gz else open(path, "rb")) as raw:
        for number, line in enumerate(raw, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                break
    return number


#: an ARPA line's fields are separated by ASCII blanks only (as in SRILM and KenLM, and as the
#: lattice readers split theirs): a word may hold a no-break or other Unicode space
_FIELD = re.compile(r"[^ \t\n\r\f\v]+")


def _fields(line: str) -> list[str]:
    """The fields of ``line``: ``str.split`` for an ASCII line (a cached flag makes the check free),
    else split at ASCII blanks only."""
    return line.split() if line.isascii() else _FIELD.findall(line)


class _Lines:
    """The input's lines and the number of the last one taken (for messages)."""

    def __init__(self, lines: Iterator[str], source: str) -> None:
        self.lines, self.source, self.number = lines, source, 0

    def next_nonblank(self) -> str | None:
        """The next non-blank line, stripped; None at the end of the input."""
        for line in self.lines:
            self.number += 1
            text = line.strip()
            if text:
                return text
        return None

    def error(self, message: str, number: int | None = None) -> ArpaFormatError:
        return ArpaFormatError(f"{self.source}:{self.number if number is None else number}: {message}")


class _Numbering(dict):
    """word -> id; a word not seen before gets the next id (the unigram section's numbering)."""

    def __missing__(self, word: str) -> int:
        self[word] = len(self)
        return self[word]


@dataclass(frozen=True)
class _Section:
    """One ``\\n-grams:`` section as read. ``grams``: int32 ``(count, n)`` word ids in file order;
    ``probs``, ``backoffs``: float64 ``(count,)`` log10 numbers (back-off 0 where none is given);
    ``first_line``: the number of the line after the section's header; ``blanks``: for each blank
    line, how many entries come before it; ``end``: the stripped line that ended the section
    (None at the end of the input)."""

    grams: np.ndarray
    probs: np.ndarray
    backoffs: np.ndarray
    first_line: int
    blanks: list[int]
    end: str | None

    def line_of(self, row: int) -> int:
        """The line number of entry ``row``."""
        return self.first_line + row + bisect.bisect_right(self.blanks, row)


def _read(lines: Iterator[str], source: str, dtype: DTypeLike) -> NgramStore:
    """The one ARPA parser (the format and its checks: :mod:`lm.ngram.arpa`). Each line is split once and
    its numbers and words appended to flat arrays; what whole arrays show at once (numbers that
    are not finite, n-grams listed twice) is checked per section afterwards, and the first problem
    in file order is the one reported, as a line-by-line check would."""
    reader = _Lines(lines, source)
    declared, pending = _read_header(reader)
    order = len(declared)
    index: dict[str, int] = _Numbering()
    keys, logprobs, backoffs = [], [], []
    for n in range(1, order + 1):
        header = pending if pending is not None else reader.next_nonblank()
        if header is None:
            raise ArpaFormatError(f"{source}: the file ends before the \\{n}-grams: section")
        if header != f"\\{n}-grams:":
            raise reader.error(f"expected \\{n}-grams:, got {header!r}")
        header_line = reader.number
        section, line_error = _read_section(reader, n, n == order, index.__getitem__)
        if n == 1:
            index = dict(index)  # complete: an unknown word of a higher order is an error
        bits = max(1, (len(index) + (BOS not in index) + (unk_symbol(index) not in index) - 1).bit_length())
        packed, sort = _sorted_checked(section, n, bits, index, reader)
        if line_error is not None:
            raise line_error
        found = section.probs.shape[0]
        if found != declared[n - 1]:
            raise reader.error(f"the header declares {declared[n - 1]} {n}-grams, the section has {found}", header_line)
        pending = section.end
        keys.append(packed)
        logprobs.append((section.probs[sort] * LOG10).astype(dtype, copy=False))
        backoffs.append((section.backoffs[sort] * LOG10).astype(dtype, copy=False))
    end = pending if pending is not None else reader.next_nonblank()
    if end is None:
        raise ArpaFormatError(f"{source}: the file ends without \\end\\")
    if end != "\\end\\":
        raise reader.error(f"expected \\end\\, got {end!r}")
    if EOS not in index:
        raise ArpaFormatError(f"{source}: {EOS} is not among the unigrams")
    words = list(index)
    num_file_words = len(words)
    unk = unk_symbol(index)
    words += [w for w in (BOS, unk) if w not in index]
    return NgramStore(words=tuple(words), order=order, keys=keys, logprobs=logprobs, backoffs=backoffs,
                      num_file_words=num_file_words, source=source, unk=unk)


def _read_header(reader: _Lines) -> tuple[list[int], str | None]:
    """Skip to ``\\data\\`` and read its ``ngram N=COUNT`` lines: the counts of orders 1..N, and
    the stripped line after them (None at the end of the input)."""
    for line in reader.lines:
        reader.number += 1
        if line.strip() == "\\data\\":
            break
    else:
        raise ArpaFormatError(f"{reader.source}: no \\data\\ line: not an ARPA file")
    counts: list[int] = []
    while (text := reader.next_nonblank()) is not None and not text.startswith("\\"):
        match = NGRAM_COUNT_LINE.fullmatch(text)
        if not match:
            raise reader.error(f"expected 'ngram N=COUNT', got {text!r}")
        n, count = int(match[1]), int(match[2])
        if n != len(counts) + 1:
            raise reader.error(f"expected the count of order {len(counts) + 1}, got order {n}")
        counts.append(count)
    if not counts:
        raise reader.error("the \\data\\ header has no 'ngram N=COUNT' lines", reader.number + (text is None))
    return counts, text


def _read_section(reader: _Lines, n: int, highest: bool,
                  word_id: Callable[[str], int]) -> tuple[_Section, ArpaFormatError | None]:
    """The entries of a ``\\n-grams:`` section up to the next line whose first field starts with a
    backslash (the next section's header or ``\\end\\``), or the end of the input. ``word_id``
    maps a word to its id (``KeyError`` for a word that is not a unigram). Per line: one
    ``split``, a branch on the number of fields, ``float`` and the word look-ups; nothing else.

    Returns the entries read and, when a line is malformed, its error (the entries before it are
    checked first: an earlier problem is reported first); ``reader.number`` is left at the last
    line taken."""
    plain, with_backoff = n + 1, (-1 if highest else n + 2)
    ids, probs = array("i"), array("d")
    backoff_rows, backoff_values, blanks = array("q"), array("d"), []
    add_ids, add_prob = ids.extend, probs.append
    first = reader.number + 1
    end = line = None
    error: str | None = None
    try:
        for line in reader.lines:
            parts = _fields(line)
            size = len(parts)
            if size == plain:
                logprob = float(parts[0])
                add_ids(map(word_id, parts[1:plain]))
                add_prob(logprob)
            elif size == with_backoff:
                logprob, backoff = float(parts[0]), float(parts[plain])
                add_ids(map(word_id, parts[1:plain]))
                backoff_rows.append(len(probs))
                backoff_values.append(backoff)
                add_prob(logprob)
            elif not size:
                blanks.append(len(probs))
            else:
                end = line
                break
    except (ValueError, KeyError) as err:
        end, error = line, _line_problem(line, n, err)
    count = len(probs)
    reader.number = first + count + len(blanks) - (end is None)
    if end is not None and error is None and _fields(end)[0][0] != "\\":
        expected = f"log10 prob and {n} word{'s' if n > 1 else ''}" + ("" if highest else " [and a back-off]")
        error = f"expected {expected}, got {len(_fields(end))} fields: {end.strip()!r}"
    dense = np.zeros(count, dtype=np.float64)
    dense[np.frombuffer(backoff_rows, dtype=np.int64)] = np.frombuffer(backoff_values, dtype=np.float64)
    section = _Section(grams=np.frombuffer(ids, dtype=np.intc)[:count * n].reshape(count, n),
                       probs=np.frombuffer(probs, dtype=np.float64), backoffs=dense, first_line=first,
                       blanks=blanks, end=None if end is None or error else end.strip())
    return section, None if error is None else reader.error(error)


def _line_problem(line: str, n: int, err: ValueError | KeyError) -> str | None:
    """What is wrong with an entry line whose number or word failed (the error path only), in the
    order numbers, then words; None for a line that starts with a backslash: no entry but the end
    of the section, whatever its number of fields."""
    parts = _fields(line)
    if parts[0][0] == "\\":
        return None
    if isinstance(err, ValueError):
        return f"not a number in {line.strip()!r}"
    logprob, backoff = float(parts[0]), float(parts[-1]) if len(parts) == n + 2 else 0.0
    if not _finite(np.array([logprob]), np.array([backoff]))[0]:
        return _not_finite(n, " ".join(parts[1:n + 1]), logprob, backoff)
    return f"word {err.args[0]!r} is not among the unigrams"


def _finite(probs: np.ndarray, backoffs: np.ndarray) -> np.ndarray:
    """bool: a log-probability below +inf that is a number (``-inf`` is probability 0), and a
    finite back-off weight."""
    return ~(np.isnan(probs) | (probs == np.inf) | ~np.isfinite(backoffs))


def _not_finite(n: int, words: str, logprob: float, backoff: float) -> str:
    return (f"log-probability or back-off is not finite in the {n}-gram {words!r}: "
            f"log10 p {logprob}, back-off {backoff}")


def _sorted_checked(section: _Section, n: int, bits: int, index: dict[str, int],
                    reader: _Lines) -> tuple[np.ndarray, np.ndarray]:
    """The section's packed keys, sorted, and the sorting permutation; raises for the first
    entry (in file order) whose numbers are not finite or that repeats an earlier n-gram."""
    packed = Packer(n, bits).pack(section.grams)
    sort = np.argsort(packed, kind="stable")
    packed = packed[sort]
    bad = ~_finite(section.probs, section.backoffs)
    repeats = sort[1:][packed[1:] == packed[:-1]]  # the later entry of each equal pair
    if bad.any() or repeats.size:
        not_finite = int(np.argmax(bad)) if bad.any() else section.probs.shape[0]
        row = min(not_finite, int(repeats.min()) if repeats.size else not_finite)
        words = _gram_text(section.grams[row], index)
        if row == not_finite:
            message = _not_finite(n, words, float(section.probs[row]), float(section.backoffs[row]))
        else:
            message = f"{'unigram' if n == 1 else f'{n}-gram'} {words!r} is listed twice"
        raise reader.error(message, section.line_of(row))
    return packed, sort


def _gram_text(ids: np.ndarray, index: dict[str, int]) -> str:
    """The words of one n-gram, for a message (the error path only: builds the id -> word list)."""
    words = list(index)
    return " ".join(words[i] for i in ids.tolist())


class StoreScorer:
    """An :class:`NgramStore` as a ``lattices.scorer.ContextScorer``, batched in numpy.

    ``context_size`` is ``order - 1``; contexts wider than that are cut to their last
    ``order - 1`` tokens."""

    #: float32 log-probabilities, summed in float64
    precision = "fp32"

    def __init__(self, store: NgramStore) -> None:
        self.store = store
        self.context_size: int | None = store.order - 1
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
            "num_file_words": store.num_file_words, "source": store.source, "unk": store.unk}
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
                      num_file_words=int(meta["num_file_words"]), source=str(directory),
                      unk=str(meta.get("unk", UNK)))


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
        return f"back-off {self.order}-gram ({sum(self.counts):,} n-grams)"


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
        return _NgramVocab(unk=self.store.unk)

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
