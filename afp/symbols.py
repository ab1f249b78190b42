"""Word symbol tables (Kaldi ``words.txt``): the one loader of every front end.

``afp rescore --words``, ``afp tune --words`` and the server's ``words`` request field all come
here, so a table is read, checked and shared the same way whichever door it comes in by.
"""

from __future__ import annotations

import functools
from pathlib import Path

from lm.vocab import VocabularyError, parse_symbol_table


class SymbolTableError(ValueError):
    """A symbol table that cannot be used; the message names its source (file or field)."""


@functools.lru_cache(maxsize=4)
def words_table(text: str, source: str = "words.txt") -> tuple[str, ...]:
    """A ``words.txt`` text as an id-indexed tuple (gaps are empty strings), cached for the last
    4 (text, source) pairs.

    Clients send the same table with every request: hashing its text (about 1 ms for 200k
    entries) replaces parsing it (about 160 ms), and every request gets the same tuple, so the
    readers index it once (:func:`lattices.formats._text.symbol_index`) and its lattices share it.
    A bad table (id 0 must be ``<eps>``) raises :class:`SymbolTableError` and is not cached.
    """
    try:
        table = parse_symbol_table(text, source=source)
    except VocabularyError as err:
        raise SymbolTableError(str(err)) from None
    if not table or table[0] != "<eps>":
        raise SymbolTableError(f"{source}: id 0 of the symbol table must be <eps>, got "
                               f"{table[0] if table else 'an empty table'!r}")
    return tuple(table)


def read_words_txt(path: str | Path) -> tuple[str, ...]:
    """:func:`words_table` of a file; a missing or unreadable file is a :class:`SymbolTableError`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SymbolTableError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SymbolTableError(f"{path}: cannot read: {err}") from None
    return words_table(text, source=str(path))
