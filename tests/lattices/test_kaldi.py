"""Kaldi text archives: real files, both lattice types, round trips, located errors, fuzzing."""

from __future__ import annotations

import functools
import math
import re
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
def check_read(text: str, symbols: list[str] | None) -> None:
    """Reading gives valid lattices or a LatticeFormatError; what it gives writes back stably."""
    try:
        lattices = read_kaldi(text, symbols)
    except LatticeFormatError:
        return
    for lattice in lattices:
        lattice.validate()
    table = lattices[0].symbols if lattices else symbols
    written = write_kaldi(lattices)
    again = read_kaldi(written, table)
    assert [canonical(a) for a in again] == [canonical(b) for b in lattices]
    assert write_kaldi(again) == written
    for a, b in zip(read_kaldi(written, again[0].symbols if again else table), again):
        assert_same_lattice(a, b)


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
@given(st.text(max_size=200), st.booleans())
def test_fuzz_arbitrary_text(text, with_symbols):
    check_read(text, SYMBOLS if with_symbols else None)


VALID = COMPACT + "\n" + TRANSDUCER.replace("utt", "utt3") + "\nutt4\n0 1 A 1,2,\n1 2 B 3,-4,5\n2\n"


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 10**6), st.sampled_from(TOKENS)),
                min_size=1, max_size=4), st.booleans())
def test_fuzz_mutations_of_a_valid_archive(mutations, with_symbols):
    check_read(mutate_lines(VALID, mutations), SYMBOLS if with_symbols else None)


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
