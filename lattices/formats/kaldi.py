"""Kaldi text lattice archives (what ``lattice-copy ark:1.lat ark,t:-`` prints).

An archive holds any number of lattices, each written as::

    KEY
    <arc and final-state lines: OpenFst text format, fields separated by spaces or tabs>
    <empty line>            (the last lattice may end at the end of the text instead)

``KEY`` is the utterance id on a line of its own (surrounding spaces are dropped). Kaldi keys
have no spaces; a key line with spaces whose first field is not an integer (TheanoLM's test
lattice has ``utterance 123``) is read whole, as TheanoLM does. Empty lines before a key are
skipped; a line of only spaces or tabs ends a lattice. Kaldi has two lattice types,
told apart per lattice:

``CompactLattice`` (an acceptor; what decoders and ``lattice-copy`` write to ``.lat`` files)::

    src dst word [g,a,tids]     an arc; a missing weight is One, i.e. ``0,0,``
    state [g,a,tids]            a final state

  ``g`` is the graph cost (LM + pronunciation + transition), ``a`` the acoustic cost and
  ``tids`` the arc's transition ids joined by ``_`` (may be empty: ``g,a,``). Example:
  ``0 1 HELLO 5.5,-30.25,2_1_1``.

``Lattice`` (a transducer over Kaldi's ``LatticeWeight``; ``lattice-copy --write-compact=false``)::

    src dst ilabel olabel [g,a] an arc: ilabel is a transition id, olabel the word; One is ``0,0``
    state [g,a]                 a final state

A lattice is a ``Lattice`` if one of its arc lines has 5 fields, or 4 fields whose 4th has no
comma (a 3-field line, or a 4-field line ending in a weight, is a ``CompactLattice`` arc; one
lattice cannot mix both). A lattice with no arc lines is a ``Lattice`` if a final weight is a
``g,a`` pair, else a ``CompactLattice``.

Words are spellings (``HELLO``, ``<eps>``) or integer ids (``utils/sym2int.pl`` output). If every
word field of the archive is an integer they are ids into ``symbols`` (``words.txt``), which is
then required; otherwise they are spellings: words of ``symbols`` keep their ids, ``<eps>`` is 0,
and unseen words are appended. All lattices of one archive share one ``symbols`` tuple.

Each lattice becomes a :class:`~lattices.lattice.Lattice` with:

* ``start``: the state on the first line (Kaldi's reader and ``fstcompile`` do the same);
  ``num_states``: the highest state id + 1 (every id must appear: no gaps).
* ``graph = -g``, ``acoustic = -a`` on arcs and final states (log-scores, higher is better);
  ``words``: the word (CompactLattice) or olabel (Lattice). ``finals`` are sorted by state.
* ``meta["kaldi_type"]``: ``"CompactLattice"`` or ``"Lattice"``; ``meta["kaldi_word_ids"]``:
  whether words were integer ids.
* CompactLattice: ``arc_extra["kaldi_tids"]`` and ``final_extra["kaldi_tids"]``, tuples of the
  ``tids`` strings. Lattice: ``arc_extra["kaldi_ilabel"]``, int64 ``(A,)``.

:func:`write_kaldi` writes the same type back in ``fstprint`` order (the start state's arcs
first, then state by state, each state's final line after its arcs; weights equal to One are
left out), so a Kaldi-printed archive is reproduced byte for byte (apart from trailing spaces on
key lines, which Kaldi prints and this writer does not).

Binary archives (``ark:`` without ``,t``, e.g. ``lat.1.gz`` as decoders write them) are read and
written by :mod:`lattices.formats.kaldi_binary` into the same lattices.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from lattices.formats._text import (
    GraphText, Where, checked_symbols, format_float, is_int, label_writer, numbered_lines, print_order, resolve_words,
    split_fields, symbol_index, word_ids_in,
)
from lattices.lattice import Lattice, LatticeFormatError
from lattices.ops import check_deadline

__all__ = ["read_kaldi", "write_kaldi"]

COMPACT = "CompactLattice"
TRANSDUCER = "Lattice"
_COMPACT_ARC = "'src dst word [graph,acoustic,tids]'"
_TRANSDUCER_ARC = "'src dst ilabel olabel [graph,acoustic]'"
_TIDS = re.compile(r"(?:[0-9]+(?:_[0-9]+)*)?")
_BLANK = " \t\r"

Lines = list[tuple[int, list[str]]]
T = TypeVar("T")
R = TypeVar("R")


def read_kaldi(text: str, symbols: Sequence[str] | None = None, source: str | None = None,
               deadline: float | None = None, keep: Callable[[], bool] | None = None,
               on_error: Callable[[str, LatticeFormatError], None] | None = None) -> list[Lattice]:
    """Read a Kaldi text archive into lattices, in archive order (see the module docstring).

    ``symbols[i]`` is the word with id ``i`` (``symbols[0] == "<eps>"``); it is required when the
    words are integer ids. ``source`` (a file name) is named in errors. Raises
    :class:`LatticeFormatError` naming source, key, line and field for any malformed input, and
    :class:`~lattices.ops.DeadlineExceeded` between lattices once ``deadline`` has passed.
    ``keep``: called once per lattice of the archive, in order, before its lines are parsed; the
    lattices it says no to are skipped unparsed (a shard of a job parses its own share only).
    ``on_error``: given, a malformed lattice is told to it (its key and the error) and left out,
    and the archive's other lattices are read (a corpus job records it and goes on); an archive
    whose lattices cannot be told apart (a missing or repeated key line) still raises.
    """
    blocks = _split_archive(text, source)
    if keep is not None:
        blocks = [block for block in blocks if keep()]

    def each(items: Sequence[T], read: Callable[[T], R], key: Callable[[T], str]) -> list[R]:
        out = []
        for item in items:
            check_deadline(deadline)
            try:
                out.append(read(item))
            except LatticeFormatError as err:
                if on_error is None:
                    raise
                on_error(key(item), err)
        return out

    parsed = each(blocks, lambda b: _parse_lattice(b[0], b[1], b[2], Where(source, b[0])), lambda b: b[0])
    parsed, (table, word_ids, are_ids) = _resolve_tolerantly(parsed, symbols, source, on_error)

    def build(item: tuple[tuple[GraphText, bool, list[int], list[str], list[str]], list[int]]) -> Lattice:
        (graph, transducer, ilabels, tids, final_tids), words = item
        meta, arc_extra, final_extra = kaldi_extras(transducer, are_ids, ilabels, tids, final_tids)
        return graph.to_lattice(Where(source, graph.key), table, words, meta, arc_extra, final_extra)

    return each(list(zip(parsed, word_ids)), build, lambda item: item[0][0].key)


def _resolve_tolerantly(parsed: list[tuple[GraphText, bool, list[int], list[str], list[str]]],
                        symbols: Sequence[str] | None, source: str | None,
                        on_error: Callable[[str, LatticeFormatError], None] | None
                        ) -> tuple[list[tuple[GraphText, bool, list[int], list[str], list[str]]],
                                   tuple[tuple[str, ...], list[list[int]], bool]]:
    """:func:`resolve_words` over the archive; with ``on_error``, a lattice whose words cannot be
    resolved (an id beyond the table...) is told and left out, and the rest resolved together."""
    try:
        return parsed, resolve_words([p[0] for p in parsed], symbols, source)
    except LatticeFormatError:
        if on_error is None:
            raise
    kept = []
    for item in parsed:
        try:
            resolve_words([item[0]], symbols, source)
            kept.append(item)
        except LatticeFormatError as err:
            on_error(item[0].key, err)
    return kept, resolve_words([p[0] for p in kept], symbols, source)


def kaldi_extras(transducer: bool, word_ids: bool, ilabels: Sequence[int] | torch.Tensor, tids: Sequence[str],
                 final_tids: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(meta, arc_extra, final_extra)`` of one Kaldi lattice, as the module docstring lists them.

    Shared by the text and binary readers (:mod:`.kaldi_binary`), so both build the same lattice.
    ``ilabels`` (Lattice) and ``tids`` (CompactLattice) are per arc, ``final_tids`` per final state.
    """
    meta = {"kaldi_type": TRANSDUCER if transducer else COMPACT, "kaldi_word_ids": word_ids}
    if transducer:
        return meta, {"kaldi_ilabel": torch.as_tensor(ilabels, dtype=torch.int64)}, {}
    return meta, {"kaldi_tids": tuple(tids)}, {"kaldi_tids": tuple(final_tids)}


def write_kaldi(lattices: Sequence[Lattice], use_ids: bool | None = None,
                symbols: Sequence[str] | None = None) -> str:
    """Write lattices as a Kaldi text archive that :func:`read_kaldi` (and Kaldi) read back.

    Each lattice is written as its ``meta["kaldi_type"]`` (default ``CompactLattice``). Words are
    written as ids if ``use_ids``, as spellings if not, and when ``None`` as they were read
    (``meta["kaldi_word_ids"]``, default spellings). Ids are those of each lattice's own
    ``symbols``, or of ``symbols`` when given (``words.txt``; then ids are written unless
    ``use_ids`` is False, and a word it lacks is a :class:`LatticeFormatError`), as
    :func:`~lattices.formats.kaldi_binary.write_kaldi_binary` does. Raises
    :class:`LatticeFormatError` for a key or word that cannot be one text field (empty, or
    containing whitespace).
    """
    table = checked_symbols(symbols, None)
    index = symbol_index(table) if table is not None and use_ids is not False else None
    out: list[str] = []
    for lattice in lattices:
        out.append(_checked_key(lattice.key))
        out.extend(_lattice_lines(lattice, True if index is not None else use_ids, index))
        out.append("")
    return "\n".join(out) + "\n" if out else ""


# ---------------------------------------------------------------------------------- reading
def _split_archive(text: str, source: str | None) -> list[tuple[str, int, Lines]]:
    """``(key, key line, [(line, fields)...])`` per lattice."""
    blocks: list[tuple[str, int, Lines]] = []
    key_lines: dict[str, int] = {}
    current: Lines | None = None
    for number, line, fields in numbered_lines(text):
        if current is not None:
            if fields:
                current.append((number, fields))
            else:
                current = None
        elif fields:
            if len(fields) > 1 and is_int(fields[0]):
                raise Where(source).error("expected a lattice key (the utterance id on a line of its own), got an "
                                          "arc or final-state line: is the key line missing?", number, "key")
            key = line.strip(_BLANK)
            if "\r" in key:  # a line break inside (old Mac line endings?): no key line can write it back
                raise Where(source).error(f"key {key!r} holds a carriage return: is the file's line ending CR "
                                          "alone? Kaldi archives end lines with LF", number, "key")
            if key in key_lines:
                raise Where(source, key).error(f"key {key!r} was already used on line {key_lines[key]}", number, "key")
            key_lines[key] = number
            current = []
            blocks.append((key, number, current))
    return blocks


def _lattice_type(lines: Lines, where: Where) -> bool:
    """True for a ``Lattice`` (transducer), False for a ``CompactLattice``."""
    transducer_line = next((n for n, f in lines if len(f) == 5 or (len(f) == 4 and "," not in f[3])), None)
    compact_line = next((n for n, f in lines if len(f) == 3 or (len(f) == 4 and "," in f[3])), None)
    if transducer_line is not None and compact_line is not None:
        if compact_line > transducer_line:
            message = (f"this is a CompactLattice arc {_COMPACT_ARC}, but line {transducer_line} is a Lattice "
                       f"(transducer) arc {_TRANSDUCER_ARC}")
        else:
            message = (f"this is a Lattice (transducer) arc {_TRANSDUCER_ARC}, but line {compact_line} is a "
                       f"CompactLattice arc {_COMPACT_ARC}")
        raise where.error(message + "; one lattice cannot mix them", max(transducer_line, compact_line), "fields")
    if transducer_line is None and compact_line is None:
        return any(len(f) == 2 and f[1].count(",") == 1 for _, f in lines)
    return transducer_line is not None


def _parse_lattice(key: str, key_line: int, lines: Lines, where: Where
                   ) -> tuple[GraphText, bool, list[int], list[str], list[str]]:
    """One lattice's lines: ``(graph, is transducer, ilabels, arc tids, final tids)``."""
    if not lines:
        raise where.error("the lattice has no arc or final-state lines (an empty line follows the key)",
                          key_line, "lattice")
    transducer = _lattice_type(lines, where)
    graph = GraphText(key, key_line, "olabel" if transducer else "word")
    ilabels: list[int] = []
    tids: list[str] = []
    final_tids: list[str] = []
    for n, f in lines:
        if len(f) > 5:
            raise where.error(f"{len(f)} fields is too many: expected {_TRANSDUCER_ARC if transducer else _COMPACT_ARC}"
                              " or 'state [weight]'", n, "fields")
        if len(f) <= 2:
            if len(f) == 1 and not is_int(f[0]):
                raise where.error(f"state {f[0]!r} is not an integer (a new lattice's key must follow an empty "
                                  "line)", n, "state")
            state = where.state(f[0], n, "state")
            if transducer:
                g, a = where.pair(f[1], n, "weight") if len(f) == 2 else (0.0, 0.0)
            else:
                g, a, t = _compact_weight(f[1], n, where) if len(f) == 2 else (0.0, 0.0, "")
                final_tids.append(t)
            graph.add_final(where, n, state, g, a)
            continue
        src, dst = where.state(f[0], n, "src"), where.state(f[1], n, "dst")
        if transducer:
            ilabels.append(where.integer(f[2], n, "ilabel", "ilabel (transition id)"))
            word = f[3]
            g, a = where.pair(f[4], n, "weight") if len(f) == 5 else (0.0, 0.0)
        else:
            word = f[2]
            g, a, t = _compact_weight(f[3], n, where) if len(f) == 4 else (0.0, 0.0, "")
            tids.append(t)
        graph.add_arc(n, src, dst, word, g, a)
    return graph, transducer, ilabels, tids, final_tids


def _compact_weight(token: str, line: int, where: Where) -> tuple[float, float, str]:
    """A ``CompactLatticeWeight`` ``graph,acoustic,tids``."""
    parts = token.split(",")
    if len(parts) != 3:
        raise where.error(f"weight {token!r} is not 'graph,acoustic,tids' (a CompactLattice weight; the "
                          "transition ids may be empty)", line, "weight")
    if not _TIDS.fullmatch(parts[2]):
        raise where.error(f"transition ids {parts[2]!r} are not integers joined by '_'", line, "weight")
    return where.cost(parts[0], line, "weight"), where.cost(parts[1], line, "weight"), parts[2]


# ---------------------------------------------------------------------------------- writing
def _lattice_lines(lattice: Lattice, use_ids: bool | None, index: dict[str, int] | None = None) -> list[str]:
    kind = lattice.meta.get("kaldi_type", COMPACT)
    if kind not in (COMPACT, TRANSDUCER):
        raise LatticeFormatError(f"unknown Kaldi lattice type {kind!r}", key=lattice.key, field="meta['kaldi_type']")
    ids = bool(lattice.meta.get("kaldi_word_ids", False)) if use_ids is None else use_ids
    label = label_writer(lattice, ids)
    src, dst, words = lattice.src.tolist(), lattice.dst.tolist(), word_ids_in(lattice, index).tolist()
    costs = [format_float(0.0 - x) for x in lattice.graph.tolist()]
    acoustic = [format_float(0.0 - x) for x in lattice.acoustic.tolist()]
    finals = lattice.finals.tolist()
    final_costs = [format_float(0.0 - x) for x in lattice.final_graph.tolist()]
    final_acoustic = [format_float(0.0 - x) for x in lattice.final_acoustic.tolist()]
    lines = []
    if kind == COMPACT:
        tids = checked_tids(lattice, lattice.arc_extra.get("kaldi_tids"), lattice.num_arcs)
        final_tids = checked_tids(lattice, lattice.final_extra.get("kaldi_tids"), len(finals))
        for is_arc, i in print_order(lattice):
            g, a, t = (costs[i], acoustic[i], tids[i]) if is_arc else (final_costs[i], final_acoustic[i], final_tids[i])
            weight = "" if g == a == "0" and not t else f" {g},{a},{t}"
            lines.append(f"{src[i]} {dst[i]} {label(words[i])}{weight}" if is_arc else f"{finals[i]}{weight}")
        return lines
    ilabels = lattice.arc_extra.get("kaldi_ilabel")
    ilabels = [0] * lattice.num_arcs if ilabels is None else [int(x) for x in ilabels]
    for is_arc, i in print_order(lattice):
        if is_arc:
            word = label(words[i])
            # A One weight is left out, unless the word has a comma (then 4 fields would read as a CompactLattice arc).
            weight = "" if costs[i] == acoustic[i] == "0" and "," not in word else f" {costs[i]},{acoustic[i]}"
            lines.append(f"{src[i]} {dst[i]} {ilabels[i]} {word}{weight}")
        else:
            # Without arcs, only a 'g,a' final weight tells a Lattice from a CompactLattice.
            one = final_costs[i] == final_acoustic[i] == "0" and lattice.num_arcs > 0
            lines.append(f"{finals[i]}" + ("" if one else f" {final_costs[i]},{final_acoustic[i]}"))
    return lines


def _checked_key(key: str) -> str:
    fields = split_fields(key)
    if not fields or key != key.strip(_BLANK) or "\n" in key or "\r" in key or (len(fields) > 1 and is_int(fields[0])):
        raise LatticeFormatError(f"key {key!r} cannot be written as a key line (it is empty, has a line break or "
                                 "surrounding space, or starts with an integer and has a space)", key=key, field="key")
    return key


def checked_tids(lattice: Lattice, values: Sequence[str] | None, count: int) -> Sequence[str]:
    """A ``kaldi_tids`` extra (``count`` empty strings when absent), each checked to be ids joined by ``_``."""
    if values is None:
        return ("",) * count
    for value in values:
        if not isinstance(value, str) or not _TIDS.fullmatch(value):
            raise LatticeFormatError(f"transition ids {value!r} are not integers joined by '_'", key=lattice.key,
                                     field="kaldi_tids")
    return values
