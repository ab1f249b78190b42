"""ARPA back-off n-gram language models, and such a model as a finite-context scorer.

The ARPA format (as SRILM and KenLM write it), the subset read here::

    any text (ignored) up to the line \\data\\
    \\data\\
    ngram 1=<count>                 one line per order, orders 1..N, each once
    ...
    ngram N=<count>

    \\1-grams:
    <log10 p> <w1> [<log10 backoff>]
    ...
    \\N-grams:
    <log10 p> <w1> .. <wN>          the highest order has no back-off weights
    \\end\\                          anything after it is ignored

Fields are separated by whitespace, blank lines are ignored, sections come in order 1..N and
hold exactly as many entries as the header says. Every word of a higher-order n-gram must be
among the unigrams, ``</s>`` must be one, and no n-gram may be listed twice. Text is UTF-8;
gzip-compressed input is recognised by its magic bytes. Any violation raises
:class:`ArpaFormatError` naming the source and line.

Probabilities (standard back-off, as SRILM and KenLM compute them), in natural log:

* ``P(w | h) = p(h w)`` when the n-gram ``h w`` is listed, else ``bo(h) + P(w | h[1:])``,
  recursively down to the unigram ``p(w)``; ``bo`` of a context that is not listed, or is listed
  without a back-off field, is 0. Only the last ``order - 1`` tokens of a history matter.
* ``<s>`` is a context-only token: as a target it always gets :data:`LOG_FLOOR` (the file's
  unigram of ``<s>``, usually ``-99``, is kept but never used for prediction).
* An unknown word is scored as ``<unk>`` when the file has ``<unk>``. Without it, an unknown word
  maps to an extra ``<unk>`` id that has no n-grams: as a target it gets exactly
  :data:`LOG_FLOOR` (SRILM's ``-99`` log10 "zero probability", converted to natural log), whatever
  the context, and in a history it matches no n-gram, so the prediction backs off past it.
"""

from __future__ import annotations

import gzip
import math
import os
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

BOS = "<s>"
EOS = "</s>"
UNK = "<unk>"
LOG10 = math.log(10.0)
#: natural-log probability of a word the model cannot predict (``<s>``; an unknown word when the
#: file has no ``<unk>``): SRILM's -99 in log10.
LOG_FLOOR = -99.0 * LOG10

Gram = tuple[int, ...]

_NGRAM_LINE = re.compile(r"ngram\s+(\d+)\s*=\s*(\d+)")
_SECTION = re.compile(r"\\(\d+)-grams:")


class ArpaFormatError(ValueError):
    """An ARPA file is malformed; the message starts with the source and, where there is one, the line."""


@dataclass(frozen=True, eq=False)
class NgramModel:
    """A back-off n-gram model read from an ARPA file (see the module docstring for semantics).

    Attributes:
      words: ``tuple[str, ...]``; ``words[i]`` is the word with id ``i``: the unigrams in file
        order, then ``<s>`` if the file lacks it and ``<unk>`` if the file lacks it.
      order: the highest n-gram order N.
      logprobs: context ``(h_1 .. h_{n-1})`` of word ids -> ``{word id: ln p(h w)}``, for every
        listed n-gram of every order (the unigrams under the empty context ``()``).
      backoffs: n-gram of word ids -> its natural-log back-off weight, for n-grams listed with one.
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
    _index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {w: i for i, w in enumerate(self.words)})
        for required in (BOS, EOS, UNK):
            assert required in self._index, f"{self.source}: model words lack {required!r}"

    @property
    def bos_id(self) -> int:
        return self._index[BOS]

    @property
    def eos_id(self) -> int:
        return self._index[EOS]

    @property
    def unk_id(self) -> int:
        return self._index[UNK]

    @property
    def has_unk(self) -> bool:
        """Whether ``<unk>`` is a unigram of the file (else unknown words get :data:`LOG_FLOOR`)."""
        return self.unk_id < self.num_file_words

    def __contains__(self, word: object) -> bool:
        """Known words: the unigrams of the file (``<unk>`` included when listed)."""
        return self._index.get(word, self.num_file_words) < self.num_file_words  # type: ignore[call-overload]

    def id(self, word: str) -> int:
        """The id of ``word``; unknown words get the ``<unk>`` id."""
        return self._index.get(word, self._index[UNK])

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


# ----------------------------------------------------------------------------------- reading
def read_arpa(path_or_text: str | os.PathLike[str] | bytes, source: str | None = None) -> NgramModel:
    """Read an ARPA model from a path (plain or gzip), from ARPA text, or from file bytes.

    A ``str`` is taken as ARPA text when it contains a newline, else as a path. ``source`` names
    the input in error messages (default: the path, or ``<ARPA text>``).
    Raises :class:`ArpaFormatError` for unreadable or malformed input.
    """
    if isinstance(path_or_text, (bytes, bytearray)):
        data: bytes | str = bytes(path_or_text)
        source = source or "<ARPA bytes>"
    elif isinstance(path_or_text, str) and "\n" in path_or_text:
        data, source = path_or_text, source or "<ARPA text>"
    else:
        path = Path(path_or_text)
        source = source or str(path)
        try:
            data = path.read_bytes()
        except OSError as err:
            raise ArpaFormatError(f"{source}: cannot read ARPA file: {err}") from err
    if isinstance(data, bytes):
        if data[:2] == b"\x1f\x8b":
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError, zlib.error) as err:
                raise ArpaFormatError(f"{source}: broken gzip data: {err}") from err
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as err:
            line = data.count(b"\n", 0, err.start) + 1
            raise ArpaFormatError(f"{source}:{line}: not UTF-8 text: {err.reason}") from err
    return parse_arpa(data, source)


def parse_arpa(text: str, source: str = "<ARPA text>") -> NgramModel:
    """Parse ARPA text (see the module docstring); errors name ``source`` and the line."""
    lines = text.split("\n")
    i = _skip_to_data(lines, source)
    i, declared = _read_header(lines, i, source)
    order = len(declared)
    index: dict[str, int] = {}
    logprobs: dict[Gram, dict[int, float]] = {}
    backoffs: dict[Gram, float] = {}
    for n in range(1, order + 1):
        i = _next_nonblank(lines, i)
        if i == len(lines):
            raise ArpaFormatError(f"{source}: the file ends before the \\{n}-grams: section")
        if lines[i].strip() != f"\\{n}-grams:":
            raise ArpaFormatError(f"{source}:{i + 1}: expected \\{n}-grams:, got {lines[i].strip()!r}")
        header = i
        i, found = _read_section(lines, i + 1, n, n == order, index, logprobs, backoffs, source)
        if found != declared[n - 1]:
            raise ArpaFormatError(f"{source}:{header + 1}: the header declares {declared[n - 1]} {n}-grams, "
                                  f"the section has {found}")
    i = _next_nonblank(lines, i)
    if i == len(lines):
        raise ArpaFormatError(f"{source}: the file ends without \\end\\")
    if lines[i].strip() != "\\end\\":
        raise ArpaFormatError(f"{source}:{i + 1}: expected \\end\\, got {lines[i].strip()!r}")
    if EOS not in index:
        raise ArpaFormatError(f"{source}: {EOS} is not among the unigrams")
    words = list(index)
    num_file_words = len(words)
    words += [w for w in (BOS, UNK) if w not in index]
    logprobs.setdefault((), {})
    return NgramModel(tuple(words), order, logprobs, backoffs, tuple(declared), num_file_words, source)


def _next_nonblank(lines: list[str], i: int) -> int:
    while i < len(lines) and not lines[i].strip():
        i += 1
    return i


def _skip_to_data(lines: list[str], source: str) -> int:
    for i, line in enumerate(lines):
        if line.strip() == "\\data\\":
            return i + 1
    raise ArpaFormatError(f"{source}: no \\data\\ line: not an ARPA file")


def _read_header(lines: list[str], i: int, source: str) -> tuple[int, list[int]]:
    """The ``ngram N=count`` lines after ``\\data\\``: counts of orders 1..N, and where sections start."""
    counts: dict[int, int] = {}
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("\\"):
            break
        if line:
            match = _NGRAM_LINE.fullmatch(line)
            if not match:
                raise ArpaFormatError(f"{source}:{i + 1}: expected 'ngram N=COUNT', got {line!r}")
            n, count = int(match[1]), int(match[2])
            if n != len(counts) + 1:
                raise ArpaFormatError(f"{source}:{i + 1}: expected the count of order {len(counts) + 1}, got order {n}")
            counts[n] = count
        i += 1
    if not counts:
        raise ArpaFormatError(f"{source}:{i + 1}: the \\data\\ header has no 'ngram N=COUNT' lines")
    return i, [counts[n] for n in range(1, len(counts) + 1)]


def _read_section(lines: list[str], i: int, n: int, highest: bool, index: dict[str, int],
                  logprobs: dict[Gram, dict[int, float]], backoffs: dict[Gram, float],
                  source: str) -> tuple[int, int]:
    """Entries of the ``\\n-grams:`` section from line ``i`` up to the next ``\\`` line; returns
    that line's index and how many entries there were. Unigrams add their words to ``index``."""
    found = 0
    with_backoff = n + 2
    if n == 1:
        unigrams = logprobs.setdefault((), {})
    for i in range(i, len(lines)):  # noqa: B020 (the loop index is returned)
        line = lines[i]
        fields = line.split()
        if not fields:
            continue
        if fields[0][0] == "\\":
            return i, found
        size = len(fields)
        if size != n + 1 and (size != with_backoff or highest):
            expected = f"log10 prob and {n} word{'s' if n > 1 else ''}" + ("" if highest else " [and a back-off]")
            raise ArpaFormatError(f"{source}:{i + 1}: expected {expected}, got {size} fields: {line.strip()!r}")
        try:
            logprob = float(fields[0])
            backoff = float(fields[-1]) if size == with_backoff else 0.0
        except ValueError:
            raise ArpaFormatError(f"{source}:{i + 1}: not a number in {line.strip()!r}") from None
        if math.isnan(logprob) or math.isnan(backoff) or logprob == math.inf or math.isinf(backoff):
            raise ArpaFormatError(f"{source}:{i + 1}: log-probability or back-off is not finite in {line.strip()!r}")
        if n == 1:
            word = fields[1]
            if word in index:
                raise ArpaFormatError(f"{source}:{i + 1}: unigram {word!r} is listed twice")
            gram: Gram = (len(index),)
            index[word] = gram[0]
            unigrams[gram[0]] = logprob * LOG10
        else:
            try:
                gram = tuple([index[w] for w in fields[1:n + 1]])
            except KeyError as err:
                raise ArpaFormatError(f"{source}:{i + 1}: word {err.args[0]!r} is not among the unigrams") from None
            table = logprobs.get(gram[:-1])
            if table is None:
                table = logprobs[gram[:-1]] = {}
            elif gram[-1] in table:
                raise ArpaFormatError(f"{source}:{i + 1}: {n}-gram {' '.join(fields[1:n + 1])!r} is listed twice")
            table[gram[-1]] = logprob * LOG10
        if size == with_backoff:
            backoffs[gram] = backoff * LOG10
        found += 1
    return len(lines), found


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
        return torch.tensor([w in self.model and w != UNK for w in words], dtype=torch.bool)

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
