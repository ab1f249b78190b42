"""Kaldi binary lattice archives (``ark:`` as decoders and ``lattice-copy ark:IN ark:OUT`` write them).

An archive is entries ``KEY SEP FST`` with nothing between them. ``KEY`` is the utterance id:
bytes other than whitespace and NUL, read as UTF-8; whitespace before it is skipped (Kaldi reads
it with ``is >> key``). ``SEP`` is one space (or a tab). Kaldi's lattice holders write the FST
right after it *without* the ``\\0B`` marker of other Kaldi objects (``CompactLatticeHolder::Write``:
"we don't include the binary-mode header"); readers tell binary from text by the FST's first
byte, 0xD6. A ``\\0B`` there is skipped all the same. ``FST`` is an OpenFst ``VectorFst`` in binary
form, little-endian, unpadded; a string is an int32 length and that many bytes::

    int32   magic          2125659606 (bytes D6 FD B2 7E)
    string  fst type       "vector" (Kaldi reads no other)
    string  arc type       "compactlattice44" (CompactLattice) or "lattice4" (Lattice); the
                           float64 forms "compactlattice84" and "lattice8" are read too
    int32   version        2 (older is refused, as OpenFst does)
    int32   flags          0x1 / 0x2: an input / output symbol table follows; 0x4: aligned (no
                           effect on a VectorFst). Kaldi writes 0
    uint64  properties     OpenFst property bits (not used)
    int64   start          the start state; -1 when there are no states
    int64   num_states
    int64   num_arcs       not used; VectorFst writes 0
    [per flag, a symbol table: int32 magic 2125658996, string name, int64 available key,
     int64 size, size x (string symbol, int64 key); skipped]
    num_states x (weight final, int64 num_arcs,
                  num_arcs x (int32 ilabel, int32 olabel, weight, int32 nextstate))

    weight (Lattice)          float32 graph cost, float32 acoustic cost
    weight (CompactLattice)   float32 graph cost, float32 acoustic cost, int32 n, n x int32 tids

A final weight of Zero (both costs +inf, no transition ids) marks a state that is not final. A
CompactLattice is an acceptor (ilabel == olabel == word id); a Lattice's ilabel is a transition
id and its olabel the word id. Sources followed: Kaldi ``src/lat/kaldi-lattice.{h,cc}``,
``src/fstext/lattice-weight.h``, ``src/util/kaldi-table-inl.h``; OpenFst ``fst.h`` (``FstHeader``,
``FstImpl::ReadHeader``/``WriteFstHeader``), ``vector-fst.h`` (``VectorFstImpl::Read``,
``VectorFst::WriteFst``), ``symbol-table.cc``, ``script/print-impl.h`` (``FstPrinter``).

:func:`read_kaldi_binary` gives exactly the lattices :func:`~lattices.formats.kaldi.read_kaldi`
gives for the text Kaldi prints of the same archive (``lattice-copy ark:IN ark,t:-``): arcs in
``fstprint`` order (the start state's first, then the other states' in id order), finals sorted,
``graph = -g``, ``acoustic = -a``, words as ids into ``symbols`` (required, as for an integer text
archive), ``meta`` and extras from :func:`~lattices.formats.kaldi.kaldi_extras`. Kaldi prints a
cost with C++'s default 6 significant digits, so a cost ``c`` is read as ``float("%.6g" % c)``:
what the text gives, at the price of float32's seventh digit. (One difference: the text cannot
tell an arc-less Lattice with One final weights from a CompactLattice; the binary type can.) Malformed input (truncated, a wrong
magic number or type, a negative or impossible count, an arc to a missing state, an infinite or
NaN weight, a text entry) raises :class:`LatticeFormatError` naming the source, the key and the
byte offset in the (gunzipped) archive; no count is used before it is checked against the bytes left.

:func:`write_kaldi_binary` writes what Kaldi writes, with properties ``kExpanded | kMutable``
(every VectorFst has them; they claim nothing about the lattice). Costs are stored as float32.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence
from itertools import islice

import numpy as np
import torch

from lattices.formats._text import MAX_ID, checked_symbols, word_ids_in
from lattices.formats.kaldi import COMPACT, TRANSDUCER, checked_tids, kaldi_extras
from lattices.lattice import EPSILON, Lattice, LatticeFormatError
from lattices.ops import check_deadline

__all__ = ["looks_like_kaldi_binary", "read_kaldi_binary", "write_kaldi_binary"]

FST_MAGIC = 2125659606
SYMBOL_TABLE_MAGIC = 2125658996
FILE_VERSION = 2  # VectorFst's file version, and the oldest it reads
PROPERTIES = 0x3  # kExpanded | kMutable
#: arc type -> (is a CompactLattice, bytes per cost)
ARC_TYPES = {"compactlattice44": (True, 4), "lattice4": (False, 4),
             "compactlattice84": (True, 8), "lattice8": (False, 8)}
_PRINTED = "%.6g"  # how Kaldi prints a cost (C++ stream default precision)
_WHITESPACE = frozenset(b" \t\n\v\f\r")
_KEY = re.compile(rb"[^ \t\n\v\f\r\x00]+")
_SPACE = re.compile(rb"[ \t\n\v\f\r]*")
_START = re.compile(rb"[ \t\n\v\f\r]*[^ \t\n\v\f\r\x00]+[ \t](?:\xd6|\x00B)")
_I32, _I64, _WEIGHT = struct.Struct("<i"), struct.Struct("<q"), struct.Struct("<ff")
_ARC = struct.Struct("<iiff")  # ilabel, olabel, graph cost, acoustic cost
_HEADER = struct.Struct("<iiQqqq")  # version, flags, properties, start, num_states, num_arcs
_POW10 = np.array([10**k for k in range(1, 10)], dtype=np.int64)


def looks_like_kaldi_binary(data: bytes) -> bool:
    """Whether ``data`` starts like a binary archive: a key, a space or tab, then an FST (or ``\\0B``)."""
    return _START.match(data[:4096]) is not None


def read_kaldi_binary(data: bytes, symbols: Sequence[str] | None = None, source: str | None = None,
                      deadline: float | None = None, keep: Callable[[], bool] | None = None) -> list[Lattice]:
    """Read a binary Kaldi archive into lattices, in archive order (see the module docstring).

    ``symbols[i]`` is the word with id ``i`` (``words.txt``); it is required unless no lattice has
    an arc. ``source`` (a file name) is named in errors. Past ``deadline`` (checked between
    lattices): :class:`~lattices.ops.DeadlineExceeded`. ``keep``: called once per lattice, in
    order; the lattices it refuses are only walked (to find where the next one starts), not
    decoded or checked.
    """
    reader = _Reader(bytes(data), checked_symbols(symbols, source), source)
    lattices: list[Lattice] = []
    keys: dict[str, int] = {}
    pos = _SPACE.match(reader.data).end()
    while pos < reader.end:
        check_deadline(deadline)
        key, at, pos = reader.key(pos)
        if key in keys:
            raise reader.error(f"key {key!r} was already used at byte {keys[key]}", at, "key")
        keys[key] = at
        take = keep is None or keep()
        lattice, pos = reader.fst(pos, build=take)
        if lattice is not None:
            lattices.append(lattice)
        pos = _SPACE.match(reader.data, pos).end()
    if not any(lattice.num_arcs for lattice in lattices):  # as the text reader: no word field, so no word ids
        lattices = [lattice.replace(meta={**lattice.meta, "kaldi_word_ids": False}) for lattice in lattices]
    return lattices


def write_kaldi_binary(lattices: Sequence[Lattice], symbols: Sequence[str] | None = None) -> bytes:
    """Write lattices as a binary Kaldi archive, each as its ``meta["kaldi_type"]`` (default
    ``CompactLattice``). Words are written as ids into ``symbols`` when given (a word it lacks is a
    :class:`LatticeFormatError`), else as ids into each lattice's own ``symbols``. Keys must be
    non-empty and free of whitespace."""
    index = None
    if symbols is not None:
        index = {word: i for i, word in reversed(list(enumerate(checked_symbols(symbols, None) or ()))) if word}
        index[EPSILON] = 0
    out = bytearray()
    for lattice in lattices:
        try:
            key = lattice.key.encode("utf-8")
        except UnicodeEncodeError:
            key = b""
        if not _KEY.fullmatch(key):
            raise LatticeFormatError(f"key {lattice.key!r} cannot be a binary archive key (it is empty or has "
                                     "whitespace or NUL)", key=lattice.key, field="key")
        out += key + b" " + _fst_bytes(lattice, index)
    return bytes(out)


# ---------------------------------------------------------------------------------- reading
class _Reader:
    """Bounds-checked reads from an archive; errors name the source, the current key and a byte offset."""

    def __init__(self, data: bytes, table: tuple[str, ...] | None, source: str | None) -> None:
        self.data, self.end, self.table, self.source, self.key_text = data, len(data), table, source, None
        self.u8 = np.frombuffer(data, dtype=np.uint8)
        self.holes = None if table is None else np.array([not word for word in table], dtype=bool)

    def error(self, message: str, offset: int, field: str | None = None) -> LatticeFormatError:
        return LatticeFormatError(f"{message} (at byte {offset})", source=self.source, key=self.key_text,
                                  field=field)

    def unpack(self, fmt: struct.Struct, pos: int, what: str) -> tuple:
        if pos + fmt.size > self.end:
            raise self.error(f"the data ends inside the {what} (a truncated archive?)", pos, what.split()[-1])
        return fmt.unpack_from(self.data, pos)

    def count(self, value: int, at: int, room: int, item_bytes: int, what: str) -> int:
        """``value`` (read at byte ``at``) if that many items of ``item_bytes`` fit in the ``room`` bytes left."""
        if value < 0 or value * item_bytes > room:
            raise self.error(f"{what} {value} is impossible: {max(room, 0)} bytes are left", at, what.split()[-1])
        return value

    def string(self, pos: int, what: str) -> tuple[bytes, int]:
        size = self.count(self.unpack(_I32, pos, what)[0], pos, self.end - pos - 4, 1, f"length of the {what}")
        return self.data[pos + 4:pos + 4 + size], pos + 4 + size

    def key(self, pos: int) -> tuple[str, int, int]:
        """The key at ``pos``: ``(key, pos, offset of its FST)``."""
        data, self.key_text = self.data, None
        match = _KEY.match(data, pos)
        if match is None:
            raise self.error("expected a lattice key, got a NUL byte", pos, "key")
        try:
            self.key_text = match.group().decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(f"key {match.group()[:40]!r} is not UTF-8", pos, "key") from None
        end = match.end()
        if data[end:end + 1] not in (b" ", b"\t"):
            raise self.error("expected a space after the key" if end < self.end else "the archive ends after the key",
                             end, "key")
        fst = end + (3 if data[end + 1:end + 3] == b"\x00B" else 1)
        if fst < self.end and data[fst] in _WHITESPACE:
            raise self.error("this lattice is in text form; a binary archive must hold binary lattices only", fst,
                             "key")
        return self.key_text, pos, fst

    def fst(self, offset: int, build: bool = True) -> tuple[Lattice | None, int]:
        """The lattice of the FST at ``offset`` (None without ``build``: its structure is only
        walked, to find its end), and the offset after the FST."""
        (magic,) = self.unpack(_I32, offset, "FST header")
        if magic != FST_MAGIC:
            raise self.error(f"not an OpenFst binary FST: magic number {magic}, expected {FST_MAGIC}", offset, "header")
        fst_type, pos = self.string(offset + 4, "FST type")
        if fst_type != b"vector":
            raise self.error(f"FST type {fst_type[:40]!r} is not supported (Kaldi lattices are 'vector')",
                             offset + 4, "header")
        arc_type, header = self.string(pos, "arc type")
        if arc_type.decode("latin-1") not in ARC_TYPES:
            raise self.error(f"arc type {arc_type[:40]!r} is not a Kaldi lattice ({', '.join(ARC_TYPES)})", pos,
                             "header")
        compact, w = ARC_TYPES[arc_type.decode("latin-1")]
        version, flags, _, start, num_states, _ = self.unpack(_HEADER, header, "FST header")
        if version < FILE_VERSION:
            raise self.error(f"VectorFst file version {version} is older than {FILE_VERSION}", header, "header")
        pos = header + _HEADER.size
        for flag in (0x1, 0x2):  # input, output symbol table
            if flags & flag:
                pos = self.skip_symbol_table(pos)
        weight = 2 * w + (4 if compact else 0)  # the fixed part of a weight
        num_states = self.count(num_states, header + 24, self.end - pos, weight + 8, "number of states")
        if num_states == 0:
            raise self.error("the lattice has no states (an empty FST)", header + 24, "lattice")
        if not 0 <= start < num_states:
            raise self.error(f"start state {start} is not in 0..{num_states - 1}", header + 16, "start")
        return self.states(offset, pos, compact, w, start, num_states, build)

    def skip_symbol_table(self, pos: int) -> int:
        (magic,) = self.unpack(_I32, pos, "symbol table")
        if magic != SYMBOL_TABLE_MAGIC:
            raise self.error(f"bad symbol table magic number {magic}", pos, "table")
        _, pos = self.string(pos + 4, "symbol table name")
        size = self.count(self.unpack(_I64, pos + 8, "symbol table")[0], pos + 8, self.end - pos - 16, 12,
                          "symbol table size")
        pos += 16
        for _ in range(size):
            _, pos = self.string(pos, "symbol table")
            pos += 8
        if pos > self.end:
            raise self.error("the data ends inside the symbol table", self.end, "table")
        return pos

    def states(self, offset: int, pos: int, compact: bool, w: int, start: int, num_states: int, build: bool = True
               ) -> tuple[Lattice | None, int]:
        """Walk the states (offsets only: a CompactLattice arc's size depends on its transition ids)."""
        data, end, unpack_i32, unpack_i64 = self.data, self.end, _I32.unpack_from, _I64.unpack_from
        weight = 2 * w + (4 if compact else 0)
        arc_bytes, n_at = 12 + weight, 8 + 2 * w  # an arc without transition ids; where its n is
        state_at, counts, arc_at = [], [], []  # final weights, arcs per state, arcs (a Lattice: arc blocks)
        append = arc_at.append
        for _ in range(num_states):
            state_at.append(pos)
            if pos + weight + 8 > end:
                raise self.error("the data ends inside a state (a truncated archive?)", pos, "state")
            if compact:
                pos += weight + 4 * self.count(unpack_i32(data, pos + 2 * w)[0], pos + 2 * w, end - pos - weight - 8,
                                               4, "number of final transition ids")
            else:
                pos += weight
            narcs = self.count(unpack_i64(data, pos)[0], pos, end - pos - 8, arc_bytes, "number of arcs")
            pos += 8
            counts.append(narcs)
            if not compact:
                append(pos)
                pos += arc_bytes * narcs
                continue
            for _ in range(narcs):
                if pos + arc_bytes > end:
                    raise self.error("the data ends inside an arc (a truncated archive?)", pos, "arc")
                n = unpack_i32(data, pos + n_at)[0]
                if n < 0 or 4 * n > end - pos - arc_bytes:
                    self.count(n, pos + n_at, end - pos - arc_bytes, 4, "number of transition ids")
                append(pos)
                pos += arc_bytes + 4 * n
        if not build:
            return None, pos
        counts_a, arcs = np.array(counts, dtype=np.int64), np.array(arc_at, dtype=np.int64)
        if not compact:  # one offset per arc, from the blocks
            arcs = np.repeat(arcs, counts_a) + arc_bytes * _ranks(counts_a)
        return self.decode(offset, compact, w, start, np.array(state_at, dtype=np.int64), counts_a, arcs), pos

    def decode(self, offset: int, compact: bool, w: int, start: int, state_at: np.ndarray, counts: np.ndarray,
               arc_at: np.ndarray) -> Lattice:
        """Gather and check all fields at once, given every state's and arc's offset."""
        num_states, cost = len(state_at), "<f4" if w == 4 else "<f8"
        src = np.repeat(np.arange(num_states, dtype=np.int64), counts)
        ilabels, words = self.gather(arc_at, "<i4"), self.gather(arc_at + 4, "<i4")
        costs = np.stack([self.gather(arc_at + 8, cost), self.gather(arc_at + 8 + w, cost)], 1)
        n = self.gather(arc_at + 8 + 2 * w, "<i4") if compact else 0
        next_at = arc_at + 8 + 2 * w + (4 + 4 * n if compact else 0)
        dst = self.gather(next_at, "<i4")
        self.first(arc_at, (ilabels < 0) | (words < 0), "label {} is negative", np.minimum(ilabels, words), "ilabel")
        if compact:
            self.first(arc_at, ilabels != words, "ilabel {} differs from the olabel: a CompactLattice is an acceptor",
                       ilabels, "ilabel")
        self.first(next_at, (dst < 0) | (dst >= num_states), f"arc to state {{}}, but there are {num_states} states",
                   dst, "nextstate")
        self.first(arc_at + 8, ~np.isfinite(costs).all(1), "arc weight {} is not finite", costs, "weight")
        word_field = "word" if compact else "olabel"
        if words.size and self.table is None:
            raise self.error("integer word ids need a symbol table (words.txt)", int(arc_at[0]) + 4, word_field)
        if words.size and self.holes is not None:
            bad = words >= len(self.holes)
            bad[~bad] = self.holes[words[~bad]]
            self.first(arc_at + 4, bad, f"word id {{}} is not in the symbol table of {len(self.holes)} entries", words,
                       word_field)
        final_costs = np.stack([self.gather(state_at, cost), self.gather(state_at + w, cost)], 1)
        final_n = self.gather(state_at + 2 * w, "<i4") if compact else np.zeros(num_states, dtype=np.int64)
        zero = (final_costs == np.inf).all(1) & (final_n == 0)
        self.first(state_at, ~zero & ~np.isfinite(final_costs).all(1), "final weight {} is neither finite nor Zero",
                   final_costs, "weight")
        finals = np.flatnonzero(~zero)
        tids = self.tid_strings(arc_at + 12 + 2 * w, n) if compact else []
        final_tids = self.tid_strings(state_at[finals] + 2 * w + 4, final_n[finals]) if compact else []
        if start != 0:  # fstprint order: the start state's arcs first
            order = np.argsort(np.where(src == start, -1, src), kind="stable")
            src, dst, words, ilabels, costs = (x[order] for x in (src, dst, words, ilabels, costs))
            tids = [tids[i] for i in order.tolist()] if compact else tids
        graph, acoustic = (torch.from_numpy(0.0 - _printed(costs[:, i])) for i in (0, 1))
        final_graph, final_acoustic = (torch.from_numpy(0.0 - _printed(final_costs[finals, i])) for i in (0, 1))
        meta, arc_extra, final_extra = kaldi_extras(not compact, True, torch.from_numpy(ilabels), tids, final_tids)
        lattice = Lattice(
            key=self.key_text or "", num_states=num_states, start=start, src=torch.from_numpy(src),
            dst=torch.from_numpy(dst), words=torch.from_numpy(words), acoustic=acoustic, graph=graph,
            finals=torch.from_numpy(finals), final_acoustic=final_acoustic, final_graph=final_graph,
            symbols=self.table or (EPSILON,), meta=meta, arc_extra=arc_extra, final_extra=final_extra)
        try:
            return lattice.validate()
        except LatticeFormatError as err:
            raise LatticeFormatError(f"{err.reason} (in the FST at byte {offset})", source=self.source,
                                     key=lattice.key, field=err.field) from None

    def gather(self, offsets: np.ndarray, dtype: str) -> np.ndarray:
        """The values of ``dtype`` at byte ``offsets`` (already bounds-checked), as int64 or float64."""
        values = self.u8[offsets[:, None] + np.arange(np.dtype(dtype).itemsize)].view(dtype).reshape(-1)
        with np.errstate(invalid="ignore"):  # a signalling NaN (refused later) may be cast
            return values.astype(np.int64 if dtype == "<i4" else np.float64)

    def first(self, offsets: np.ndarray, bad: np.ndarray, message: str, values: np.ndarray, field: str) -> None:
        """Raise about the first ``bad`` entry, if any, at its offset."""
        if bad.any():
            i = int(bad.argmax())
            value = values[i].tolist()
            raise self.error(message.format(",".join(map(repr, value)) if isinstance(value, list) else value),
                             int(offsets[i]), field)

    def tid_strings(self, starts: np.ndarray, counts: np.ndarray) -> list[str]:
        """Each run of ``counts[i]`` int32 transition ids at ``starts[i]`` joined by ``_``, as Kaldi prints it."""
        total = int(counts.sum())
        if total == 0:
            return [""] * len(counts)
        at = np.repeat(starts, counts) + 4 * _ranks(counts)
        values = self.gather(at, "<i4")
        self.first(at, values < 0, "transition id {} is negative", values, "weight")
        unique, inverse = np.unique(values, return_inverse=True)
        text = "_".join(np.array(list(map(str, unique.tolist())), dtype=object)[inverse.reshape(-1)].tolist())
        widths = np.searchsorted(_POW10, values, side="right") + 1  # digits
        begin = np.cumsum(widths + 1) - widths - 1  # where each id starts in text
        first = np.cumsum(counts) - counts
        spans = zip(counts.tolist(), begin[np.clip(first, 0, total - 1)].tolist(),
                    (begin + widths)[np.clip(first + counts - 1, 0, total - 1)].tolist())
        return [text[b:e] if c else "" for c, b, e in spans]


def _ranks(counts: np.ndarray) -> np.ndarray:
    """``0..c-1`` for each count ``c``, concatenated."""
    return np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)


def _printed(costs: np.ndarray) -> np.ndarray:
    """float64 of each (finite) cost as Kaldi prints it: 6 significant digits."""
    values, inverse = np.unique(costs, return_inverse=True)
    return np.array(list(map(float, map(_PRINTED.__mod__, values.tolist()))), dtype=np.float64)[inverse.reshape(-1)]


# ---------------------------------------------------------------------------------- writing
def _fst_bytes(lattice: Lattice, index: dict[str, int] | None) -> bytes:
    kind = lattice.meta.get("kaldi_type", COMPACT)
    if kind not in (COMPACT, TRANSDUCER):
        raise LatticeFormatError(f"unknown Kaldi lattice type {kind!r}", key=lattice.key, field="meta['kaldi_type']")
    compact, num_states = kind == COMPACT, lattice.num_states
    words = _labels(lattice, word_ids_in(lattice, index).numpy(), "words").tolist()
    given = lattice.arc_extra.get("kaldi_ilabel")
    ilabels = [0] * len(words) if compact or given is None else _labels(
        lattice, torch.as_tensor(given).cpu().numpy(), "kaldi_ilabel").tolist()
    tids = checked_tids(lattice, lattice.arc_extra.get("kaldi_tids") if compact else None, len(words))
    final_tids = checked_tids(lattice, lattice.final_extra.get("kaldi_tids") if compact else None,
                              int(lattice.finals.numel()))
    graph, acoustic, dst = _costs(lattice, "graph"), _costs(lattice, "acoustic"), lattice.dst.tolist()
    finals = dict(zip(lattice.finals.tolist(), zip(_costs(lattice, "final_graph"),
                                                   _costs(lattice, "final_acoustic"), final_tids)))
    arc_type = b"compactlattice44" if compact else b"lattice4"
    out = [_I32.pack(FST_MAGIC), _I32.pack(6), b"vector", _I32.pack(len(arc_type)), arc_type,
           _HEADER.pack(FILE_VERSION, 0, PROPERTIES, lattice.start, num_states, 0)]
    packed: dict[str, bytes] = {"": _I32.pack(0)}
    arcs = iter(torch.argsort(lattice.src.cpu(), stable=True).tolist())
    for state, narcs in enumerate(np.bincount(lattice.src.cpu().numpy(), minlength=num_states).tolist()):
        g, a, t = finals.get(state, (np.inf, np.inf, ""))  # Zero: not final
        out += (_WEIGHT.pack(g, a), _tids_bytes(lattice, t, packed) if compact else b"", _I64.pack(narcs))
        for i in islice(arcs, narcs):
            if compact:
                out += (_ARC.pack(words[i], words[i], graph[i], acoustic[i]), _tids_bytes(lattice, tids[i], packed),
                        _I32.pack(dst[i]))
            else:
                out.append(_ARC.pack(ilabels[i], words[i], graph[i], acoustic[i]) + _I32.pack(dst[i]))
    return b"".join(out)


def _labels(lattice: Lattice, ids: np.ndarray, field: str) -> np.ndarray:
    bad = (ids < 0) | (ids > MAX_ID)
    if bad.any():
        raise LatticeFormatError(f"label {int(ids[bad][0])} is not in 0..{MAX_ID}", key=lattice.key, field=field)
    return ids


def _costs(lattice: Lattice, name: str) -> list[float]:
    """The float32 costs (``-score``) of attribute ``name``; a score beyond float32's range is an error."""
    scores = getattr(lattice, name).cpu().numpy()
    with np.errstate(over="ignore"):
        costs = (0.0 - scores).astype(np.float32)
    if not np.isfinite(costs).all():
        bad = float(scores[~np.isfinite(costs)][0])
        raise LatticeFormatError(f"score {bad} does not fit a float32 cost", key=lattice.key, field=name)
    return costs.tolist()


def _tids_bytes(lattice: Lattice, tids: str, packed: dict[str, bytes]) -> bytes:
    """``int32 n, n x int32`` of a ``kaldi_tids`` string (checked by :func:`checked_tids`), memoized in ``packed``."""
    done = packed.get(tids)
    if done is None:
        values = [int(t) for t in tids.split("_")]
        if max(values) > MAX_ID:
            raise LatticeFormatError(f"transition id {max(values)} is larger than {MAX_ID}", key=lattice.key,
                                     field="kaldi_tids")
        done = packed[tids] = struct.pack(f"<i{len(values)}i", len(values), *values)
    return done
