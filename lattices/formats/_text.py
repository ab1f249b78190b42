"""Helpers shared by the Kaldi and OpenFst text formats (:mod:`.kaldi`, :mod:`.openfst`).

Both formats are OpenFst's text format (``fstprint`` output): one line per arc
(``src dst label... [weight]``) or per final state (``state [weight]``). Lines are separated by
``\\n``; fields by spaces or tabs (a ``\\r`` counts as a separator too, so CRLF text reads). Line
numbers in errors are 1-based within the whole text.

Conventions shared by both readers:

* The state named on the *first* line (the source of an arc, or a final state) is the start
  state, as in OpenFst's ``fstcompile`` and Kaldi's ``LatticeReader::ReadText``. ``fstprint``
  prints the start state's arcs first, so this is the source of the first arc line.
* ``num_states`` is the highest state id + 1. States must be numbered without gaps: an id that
  no line names would be an unreachable state, and is reported as such before any tensor is
  built (so a line naming state 10**9 cannot make the reader allocate a billion states).
* Costs are negated into log-scores (``score = 0.0 - cost``, so a cost of 0 gives +0.0, never
  -0.0). Numbers are ``[+-]digits[.digits][e[+-]digits]``; ``inf``/``nan`` and overflowing
  numbers are errors.
* Word labels are either all integers (ids into a symbol table that the caller must give) or
  words (spellings); see :func:`resolve_words`.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from lattices.lattice import EPSILON, Lattice, LatticeFormatError

MAX_ID = 2**31 - 1
"""Largest state id or label (OpenFst and Kaldi use int32)."""

_SEPARATORS = re.compile(r"[ \t\r]+")
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_UNWRITABLE = re.compile(r"[ \t\r\n]")


def numbered_lines(text: str) -> Iterator[tuple[int, str, list[str]]]:
    """``(line number, line, fields)`` for every line of ``text``; blank lines give no fields."""
    for number, line in enumerate(text.split("\n"), 1):
        yield number, line, split_fields(line)


def split_fields(line: str) -> list[str]:
    return [f for f in _SEPARATORS.split(line) if f]


def is_int(token: str) -> bool:
    return _INT.fullmatch(token) is not None


def is_number(token: str) -> bool:
    return _FLOAT.fullmatch(token) is not None


def format_float(x: float, point: bool = False) -> str:
    """Shortest text that reads back as exactly ``x`` (``repr``), never ``-0``.

    Integral values are written without ``.0`` (as Kaldi and ``fstprint`` do) unless ``point``.
    """
    x = float(x) + 0.0  # -0.0 + 0.0 == +0.0
    text = repr(x)
    return text[:-2] if not point and text.endswith(".0") else text


def check_token(token: str, what: str, key: str | None, field_name: str) -> str:
    """``token`` if it can be written as one field, else :class:`LatticeFormatError`."""
    if not token or _UNWRITABLE.search(token):
        raise LatticeFormatError(f"{what} {token!r} cannot be written as a text field (it is empty or has "
                                 "whitespace)", key=key, field=field_name)
    return token


@dataclass(frozen=True)
class Where:
    """Where the text being read comes from; makes located errors."""

    source: str | None
    key: str | None = None

    def error(self, message: str, line: int | None, field_name: str | None) -> LatticeFormatError:
        return LatticeFormatError(message, source=self.source, key=self.key, line=line, field=field_name)

    def state(self, token: str, line: int, field_name: str) -> int:
        """A state id: an integer in ``0 .. 2**31-1``."""
        return self.integer(token, line, field_name, "state")

    def integer(self, token: str, line: int, field_name: str, what: str) -> int:
        if not is_int(token):
            raise self.error(f"{what} {token!r} is not an integer", line, field_name)
        value = int(token)
        if value < 0:
            raise self.error(f"{what} {value} is negative", line, field_name)
        if value > MAX_ID:
            raise self.error(f"{what} {value} is larger than {MAX_ID}", line, field_name)
        return value

    def cost(self, token: str, line: int, field_name: str) -> float:
        """A finite float."""
        if not is_number(token):
            raise self.error(f"{token!r} is not a number", line, field_name)
        value = float(token)
        if not math.isfinite(value):
            raise self.error(f"{token!r} is not a finite number", line, field_name)
        return value

    def pair(self, token: str, line: int, field_name: str) -> tuple[float, float]:
        """A Kaldi ``LatticeWeight`` ``graph,acoustic`` (two costs)."""
        parts = token.split(",")
        if len(parts) != 2:
            raise self.error(f"weight {token!r} is not 'graph,acoustic' (two costs separated by a comma)",
                             line, field_name)
        return self.cost(parts[0], line, field_name), self.cost(parts[1], line, field_name)


@dataclass
class GraphText:
    """One FST as read from text, before its word labels become ids.

    Scores are already log-domain (negated costs); lists are in file order. ``word_field`` names
    the field that holds the word (for errors about word ids).
    """

    key: str
    first_line: int
    word_field: str
    start: int | None = None
    src: list[int] = field(default_factory=list)
    dst: list[int] = field(default_factory=list)
    word_tokens: list[str] = field(default_factory=list)
    arc_lines: list[int] = field(default_factory=list)
    graph: list[float] = field(default_factory=list)
    acoustic: list[float] = field(default_factory=list)
    final_states: list[int] = field(default_factory=list)
    final_lines: list[int] = field(default_factory=list)
    final_graph: list[float] = field(default_factory=list)
    final_acoustic: list[float] = field(default_factory=list)
    _final_line_of: dict[int, int] = field(default_factory=dict)

    def add_arc(self, line: int, src: int, dst: int, word: str, graph_cost: float, acoustic_cost: float) -> None:
        if self.start is None:
            self.start = src
        self.src.append(src)
        self.dst.append(dst)
        self.word_tokens.append(word)
        self.arc_lines.append(line)
        self.graph.append(0.0 - graph_cost)
        self.acoustic.append(0.0 - acoustic_cost)

    def add_final(self, where: Where, line: int, state: int, graph_cost: float, acoustic_cost: float) -> None:
        if state in self._final_line_of:
            raise where.error(f"state {state} was already made final on line {self._final_line_of[state]}",
                              line, "state")
        if self.start is None:
            self.start = state
        self._final_line_of[state] = line
        self.final_states.append(state)
        self.final_lines.append(line)
        self.final_graph.append(0.0 - graph_cost)
        self.final_acoustic.append(0.0 - acoustic_cost)

    def to_lattice(self, where: Where, symbols: tuple[str, ...], words: list[int], meta: dict[str, Any],
                   arc_extra: dict[str, Any], final_extra: dict[str, Any]) -> Lattice:
        """Check the state numbering, build the lattice and validate it (errors get a line).

        ``final_extra`` values are in file order; finals are sorted by state id here.
        """
        if self.start is None:
            raise where.error("the lattice has no arc or final-state lines", self.first_line, "lattice")
        used = set(self.src) | set(self.dst) | set(self.final_states)
        num_states = max(used) + 1
        if len(used) != num_states:
            missing = next(s for s in range(num_states) if s not in used)  # within len(used) steps
            raise where.error(f"no line names state {missing}, but the highest state is {num_states - 1}: states must "
                              "be numbered 0.. without gaps (an unnamed state would be unreachable)",
                              self._first_mention(num_states - 1), "state")
        order = sorted(range(len(self.final_states)), key=self.final_states.__getitem__)
        f64 = torch.float64
        lattice = Lattice(
            key=self.key, num_states=num_states, start=self.start,
            src=torch.tensor(self.src, dtype=torch.int64), dst=torch.tensor(self.dst, dtype=torch.int64),
            words=torch.tensor(words, dtype=torch.int64),
            acoustic=torch.tensor(self.acoustic, dtype=f64), graph=torch.tensor(self.graph, dtype=f64),
            finals=torch.tensor([self.final_states[i] for i in order], dtype=torch.int64),
            final_acoustic=torch.tensor([self.final_acoustic[i] for i in order], dtype=f64),
            final_graph=torch.tensor([self.final_graph[i] for i in order], dtype=f64),
            symbols=symbols, meta=meta, arc_extra=arc_extra,
            final_extra={name: tuple(values[i] for i in order) for name, values in final_extra.items()})
        try:
            return lattice.validate()
        except LatticeFormatError as err:
            raise self._explain(where, num_states) or err.located(source=where.source, key=self.key) from None

    def _first_mention(self, state: int) -> int:
        for line, src, dst in zip(self.arc_lines, self.src, self.dst):
            if state in (src, dst):
                return line
        return self.final_lines[self.final_states.index(state)]

    def _explain(self, where: Where, num_states: int) -> LatticeFormatError | None:
        """The structural error of an invalid lattice, with the line that shows it (error path only)."""
        if not self.final_states:
            return where.error("the lattice has no final state (a line 'state [weight]')", self.first_line, "finals")
        out: list[list[int]] = [[] for _ in range(num_states)]
        into: list[list[int]] = [[] for _ in range(num_states)]
        for arc, (s, d) in enumerate(zip(self.src, self.dst)):
            out[s].append(arc)
            into[d].append(arc)
        indegree = [len(arcs) for arcs in into]
        stack = [s for s in range(num_states) if indegree[s] == 0]
        while stack:
            for arc in out[stack.pop()]:
                indegree[self.dst[arc]] -= 1
                if indegree[self.dst[arc]] == 0:
                    stack.append(self.dst[arc])
        if any(indegree):  # walk backwards inside the remaining states until one repeats
            state, path, seen = next(s for s in range(num_states) if indegree[s]), [], {}
            while state not in seen:
                seen[state] = len(path)
                arc = next(a for a in into[state] if indegree[self.src[a]])
                path.append(arc)
                state = self.src[arc]
            cycle = path[seen[state]:][::-1]
            states = " -> ".join(str(self.src[a]) for a in cycle) + f" -> {self.src[cycle[0]]}"
            lines = ", ".join(str(self.arc_lines[a]) for a in cycle)
            first = min(cycle, key=self.arc_lines.__getitem__)
            return where.error(f"arcs form a cycle {states} (lines {lines}); lattices must be acyclic",
                               self.arc_lines[first], "dst")
        for forward in (True, False):
            mark = [False] * num_states
            stack = [self.start] if forward else list(self.final_states)
            while stack:
                state = stack.pop()
                if not mark[state]:
                    mark[state] = True
                    stack.extend(self.dst[a] if forward else self.src[a] for a in (out if forward else into)[state])
            if not all(mark):
                state = mark.index(False)
                problem = (f"is unreachable from the start state {self.start} (the state on the first line is "
                           "the start)" if forward else "is dead: no path from it reaches a final state")
                return where.error(f"state {state} {problem}", self._first_mention(state), "state")
        return None


def checked_symbols(symbols: Sequence[str] | None, source: str | None) -> tuple[str, ...] | None:
    """``symbols`` as a tuple (``None`` stays ``None``); :class:`LatticeFormatError` unless id 0 is ``<eps>``."""
    if symbols is None:
        return None
    table = tuple(symbols)
    if not table or table[0] != EPSILON:
        raise LatticeFormatError(f"the symbol table must map id 0 to {EPSILON!r}", source=source, field="symbols")
    return table


def resolve_words(graphs: Sequence[GraphText], symbols: Sequence[str] | None,
                  source: str | None) -> tuple[tuple[str, ...], list[list[int]], bool]:
    """Turn the word labels of ``graphs`` into ids: ``(symbol table, ids per graph, labels were ids)``.

    If every label is an integer, labels are ids into ``symbols`` (required; each id must name an
    entry). Otherwise labels are words: a word of ``symbols`` keeps its id, ``<eps>`` is id 0, and
    unseen words are appended in order of appearance. All graphs share the returned table, which
    is ``symbols`` itself (not a copy) when it is a tuple and no word had to be appended; its
    word index is built once per table (:func:`symbol_index`).
    """
    table = checked_symbols(symbols, source)
    if any(g.word_tokens for g in graphs) and all(is_int(t) for g in graphs for t in g.word_tokens):
        if table is None:
            first = next(g for g in graphs if g.word_tokens)
            raise Where(source, first.key).error("integer word ids need a symbol table (words.txt)",
                                                 first.arc_lines[0], first.word_field)
        ids: list[list[int]] = []
        for g in graphs:
            where = Where(source, g.key)
            row = [where.integer(t, line, g.word_field, "word id") for t, line in zip(g.word_tokens, g.arc_lines)]
            for word_id, line in zip(row, g.arc_lines):
                if word_id >= len(table) or not table[word_id]:
                    raise where.error(f"word id {word_id} is not in the symbol table of {len(table)} entries",
                                      line, g.word_field)
            ids.append(row)
        return table, ids, True
    base = table or (EPSILON,)
    index = symbol_index(table) if table else {EPSILON: 0}
    added: dict[str, int] = {}  # unseen words, appended after the table in order of appearance
    ids = []
    for g in graphs:
        row = []
        for token in g.word_tokens:
            word_id = index.get(token)
            if word_id is None:
                word_id = added.setdefault(token, len(base) + len(added))
            row.append(word_id)
        ids.append(row)
    return (base + tuple(added) if added else base), ids, False


_INDEX_CACHE_SIZE = 4
_index_cache: dict[int, tuple[tuple[str, ...], dict[str, int]]] = {}
_index_lock = threading.Lock()


def symbol_index(table: tuple[str, ...]) -> dict[str, int]:
    """``{word: id}`` of a symbol table (the first id of each non-empty word; ``<eps>`` is 0). Do
    not change the returned dict.

    Cached by the table's *identity* for the last :data:`_INDEX_CACHE_SIZE` tables (an entry
    keeps its table alive, so its ``id`` cannot be reused while cached): readers given the same
    tuple for many archives (``afp rescore --words``, the server's parsed ``words``) index it
    once. Indexing a 200k-entry table takes ~50 ms; hashing it for an ``lru_cache`` ~1.5 ms per
    call, this lookup nothing. A new tuple with the same words is indexed anew.
    """
    cached = _index_cache.get(id(table))
    if cached is not None and cached[0] is table:
        return cached[1]
    index: dict[str, int] = {}
    for i, word in enumerate(table):
        if word:
            index.setdefault(word, i)
    index[EPSILON] = 0
    with _index_lock:
        while len(_index_cache) >= _INDEX_CACHE_SIZE:
            del _index_cache[next(iter(_index_cache))]
        _index_cache[id(table)] = (table, index)
    return index


def print_order(lattice: Lattice) -> list[tuple[bool, int]]:
    """``fstprint``'s line order: ``(is_arc, index)`` for arcs and final states, grouped by state,
    the start state first, then the others in id order; a state's final line after its arcs."""
    def ranks(states: torch.Tensor) -> list[int]:
        return torch.where(states == lattice.start, -1, states).tolist()

    arc_rank, final_rank = ranks(lattice.src.cpu()), ranks(lattice.finals.cpu())
    arcs = sorted(range(len(arc_rank)), key=arc_rank.__getitem__)
    finals = sorted(range(len(final_rank)), key=final_rank.__getitem__)
    order: list[tuple[bool, int]] = []
    f = 0
    for arc in arcs:
        while f < len(finals) and final_rank[finals[f]] < arc_rank[arc]:
            order.append((False, finals[f]))
            f += 1
        order.append((True, arc))
    order.extend((False, i) for i in finals[f:])
    return order


def label_writer(lattice: Lattice, use_ids: bool) -> Any:
    """A function ``word id -> field text``: the id itself, or its spelling (checked writable)."""
    checked: dict[int, str] = {}

    def label(word_id: int) -> str:
        if use_ids:
            return str(word_id)
        text = checked.get(word_id)
        if text is None:
            text = checked[word_id] = check_token(lattice.symbols[word_id], "word", lattice.key, "words")
        return text
    return label


def word_ids_in(lattice: Lattice, index: dict[str, int] | None) -> torch.Tensor:
    """int64 ``(A,)`` on the CPU: the arcs' word ids in ``index`` (spelling -> id, e.g.
    :func:`symbol_index` of a ``words.txt``), or in the lattice's own table when ``index`` is
    None. A word missing from ``index`` is a :class:`LatticeFormatError`."""
    words = lattice.words.cpu()
    if index is None or not words.numel():
        return words
    used = torch.unique(words)
    lookup = torch.zeros(int(used[-1]) + 1, dtype=torch.int64)
    for word_id in used.tolist():
        spelling = lattice.symbols[word_id]
        if spelling not in index:
            raise LatticeFormatError(f"word {spelling!r} has no id in the symbol table", key=lattice.key,
                                     field="words")
        lookup[word_id] = index[spelling]
    return lookup[words]
