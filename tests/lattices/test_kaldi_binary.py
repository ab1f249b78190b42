"""Kaldi binary archives: hand-built bytes, equality with the text reader, round trips, located errors, fuzzing."""

from __future__ import annotations

import functools
import gzip
import math
import struct

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lattices.formats import guess_format, read_lattice_file, read_lattices, write_lattices
from lattices.formats.kaldi import read_kaldi, write_kaldi
from lattices.formats.kaldi_binary import looks_like_kaldi_binary, read_kaldi_binary, write_kaldi_binary
from lattices.lattice import Lattice, LatticeFormatError
from lm.vocab import parse_symbol_table
from tests.factories import require_shared, SHARED_DATA
from tests.lattices.test_kaldi import COMPACT, TRANSDUCER, VALID, assert_same_lattice

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SYMBOLS = ("<eps>", "HELLO", "WORLD")
INF, NAN = math.inf, math.nan


# --------------------------------------------------------------------------- the byte format, written out by hand
def string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<i", len(raw)) + raw


def header(arc_type: str, start: int, num_states: int, *, flags: int = 0, version: int = 2, fst_type: str = "vector",
           magic: int = 2125659606) -> bytes:
    """OpenFst FstHeader: magic, fst type, arc type, version, flags, properties, start, #states, #arcs."""
    return (struct.pack("<i", magic) + string(fst_type) + string(arc_type)
            + struct.pack("<iiQqqq", version, flags, 3, start, num_states, 0))


def cweight(graph: float, acoustic: float, *tids: int) -> bytes:
    """CompactLatticeWeight: float32 graph cost, float32 acoustic cost, int32 n, n int32 transition ids."""
    return struct.pack(f"<ffi{len(tids)}i", graph, acoustic, len(tids), *tids)


def carc(dst: int, word: int, weight: bytes | None = None, olabel: int | None = None) -> bytes:
    """A CompactLattice arc: ilabel, olabel (the same word), weight, nextstate."""
    labels = struct.pack("<ii", word, word if olabel is None else olabel)
    return labels + (weight or cweight(0, 0)) + struct.pack("<i", dst)


def larc(dst: int, ilabel: int, olabel: int, graph: float = 0.0, acoustic: float = 0.0) -> bytes:
    """A Lattice arc: ilabel (transition id), olabel (word), float32 graph and acoustic costs, nextstate."""
    return struct.pack("<iiffi", ilabel, olabel, graph, acoustic, dst)


def state(final: bytes, *arcs: bytes) -> bytes:
    return final + struct.pack("<q", len(arcs)) + b"".join(arcs)


C_ZERO, L_ZERO = cweight(INF, INF), struct.pack("<ff", INF, INF)  # not final

# Kaldi's text (tab-separated, as lattice-copy ark:- ark,t:- prints it) and the same archive in binary.
COMPACT_TEXT = ("utt1\n0\t1\t1\t1.5,-20.25,2_1_1\n0\t2\t0\t0.5,-3,2\n1\t3\t2\n2\t3\t2\n3\t0.25,0,7\n\n"
                "utt2\n0\n\n")
COMPACT_BIN = (b"utt1 " + header("compactlattice44", 0, 4)
               + state(C_ZERO, carc(1, 1, cweight(1.5, -20.25, 2, 1, 1)), carc(2, 0, cweight(0.5, -3, 2)))
               + state(C_ZERO, carc(3, 2)) + state(C_ZERO, carc(3, 2)) + state(cweight(0.25, 0, 7))
               + b"utt2 " + header("compactlattice44", 0, 1) + state(cweight(0, 0)))
# A Lattice whose start state is 2: fstprint prints state 2's arc first, then states 0, 1, 3.
TRANSDUCER_TEXT = "t\n2\t0\t4\t1\t1.5,-20.25\n0\t1\t7\t0\n0\t3\t9\t2\t2,0.001\n1\t3\t0\t2\n3\t0.5,0.25\n\n"
TRANSDUCER_BIN = (b"t " + header("lattice4", 2, 4)
                  + state(L_ZERO, larc(1, 7, 0), larc(3, 9, 2, 2, 0.001)) + state(L_ZERO, larc(3, 0, 2))
                  + state(L_ZERO, larc(0, 4, 1, 1.5, -20.25)) + state(struct.pack("<ff", 0.5, 0.25)))
ARCHIVE = COMPACT_BIN + TRANSDUCER_BIN


def test_hand_built_compact_lattice_reads_field_by_field():
    utt1, utt2 = read_kaldi_binary(COMPACT_BIN, SYMBOLS, source="c.ark")
    assert (utt1.key, utt1.num_states, utt1.start) == ("utt1", 4, 0)
    assert utt1.src.tolist() == [0, 0, 1, 2] and utt1.dst.tolist() == [1, 2, 3, 3]
    assert utt1.words.tolist() == [1, 0, 2, 2] and utt1.symbols == SYMBOLS
    assert utt1.graph.tolist() == [-1.5, -0.5, 0.0, 0.0] and utt1.acoustic.tolist() == [20.25, 3.0, 0.0, 0.0]
    assert all(math.copysign(1.0, x) == 1.0 for x in utt1.graph.tolist()[2:] + utt1.acoustic.tolist()[2:])
    assert utt1.arc_extra == {"kaldi_tids": ("2_1_1", "2", "", "")}
    assert utt1.finals.tolist() == [3] and utt1.final_graph.tolist() == [-0.25] and utt1.final_acoustic.tolist() == [0]
    assert utt1.final_extra == {"kaldi_tids": ("7",)}
    assert utt1.meta == {"kaldi_type": "CompactLattice", "kaldi_word_ids": True}
    assert (utt2.num_states, utt2.start, utt2.num_arcs, utt2.finals.tolist()) == (1, 0, 0, [0])
    assert utt2.symbols is utt1.symbols
    for name in ("src", "dst", "words", "finals"):
        assert getattr(utt1, name).dtype == torch.int64
    for ours, text in zip((utt1, utt2), read_kaldi(COMPACT_TEXT, SYMBOLS)):
        assert_same_lattice(ours, text)


def test_hand_built_transducer_lattice_keeps_fstprint_order():
    (lattice,) = read_kaldi_binary(TRANSDUCER_BIN, SYMBOLS)
    assert (lattice.start, lattice.num_states) == (2, 4)
    assert lattice.src.tolist() == [2, 0, 0, 1] and lattice.dst.tolist() == [0, 1, 3, 3]  # the start state's arc first
    assert lattice.arc_extra["kaldi_ilabel"].tolist() == [4, 7, 9, 0]
    assert lattice.arc_extra["kaldi_ilabel"].dtype == torch.int64
    assert lattice.words.tolist() == [1, 0, 2, 2]
    assert lattice.graph.tolist() == [-1.5, 0.0, -2.0, 0.0] and lattice.acoustic.tolist() == [20.25, 0.0, -0.001, 0.0]
    assert lattice.final_graph.tolist() == [-0.5] and lattice.final_acoustic.tolist() == [-0.25]
    assert lattice.meta == {"kaldi_type": "Lattice", "kaldi_word_ids": True} and lattice.final_extra == {}
    assert_same_lattice(lattice, read_kaldi(TRANSDUCER_TEXT, SYMBOLS)[0])


def test_writer_reproduces_the_hand_built_bytes():
    assert write_kaldi_binary(read_kaldi_binary(ARCHIVE, SYMBOLS)) == ARCHIVE
    assert write_kaldi_binary(read_kaldi(COMPACT_TEXT + TRANSDUCER_TEXT, SYMBOLS)) == ARCHIVE
    assert write_lattices(read_kaldi_binary(ARCHIVE, SYMBOLS), "kaldi", binary=True) == ARCHIVE
    with pytest.raises(ValueError, match="kaldi format only"):
        write_lattices(read_kaldi_binary(ARCHIVE, SYMBOLS), "htk", binary=True)


def test_costs_read_as_kaldi_prints_them():
    # float32 0.1 is 0.100000001..., and 25.137413 has 8 digits; Kaldi prints them as 0.1 and 25.1374
    data = b"u " + header("compactlattice44", 0, 2) + state(C_ZERO, carc(1, 1, cweight(0.1, 25.137413))) + state(
        cweight(1e-3, 123456789.0))
    (lattice,) = read_kaldi_binary(data, SYMBOLS)
    assert lattice.graph.tolist() == [-0.1] and lattice.acoustic.tolist() == [-25.1374]
    assert lattice.final_graph.tolist() == [-0.001] and lattice.final_acoustic.tolist() == [-1.23457e8]
    assert_same_lattice(lattice, read_kaldi("u\n0\t1\t1\t0.1,25.1374,\n1\t0.001,1.23457e+08,\n", SYMBOLS)[0])


def test_float64_lattice_types_and_symbol_tables_in_the_header():
    table = struct.pack("<i", 2125658996) + string("words") + struct.pack("<qq", 3, 2) + string("<eps>") + struct.pack(
        "<q", 0) + string("HELLO") + struct.pack("<q", 1)
    states = state(C_ZERO, carc(1, 1, cweight(1.5, 2))) + state(cweight(0, 0))
    plain = read_kaldi_binary(b"u " + header("compactlattice44", 0, 2) + states, SYMBOLS)
    with_tables = read_kaldi_binary(b"u " + header("compactlattice44", 0, 2, flags=3) + table + table + states, SYMBOLS)
    assert_same_lattice(with_tables[0], plain[0])
    double = (b"u " + header("compactlattice84", 0, 2) + struct.pack("<ddi", INF, INF, 0)
              + struct.pack("<q", 1) + struct.pack("<iiddii", 1, 1, 1.5, 2, 0, 1) + state(struct.pack("<ddi", 0, 0, 0)))
    assert_same_lattice(read_kaldi_binary(double, SYMBOLS)[0], plain[0])


def test_marker_and_whitespace_between_entries_are_accepted():
    marked = COMPACT_BIN.replace(b"utt1 ", b"utt1 \x00B").replace(b"utt2 ", b"\n utt2\t")
    for ours, expected in zip(read_kaldi_binary(marked, SYMBOLS), read_kaldi_binary(COMPACT_BIN, SYMBOLS)):
        assert_same_lattice(ours, expected)
    assert read_kaldi_binary(b"") == [] and read_kaldi_binary(b" \n") == []


def test_archive_without_arcs_needs_no_table_like_the_text_reader():
    data = b"a " + header("compactlattice44", 0, 1) + state(cweight(1, 2))
    (lattice,) = read_kaldi_binary(data)
    assert_same_lattice(lattice, read_kaldi("a\n0\t1,2,\n")[0])
    assert lattice.meta["kaldi_word_ids"] is False and lattice.symbols == ("<eps>",)


# --------------------------------------------------------------------------- round trips
def id_archive(text: str) -> tuple[list[Lattice], tuple[str, ...]]:
    """The lattices of a text archive with integer word ids (and their table), as read_kaldi gives them."""
    spelled = read_kaldi(text, SYMBOLS)
    table = spelled[0].symbols
    return read_kaldi(write_kaldi(spelled, use_ids=True), table), table


@pytest.mark.parametrize("text", [COMPACT, TRANSDUCER, VALID, COMPACT_TEXT + TRANSDUCER_TEXT,
                                  "u\n2 0 A 1,0,\n0 1 B\n1\n"])
def test_text_archives_round_trip_through_binary(text):
    lattices, table = id_archive(text)
    data = write_kaldi_binary(lattices)
    assert looks_like_kaldi_binary(data) and guess_format(data) == "kaldi"
    again = read_kaldi_binary(data, table)
    assert len(again) == len(lattices)
    for ours, expected in zip(again, lattices):
        assert_same_lattice(ours, expected)
    assert write_kaldi_binary(again) == data
    spelled = read_kaldi(text, SYMBOLS)
    for ours, expected in zip(read_kaldi_binary(write_kaldi_binary(spelled, table), table), spelled):
        assert_same_lattice(ours, expected.replace(meta={**expected.meta, "kaldi_word_ids": True}))


def test_writer_maps_words_through_a_given_table():
    lattices = read_kaldi(COMPACT)
    other = ("<eps>", "", "WORLD", "X", "HELLO")
    again = read_kaldi_binary(write_kaldi_binary(lattices, other), other)
    assert again[0].words.tolist() == [4, 0, 2, 2] and [again[0].word(i) for i in range(4)] == [
        lattices[0].word(i) for i in range(4)]
    with pytest.raises(LatticeFormatError, match="'HELLO' has no id") as info:
        write_kaldi_binary(lattices, ("<eps>", "WORLD"))
    assert info.value.key == "utt1"


def test_gzipped_binary_archives_through_read_lattices(tmp_path):
    expected = read_kaldi_binary(ARCHIVE, SYMBOLS)
    packed = gzip.compress(ARCHIVE)
    (tmp_path / "lat.1.gz").write_bytes(packed)
    for got in (read_lattices(packed, "kaldi", SYMBOLS), read_lattices(packed, "auto", SYMBOLS),
                read_lattices(ARCHIVE, "auto", SYMBOLS), read_lattice_file(tmp_path / "lat.1.gz", "auto", SYMBOLS)):
        assert [lattice.key for lattice in got] == ["utt1", "utt2", "t"]
        for ours, theirs in zip(got, expected):
            assert_same_lattice(ours, theirs)


def test_binary_sniffing_does_not_take_other_formats():
    assert guess_format(COMPACT.encode()) == "kaldi" and not looks_like_kaldi_binary(COMPACT.encode())
    assert guess_format(b"PK\x03\x04\x14\x00\x00\x00") == "k2"
    assert guess_format(b"PKkey " + ARCHIVE[5:]) == "kaldi"  # a key may start with PK
    with pytest.raises(LatticeFormatError, match=r"not UTF-8 text \(byte 2\), nor a binary Kaldi archive"):
        read_lattices(b"u\n\xd6\xfd", "kaldi")


@functools.lru_cache(maxsize=None)
def ami(name: str) -> str:
    path = SHARED_DATA / "lattices" / "ami-kaldi" / name
    require_shared(path)
    return path.read_text()


@functools.lru_cache(maxsize=None)
def ami_table() -> tuple[str, ...]:
    """The id table of 1.lat.int (not words.txt, see test_kaldi): its word fields paired with those of 1.lat."""
    pairs = {int(i.split()[2]): w.split()[2] for w, i in zip(ami("1.lat").split("\n"), ami("1.lat.int").split("\n"))
             if len(i.split()) >= 3}
    table = [""] * (max(pairs) + 1)
    for word_id, word in pairs.items():
        table[word_id] = word
    return tuple(table)


def test_real_ami_archive_round_trips_exactly():
    lattices = read_kaldi(ami("1.lat.int"), ami_table(), source="1.lat.int")
    data = write_kaldi_binary(lattices)
    again = read_lattices(gzip.compress(data), "kaldi", ami_table(), source="lat.1.gz")
    assert len(again) == len(lattices) == 10 and sum(lat.num_arcs for lat in again) == 4782
    for ours, expected in zip(again, lattices):
        assert_same_lattice(ours, expected)
    assert write_kaldi(again) == ami("1.lat.int")  # and back to the very text Kaldi printed


def test_real_ami_words_archive_with_words_txt():
    words_txt = tuple(parse_symbol_table(ami("words.txt")))
    lattices = read_kaldi(ami("1.lat"), words_txt)
    with pytest.raises(LatticeFormatError, match="has no id in the symbol table"):  # partial words like LIC
        write_kaldi_binary(lattices, words_txt)
    again = read_kaldi_binary(write_kaldi_binary(lattices), lattices[0].symbols)
    for ours, expected in zip(again, lattices):
        assert_same_lattice(ours, expected.replace(meta={**expected.meta, "kaldi_word_ids": True}))


def test_writer_refuses_what_kaldi_cannot_hold():
    (lattice,) = read_kaldi("u\n0 1 A 1,2,3\n1\n")
    for key in ("", "two words", "tab\tkey", "nul\x00"):
        with pytest.raises(LatticeFormatError, match="binary archive key"):
            write_kaldi_binary([lattice.replace(key=key)])
    cases = [(lattice.replace(graph=torch.tensor([1e39], dtype=torch.float64)), "does not fit a float32"),
             (lattice.replace(arc_extra={"kaldi_tids": ("99999999999",)}), "larger than"),
             (lattice.replace(arc_extra={"kaldi_tids": ("1,2",)}), "not integers joined"),
             (lattice.replace(meta={"kaldi_type": "Other"}), "unknown Kaldi lattice type")]
    for bad, words in cases:
        with pytest.raises(LatticeFormatError, match=words):
            write_kaldi_binary([bad])


# --------------------------------------------------------------------------- errors
H = header("compactlattice44", 0, 2)  # 74 bytes; after b"u " the states start at byte 76
S1 = state(cweight(0, 0))
A0 = 96  # the arc of state 0 (76 + 12-byte weight + 8-byte count): ilabel 96, olabel 100, costs 104/108, n 112


def fst(*states: bytes, head: bytes = H) -> bytes:
    return b"u " + head + b"".join(states)


ERRORS = [
    # (data, symbols, offset, field, words in the message); the key is 'u' unless the error is before it
    (b"u " + struct.pack("<i", 1234) + H[4:], SYMBOLS, 2, "header", "magic number 1234"),
    (fst(head=header("compactlattice44", 0, 2, fst_type="const")), SYMBOLS, 6, "header", "FST type b'const'"),
    (fst(head=header("standard", 0, 2)), SYMBOLS, 16, "header", "arc type b'standard'"),
    (fst(head=header("lattice4", 0, 2, version=1)), SYMBOLS, 28, "header", "version 1"),
    (fst(head=header("compactlattice44", 0, -1)), SYMBOLS, 60, "states", "number of states -1 is impossible"),
    (fst(head=header("compactlattice44", 0, 2**62)), SYMBOLS, 60, "states", "number of states 4611686018427387904"),
    (fst(head=header("compactlattice44", -1, 0)), SYMBOLS, 60, "lattice", "no states"),
    (fst(state(C_ZERO, carc(1, 1)), S1, head=header("compactlattice44", 5, 2)), SYMBOLS, 52, "start", "start state 5"),
    (fst(C_ZERO + struct.pack("<q", -1), S1), SYMBOLS, 88, "arcs", "number of arcs -1"),
    (fst(C_ZERO + struct.pack("<q", 2**40), S1), SYMBOLS, 88, "arcs", "number of arcs 1099511627776 is impossible"),
    (fst(state(C_ZERO, struct.pack("<iiffii", 1, 1, 0, 0, -1, 1)), S1), SYMBOLS, 112, "ids", "transition ids -1"),
    (fst(state(C_ZERO, struct.pack("<iiffii", 1, 1, 0, 0, 2**31 - 1, 1)), S1), SYMBOLS, 112, "ids", "impossible"),
    (fst(struct.pack("<ffi", 0, 0, 2**30), S1, S1), SYMBOLS, 84, "ids", "final transition ids 1073741824"),
    (fst(state(C_ZERO, carc(5, 1)), S1), SYMBOLS, 116, "nextstate", "arc to state 5, but there are 2 states"),
    (fst(state(C_ZERO, carc(-1, 1)), S1), SYMBOLS, 116, "nextstate", "arc to state -1"),
    (fst(state(C_ZERO, carc(1, 1, cweight(NAN, 0))), S1), SYMBOLS, 104, "weight", "arc weight nan,0.0 is not finite"),
    (fst(state(C_ZERO, carc(1, 1, C_ZERO)), S1), SYMBOLS, 104, "weight", "arc weight inf,inf is not finite"),
    (fst(state(C_ZERO, carc(1, 1)), state(cweight(INF, 1))), SYMBOLS, 120, "weight", "inf,1.0 is neither finite nor"),
    (fst(state(C_ZERO, carc(1, 1)), state(cweight(INF, INF, 3))), SYMBOLS, 120, "weight", "neither finite nor Zero"),
    (fst(state(C_ZERO, carc(1, 1, cweight(0, 0, -5))), S1), SYMBOLS, 116, "weight", "transition id -5 is negative"),
    (fst(state(C_ZERO, carc(1, 1, olabel=2)), S1), SYMBOLS, A0, "ilabel", "a CompactLattice is an acceptor"),
    (fst(state(C_ZERO, carc(1, -3)), S1), SYMBOLS, A0, "ilabel", "label -3 is negative"),
    (fst(state(C_ZERO, carc(1, 7)), S1), SYMBOLS, 100, "word", "word id 7 is not in the symbol table of 3 entries"),
    (fst(state(C_ZERO, carc(1, 1)), S1), ("<eps>", "", "WORLD"), 100, "word", "word id 1 is not in the symbol"),
    (fst(state(C_ZERO, carc(1, 1)), S1), None, 100, "word", "integer word ids need a symbol table (words.txt)"),
    (fst(state(L_ZERO, larc(1, 5, 9)), state(struct.pack("<ff", 0, 0)), head=header("lattice4", 0, 2)), SYMBOLS, 88,
     "olabel", "word id 9"),
    (fst(state(C_ZERO, carc(1, 1)), S1)[:-1], SYMBOLS, 120, "state", "the data ends inside a state"),
    (fst(state(C_ZERO, carc(1, 1, cweight(0, 0, 5, 5, 5)), carc(1, 1)))[:146], SYMBOLS, 132, "arc",
     "the data ends inside an arc"),
    (b"u " + H[:50], SYMBOLS, 36, "header", "the data ends inside the FST header"),
    (b"u \n0\t1\t1\n1\n", SYMBOLS, 2, "key", "text form"),
    (b"u", SYMBOLS, 1, "key", "the archive ends after the key"),
    (b"u\x00B" + H, SYMBOLS, 1, "key", "expected a space after the key"),
    (fst(state(C_ZERO, carc(1, 1)), S1) * 2, SYMBOLS, 140, "key", "key 'u' was already used at byte 0"),
    (fst(state(C_ZERO, carc(1, 1)), S1) + b"\n\x00", SYMBOLS, 141, "key", "got a NUL byte"),
    (fst(head=header("lattice4", 0, 2, flags=1) + struct.pack("<i", 7)), SYMBOLS, 68, "table", "magic number 7"),
    (fst(head=header("lattice4", 0, 2, flags=2) + struct.pack("<i", 2125658996) + string("") + struct.pack(
        "<qq", 0, 2**40)), SYMBOLS, 84, "size", "symbol table size 1099511627776 is impossible"),
    (fst(state(C_ZERO, carc(1, 1)), state(C_ZERO, carc(0, 2))), SYMBOLS, 2, "finals", "has no final state"),
]


@pytest.mark.parametrize("data,symbols,offset,field,words", ERRORS)
def test_malformed_archives_name_source_key_and_byte(data, symbols, offset, field, words):
    with pytest.raises(LatticeFormatError) as info:
        read_kaldi_binary(data, symbols, source="bad.ark")
    error = info.value
    assert (error.source, error.field, error.key) == ("bad.ark", field, None if "NUL" in words else "u")
    assert words in str(error) and f"at byte {offset})" in str(error)
    assert str(error).startswith("bad.ark: lattice 'u'" if error.key else "bad.ark: field key")


def test_structure_errors_name_the_fst():
    cycle = fst(state(C_ZERO, carc(1, 1)), state(cweight(0, 0), carc(0, 2)))
    with pytest.raises(LatticeFormatError, match=r"cycle.*\(in the FST at byte 2\)") as info:
        read_kaldi_binary(cycle, SYMBOLS, source="c.ark")
    assert (info.value.source, info.value.key) == ("c.ark", "u")
    isolated = fst(state(C_ZERO, carc(1, 1)), S1, C_ZERO + struct.pack("<q", 0), head=header("compactlattice44", 0, 3))
    with pytest.raises(LatticeFormatError, match="state 2 is unreachable"):
        read_kaldi_binary(isolated, SYMBOLS)
    with pytest.raises(LatticeFormatError, match=r"not UTF-8 \(at byte 0\)"):
        read_kaldi_binary(b"\xff " + H)


# --------------------------------------------------------------------------- fuzzing
def check_read(data: bytes, symbols: tuple[str, ...] | None) -> None:
    """Reading gives valid lattices or a LatticeFormatError; what it gives is written back and read back the same."""
    try:
        lattices = read_kaldi_binary(data, symbols)
    except LatticeFormatError:
        return
    for lattice in lattices:
        lattice.validate()
    table = lattices[0].symbols if lattices else symbols
    try:
        written = write_kaldi_binary(lattices)
    except LatticeFormatError as err:  # a float64 lattice ("lattice8") may hold costs beyond float32
        assert "float32" in str(err) and b"8" in data
        return
    again = read_kaldi_binary(written, table)
    assert len(again) == len(lattices)
    if b"lattice8" not in data and b"lattice84" not in data:  # float32 costs come back exactly
        for ours, theirs in zip(again, lattices):
            assert_same_lattice(ours, theirs)
    assert write_kaldi_binary(again) == written


def check_sniffed(data: bytes, symbols: tuple[str, ...] | None) -> None:
    """Through read_lattices: lattices or a LatticeFormatError, and no lattices only for blank input."""
    try:
        lattices = read_lattices(data, "kaldi", symbols)
    except LatticeFormatError:
        return
    assert lattices or not data.strip(b" \t\r\n\v\f")


def test_every_truncation_fails_cleanly_or_is_a_shorter_archive():
    full = read_kaldi_binary(ARCHIVE, SYMBOLS)
    boundary = len(COMPACT_BIN)
    for size in range(len(ARCHIVE)):
        cut = ARCHIVE[:size]
        try:
            lattices = read_kaldi_binary(cut, SYMBOLS)
        except LatticeFormatError as err:
            assert "(at byte " in str(err) and size > 0
        else:  # only where an entry ends
            assert size in (0, COMPACT_BIN.index(b"utt2 "), boundary)
            assert [lat.key for lat in lattices] == [lat.key for lat in full][:len(lattices)]
        check_sniffed(cut, SYMBOLS)
    assert len(read_lattices(ARCHIVE, "kaldi", SYMBOLS)) == 3


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=6), st.booleans())
def test_fuzz_byte_flips_of_a_valid_archive(flips, with_symbols):
    data = bytearray(ARCHIVE)
    for position, value in flips:
        data[position % len(data)] = value
    check_read(bytes(data), SYMBOLS if with_symbols else None)
    check_sniffed(bytes(data), SYMBOLS if with_symbols else None)


@FUZZ
@given(st.integers(0, len(ARCHIVE)), st.integers(0, 40), st.binary(max_size=24), st.booleans())
def test_fuzz_spliced_bytes(position, removed, inserted, with_symbols):
    data = ARCHIVE[:position] + inserted + ARCHIVE[position + removed:]
    check_read(data, SYMBOLS if with_symbols else None)
    check_sniffed(data, SYMBOLS if with_symbols else None)


@FUZZ
@given(st.binary(max_size=200), st.sampled_from([b"", b"k ", b"k " + H[:4], b"k " + H]))
def test_fuzz_arbitrary_bytes(data, prefix):
    check_read(prefix + data, SYMBOLS)
    check_sniffed(prefix + data, SYMBOLS)


@FUZZ
@given(st.lists(st.sampled_from([COMPACT_BIN, TRANSDUCER_BIN]), min_size=1, max_size=5))
def test_fuzz_concatenated_archives_read_as_their_parts(parts):
    """A binary archive is its lattices one after another: any concatenation of valid archives
    reads, to the lattices of its parts in order (a reader that refused everything would fail)."""
    def keyed(i: int, part: bytes) -> bytes:  # keys are unique within an archive
        if part is TRANSDUCER_BIN:
            return f"p{i}t ".encode() + part[2:]
        return part.replace(b"utt1 ", f"p{i}u1 ".encode(), 1).replace(b"utt2 ", f"p{i}u2 ".encode(), 1)

    parts = [keyed(i, part) for i, part in enumerate(parts)]
    expected = [lattice for part in parts for lattice in read_kaldi_binary(part, SYMBOLS)]
    got = read_kaldi_binary(b"".join(parts), SYMBOLS)
    assert [lattice.key for lattice in got] == [lattice.key for lattice in expected]
    for ours, theirs in zip(got, expected):
        assert_same_lattice(ours, theirs)
