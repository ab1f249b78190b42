"""HTK Standard Lattice Format (SLF, HTK book chapter 20): :func:`read_htk` and :func:`write_htk`.

An SLF file is text, one record per line; ``#`` starts a comment line and blank lines are
ignored. Every line is a list of ``name=value`` fields separated by white space. A value that
starts with ``"`` is quoted: it runs to the next unescaped ``"``, and inside it ``\\ooo`` (three
octal digits) is that character and ``\\c`` is ``c``; elsewhere a backslash is an ordinary
character. A line with an ``I=`` field is a node, a line with ``J=`` a link, any other line a
header line::

    VERSION=1.1
    UTTERANCE="utterance 123"            # the lattice key
    lmscale=12.3 wdpenalty=0.7           # kept in meta, never applied to the scores
    base=10                              # log base of a= and l= (default e; 0 is refused)
    N=3 L=2                              # NODES= / LINKS=: must equal the counts found
    I=0 t=0.00 W=!NULL                   # node: id, time (time=), word (WORD=), var (var=) ...
    I=1 t=0.25 W=hello v=1
    I=2 t=0.50 W=world
    J=0 S=0 E=1 a=-10.5 l=-2.0           # link: id, START=, END=, acoustic=, language= ...
    J=1 S=1 E=2 a=-20.25 l=-3.5 r=0.00

Long field names are accepted and mapped to the short ones: ``NODES LINKS time WORD var START
END acoustic language div`` -> ``N L t W v S E a l d``. Node and link ids may come in any order;
node ids must be ``0..N-1`` and become the state ids, link ids ``0..L-1`` the arc ids.

Words sit either on nodes (the word of node ``E`` is the word of every link into ``E``; the AMI
lattices) or on links (theanolm); ``!NULL`` (and a missing ``W=``) is epsilon, id 0. ``<s>``,
``</s>``, ``!ENTER``, ``!EXIT``, ``!SIL`` are ordinary words. ``a=`` is the acoustic
log-likelihood (``Lattice.acoustic``), ``l=`` the LM log-probability (``Lattice.graph``), both
0 when missing and converted to natural log by multiplying by ``ln(base)``. The start state is
``start=`` or else the only node without incoming links; the final states are ``end=`` or else
the nodes without outgoing links, all with final weight 0.

What the reader keeps for :func:`write_htk`:
  meta["header"]: list of ``[name, raw value]`` header fields in file order, except the ones that
    describe the graph (N, L, start, end): the tensors hold that, and the writer recomputes it.
  meta["lmscale"], meta["wdpenalty"], meta["acscale"], meta["base"]: floats, where present
    (``base`` records the file's base; the scores themselves are already natural log).
  meta["htk_words_on"]: ``"nodes"`` or ``"links"``.
  meta["htk_start_word"]: the start node's own word (``"!NULL"``, ``"<s>"``...) or None.
  state_extra["time"]: float64 ``(S,)`` node times ``t=`` (NaN where a node has none).
  state_extra["htk_<name>"], arc_extra["htk_<name>"]: tuples of raw strings (None where absent)
    for every other node / link field (``v``, ``d``, ``r``, ``s``, ``x1``...), written back.

:func:`write_htk` writes natural-log scores with ``repr`` floats (so ``read(write(x))`` keeps
every score exactly) and therefore no ``base=`` line. It writes words on nodes when the lattice
was read that way and every link into a node carries the same word, otherwise on links (epsilon
as ``!NULL``). The header is written back in its order with UTTERANCE= and the scales made
current (UTTERANCE= added when missing, unless the key is the default ``lattice``), then N= L=. HTK has no final weights and takes the final states
to be the nodes without outgoing links, so a lattice with a final weight other than 0, or a final
state with outgoing links, is written with one extra ``!NULL`` node that every final state links
into, the link carrying that state's final weights.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import torch

from lattices.lattice import EPSILON, Lattice, LatticeFormatError

NULL_WORD = "!NULL"
LONG_NAMES = {"NODES": "N", "LINKS": "L", "time": "t", "WORD": "W", "var": "v", "START": "S",
              "END": "E", "acoustic": "a", "language": "l", "div": "d"}
_SCALE_FIELDS = ("lmscale", "wdpenalty", "acscale")
_STRUCTURE = ("N", "L", "start", "end")  # header fields that describe the graph, not kept in meta
_DIGITS = re.compile(r"[0-9]+")


# ---------------------------------------------------------------------------------------- reading
def _fields(line: str, number: int, source: str | None) -> list[tuple[str, str]]:
    """Split one line into ``(name, value)`` pairs (long names mapped to short ones)."""
    if '"' not in line:  # fast path: no quoted values
        out = []
        for token in line.split():
            name, eq, value = token.partition("=")
            if not eq or not name:
                raise LatticeFormatError(f"expected name=value, got {token[:20]!r}", source=source, line=number,
                                         field=name if eq else token[:20])
            out.append((LONG_NAMES.get(name, name), value))
        return out
    out, i, n = [], 0, len(line)
    while True:
        while i < n and line[i].isspace():
            i += 1
        if i >= n:
            return out
        eq = i
        while eq < n and line[eq] != "=" and not line[eq].isspace():
            eq += 1
        token = line[i:eq]
        if eq >= n or line[eq] != "=" or not token:
            raise LatticeFormatError(f"expected name=value, got {token or line[i:i + 20]!r}",
                                     source=source, line=number, field=token or None)
        name, i = LONG_NAMES.get(token, token), eq + 1
        if i < n and line[i] == '"':
            chars, i = [], i + 1
            while True:
                if i >= n:
                    raise LatticeFormatError("unterminated quoted value", source=source, line=number, field=name)
                ch = line[i]
                if ch == '"':
                    i += 1
                    break
                if ch == "\\" and i + 1 < n:
                    octal = line[i + 1:i + 4]
                    if len(octal) == 3 and all(c in "01234567" for c in octal):
                        chars.append(chr(int(octal, 8)))
                        i += 4
                        continue
                    ch, i = line[i + 1], i + 1
                chars.append(ch)
                i += 1
            if i < n and not line[i].isspace():
                raise LatticeFormatError("text right after a closing quote", source=source, line=number, field=name)
            value = "".join(chars)
        else:
            start = i
            while i < n and not line[i].isspace():
                i += 1
            value = line[start:i]
        out.append((name, value))


class _Reader:
    """One parse of one SLF text; methods raise LatticeFormatError with line and field."""

    def __init__(self, source: str | None) -> None:
        self.source = source
        self.key: str | None = None

    def error(self, message: str, line: int | None = None, field: str | None = None) -> LatticeFormatError:
        return LatticeFormatError(message, source=self.source, key=self.key, line=line, field=field)

    def integer(self, value: str, line: int, field: str) -> int:
        if not _DIGITS.fullmatch(value) or len(value) > 18:
            raise self.error(f"{value[:30]!r} is not a non-negative integer (of at most 18 digits)", line, field)
        return int(value)

    def number(self, value: str, line: int | None, field: str) -> float:
        try:
            result = float(value)
        except ValueError:
            raise self.error(f"{value!r} is not a number", line, field) from None
        if not math.isfinite(result):
            raise self.error(f"{value!r} is not a finite number", line, field)
        return result


def read_htk(text: str, source: str | None = None) -> Lattice:
    """Parse one HTK SLF lattice (see the module docstring); raise LatticeFormatError if malformed."""
    if not isinstance(text, str):
        raise LatticeFormatError(f"expected text, got {type(text).__name__}", source=source)
    r = _Reader(source)
    header: list[list[str]] = []
    header_line: dict[str, int] = {}
    values: dict[str, str] = {}
    nodes: dict[int, tuple[int, dict[str, str]]] = {}
    links: dict[int, tuple[int, dict[str, str]]] = {}
    for number, raw in enumerate(text.removeprefix("\ufeff").split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pairs = _fields(line, number, source)
        record: dict[str, str] = {}
        for name, value in pairs:
            if name in record:
                raise r.error(f"field {name} appears twice on one line", number, name)
            record[name] = value
        if "I" in record and "J" in record:
            raise r.error("a line cannot be both a node (I=) and a link (J=)", number, "J")
        if "I" in record or "J" in record:
            name = "I" if "I" in record else "J"
            table = nodes if name == "I" else links
            ident = r.integer(record.pop(name), number, name)
            if ident in table:
                raise r.error(f"{'node' if name == 'I' else 'link'} {ident} is defined twice "
                              f"(first on line {table[ident][0]})", number, name)
            if name == "I" and "L" in record:
                raise r.error("sub-lattices (L= on a node) are not supported", number, "L")
            table[ident] = (number, record)
            continue
        if nodes or links:
            raise r.error("header field after the node and link lines (one lattice per file)",
                          number, pairs[0][0])
        for name, value in pairs:
            if name in header_line:
                raise r.error(f"header field {name} appears twice (first on line {header_line[name]})", number, name)
            header_line[name], values[name] = number, value
            if name not in _STRUCTURE:
                header.append([name, value])
            if name == "UTTERANCE":
                r.key = value
    if "SUBLAT" in values:
        raise r.error("sub-lattices (SUBLAT=) are not supported", header_line["SUBLAT"], "SUBLAT")
    if r.key is None:
        r.key = _key_from_source(source)
    meta: dict[str, Any] = {"header": header}
    for name in (*_SCALE_FIELDS, "base"):
        if name in values:
            meta[name] = r.number(values[name], header_line[name], name)
    log_base = 1.0
    if "base" in meta:
        if meta["base"] <= 0.0 or meta["base"] == 1.0:
            raise r.error(f"base={values['base']} is not supported: scores must be logarithms "
                          "to a base > 0 other than 1 (base=0 means plain probabilities)",
                          header_line["base"], "base")
        log_base = math.log(meta["base"])
    for name, found in (("N", len(nodes)), ("L", len(links))):
        if name in values and r.integer(values[name], header_line[name], name) != found:
            raise r.error(f"{name}={values[name]} but the file has {found} "
                          f"{'nodes' if name == 'N' else 'links'}", header_line[name], name)
    if not nodes:
        raise r.error("the lattice has no nodes (I= lines)", None, "N")
    for name, table in (("I", nodes), ("J", links)):
        for ident, (number, _) in table.items():
            if ident >= len(table):
                raise r.error(f"id {ident} is not in 0..{len(table) - 1} (ids must be 0..count-1)", number, name)
    return _build(r, nodes, links, meta, values, header_line, log_base)


def _key_from_source(source: str | None) -> str:
    if not source:
        return "lattice"
    name = Path(source).name
    for suffix in (".gz", ".lat", ".slf", ".htk"):
        name = name.removesuffix(suffix)
    return name or "lattice"


def _build(r: _Reader, nodes: dict[int, tuple[int, dict[str, str]]], links: dict[int, tuple[int, dict[str, str]]],
           meta: dict[str, Any], values: dict[str, str], header_line: dict[str, int], log_base: float) -> Lattice:
    num_states, num_arcs = len(nodes), len(links)
    on_links = any("W" in links[j][1] for j in links) or not any("W" in nodes[i][1] for i in nodes)
    meta["htk_words_on"] = "links" if on_links else "nodes"
    symbols, ids = [EPSILON], {EPSILON: 0, NULL_WORD: 0}

    def word_id(word: str | None) -> int:
        if word is None:
            return 0
        if word not in ids:
            ids[word] = len(symbols)
            symbols.append(word)
        return ids[word]

    times = [math.nan] * num_states
    node_extra: dict[str, list[str | None]] = {}
    node_word: list[str | None] = [None] * num_states
    for i in range(num_states):
        number, record = nodes[i]
        for name, value in record.items():
            if name == "t":
                times[i] = r.number(value, number, "t")
            elif name == "W" and not on_links:
                node_word[i] = value
            else:
                node_extra.setdefault(name, [None] * num_states)[i] = value
    src, dst, words, acoustic, graph = [], [], [], [], []
    link_extra: dict[str, list[str | None]] = {}
    for j in range(num_arcs):
        number, record = links[j]
        ends = []
        for name in ("S", "E"):
            if name not in record:
                raise r.error(f"link {j} has no {name}= field", number, name)
            node = r.integer(record[name], number, name)
            if node not in nodes:
                raise r.error(f"node {node} is not declared (no I={node} line)", number, name)
            ends.append(node)
        src.append(ends[0])
        dst.append(ends[1])
        words.append(word_id(record.get("W") if on_links else node_word[ends[1]]))
        acoustic.append(r.number(record["a"], number, "a") * log_base if "a" in record else 0.0)
        graph.append(r.number(record["l"], number, "l") * log_base if "l" in record else 0.0)
        for name, value in record.items():
            if name not in ("S", "E", "W", "a", "l"):
                link_extra.setdefault(name, [None] * num_arcs)[j] = value
    start, finals = _start_and_finals(r, num_states, src, dst, values, header_line)
    meta["htk_start_word"] = None if on_links else node_word[start]
    state_extra: dict[str, Any] = {f"htk_{n}": tuple(v) for n, v in node_extra.items()}
    if not all(math.isnan(t) for t in times):
        state_extra["time"] = torch.tensor(times, dtype=torch.float64)
    lattice = Lattice(
        key=r.key or "lattice", num_states=num_states, start=start,
        src=torch.tensor(src, dtype=torch.int64), dst=torch.tensor(dst, dtype=torch.int64),
        words=torch.tensor(words, dtype=torch.int64), acoustic=torch.tensor(acoustic, dtype=torch.float64),
        graph=torch.tensor(graph, dtype=torch.float64), finals=torch.tensor(finals, dtype=torch.int64),
        final_acoustic=torch.zeros(len(finals), dtype=torch.float64),
        final_graph=torch.zeros(len(finals), dtype=torch.float64), symbols=tuple(symbols), meta=meta,
        arc_extra={f"htk_{n}": tuple(v) for n, v in link_extra.items()}, state_extra=state_extra)
    try:
        return lattice.validate()
    except LatticeFormatError as err:
        raise err.located(source=r.source, key=r.key) from None


def _start_and_finals(r: _Reader, num_states: int, src: list[int], dst: list[int], values: dict[str, str],
                      header_line: dict[str, int]) -> tuple[int, list[int]]:
    for name in ("start", "end"):
        if name in values and r.integer(values[name], header_line[name], name) >= num_states:
            raise r.error(f"node {values[name]} is not declared", header_line[name], name)
    if "start" in values:
        start = int(values["start"])
    else:
        sources = sorted(set(range(num_states)) - set(dst))
        if len(sources) != 1:
            raise r.error(f"{len(sources)} nodes have no incoming link ({sources[:5]}); "
                          "a lattice needs exactly one start node or a start= header", None, "start")
        start = sources[0]
    if "end" in values:
        return start, [int(values["end"])]
    return start, sorted(set(range(num_states)) - set(src))


# ---------------------------------------------------------------------------------------- writing
def _format_value(value: str) -> str:
    """Quote a value when it would not read back as itself unquoted."""
    if value and not value.startswith('"') and not any(c.isspace() or ord(c) < 32 for c in value):
        return value
    escaped = "".join(f"\\{ord(c):03o}" if ord(c) < 32 else "\\" + c if c in '"\\' else c for c in value)
    return f'"{escaped}"'


def _format_float(value: float) -> str:
    return repr(float(value) + 0.0)  # + 0.0 turns -0.0 into 0.0


def _column(values: Any, index: int) -> str | None:
    item = values[index]
    return None if item is None else str(item)


def write_htk(lattice: Lattice) -> str:
    """The lattice as HTK SLF text (see the module docstring for the layout chosen)."""
    words, src, dst = lattice.words.tolist(), lattice.src.tolist(), lattice.dst.tolist()
    acoustic, graph = lattice.acoustic.tolist(), lattice.graph.tolist()
    n, num_arcs = lattice.num_states, lattice.num_arcs
    finals = lattice.finals.tolist()
    final_acoustic, final_graph = lattice.final_acoustic.tolist(), lattice.final_graph.tolist()
    has_out = set(src)
    weighted = any(a != 0.0 or g != 0.0 for a, g in zip(final_acoustic, final_graph))
    super_final = weighted or any(f in has_out for f in finals)  # then there are several finals
    arc_extra = {k[4:]: v for k, v in lattice.arc_extra.items() if k.startswith("htk_")}
    if super_final:  # links from every final state to one new !NULL node carry the final weights
        for f, a, g in zip(finals, final_acoustic, final_graph):
            src.append(f)
            dst.append(n)
            words.append(0)
            acoustic.append(a)
            graph.append(g)
    total_nodes, total_links = n + int(super_final), len(src)

    node_word: list[int | None] = [None] * total_nodes
    on_nodes = lattice.meta.get("htk_words_on") == "nodes"
    for d, w in zip(dst, words):
        if node_word[d] is None:
            node_word[d] = w
        elif node_word[d] != w:
            on_nodes = False
            break

    def spell(word_id: int | None) -> str:
        return NULL_WORD if not word_id else lattice.symbols[word_id]

    lines = _header_lines(lattice, total_nodes, total_links)
    times = lattice.state_extra.get("time")
    node_extra = {k[4:]: v for k, v in lattice.state_extra.items() if k.startswith("htk_")}
    if on_nodes:
        node_extra.pop("W", None)
    for i in range(total_nodes):
        fields = [f"I={i}"]
        if times is not None:
            t = float(times[i]) if i < n else max((float(times[f]) for f in finals), default=math.nan)
            if not math.isnan(t):
                fields.append(f"t={_format_float(t)}")
        if on_nodes:
            start_word = lattice.meta.get("htk_start_word")
            if i != lattice.start:
                fields.append(f"W={_format_value(spell(node_word[i]))}")
            elif start_word is not None:
                fields.append(f"W={_format_value(str(start_word))}")
        for name, values in node_extra.items():
            value = _column(values, i) if i < n else None
            if value is not None:
                fields.append(f"{name}={_format_value(value)}")
        lines.append(" ".join(fields))
    for j in range(total_links):
        fields = [f"J={j}", f"S={src[j]}", f"E={dst[j]}"]
        if not on_nodes:
            fields.append(f"W={_format_value(spell(words[j]))}")
        fields += [f"a={_format_float(acoustic[j])}", f"l={_format_float(graph[j])}"]
        for name, values in arc_extra.items():
            value = _column(values, j) if j < num_arcs else None
            if value is not None:
                fields.append(f"{name}={_format_value(value)}")
        lines.append(" ".join(fields))
    return "\n".join(lines) + "\n"


def _header_lines(lattice: Lattice, num_nodes: int, num_links: int) -> list[str]:
    """The header fields read, in their order, with the key and the scales made current, base=
    left out (scores are natural log), then N= L=. A lattice from another format gets VERSION=,
    UTTERANCE= and its scales."""
    header = [list(pair) for pair in lattice.meta.get("header", [["VERSION", "1.1"]])]
    names = [pair[0] for pair in header]
    if "UTTERANCE" not in names and lattice.key != _key_from_source(None):
        header.insert(1 if names[:1] == ["VERSION"] else 0, ["UTTERANCE", lattice.key])
    for name in _SCALE_FIELDS:
        if name in lattice.meta and name not in names:
            header.append([name, _format_float(lattice.meta[name])])
    lines: list[str] = []
    deferred: list[str] = []  # fields named "#..." before any written field: they go after N= L=
    for name, value in header:
        if name in _STRUCTURE or name == "base":
            continue
        if name == "UTTERANCE":
            value = lattice.key
        elif name in _SCALE_FIELDS and name in lattice.meta:
            try:
                same = float(value) == float(lattice.meta[name])
            except ValueError:
                same = False
            value = value if same else _format_float(lattice.meta[name])
        field = f"{name}={_format_value(str(value))}"
        if name.startswith("#"):  # at the start of a line it would be read back as a comment
            if lines:
                lines[-1] += " " + field  # after the field it followed
            else:
                deferred.append(field)
            continue
        lines.append(field)
    lines.append(" ".join([f"N={num_nodes} L={num_links}", *deferred]))
    return lines
