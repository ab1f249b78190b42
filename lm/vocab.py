"""Word vocabulary: the mapping between words and the integer ids a model predicts.

A :class:`Vocabulary` always contains the sentence boundaries ``<s>`` and ``</s>`` and an
unknown-word symbol (``<unk>`` unless told otherwise). Every other word that is not in it maps
to the unknown-word id.

It is built from training text (most frequent words first) or read from a Kaldi ``words.txt``
symbol table, whose lines are ``WORD ID``; there the ids of the file are kept, so that a lattice
written with that table can be scored without renumbering. Kaldi's ``<eps>`` (id 0) and
disambiguation symbols (``#0``, ``#1``...) are kept in the table but never predicted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lm.ngram.arpa import unk_symbol

BOS = "<s>"
EOS = "</s>"
UNK = "<unk>"


class VocabularyError(ValueError):
    """A symbol table or vocabulary description is malformed; the message names file and line."""


@dataclass(frozen=True)
class Vocabulary:
    """An immutable word <-> id table.

    Attributes:
      words: ``tuple[str, ...]`` of length ``size``; ``words[i]`` is the word with id ``i``.
        Ids without a word (gaps in a Kaldi table) hold the empty string and are never produced.
      unk: the unknown-word symbol; must be in ``words``.
    """

    words: tuple[str, ...]
    unk: str = UNK
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, int] = {}
        for i, word in enumerate(self.words):
            if not word:
                continue
            if word in index:
                raise VocabularyError(f"word {word!r} appears twice (ids {index[word]} and {i})")
            index[word] = i
        for required in (BOS, EOS, self.unk):
            if required not in index:
                raise VocabularyError(f"vocabulary lacks the required symbol {required!r}")
        object.__setattr__(self, "_index", index)

    # ----------------------------------------------------------------- constructors
    @classmethod
    def from_sentences(
        cls,
        sentences: Iterable[Sequence[str]],
        max_size: int | None = None,
        min_count: int = 1,
        unk: str = UNK,
    ) -> Vocabulary:
        """Build from tokenized training sentences: specials first, then by count, then by spelling.

        Args:
          sentences: words of each sentence, without ``<s>``/``</s>``.
          max_size: keep at most this many entries in all (specials included).
          min_count: drop words seen fewer times (they become ``unk``).
        """
        return cls.from_counts(Counter(word for sentence in sentences for word in sentence),
                               max_size=max_size, min_count=min_count, unk=unk)

    @classmethod
    def from_counts(
        cls,
        counts: Mapping[str, int],
        max_size: int | None = None,
        min_count: int = 1,
        unk: str = UNK,
    ) -> Vocabulary:
        """Build from word counts (what :meth:`from_sentences` counts; a streaming reader can count
        a corpus too large to hold): specials first, then by count, then by spelling.

        ``max_size`` and ``min_count`` as in :meth:`from_sentences`; counts of ``<s>``, ``</s>``
        and ``unk`` are ignored.
        """
        specials = [BOS, EOS, unk]
        ranked = sorted((w for w, c in counts.items() if c >= min_count and w not in specials),
                        key=lambda w: (-counts[w], w))
        if max_size is not None:
            if max_size < len(specials):
                raise ValueError(f"max_size={max_size} is smaller than the {len(specials)} special symbols")
            ranked = ranked[: max_size - len(specials)]
        return cls(tuple(specials + ranked), unk=unk)

    @classmethod
    def from_words_txt(cls, path: str | Path, unk: str | None = None) -> Vocabulary:
        """Read a Kaldi symbol table (``WORD ID`` per line, ids need not be contiguous).

        ``unk`` defaults to whichever of ``<unk>``, ``<UNK>``, ``[unk]``, ``<SPOKEN_NOISE>`` the
        table has. ``<s>`` and ``</s>`` are appended when the table lacks them.
        """
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise VocabularyError(f"{path}: cannot read symbol table: {err}") from err
        words = parse_symbol_table(text, source=str(path))
        present = {w for w in words if w}
        for special in (BOS, EOS):
            if special not in present:
                words.append(special)
        if unk is None:
            unk = unk_symbol(present)
            if unk not in present:
                words.append(UNK)
        elif unk not in present:
            raise VocabularyError(f"{path}: unknown-word symbol {unk!r} is not in the table")
        try:
            return cls(tuple(words), unk=unk)
        except VocabularyError as err:
            raise VocabularyError(f"{path}: {err}") from None

    def to_words_txt(self, path: str | Path) -> None:
        """Write a Kaldi symbol table with these ids."""
        lines = [f"{word} {i}\n" for i, word in enumerate(self.words) if word]
        Path(path).write_text("".join(lines), encoding="utf-8")

    # ----------------------------------------------------------------- lookups
    @property
    def size(self) -> int:
        """Number of ids (the softmax width)."""
        return len(self.words)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self._index

    @property
    def bos_id(self) -> int:
        return self._index[BOS]

    @property
    def eos_id(self) -> int:
        return self._index[EOS]

    @property
    def unk_id(self) -> int:
        return self._index[self.unk]

    def id(self, word: str) -> int:
        """The id of ``word``, or the unknown-word id."""
        return self._index.get(word, self._index[self.unk])

    def encode(self, words: Sequence[str], oov_id: int | None = None) -> list[int]:
        """Ids of ``words``; no boundaries added. Unknown words (:meth:`is_known`) get ``oov_id``,
        by default the unknown-word id (:mod:`lm.shards` marks them ``-1`` to count them later)."""
        if oov_id is None:
            unk_id = self.unk_id
            return [self._index.get(w, unk_id) for w in words]
        unk = self.unk  # a literal unknown-word symbol is unknown too (see is_known)
        return [oov_id if w == unk else self._index.get(w, oov_id) for w in words]

    def is_known(self, word: str) -> bool:
        """False for an *unknown* word, one the model scores as its unknown-word symbol: a word
        not in the vocabulary, or that symbol itself (``<unk>`` in the text). The one definition
        of an unknown word (``oov`` counts, the rescoring engine's ``unk`` and its penalty)."""
        return word in self._index and word != self.unk

    def count_oov(self, words: Sequence[str]) -> int:
        """How many of ``words`` are unknown (:meth:`is_known`; a literal ``<unk>`` counts)."""
        return sum(1 for w in words if not self.is_known(w))

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.words[i] for i in ids]

    def predictable_mask(self) -> list[bool]:
        """Per id: may the model assign it probability? False for gaps, ``<s>``, ``<eps>``, ``#k``."""
        blocked = {BOS, "<eps>"}
        return [bool(w) and w not in blocked and not _is_disambig(w) for w in self.words]


def parse_symbol_table(text: str, source: str = "symbol table") -> list[str]:
    """Parse Kaldi ``words.txt`` text (``WORD ID`` per line) into an id-indexed list.

    ``result[i]`` is the word with id ``i``; ids the table skips hold ``""``. Errors name the
    source and line.
    """
    by_id: dict[int, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 2:
            raise VocabularyError(f"{source}:{lineno}: expected 'WORD ID', got {line!r}")
        word, raw_id = fields
        try:
            word_id = int(raw_id)
        except ValueError:
            raise VocabularyError(f"{source}:{lineno}: id {raw_id!r} is not an integer") from None
        if word_id < 0:
            raise VocabularyError(f"{source}:{lineno}: id {word_id} is negative")
        if word_id in by_id:
            raise VocabularyError(f"{source}:{lineno}: id {word_id} used for {by_id[word_id]!r} and {word!r}")
        by_id[word_id] = word
    if not by_id:
        raise VocabularyError(f"{source}: symbol table is empty")
    words = [""] * (max(by_id) + 1)
    for word_id, word in by_id.items():
        words[word_id] = word
    return words


def _is_disambig(word: str) -> bool:
    return len(word) > 1 and word[0] == "#" and word[1:].isdigit()
