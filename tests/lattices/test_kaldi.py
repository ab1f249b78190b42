"""Kaldi text archives: real files, both lattice types, round trips, located errors, fuzzing."""

from __future__ import annotations

import functools
import math
import random
import re
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lattices.formats.kaldi import read_kaldi, write_kaldi
from lattices.lattice import Lattice, LatticeFormatError
from lm.vocab import parse_symbol_table
from tests.factories import require_shared, MUTATIONS, SHARED_DATA, VALID_MUTATIONS, mutate_lines, neutral_mutation

DATA = SHARED_DATA / "lattices"
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TENSORS = ("src", "dst", "words", "acoustic", "graph", "finals", "final_acoustic", "final_graph")


def assert_same_lattice(a: Lattice, b: Lattice) -> None:
    """Exactly equal: tensors (values and dtypes), symbols, meta and extras."""
    assert (a.key, a.num_states, a.start) == (b.key, b.num_states, b.start)
    for name in TENSORS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and torch.equal(x, y), name
    assert a.symbols == b.symbols
    assert a.meta == b.meta
    for ours, theirs in ((a.arc_extra, b.arc_extra), (a.final_extra, b.final_extra), (a.state_extra, b.state_extra)):
        assert ours.keys() == theirs.keys()
        for name, values in ours.items():
            if isinstance(values, torch.Tensor):
                assert torch.equal(values, theirs[name]), name
            else:
                assert tuple(values) == tuple(theirs[name]), name


def canonical(lattice: Lattice) -> tuple:
    """Everything a lattice says, independent of arc order and word numbering."""
    extras = [list(v.tolist() if isinstance(v, torch.Tensor) else v) for _, v in sorted(lattice.arc_extra.items())]
    arcs = sorted(zip(lattice.src.tolist(), lattice.dst.tolist(), [lattice.word(i) for i in range(lattice.num_arcs)],
                      lattice.graph.tolist(), lattice.acoustic.tolist(), *extras))
    final_extras = [list(v) for _, v in sorted(lattice.final_extra.items())]
    finals = sorted(zip(lattice.finals.tolist(), lattice.final_graph.tolist(), lattice.final_acoustic.tolist(),
                        *final_extras))
    return lattice.key, lattice.num_states, lattice.start, arcs, finals, lattice.meta


def data(*parts: str) -> Path:
    path = DATA.joinpath(*parts)
    require_shared(path)
    return path


# --------------------------------------------------------------------------- real archives
@functools.lru_cache(maxsize=None)
def real_text(name: str) -> str:
    return data(*name.split("/")).read_text()


@functools.lru_cache(maxsize=None)
def real_table(name: str | None) -> tuple[str, ...] | None:
    """A symbol table file, or "aligned": the id table of 1.lat.int, recovered by pairing its word
    fields with those of 1.lat (the shipped words.txt is a different table, see below)."""
    if name != "aligned":
        return tuple(parse_symbol_table(real_text(name))) if name else None
    words, ids = real_text("ami-kaldi/1.lat").split("\n"), real_text("ami-kaldi/1.lat.int").split("\n")
    pairs = {int(i.split()[2]): w.split()[2] for w, i in zip(words, ids) if len(i.split()) >= 3}
    table = [""] * (max(pairs) + 1)
    for word_id, word in pairs.items():
        table[word_id] = word
    return tuple(table)


@functools.lru_cache(maxsize=None)
def real_archive(name: str, table: str | None = None) -> tuple[Lattice, ...]:
    """Read once per session (reading validates, which is slow on a busy CPU); lattices are immutable."""
    return tuple(read_kaldi(real_text(name), real_table(table), source=name))


def test_ami_archive_has_ten_lattices_keyed_by_their_key_lines():
    lines = real_text("ami-kaldi/1.lat").split("\n")
    key_lines = [line.strip() for i, line in enumerate(lines) if line.strip() and (i == 0 or not lines[i - 1].strip())]
    lattices = real_archive("ami-kaldi/1.lat")
    assert len(lattices) == 10
    assert sum(lat.num_arcs for lat in lattices) == 4782
    assert [lat.key for lat in lattices] == key_lines
    first = lattices[0]
    # first line: "0 145 <eps> 6.42543,-25.1374,2_1_1_1_1_1_1_1"; last: final state "147" (weight One)
    assert (first.start, first.num_states, first.word(0)) == (0, 148, "<eps>")
    assert (int(first.src[0]), int(first.dst[0])) == (0, 145)
    assert float(first.graph[0]) == -6.42543 and float(first.acoustic[0]) == 25.1374
    assert first.arc_extra["kaldi_tids"][0] == "2_1_1_1_1_1_1_1"
    assert first.finals.tolist() == [147] and first.final_graph.tolist() == [0.0]
    assert first.final_extra["kaldi_tids"] == ("",)
    assert all(lat.meta == {"kaldi_type": "CompactLattice", "kaldi_word_ids": False} for lat in lattices)
    assert all(lat.symbols is lattices[0].symbols for lat in lattices)
    assert bool((torch.cat([lat.acoustic for lat in lattices]) < 0).any())  # acoustic costs can be negative


def test_ami_integer_archive_equals_the_word_archive():
    by_word, by_id = real_archive("ami-kaldi/1.lat"), real_archive("ami-kaldi/1.lat.int", "aligned")
    assert len(by_id) == 10 and all(lat.meta["kaldi_word_ids"] for lat in by_id)
    for a, b in zip(by_word, by_id):
        assert canonical(a)[:5] == canonical(b)[:5]
        for name in TENSORS:
            if name != "words":
                assert torch.equal(getattr(a, name), getattr(b, name)), name
        assert [a.word(i) for i in range(a.num_arcs)] == [b.word(i) for i in range(b.num_arcs)]
        assert a.arc_extra == b.arc_extra and a.final_extra == b.final_extra
        assert b.symbols is by_id[0].symbols and b.symbols == real_table("aligned")


def test_ami_words_txt_is_not_the_table_of_the_integer_archive():
    # The shipped words.txt has 46,949 entries; 1.lat.int uses a larger table (YOU = 198712 on line 70).
    table = real_table("ami-kaldi/words.txt")
    with pytest.raises(LatticeFormatError) as info:
        read_kaldi(real_text("ami-kaldi/1.lat.int"), table, source="1.lat.int")
    assert (info.value.line, info.value.field) == (70, "word")
    assert "1.lat.int:70" in str(info.value) and "198712" in str(info.value)


def test_ami_words_keep_their_words_txt_ids():
    table = real_table("ami-kaldi/words.txt")
    symbols = real_archive("ami-kaldi/1.lat", "ami-kaldi/words.txt")[0].symbols
    assert symbols[:len(table)] == table and len(symbols) > len(table)  # partial words like LIC are appended
    assert symbols.index("YOU") == table.index("YOU") == 46775
    assert "LIC" not in table and symbols.index("LIC") >= len(table)


def test_kaldi_printed_archive_is_written_back_byte_for_byte():
    assert write_kaldi(real_archive("ami-kaldi/1.lat.int", "aligned")) == real_text("ami-kaldi/1.lat.int")
    # 1.lat went through int2sym.pl, which left a space at the end of every line
    expected = "\n".join(line.rstrip(" ") for line in real_text("ami-kaldi/1.lat").split("\n"))
    assert write_kaldi(real_archive("ami-kaldi/1.lat")) == expected


def test_theanolm_lattice():
    table = real_table("theanolm/words.txt")
    (lattice,) = real_archive("theanolm/lattice.lat", "theanolm/words.txt")
    arc_lines = [line for line in real_text("theanolm/lattice.lat").splitlines() if len(line.split()) >= 3]
    assert lattice.key == "utterance 123" and lattice.num_arcs == len(arc_lines)  # TheanoLM reads the whole line
    assert lattice.meta == {"kaldi_type": "CompactLattice", "kaldi_word_ids": True}
    assert lattice.symbols == table
    # first arc "0 1 0 0.0,1432.27," (graph cost 0.0 must read as +0.0); finals "21 13.83,4651.0,", "22 ..."
    assert math.copysign(1.0, float(lattice.graph[0])) == 1.0 and float(lattice.acoustic[0]) == -1432.27
    assert lattice.finals.tolist() == [21, 22]
    assert lattice.final_graph.tolist() == [-13.83, -13.83] and lattice.final_acoustic.tolist() == [-4651.0, -4651.0]
    # arcs keep file order: four <eps> arcs leave state 0, then "1 5 13 87.29,2434.05," (13 is "to")
    assert [lattice.word(i) for i in range(5)] == ["<eps>"] * 4 + ["to"]


@pytest.mark.parametrize("name,table", [("ami-kaldi/1.lat", None), ("ami-kaldi/1.lat.int", "aligned"),
                                        ("theanolm/lattice.lat", "theanolm/words.txt")])
@pytest.mark.parametrize("use_ids", [None, True, False])
def test_real_archives_round_trip_exactly(name, table, use_ids):
    first = real_archive(name, table)
    written = write_kaldi(first, use_ids=use_ids)
    again = read_kaldi(written, first[0].symbols)
    assert len(again) == len(first)
    for a, b in zip(first, again):
        if use_ids is not None:
            assert b.meta["kaldi_word_ids"] is use_ids
            b = b.replace(meta={**b.meta, "kaldi_word_ids": a.meta["kaldi_word_ids"]})
        assert_same_lattice(a, b)


# --------------------------------------------------------------------------- small archives
COMPACT = """\
utt1
0 1 HELLO 1.5,-20.25,2_1_1
0 2 <eps> 0.5,-3,2
1 3 WORLD
2 3 WORLD 0,0,
3 0.25,0,7

utt2
0
"""
# utt1: best path (lowest total cost) is 0 -> 2 -> 3 (<eps> WORLD): cost 0.5 - 3 + 0 + 0.25 = -2.25
# against 0 -> 1 -> 3 (HELLO WORLD): 1.5 - 20.25 + 0.25 = -18.5, so HELLO WORLD is better.


def test_compact_lattice_with_omitted_weights_epsilons_and_final_weights():
    utt1, utt2 = read_kaldi(COMPACT)
    assert utt1.symbols == ("<eps>", "HELLO", "WORLD") and utt2.symbols is utt1.symbols
    assert utt1.words.tolist() == [1, 0, 2, 2]
    assert utt1.graph.tolist() == [-1.5, -0.5, 0.0, 0.0] and utt1.acoustic.tolist() == [20.25, 3.0, 0.0, 0.0]
    assert utt1.arc_extra["kaldi_tids"] == ("2_1_1", "2", "", "")
    assert utt1.finals.tolist() == [3] and utt1.final_graph.tolist() == [-0.25]
    assert utt1.final_extra["kaldi_tids"] == ("7",)
    zeros = [x for x in utt1.graph.tolist() + utt1.acoustic.tolist() if x == 0]
    assert len(zeros) == 4 and all(math.copysign(1.0, x) == 1.0 for x in zeros)  # +0.0, never -0.0
    assert (utt2.num_states, utt2.start, utt2.num_arcs, utt2.finals.tolist()) == (1, 0, 0, [0])
    assert utt2.meta["kaldi_type"] == "CompactLattice"
    # the best path HELLO WORLD: scores along 0 -> 1 -> 3
    assert float(utt1.graph[0] + utt1.acoustic[0] + utt1.graph[2] + utt1.final_graph[0]) == 18.5


def test_compact_lattice_is_written_as_kaldi_prints_it():
    written = write_kaldi(read_kaldi(COMPACT))
    assert written == COMPACT.replace("2 3 WORLD 0,0,", "2 3 WORLD") + "\n"  # One weights are left out


TRANSDUCER = """\
utt 
0 1 4 HELLO 1.5,-20.25
1 2 7 <eps>
1 3 9 WORLD 2,1e-3
2 3 0 WORLD 0,0
3 0.5,0.25
"""


def test_transducer_lattice():
    (lattice,) = read_kaldi(TRANSDUCER)
    assert lattice.key == "utt" and lattice.meta["kaldi_type"] == "Lattice"
    assert lattice.arc_extra["kaldi_ilabel"].tolist() == [4, 7, 9, 0]
    assert lattice.arc_extra["kaldi_ilabel"].dtype == torch.int64
    assert [lattice.word(i) for i in range(4)] == ["HELLO", "<eps>", "WORLD", "WORLD"]
    assert lattice.acoustic.tolist() == [20.25, 0.0, -1e-3, 0.0]
    assert lattice.final_graph.tolist() == [-0.5] and lattice.final_acoustic.tolist() == [-0.25]
    assert lattice.final_extra == {}
    written = write_kaldi([lattice])
    assert written.splitlines()[2:4] == ["1 2 7 <eps>", "1 3 9 WORLD 2,0.001"]
    assert_same_lattice(read_kaldi(written)[0], lattice)


@pytest.mark.parametrize("text,kind", [("u\n0 1.5,2\n", "Lattice"), ("u\n0 1.5,2,\n", "CompactLattice"),
                                       ("u\n0\n", "CompactLattice"), ("u\n0 1 2 3\n1\n", "Lattice"),
                                       ("u\n0 1 2\n1\n", "CompactLattice")])
def test_type_of_a_lattice_is_told_by_its_lines(text, kind):
    (lattice,) = read_kaldi(text, ["<eps>", "a", "b", "c"])
    assert lattice.meta["kaldi_type"] == kind
    assert read_kaldi(write_kaldi([lattice]), lattice.symbols)[0].meta["kaldi_type"] == kind


def test_one_archive_may_hold_both_types():
    compact, transducer = read_kaldi("a\n0 1 X 1,2,3\n1\n\nb\n0 1 5 X 1,2\n1\n")
    assert (compact.meta["kaldi_type"], transducer.meta["kaldi_type"]) == ("CompactLattice", "Lattice")
    assert compact.symbols is transducer.symbols and compact.words.tolist() == transducer.words.tolist() == [1]


def test_integer_words_need_a_table_and_are_written_back_as_ids_or_words():
    text = "u\n0 1 1 1,2,\n1 2 2\n2\n"
    (lattice,) = read_kaldi(text, ["<eps>", "HELLO", "WORLD"])
    assert lattice.meta["kaldi_word_ids"] is True and lattice.words.tolist() == [1, 2]
    assert write_kaldi([lattice]) == text + "\n"
    assert write_kaldi([lattice], use_ids=False) == "u\n0 1 HELLO 1,2,\n1 2 WORLD\n2\n\n"
    (words,) = read_kaldi("u\n0 1 HELLO 1,2,\n1 2 WORLD\n2\n")
    assert write_kaldi([words], use_ids=True) == text + "\n"


def test_word_symbols_extend_the_given_table_and_are_shared():
    table = ["<eps>", "A", "B"]
    first, second = read_kaldi("x\n0 1 B\n1 2 NEW\n2\n\ny\n0 1 NEW2\n1 2 A\n2\n", table)
    assert first.symbols == ("<eps>", "A", "B", "NEW", "NEW2") and second.symbols is first.symbols
    assert first.words.tolist() == [2, 3] and second.words.tolist() == [4, 1]


def test_start_is_the_first_line_and_states_may_come_in_any_order():
    # start is 2 (first line); 2 -> 0 -> 1
    (lattice,) = read_kaldi("u\n2 0 A 1,0,\n0 1 B\n1\n")
    assert (lattice.start, lattice.num_states) == (2, 3)
    assert write_kaldi([lattice]).splitlines()[1] == "2 0 A 1,0,"
    assert_same_lattice(read_kaldi(write_kaldi([lattice]))[0], lattice)


def test_blank_lines_crlf_and_tabs():
    lattices = read_kaldi("\n\nu1 \r\n0\t1 A 1,2,\r\n1\r\n \t\n\n\nu2\n0\n")
    assert [lat.key for lat in lattices] == ["u1", "u2"] and lattices[0].graph.tolist() == [-1.0]
    assert read_kaldi("") == [] and read_kaldi("\n \n") == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(allow_nan=False, allow_infinity=False, width=64),
                          st.floats(allow_nan=False, allow_infinity=False)), min_size=1, max_size=4))
def test_floats_round_trip_exactly_and_never_as_minus_zero(weights):
    arcs = [(i, i + 1, 1, a, g) for i, (g, a) in enumerate(weights)]
    lattice = Lattice.from_arcs("u", arcs, {len(arcs): (-0.0, weights[0][0])}, ("<eps>", "w"),
                                meta={"kaldi_type": "CompactLattice"})
    written = write_kaldi([lattice])
    assert re.search(r"(^|[ ,])-0(?=[ ,\n]|$)", written, re.M) is None
    (again,) = read_kaldi(written)
    for name in ("graph", "acoustic", "final_graph"):
        assert getattr(again, name).tolist() == [x + 0.0 for x in getattr(lattice, name).tolist()]


def test_writer_rejects_words_and_keys_that_are_not_one_field():
    lattice = Lattice.from_arcs("u", [(0, 1, 1, 0.0, 0.0)], {1: (0.0, 0.0)}, ("<eps>", "TWO WORDS"))
    with pytest.raises(LatticeFormatError, match="TWO WORDS"):
        write_kaldi([lattice])
    assert write_kaldi([lattice], use_ids=True) == "u\n0 1 1\n1\n\n"
    for key in ("", " a", "1 b", "a\nb"):
        with pytest.raises(LatticeFormatError, match="key"):
            write_kaldi([lattice.replace(key=key)], use_ids=True)


def test_key_lines_with_spaces_are_read_whole_unless_they_start_with_a_state():
    (lattice,) = read_kaldi("my utt 1  \n0\n")
    assert lattice.key == "my utt 1"
    assert write_kaldi([lattice]) == "my utt 1\n0\n\n"
    with pytest.raises(LatticeFormatError, match="key line missing"):
        read_kaldi("0 1.5,2,\n")


# Each archive with everything it holds, written out by hand (as :func:`facts` shows a lattice: arcs
# in file order as (src, dst, word, graph, acoustic) with scores the negated costs; finals by state).
SMALL_ARCHIVES = [
    pytest.param(
        # leading blank lines, CRLF, a key line with trailing blanks, a separator of blanks, two empty
        # lines, a key with a space (its first field is no integer), a lattice of a final state alone,
        # a lattice whose start (its first line's state) is not 0
        "\n \nutt-1 \t\r\n0 1 HELLO 1.5,-2,3_4\r\n1 2 <eps> 0,0.5,\r\n2 0.25,0,\r\n \t\r\n\r\n"
        "utterance 7\r\n0\r\n\r\nb\n1 0 WORLD\n0\n", None,
        [{"key": "utt-1", "num_states": 3, "start": 0,
          "arcs": [(0, 1, "HELLO", -1.5, 2.0), (1, 2, "<eps>", 0.0, -0.5)], "finals": [(2, -0.25, 0.0)],
          "arc_extra": {"kaldi_tids": ("tuple", ("3_4", ""))}, "final_extra": {"kaldi_tids": ("tuple", ("",))}},
         {"key": "utterance 7", "num_states": 1, "start": 0, "arcs": [], "finals": [(0, 0.0, 0.0)],
          "arc_extra": {"kaldi_tids": ("tuple", ())}, "final_extra": {"kaldi_tids": ("tuple", ("",))}},
         {"key": "b", "num_states": 2, "start": 1, "arcs": [(1, 0, "WORLD", 0.0, 0.0)], "finals": [(0, 0.0, 0.0)],
          "arc_extra": {"kaldi_tids": ("tuple", ("",))}, "final_extra": {"kaldi_tids": ("tuple", ("",))}}],
        ("<eps>", "HELLO", "WORLD"), {"kaldi_type": "CompactLattice", "kaldi_word_ids": False}, id="compact"),
    pytest.param(
        # a Lattice (input labels, graph,acoustic weights) with word ids, weights left out, start 2
        "lat\n2 0 5 1 1,2\n0 1 0 0\n2 1 3 2\n1 0.5,-1\n", ["<eps>", "A", "B"],
        [{"key": "lat", "num_states": 3, "start": 2,
          "arcs": [(2, 0, "A", -1.0, -2.0), (0, 1, "<eps>", 0.0, 0.0), (2, 1, "B", 0.0, 0.0)],
          "finals": [(1, -0.5, 1.0)], "arc_extra": {"kaldi_ilabel": ("torch.int64", [5, 0, 3])}, "final_extra": {}}],
        ("<eps>", "A", "B"), {"kaldi_type": "Lattice", "kaldi_word_ids": True}, id="transducer-ids"),
]


@pytest.mark.parametrize("text,symbols,expected,table,meta", SMALL_ARCHIVES)
def test_small_archives_read_as_written(text, symbols, expected, table, meta):
    got = [facts(lattice) for lattice in read_kaldi(text, symbols, source="small.ark")]
    assert got == [{**lattice, "symbols": table, "meta": meta, "negative_zeros": 0, "dtypes": FACT_DTYPES}
                   for lattice in expected]


# --------------------------------------------------------------------------- errors
ERRORS = [
    # (text, symbols, line, field, words in the message)
    ("u\n0 1 A 1.5x,2,\n1\n", None, 2, "weight", "not a number"),
    ("u\n0 1 A inf,2,\n1\n", None, 2, "weight", "not a number"),
    ("u\n0 1 A 1e999,2,\n1\n", None, 2, "weight", "finite"),
    ("u\n0 1 A 1,2\n1\n", None, 2, "weight", "graph,acoustic,tids"),
    ("u\n0 1 A 1,2,3_x\n1\n", None, 2, "weight", "transition ids"),
    ("u\n0 1 5 A 1,2,3\n1\n", None, 2, "weight", "graph,acoustic"),
    ("u\n0 1 A 1,2, extra more\n1\n", None, 2, "fields", "too many"),
    ("u\n0 1 A B 1,2 extra\n1\n", None, 2, "fields", "too many"),
    ("u\n0 1 5 A\n1 2 B\n2\n", None, 3, "fields", "cannot mix"),
    ("u\n0 1 x A 1,2\n1\n", None, 2, "ilabel", "not an integer"),
    ("u\n0 1 7\n1\n", ["<eps>", "A"], 2, "word", "word id 7"),
    ("u\n0 1 1\n1 2 2\n2\n", None, 2, "word", "symbol table (words.txt)"),
    ("u\n0 1 5 3 1,2\n1\n", None, 2, "olabel", "symbol table"),
    ("u\n0 1 A\n1 2 B\n2 1 C\n2\n", None, 3, "dst", "cycle 1 -> 2 -> 1"),
    ("u\n0 1 A\n1 1 B\n1\n", None, 3, "dst", "cycle"),
    ("0 1 A\n1\n", None, 1, "key", "key line"),
    ("u\n0 -1 A\n1\n", None, 2, "dst", "negative"),
    ("u\n-3\n", None, 2, "state", "negative"),
    ("u\nx 1 A\n1\n", None, 2, "src", "not an integer"),
    ("u\n0 99999999999 A\n1\n", None, 2, "dst", "larger"),
    ("u\n0 2 A\n2\n", None, 2, "state", "no line names state 1"),
    ("u\n0 1000000000 A\n1000000000\n", None, 2, "state", "no line names state 1,"),
    ("u\n0 1 A\n1\n2 1 B\n", None, 4, "state", "state 2 is unreachable"),
    ("u\n0 1 A\n0 2 B\n1\n", None, 3, "state", "state 2 is dead"),
    ("u\n0 1 A\n", None, 1, "finals", "no final state"),
    ("u\n0 1 A\n1\n1 0.5,0,\n", None, 4, "state", "already made final on line 3"),
    ("u\n0\n\nu\n0\n", None, 4, "key", "already used on line 1"),
    ("u\n\nv\n0\n", None, 1, "lattice", "no arc or final-state lines"),
    ("u\n0 1 A\n1\nv\n0 1 B\n1\n", None, 4, "state", "must follow an empty line"),
    ("u\n0\n", ["HELLO"], None, "symbols", "<eps>"),
]


@pytest.mark.parametrize("text,symbols,line,field,words", ERRORS)
def test_malformed_archives_name_line_and_field(text, symbols, line, field, words):
    with pytest.raises(LatticeFormatError) as info:
        read_kaldi(text, symbols, source="bad.ark")
    error = info.value
    assert (error.line, error.field) == (line, field)
    message = str(error)
    assert words in message and f"field {field}" in message
    assert message.startswith(f"bad.ark:{line}:" if line is not None else "bad.ark")


def test_errors_name_the_lattice_key_and_line_without_a_source():
    with pytest.raises(LatticeFormatError) as info:
        read_kaldi("good\n0\n\nbad\n0 1 A 1,x,\n1\n")
    assert info.value.key == "bad" and str(info.value).startswith("line 5: lattice 'bad': field weight:")


# --------------------------------------------------------------------------- fuzzing
def check_round_trip(lattices: list[Lattice], symbols: list[str] | None) -> None:
    """What was read writes back stably."""
    table = lattices[0].symbols if lattices else symbols
    written = write_kaldi(lattices)
    again = read_kaldi(written, table)
    assert [canonical(a) for a in again] == [canonical(b) for b in lattices]
    assert write_kaldi(again) == written
    for a, b in zip(read_kaldi(written, again[0].symbols if again else table), again):
        assert_same_lattice(a, b)


# Pieces of a reading of the text formats from their definitions (the docstrings of
# lattices/formats/openfst.py and _text.py): what a valid text holds, or where the reader must
# report a malformed one; test_openfst.py's reference reads OpenFst text with them. Kaldi archives
# are checked against hand-written lattices and generated ones instead (a reference reader here had
# become a copy of the reader's splitting, so it could not disagree with it).
MAX_ID = 2**31 - 1
FIELD_SPLIT = re.compile(r"[ \t\r]+")
INTEGER = re.compile(r"[+-]?[0-9]+")
NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class Bad(Exception):
    """Malformed text: ``where`` holds each (line, field) an error may name: the fields of the
    first bad line, or every line that shows a structural problem (a state no path reaches...)."""

    def __init__(self, *where: tuple[int | None, str]) -> None:
        super().__init__(sorted(where, key=str))
        self.where = set(where)


def text_lines(text: str) -> list[tuple[int, str, list[str]]]:
    """(1-based number, line, fields) of every line (fields split at spaces, tabs and \\r)."""
    return [(n, line, [f for f in FIELD_SPLIT.split(line) if f]) for n, line in enumerate(text.split("\n"), 1)]


def ref_id(token: str, line: int, field: str) -> int:
    """A state id or label: an integer in 0 .. 2**31-1."""
    if not INTEGER.fullmatch(token) or not 0 <= int(token) <= MAX_ID:
        raise Bad((line, field))
    return int(token)


def ref_cost(token: str, line: int) -> float:
    if not NUMBER.fullmatch(token) or not math.isfinite(float(token)):
        raise Bad((line, "weight"))
    return float(token)


def ref_pair(token: str, line: int) -> tuple[float, float]:
    """A LatticeWeight 'graph,acoustic'."""
    parts = token.split(",")
    if len(parts) != 2:
        raise Bad((line, "weight"))
    return ref_cost(parts[0], line), ref_cost(parts[1], line)


@dataclass
class RefGraph:
    """One FST as its lines say: the start is the state on the first line, costs as written."""

    first_line: int
    word_field: str
    start: int | None = None
    arcs: list[tuple[int, int, int, str, float, float]] = dc_field(default_factory=list)  # line, src, dst, word, g, a
    finals: dict[int, tuple[int, float, float]] = dc_field(default_factory=dict)  # state -> line, g, a

    def arc(self, line: int, src: int, dst: int, word: str, g: float, a: float) -> None:
        self.start = src if self.start is None else self.start
        self.arcs.append((line, src, dst, word, g, a))

    def final(self, line: int, state: int, g: float, a: float) -> None:
        if state in self.finals:
            raise Bad((line, "state"))
        self.start = state if self.start is None else self.start
        self.finals[state] = (line, g, a)


def ref_words(graphs: list[RefGraph], symbols: list[str] | None) -> tuple[tuple[str, ...], list[list[int]], bool]:
    """(symbol table, word ids per graph, whether the labels were ids): all-integer labels are ids
    into ``symbols``; otherwise spellings, a word of ``symbols`` keeps its id, <eps> is 0, unseen
    words are appended in order of appearance."""
    tokens = [arc[3] for g in graphs for arc in g.arcs]
    if tokens and all(INTEGER.fullmatch(t) for t in tokens):
        if symbols is None:
            first = next(g for g in graphs if g.arcs)
            raise Bad((first.arcs[0][0], first.word_field))
        for g in graphs:
            bad = [(arc[0], g.word_field) for arc in g.arcs
                   if not (0 <= int(arc[3]) < len(symbols) and symbols[int(arc[3])])]
            if bad:
                raise Bad(*bad)
        return tuple(symbols), [[int(arc[3]) for arc in g.arcs] for g in graphs], True
    table = list(symbols or ["<eps>"])
    index: dict[str, int] = {}
    for i, word in enumerate(table):
        if word:
            index.setdefault(word, i)
    index["<eps>"] = 0
    ids = []
    for g in graphs:
        ids.append([])
        for arc in g.arcs:
            if arc[3] not in index:
                index[arc[3]] = len(table)
                table.append(arc[3])
            ids[-1].append(index[arc[3]])
    return tuple(table), ids, False


def ref_structure(g: RefGraph) -> int:
    """The number of states; raises for a gap in the numbering (the lines naming the highest state),
    no final state (the first line), a cycle (its arcs' lines), an unreachable or a dead state
    (the lines naming one), checked in that order."""
    named: dict[int, set[int]] = {}
    for line, src, dst, *_ in g.arcs:
        named.setdefault(src, set()).add(line)
        named.setdefault(dst, set()).add(line)
    for state, (line, _, _) in g.finals.items():
        named.setdefault(state, set()).add(line)
    num_states = max(named) + 1
    if len(named) != num_states:
        raise Bad(*((line, "state") for line in named[num_states - 1]))
    if not g.finals:
        raise Bad((g.first_line, "finals"))
    succ: dict[int, list[int]] = {}
    pred: dict[int, list[int]] = {}
    for _, src, dst, *_ in g.arcs:
        succ.setdefault(src, []).append(dst)
        pred.setdefault(dst, []).append(src)

    def reach(seeds, edges) -> set[int]:
        seen, stack = set(), list(seeds)
        while stack:
            state = stack.pop()
            if state not in seen:
                seen.add(state)
                stack.extend(edges.get(state, []))
        return seen

    cycle = [(line, "dst") for line, src, dst, *_ in g.arcs if src in reach([dst], succ)]
    if cycle:
        raise Bad(*cycle)
    for seeds, edges in (([g.start], succ), (list(g.finals), pred)):
        missed = set(range(num_states)) - reach(seeds, edges)
        if missed:
            raise Bad(*((line, "state") for state in missed for line in named[state]))
    return num_states


def ref_facts(g: RefGraph, key: str, table: tuple[str, ...], ids: list[int], meta: dict,
              arc_extra: dict, final_extra: dict) -> dict:
    """What the lattice read from ``g`` must hold (as :func:`facts` shows a Lattice): scores are
    negated costs, 0.0 - cost."""
    return {"key": key, "num_states": ref_structure(g), "start": g.start,
            "arcs": [(src, dst, table[w], 0.0 - gc, 0.0 - ac) for (_, src, dst, _, gc, ac), w in zip(g.arcs, ids)],
            "finals": [(s, 0.0 - gc, 0.0 - ac) for s, (_, gc, ac) in sorted(g.finals.items())],
            "symbols": table, "meta": meta, "arc_extra": arc_extra, "final_extra": final_extra, "negative_zeros": 0,
            "dtypes": FACT_DTYPES}


FACT_DTYPES = ("torch.int64",) * 3 + ("torch.float64",) * 2 + ("torch.int64",) + ("torch.float64",) * 2


def facts(lattice: Lattice) -> dict:
    """Everything a read lattice holds, arcs in file order, as plain values (tensors as their
    dtype and values, tuples as tuples)."""
    def extra(values):
        return (str(values.dtype), values.tolist()) if isinstance(values, torch.Tensor) else ("tuple", tuple(values))

    weights = [lattice.graph, lattice.acoustic, lattice.final_graph, lattice.final_acoustic]
    return {"key": lattice.key, "num_states": lattice.num_states, "start": lattice.start,
            "arcs": list(zip(lattice.src.tolist(), lattice.dst.tolist(),
                             [lattice.symbols[w] for w in lattice.words.tolist()],
                             lattice.graph.tolist(), lattice.acoustic.tolist())),
            "finals": list(zip(lattice.finals.tolist(), lattice.final_graph.tolist(), lattice.final_acoustic.tolist())),
            "symbols": lattice.symbols, "meta": lattice.meta,
            "arc_extra": {k: extra(v) for k, v in lattice.arc_extra.items()},
            "final_extra": {k: extra(v) for k, v in lattice.final_extra.items()},
            "negative_zeros": sum(math.copysign(1.0, x) < 0 for w in weights for x in w.tolist() if x == 0),
            "dtypes": tuple(str(getattr(lattice, name).dtype) for name in TENSORS)}


def check_against_reference(read, reference, text: str, symbols: list[str] | None) -> list[Lattice] | None:
    """The reader and the reference agree: the same lattices, or an error where the reference
    finds the problem (its line and field). Returns what was read (None for an error)."""
    try:
        expected, problem = reference(text, symbols), None
    except Bad as bad:
        expected, problem = None, bad.where
    try:
        got = read(text, symbols)
    except LatticeFormatError as err:
        assert problem is not None, f"the reference reads it, the reader says: {err}"
        assert (err.line, err.field) in problem, (str(err), problem)
        return None
    assert problem is None, f"the reader reads it, the reference finds a problem at {problem}"
    assert [facts(lattice) for lattice in got] == expected
    return got


def check_read(text: str, symbols: list[str] | None) -> None:
    """Whatever the text, the reader reads it or refuses it naming a field (and a line of the text
    where it names one); what it reads accounts for every non-blank line, in order (a key line per
    lattice, then one arc or final state per line) and writes back stably. What valid text must
    read as is checked against hand-written lattices (test_small_archives_read_as_written) and
    generated ones (test_fuzz_valid_archives_read_as_the_format_defines_them); where a broken one
    must be refused, by test_fuzz_a_broken_line_is_named and ERRORS."""
    lines = text.split("\n")
    try:
        lattices = read_kaldi(text, symbols, source="x.ark")
    except LatticeFormatError as err:
        assert err.source == "x.ark" and err.field, str(err)
        assert err.line is None or (1 <= err.line <= len(lines) and lines[err.line - 1].strip(" \t\r")), str(err)
        return
    filled = [line.strip(" \t\r") for line in lines if line.strip(" \t\r")]
    assert sum(1 + lattice.num_arcs + len(lattice.finals) for lattice in lattices) == len(filled)
    keys = iter(filled)
    assert all(lattice.key in keys for lattice in lattices)  # each a line of its own, in file order
    check_round_trip(lattices, symbols)


# ----------------------------------------------------------------------- generated valid archives
COST_STYLES = (repr, lambda v: f"{v:g}", lambda v: f"{v:.2f}", lambda v: f"{v:e}", lambda v: f"{v:+g}",
               lambda v: f"{v:g}".replace("0.", ".", 1) if abs(v) < 1 else repr(v))  # each reads back as exactly v


def cost_text(rng: random.Random) -> tuple[str, float]:
    """(text, value) of a random cost in hundredths, -0 among them."""
    if rng.random() < 0.05:
        return rng.choice(["-0", "-0.0", "0", "+0"]), -0.0
    value = rng.randint(-5000, 5000) / 100
    return rng.choice(COST_STYLES)(value), value


_ORDERS = {n: st.permutations(range(n)) for n in range(1, 7)}  # built once: building strategies is slow
_EXTRA_ARCS = {n: st.lists(st.tuples(st.integers(0, n - 2), st.integers(0, n - 2)), max_size=4) for n in range(2, 7)}
_MORE_FINALS = {n: st.lists(st.integers(0, n - 1), max_size=2) for n in range(1, 7)}


@st.composite
def acyclic_graphs(draw, max_states: int = 6) -> tuple[int, list[int], list[tuple[int, int]], list[int]]:
    """(number of states, the states in a topological order (the first is the start), arcs as
    (src, dst), final states) of a valid lattice: a chain through every state in that order and
    forward arcs (parallel ones too); the last state is final, others may be."""
    n = draw(st.integers(1, max_states))
    order = draw(_ORDERS[n])
    pairs = [(order[i], order[i + 1]) for i in range(n - 1)]
    if n > 1:
        pairs += [(order[min(i, j)], order[max(i, j) + 1]) for i, j in draw(_EXTRA_ARCS[n])]
    finals = sorted({order[-1], *(order[i] for i in draw(_MORE_FINALS[n]))})
    return n, order, pairs, finals


@dataclass
class Row:
    """One line of a generated text: ``kind`` key | arc | final | blank; ``lattice``: its index in the archive."""

    kind: str
    text: str
    lattice: int = 0


KALDI_KEYS = ["utt1", "utt-2", "0", "a b", "utterance 123", "ü", "7"]
KALDI_WORDS = ["<eps>", "A", "B", "HELLO", "é", "7", "x_y", "<s>"]


@st.composite
def kaldi_archives(draw) -> tuple[list[Row], list[str] | None, list[dict]]:
    """(rows of a valid Kaldi text archive, the symbol table to read it with, per lattice its
    layout: ``key``, ``transducer``, ``states``, ``order`` (topological, the start first), ``arcs``
    (src, dst, word, graph, acoustic, ilabel, tids) in file order, ``finals`` (state, graph,
    acoustic, tids) by state; scores are the negated costs written).

    One to three lattices, each a CompactLattice (``g,a,tids`` weights) or a Lattice (ilabels,
    ``g,a`` weights), weights left out at random (One); words all ids (with ``words.txt``) or
    spellings (with a table or not); the first line of each names its start state, the others in
    any order; keys with spaces, blank lines of spaces, CRLF."""
    count = draw(st.integers(1, 3))
    keys = draw(st.lists(st.sampled_from(KALDI_KEYS), min_size=count, max_size=count, unique=True))
    ids = draw(st.booleans())
    symbols = SYMBOLS if ids or draw(st.booleans()) else None
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    rows = [Row("blank", rng.choice(["", " "])) for _ in range(rng.choice([0, 0, 1, 2]))]
    layouts, spelled = [], False
    for k, key in enumerate(keys):
        n, order, pairs, finals = draw(acyclic_graphs())
        transducer = draw(st.booleans())
        sep = rng.choice([" ", "\t", "  "])
        lines = []  # (kind, fields, facts of the line)
        for src, dst in pairs:
            i = rng.randrange(len(SYMBOLS))
            word = rng.choice([str(i), f"+{i}", f"0{i}"]) if ids else \
                rng.choice(KALDI_WORDS if spelled else KALDI_WORDS[:5])
            spelled = spelled or not INTEGER.fullmatch(word)  # spellings: one word at least is not a number
            ilabel = rng.randint(0, 60)
            (gt, gc), (at, ac) = cost_text(rng), cost_text(rng)
            tids = rng.choice(["", "1", "2_1_1", "10_3"])
            weight = None if rng.random() < 0.3 else f"{gt},{at}" if transducer else f"{gt},{at},{tids}"
            ilabel_text = rng.choice([str(ilabel), f"+{ilabel}", f"0{ilabel}"])
            fields = [str(src), str(dst), *([ilabel_text] if transducer else []), word, *([weight] if weight else [])]
            lines.append(("arc", fields, (src, dst, word, 0.0 - gc if weight else 0.0, 0.0 - ac if weight else 0.0,
                                          ilabel, tids if weight else "")))
        for state in finals:
            (gt, gc), (at, ac) = cost_text(rng), cost_text(rng)
            tids = rng.choice(["", "4", "2_2"])
            weight = None if rng.random() < 0.3 and (pairs or not transducer) else \
                f"{gt},{at}" if transducer else f"{gt},{at},{tids}"
            lines.append(("final", [str(state), *([weight] if weight else [])],
                          (state, 0.0 - gc if weight else 0.0, 0.0 - ac if weight else 0.0, tids if weight else "")))
        first = next(i for i, (kind, fields, _) in enumerate(lines) if int(fields[0]) == order[0])
        lines = [lines[first]] + rng.sample(lines[:first] + lines[first + 1:], len(lines) - 1)
        rows.append(Row("key", rng.choice(["", " ", "\t"]) + key + rng.choice(["", " ", "\t "]), k))
        rows += [Row(kind, sep.join(fields) + rng.choice(["", "", " ", "\t"]), k) for kind, fields, _ in lines]
        if k + 1 < count or rng.random() < 0.5:
            rows += [Row("blank", rng.choice(["", " ", "\t"]), k) for _ in range(rng.choice([1, 1, 2]))]
        layouts.append({"transducer": transducer, "states": n, "order": order, "key": key,
                        "arcs": [f for kind, _, f in lines if kind == "arc"],
                        "finals": sorted(f for kind, _, f in lines if kind == "final")})
    return rows, symbols, layouts


def kaldi_expected(layouts: list[dict], symbols: list[str] | None) -> list[dict]:
    """What the generated archive holds, by the format's definition."""
    words = [arc[2] for layout in layouts for arc in layout["arcs"]]
    are_ids = bool(words) and all(INTEGER.fullmatch(w) for w in words)
    table = list(symbols or ["<eps>"])
    if not are_ids:
        table += [w for w in dict.fromkeys(words) if w not in table]
    out = []
    for layout in layouts:
        transducer = layout["transducer"]
        spelled = [table[int(w)] if are_ids else w for _, _, w, *_ in layout["arcs"]]
        out.append({
            "key": layout["key"], "num_states": layout["states"], "start": layout["order"][0],
            "arcs": [(s, d, w, g, a) for (s, d, _, g, a, _, _), w in zip(layout["arcs"], spelled)],
            "finals": [(s, g, a) for s, g, a, _ in layout["finals"]], "symbols": tuple(table),
            "meta": {"kaldi_type": "Lattice" if transducer else "CompactLattice", "kaldi_word_ids": are_ids},
            "arc_extra": {"kaldi_ilabel": ("torch.int64", [arc[5] for arc in layout["arcs"]])} if transducer else
            {"kaldi_tids": ("tuple", tuple(arc[6] for arc in layout["arcs"]))},
            "final_extra": {} if transducer else {"kaldi_tids": ("tuple", tuple(f[3] for f in layout["finals"]))},
            "negative_zeros": 0, "dtypes": FACT_DTYPES})
    return out


def render(rows: list[Row], newline: str = "\n") -> str:
    return newline.join(row.text for row in rows)


@FUZZ
@given(kaldi_archives(), st.sampled_from(["\n", "\r\n"]))
def test_fuzz_valid_archives_read_as_the_format_defines_them(archive, newline):
    rows, symbols, layouts = archive
    text = render(rows, newline)
    expected = kaldi_expected(layouts, symbols)
    assert [facts(lattice) for lattice in read_kaldi(text, symbols, source="x.ark")] == expected


def new_arc(transducer: bool, src: int, dst: int, ids: bool) -> str:
    """An arc line of the lattice's type, without a weight."""
    return f"{src} {dst} " + ("0 " if transducer else "") + ("1" if ids else "A")


def arcs_on_cycles(arcs: list[tuple[int, int, int]]) -> set[int]:
    """The lines of the arcs (line, src, dst) that lie on a cycle (src reachable from dst)."""
    succ: dict[int, list[int]] = {}
    for _, src, dst in arcs:
        succ.setdefault(src, []).append(dst)
    on = set()
    for line, src, dst in arcs:
        seen, stack = set(), [dst]
        while stack:
            state = stack.pop()
            if state not in seen:
                seen.add(state)
                stack.extend(succ.get(state, []))
        if src in seen:
            on.add(line)
    return on


def break_graph(draw, pick: int, rows: list[Row], lines: list[int], transducer: bool, num_states: int, order: list[int],
                ids: bool, weights: list[str], word_at: int, word_field: str, int_ilabels: bool = True
                ) -> tuple[set[int], str, str]:
    """Break one line of an FST's ``lines`` (row indices; the first names the start), or add one:
    a state, a weight (one of ``weights``), too many fields, an ilabel (transducers whose ilabels
    are all integers, ``int_ilabels``), a word id (when ``ids``; the word is field ``word_at`` of an
    arc line, named ``word_field``), a final state listed twice, an arc that makes a dead or an
    unreachable state, a gap in the numbering or a cycle: the ``pick``-th of those that apply,
    modulo their number. Changes ``rows``; returns (the line numbers an error may name, its
    field, the kind of break)."""
    arc_rows = [i for i in lines if len(rows[i].text.split()) >= 3]
    final_rows = [i for i in lines if len(rows[i].text.split()) <= 2]
    kinds = ["state", "weight", "fields", "twice", "dead", "gap", "unreachable", "cycle"]
    kinds += (["ilabel"] if transducer and int_ilabels and arc_rows else []) + (["word"] if ids and arc_rows else [])
    kind = kinds[pick % len(kinds)]
    row = draw(st.sampled_from(arc_rows if kind in ("ilabel", "word") else final_rows if kind == "twice" else lines))
    fields = rows[row].text.split()
    is_arc = len(fields) >= 3
    if kind in ("state", "ilabel", "word", "weight", "fields"):
        if kind == "state":
            at = draw(st.integers(0, 1)) if is_arc else 0
            field = ("src", "dst")[at] if is_arc else "state"
            fields[at] = draw(st.sampled_from(["x", "-1", "1.5", "99999999999", "1e3", "+-1"]))
        elif kind == "ilabel":
            fields[2], field = draw(st.sampled_from(["-1", "-40", "99999999999"])), "ilabel"
        elif kind == "word":
            fields[word_at] = draw(st.sampled_from([str(len(SYMBOLS) + 2), "-3", "999"]))
            field = word_field
        elif kind == "weight":
            at = (word_at + 1) if is_arc else 1
            fields[at:] = [draw(st.sampled_from(weights))]
            field = "weight"
        else:
            fields += ["9"] * draw(st.integers(6 - len(fields), 7))
            field = "fields"
        rows[row] = Row(rows[row].kind, " ".join(fields), rows[row].lattice)
        return {row + 1}, field, kind
    if kind == "twice":
        rows.insert(row + 1, Row("final", rows[row].text, rows[row].lattice))
        return {row + 2}, "state", kind
    m = num_states
    src, dst = draw(st.sampled_from(order)), draw(st.sampled_from(order))
    arc = {"dead": (src, m), "gap": (src, m + 1), "unreachable": (m, dst),
           "cycle": tuple(sorted((src, dst), key=order.index, reverse=True))}[kind]
    at = draw(st.integers(lines[0] + 1, lines[-1] + 1))
    rows.insert(at, Row("arc", new_arc(transducer, *arc, ids), rows[lines[0]].lattice))
    if kind != "cycle":
        return {at + 1}, "state", kind
    arcs = [(i + 1, int(f[0]), int(f[1])) for i, r in enumerate(rows) if r.lattice == rows[at].lattice
            and r.kind == "arc" and len(f := r.text.split()) >= 3]
    return arcs_on_cycles(arcs), "dst", kind


COMPACT_BAD_WEIGHTS = ["x,1,", "1,x,", "1e999,0,", "1,2,3_x", "1,2,3,4", "inf,0,", ",,", "1,2,_"]
LATTICE_BAD_WEIGHTS = ["x,1", "1,x", "1e999,0", "1", "0,nan", ","]


@st.composite
def broken_kaldi_archives(draw) -> tuple[str, list[str] | None, set[int], str, str | None, str]:
    """(a valid archive with one thing broken, its symbols, the lines the error may name, its
    field, the lattice key it names (None: not checked), the kind of break). Besides
    :func:`break_graph`'s breaks: a key line left out, a key used twice, a lattice split by a blank
    line."""
    pick = draw(st.integers(0, 2**10))  # drawn first: hypothesis shrinks the last draws towards 0 most
    rows, symbols, layouts = draw(kaldi_archives())
    k = draw(st.integers(0, len(layouts) - 1))
    layout = layouts[k]
    key_row = next(i for i, r in enumerate(rows) if r.lattice == k and r.kind == "key")
    lines = [i for i, r in enumerate(rows) if r.lattice == k and r.kind in ("arc", "final")]
    ids = bool(kaldi_expected(layouts, symbols)[0]["meta"]["kaldi_word_ids"])
    transducer = layout["transducer"]
    kind = (["no key", "key twice", "split"] + ["graph"] * 6)[pick // 16 % 9]
    if kind == "no key" and len(rows[lines[0]].text.split()) >= 2:
        del rows[key_row]
        return render(rows), symbols, {key_row + 1}, "key", None, kind
    if kind == "key twice" and k > 0:
        rows[key_row] = Row("key", layouts[draw(st.integers(0, k - 1))]["key"], k)
        return render(rows), symbols, {key_row + 1}, "key", rows[key_row].text, kind
    splits = [i for i in lines[1:] if len(rows[i].text.split()) >= 2]  # the line after the blank is no key
    if kind == "split" and splits:
        at = draw(st.sampled_from(splits))
        rows.insert(at, Row("blank", draw(st.sampled_from(["", " ", "\t"])), k))
        return render(rows), symbols, {at + 2}, "key", None, kind
    weights = LATTICE_BAD_WEIGHTS if transducer else COMPACT_BAD_WEIGHTS
    if layout["arcs"]:  # with arc lines telling the type, a weight of the other type is no type change
        weights = weights + (["1,2,3"] if transducer else ["1,2"])
    where, field, how = break_graph(draw, pick, rows, lines, transducer, layout["states"], layout["order"], ids,
                                    weights, 3 if transducer else 2, "olabel" if transducer else "word")
    return render(rows), symbols, where, field, layout["key"], how


@FUZZ
@given(broken_kaldi_archives())
def test_fuzz_a_broken_line_is_named(case):
    text, symbols, lines, field, key, kind = case
    with pytest.raises(LatticeFormatError) as info:
        read_kaldi(text, symbols, source="x.ark")
    error = info.value
    assert error.line in lines and (error.field, error.source) == (field, "x.ark"), (kind, lines, field, str(error))
    assert key is None or error.key == key, (kind, key, str(error))


TOKENS = ["0", "1", "2", "3", "-1", "A", "B", "<eps>", "7", "1.5", "1,2", "1,2,", "0.5,-1,3_4", "x,y,", "1,2,a",
          "inf,0,", "1e999", "nan", "utt", "1,,", ",", "_", "+2", "0x1"]
SYMBOLS = ["<eps>", "A", "B", "C", "D"]
STATES = st.sampled_from(["0", "1", "2", "3", "0", "1", "2", "4", "-1", "x"])
WEIGHTS = st.sampled_from(["", "", "1,2,", "0.5,-1,3_4", "1,2", "-3,4.5", "1,2,3,", "x,1,", "1e999,0,", "+1,-.5,"])
WORDS = st.sampled_from(["A", "B", "<eps>", "1", "2", "0", "9"])
arc_line = st.tuples(STATES, STATES, st.one_of(WORDS, st.tuples(st.sampled_from(["3", "0", "-2"]), WORDS).map(
    " ".join)), WEIGHTS).map(" ".join)
final_line = st.tuples(STATES, WEIGHTS).map(" ".join)
line_strategy = st.one_of(st.lists(st.sampled_from(TOKENS), max_size=6).map(" ".join), arc_line, arc_line, final_line,
                          st.just(""), st.just("utt"))
block_strategy = st.tuples(st.sampled_from(["utt", "u2", "u3", "0", "a b"]),
                           st.lists(st.one_of(arc_line, arc_line, final_line), max_size=6)).map(
    lambda block: "\n".join([block[0], *block[1]]))


@FUZZ
@given(st.lists(line_strategy, max_size=12), st.booleans(), st.booleans())
def test_fuzz_random_token_lines(lines, with_key, with_symbols):
    check_read(("utt\n" if with_key else "") + "\n".join(lines), SYMBOLS if with_symbols else None)


@FUZZ
@given(st.lists(block_strategy, max_size=3), st.sampled_from(["\n\n", "\n \n", "\n\n\n", "\n"]), st.booleans())
def test_fuzz_random_lattice_blocks(blocks, separator, with_symbols):
    check_read(separator.join(blocks), SYMBOLS if with_symbols else None)


@FUZZ
@given(st.one_of(st.text(max_size=200), st.text(alphabet="u \t\r\n0123,._-+eAB<eps>x", max_size=200)), st.booleans())
def test_fuzz_arbitrary_text(text, with_symbols):
    check_read(text, SYMBOLS if with_symbols else None)


VALID = COMPACT + "\n" + TRANSDUCER.replace("utt", "utt3") + "\nutt4\n0 1 A 1,2,\n1 2 B 3,-4,5\n2\n"


@FUZZ
@given(st.one_of(st.just((VALID, None)), kaldi_archives().map(lambda archive: (render(archive[0]), archive[1]))),
       st.lists(st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 10**6), st.sampled_from(TOKENS)),
                min_size=1, max_size=4), st.booleans())
def test_fuzz_mutations_of_a_valid_archive(archive, mutations, with_symbols):
    text, symbols = archive
    check_read(mutate_lines(text, mutations), symbols or (SYMBOLS if with_symbols else None))


def test_unmutated_archive_is_valid():
    assert [lat.key for lat in read_kaldi(VALID)] == ["utt1", "utt2", "utt3", "utt4"]
    check_read(VALID, None)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(VALID_MUTATIONS), st.integers(0, 10**6)), min_size=1, max_size=6))
def test_fuzz_neutral_mutations_of_a_valid_archive_still_parse_the_same(ops):
    """Arc lines after each lattice's first (which names the start state) may come in any order,
    with any blanks: every such archive reads, to the same lattices."""
    expected = [canonical(lattice) for lattice in read_kaldi(VALID)]
    blocks = []
    for block in VALID.strip("\n").split("\n\n"):
        lines = block.split("\n")
        arcs = [i for i, line in enumerate(lines) if i > 1 and len(line.split()) >= 3]
        blocks.append("\n".join(neutral_mutation(lines, arcs, ops)))
    assert [canonical(lattice) for lattice in read_kaldi("\n\n".join(blocks) + "\n")] == expected


def test_a_key_holding_a_carriage_return_is_refused_where_it_stands():
    """The fuzzer's find: a key line ':\\r0' read as a key that no key line can write back (Kaldi
    would read the key ':' and then '0'); it is refused, naming its line, as a file with CR-only
    line endings would be."""
    with pytest.raises(LatticeFormatError) as refused:
        read_kaldi("ok\n0 1 a 1,2,\n1\n\n:\r0\n0 1 a 1,2,\n1\n", source="x.ark")
    assert (refused.value.line, refused.value.field) == (5, "key") and "carriage return" in str(refused.value)
