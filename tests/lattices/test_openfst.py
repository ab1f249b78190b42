"""OpenFst text: acceptors, transducers, tropical and lattice weights, round trips, errors, fuzzing."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lattices.formats.openfst import read_openfst, write_openfst
from lattices.lattice import Lattice, LatticeFormatError
from tests.factories import MUTATIONS, VALID_MUTATIONS, mutate_lines, neutral_mutation
from tests.lattices.test_kaldi import FUZZ, TOKENS, assert_same_lattice, canonical, real_archive

ACCEPTOR = """\
0 1 HELLO 1.5
0 2 <eps>
1 3 WORLD 2
2 3 WORLD
3 0.5
"""
# best path (lowest cost): 0 -> 2 -> 3, "WORLD", cost 0 + 0 + 0.5; HELLO WORLD costs 1.5 + 2 + 0.5


def test_acceptor_with_tropical_weights():
    lattice = read_openfst(ACCEPTOR, source="a.fst", key="utt")
    assert lattice.key == "utt" and lattice.symbols == ("<eps>", "HELLO", "WORLD")
    assert lattice.meta == {"openfst_type": "acceptor", "openfst_weight": "tropical", "openfst_word_ids": False}
    assert lattice.words.tolist() == [1, 0, 2, 2]
    assert lattice.graph.tolist() == [-1.5, 0.0, -2.0, 0.0] and lattice.acoustic.tolist() == [0.0] * 4
    assert lattice.finals.tolist() == [3] and lattice.final_graph.tolist() == [-0.5]
    assert lattice.arc_extra == {} and lattice.final_extra == {}
    best = max([(0, 2), (1, 3)], key=lambda arcs: float(lattice.graph[list(arcs)].sum()))
    assert [lattice.word(i) for i in best] == ["<eps>", "WORLD"]


def test_acceptor_is_written_with_every_weight_and_reads_back_exactly():
    lattice = read_openfst(ACCEPTOR)
    written = write_openfst(lattice)
    assert written == "0 1 HELLO 1.5\n0 2 <eps> 0.0\n1 3 WORLD 2.0\n2 3 WORLD 0.0\n3 0.5\n"
    assert_same_lattice(read_openfst(written), lattice)


TRANSDUCER = """\
0 1 4 HELLO 1.5,-20.25
0 2 0 <eps>
1 3 9 WORLD 2,1e-3

2 3 0 WORLD 0,0
   \t
3 0.5,0.25
"""


def test_transducer_with_lattice_weights_and_blank_lines():
    lattice = read_openfst(TRANSDUCER)
    assert lattice.meta == {"openfst_type": "transducer", "openfst_weight": "lattice", "openfst_word_ids": False}
    ilabels = lattice.arc_extra["openfst_ilabel"]
    assert ilabels.dtype == torch.int64 and ilabels.tolist() == [4, 0, 9, 0]
    assert [lattice.word(i) for i in range(4)] == ["HELLO", "<eps>", "WORLD", "WORLD"]
    assert lattice.graph.tolist() == [-1.5, 0.0, -2.0, 0.0] and lattice.acoustic.tolist() == [20.25, 0.0, -1e-3, 0.0]
    assert lattice.final_graph.tolist() == [-0.5] and lattice.final_acoustic.tolist() == [-0.25]
    written = write_openfst(lattice)
    assert written.splitlines()[1] == "0 2 0 <eps> 0,0"
    assert_same_lattice(read_openfst(written), lattice)


@pytest.mark.parametrize("text,kind,weight", [
    ("0 1 A 0.5\n1\n", "acceptor", "tropical"),        # 4th field has a point: a weight
    ("0 1 A 1,2\n1\n", "acceptor", "lattice"),
    ("0 1 x A\n1\n", "transducer", "tropical"),        # 4th field is no number: an olabel
    ("0 1 2 3\n1\n", "transducer", "tropical"),        # all integers: olabels
    ("0 1 A\n1 2 B 3\n2\n", "acceptor", "tropical"),   # a 3-field line decides
    ("0\n", "acceptor", "tropical"),
    ("0 2.5\n", "acceptor", "tropical"),
    ("0 2.5,1\n", "acceptor", "lattice"),
])
def test_kind_and_weight_are_told_from_the_lines(text, kind, weight):
    lattice = read_openfst(text, ["<eps>", "A", "B", "3"])
    assert (lattice.meta["openfst_type"], lattice.meta["openfst_weight"]) == (kind, weight)
    assert_same_lattice(read_openfst(write_openfst(lattice), lattice.symbols), lattice)


def test_symbolic_ilabels_are_kept_as_strings():
    lattice = read_openfst("0 1 x A\n1 2 7 B\n2\n")
    assert lattice.arc_extra["openfst_ilabel"] == ("x", "7")
    assert write_openfst(lattice) == "0 1 x A 0.0\n1 2 7 B 0.0\n2 0.0\n"


def test_integer_labels_need_a_table_and_can_be_written_as_words():
    text = "0 1 1 1.5\n1 2 2\n2\n"
    with pytest.raises(LatticeFormatError, match=r"symbol table \(words.txt\)"):
        read_openfst(text)
    lattice = read_openfst(text, ["<eps>", "HELLO", "WORLD"])
    assert lattice.meta["openfst_word_ids"] is True and lattice.words.tolist() == [1, 2]
    assert write_openfst(lattice) == "0 1 1 1.5\n1 2 2 0.0\n2 0.0\n"
    assert write_openfst(lattice, use_ids=False) == "0 1 HELLO 1.5\n1 2 WORLD 0.0\n2 0.0\n"
    assert write_openfst(read_openfst("0 1 HELLO 1.5\n1 2 WORLD\n2\n"), use_ids=True) == write_openfst(lattice)


def test_tropical_weight_combines_graph_and_acoustic():
    lattice = Lattice.from_arcs("u", [(0, 1, 1, -2.0, -0.5)], {1: (0.25, -1.0)}, ("<eps>", "A"))
    assert write_openfst(lattice) == "0 1 A 2.5\n1 0.75\n"
    again = read_openfst(write_openfst(lattice))
    assert again.graph.tolist() == [-2.5] and again.acoustic.tolist() == [0.0]
    paired = lattice.replace(meta={"openfst_weight": "lattice"})
    assert write_openfst(paired) == "0 1 A 0.5,2\n1 1,-0.25\n"


def test_start_state_is_the_first_line():
    # 2 is the start: "2 0 A" comes first; the writer prints the start state's arcs first again
    lattice = read_openfst("2 0 A 1.0\n0 1 B\n1\n")
    assert (lattice.start, lattice.num_states) == (2, 3)
    assert write_openfst(lattice).splitlines()[0] == "2 0 A 1.0"


def test_kaldi_lattice_converts_to_openfst_and_back():
    utt = real_archive("ami-kaldi/1.lat")[0]
    as_fst = utt.replace(meta={"openfst_weight": "lattice"}, arc_extra={}, final_extra={})
    again = read_openfst(write_openfst(as_fst), utt.symbols, key=utt.key)
    for name in ("src", "dst", "words", "graph", "acoustic", "finals", "final_graph", "final_acoustic"):
        assert torch.equal(getattr(again, name), getattr(utt, name)), name


def test_writer_rejects_labels_that_are_not_one_field():
    lattice = Lattice.from_arcs("u", [(0, 1, 1, 0.0, 0.0)], {1: (0.0, 0.0)}, ("<eps>", "A B"))
    with pytest.raises(LatticeFormatError, match="'A B'"):
        write_openfst(lattice)
    assert write_openfst(lattice, use_ids=True) == "0 1 1 0.0\n1 0.0\n"


ERRORS = [
    # (text, symbols, line, field, words in the message)
    ("0 1 A 0.5\n1 2 B 1.5x\n2\n", None, 2, "weight", "not a number"),  # 0.5 makes the 4th fields weights
    ("0 1 A nan\n1 2 B\n2\n", None, 1, "weight", "not a number"),     # a 3-field arc: an acceptor
    ("0 1 x A\n1 2 A 1.5\n2\n", None, 1, "weight", "not a number"),   # 1.5 makes all 4th fields weights
    ("0 1 A 1e400\n1\n", None, 1, "weight", "finite"),
    ("0 1 A 1,2,3_4\n1\n", None, 1, "weight", "read it with read_kaldi"),
    ("0 1 A 1,x\n1\n", None, 1, "weight", "not a number"),
    ("0 1 A 1.5\n1 2 B 1,2\n2\n", None, 2, "weight", "cannot mix"),
    ("0 1 2 3 4 5\n1\n", None, 1, "fields", "too many"),
    ("0 1 A\n1 2 3 B 1.0\n2\n", None, 2, "fields", "cannot mix"),
    ("0 1 7\n1\n", ["<eps>", "A"], 1, "label", "word id 7"),
    ("0 1 x 7\n1\n", ["<eps>", "A"], 1, "olabel", "word id 7"),
    ("0 1 A\n1 0 B\n1\n", None, 1, "dst", "cycle 0 -> 1 -> 0"),
    ("0 -1 A\n", None, 1, "dst", "negative"),
    ("a 1 A\n1\n", None, 1, "src", "not an integer"),
    ("0 1 A\n1\nb\n", None, 3, "state", "not an integer"),
    ("0 1 A\n1 3 B\n3\n", None, 2, "state", "no line names state 2"),
    ("0 1 A\n1\n2 1 B\n", None, 3, "state", "unreachable"),
    ("0 1 A\n0 2 B\n1\n", None, 2, "state", "dead"),
    ("0 1 A\n", None, 1, "finals", "no final state"),
    ("0 1 A\n1\n1 2.0\n", None, 3, "state", "already made final on line 2"),
    ("0 1 -4 A\n1\n", None, 1, "ilabel", "negative"),
    (" \n\n", None, None, "lattice", "no arc or final-state lines"),
]


@pytest.mark.parametrize("text,symbols,line,field,words", ERRORS)
def test_malformed_fsts_name_line_and_field(text, symbols, line, field, words):
    with pytest.raises(LatticeFormatError) as info:
        read_openfst(text, symbols, source="bad.fst", key="k")
    error = info.value
    assert (error.line, error.field, error.key) == (line, field, "k")
    message = str(error)
    assert words in message and f"field {field}" in message
    assert message.startswith(f"bad.fst:{line}:" if line is not None else "bad.fst: lattice 'k'")


# --------------------------------------------------------------------------- fuzzing
def check_read(text: str, symbols: list[str] | None) -> None:
    """Reading gives a valid lattice or a LatticeFormatError; what it gives writes back stably."""
    try:
        lattice = read_openfst(text, symbols)
    except LatticeFormatError:
        return
    lattice.validate()
    written = write_openfst(lattice)
    again = read_openfst(written, lattice.symbols)
    assert canonical(again) == canonical(lattice)
    assert write_openfst(again) == written
    assert_same_lattice(read_openfst(written, again.symbols), again)


SYMBOLS = ["<eps>", "A", "B", "C", "D"]
STATES = st.sampled_from(["0", "1", "2", "3", "0", "1", "-1", "x"])
LABELS = st.sampled_from(["A", "B", "<eps>", "1", "2", "0", "9", "+1"])
WEIGHTS = st.sampled_from(["", "", "1.5", "-2", "0", "1,2", "-3,4.5", "1,2,3", "x", "1e999", "inf", "1,2,"])
arc = st.one_of(st.tuples(STATES, STATES, LABELS, WEIGHTS), st.tuples(STATES, STATES, LABELS, LABELS, WEIGHTS))
line_strategy = st.one_of(arc.map(" ".join), arc.map(" ".join), st.tuples(STATES, WEIGHTS).map(" ".join),
                          st.lists(st.sampled_from(TOKENS), max_size=6).map(" ".join), st.just(""))


@FUZZ
@given(st.lists(line_strategy, max_size=10), st.booleans())
def test_fuzz_random_lines(lines, with_symbols):
    check_read("\n".join(lines), SYMBOLS if with_symbols else None)


@FUZZ
@given(st.text(max_size=200), st.booleans())
def test_fuzz_arbitrary_text(text, with_symbols):
    check_read(text, SYMBOLS if with_symbols else None)


@FUZZ
@given(st.sampled_from([ACCEPTOR, TRANSDUCER, "0 1 A 1,2\n1 2 B\n2 0,1\n"]),
       st.lists(st.tuples(st.sampled_from(MUTATIONS[:-1]), st.integers(0, 10**6), st.sampled_from(TOKENS)),
                min_size=1, max_size=3), st.booleans())
def test_fuzz_mutations_of_a_valid_fst(base, mutations, with_symbols):
    check_read(mutate_lines(base, mutations), SYMBOLS if with_symbols else None)


@FUZZ
@given(st.sampled_from([ACCEPTOR, TRANSDUCER]),
       st.lists(st.tuples(st.sampled_from(VALID_MUTATIONS), st.integers(0, 10**6)), min_size=1, max_size=6))
def test_fuzz_neutral_mutations_of_a_valid_fst_still_parse_the_same(base, ops):
    """Every line after the first (whose source is the start state) may come in any order, with
    any blanks: it reads, to the same lattice."""
    lines = base.strip("\n").split("\n")
    mutated = "\n".join(neutral_mutation(lines, list(range(1, len(lines))), ops)) + "\n"
    assert canonical(read_openfst(mutated, None)) == canonical(read_openfst(base, None))
