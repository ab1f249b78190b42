"""OpenFst text: acceptors, transducers, tropical and lattice weights, round trips, errors, fuzzing."""

from __future__ import annotations

import random
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lattices.formats.openfst import read_openfst, write_openfst
from lattices.lattice import Lattice, LatticeFormatError
from tests.factories import MUTATIONS, VALID_MUTATIONS, mutate_lines, neutral_mutation
from tests.lattices.test_kaldi import (
    FACT_DTYPES, FUZZ, INTEGER, NUMBER, TOKENS, Bad, RefGraph, Row, acyclic_graphs, assert_same_lattice, break_graph,
    canonical, check_against_reference, cost_text, facts, real_archive, ref_cost, ref_facts, ref_id, ref_pair,
    ref_words, render, text_lines,
)

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
def check_round_trip(lattice: Lattice) -> None:
    """What was read writes back stably."""
    lattice.validate()
    written = write_openfst(lattice)
    again = read_openfst(written, lattice.symbols, key=lattice.key)
    assert canonical(again) == canonical(lattice)
    assert write_openfst(again) == written
    assert_same_lattice(read_openfst(written, again.symbols, key=lattice.key), again)


def reference_openfst(text: str, symbols: list[str] | None) -> list[dict]:
    """The one FST of OpenFst text (see lattices/formats/openfst.py) as a list of its facts, or
    :class:`Bad`. Checked in this order: the number of fields of every line, acceptor against
    transducer lines, each line in order, the word labels, the ilabels, the structure."""
    lines = [(n, f) for n, _, f in text_lines(text) if f]
    if not lines:
        raise Bad((None, "lattice"))
    for n, f in lines:
        if len(f) > 5:
            raise Bad((n, "fields"))
    five = next((n for n, f in lines if len(f) == 5), None)
    three = next((n for n, f in lines if len(f) == 3), None)
    if five is not None and three is not None:
        raise Bad((max(five, three), "fields"))
    fourth = [f[3] for _, f in lines if len(f) == 4]
    transducer = five is not None or (three is None and bool(fourth) and not any(
        "," in t or (NUMBER.fullmatch(t) and not INTEGER.fullmatch(t)) for t in fourth))
    g = RefGraph(lines[0][0], "olabel" if transducer else "label")
    ilabels: list[tuple[int, str]] = []
    weight_kind = None
    for n, f in lines:
        final = len(f) <= 2
        if final:
            state, weight = ref_id(f[0], n, "state"), (f[1] if len(f) == 2 else None)
        else:
            src, dst = ref_id(f[0], n, "src"), ref_id(f[1], n, "dst")
            word_at = 3 if transducer else 2
            if transducer:
                ilabels.append((n, f[2]))
            word, weight = f[word_at], (f[word_at + 1] if len(f) == word_at + 2 else None)
        gc = ac = 0.0
        if weight is not None:
            kind = "lattice" if "," in weight else "tropical"
            weight_kind = weight_kind or kind
            if kind != weight_kind:
                raise Bad((n, "weight"))
            gc, ac = ref_pair(weight, n) if kind == "lattice" else (ref_cost(weight, n), 0.0)
        if final:
            g.final(n, state, gc, ac)
        else:
            g.arc(n, src, dst, word, gc, ac)
    table, (ids,), are_ids = ref_words([g], symbols)
    arc_extra = {}
    if transducer and all(INTEGER.fullmatch(t) for _, t in ilabels):
        arc_extra["openfst_ilabel"] = ("torch.int64", [ref_id(t, n, "ilabel") for n, t in ilabels])
    elif transducer:
        arc_extra["openfst_ilabel"] = ("tuple", tuple(t for _, t in ilabels))
    meta = {"openfst_type": "transducer" if transducer else "acceptor", "openfst_weight": weight_kind or "tropical",
            "openfst_word_ids": are_ids}
    return [ref_facts(g, "k", table, ids, meta, arc_extra, {})]


def read_one(text: str, symbols: list[str] | None) -> list[Lattice]:
    return [read_openfst(text, symbols, source="x.fst", key="k")]


def check_read(text: str, symbols: list[str] | None) -> None:
    """Reading agrees with :func:`reference_openfst`; what it gives writes back stably."""
    read = check_against_reference(read_one, reference_openfst, text, symbols)
    if read is not None:
        check_round_trip(read[0])


FST_WORDS = ["<eps>", "A", "B", "HELLO", "é", "7", "x_y"]


@st.composite
def openfst_texts(draw) -> tuple[list[Row], list[str] | None, dict, dict]:
    """(rows of a valid FST in OpenFst text, the symbol table to read it with, what it holds (as
    :func:`facts`), its layout: ``transducer``, ``states``, ``order`` (topological, the start first),
    ``ids``, ``weights``).

    An acceptor or a transducer (integer ilabels, or any); no weights, tropical costs or
    ``graph,acoustic`` pairs, each left out at random (One); labels all ids (with a table) or
    spellings (with a table or not); the first line names the start state, the others come in any
    order, with blank lines among them. A tropical acceptor whose arc lines all have 4 fields has
    one weight written with a point (else, by the format's rule, it would read as a transducer)."""
    n, order, pairs, finals = draw(acyclic_graphs())
    transducer = bool(pairs) and draw(st.booleans())
    weights = draw(st.sampled_from(["none", "tropical", "lattice"]))
    ids = bool(pairs) and draw(st.booleans())
    symbols = SYMBOLS if ids or draw(st.booleans()) else None
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))

    def weight() -> tuple[str | None, float, float]:
        if weights == "none" or rng.random() < 0.3:
            return None, 0.0, 0.0
        (gt, gc), (at, ac) = cost_text(rng), cost_text(rng)
        return (f"{gt},{at}", gc, ac) if weights == "lattice" else (gt, gc, 0.0)

    arcs, spelled, symbolic = [], False, rng.random() < 0.3  # symbolic: some ilabels are not integers
    for src, dst in pairs:
        i = rng.randrange(len(SYMBOLS))
        word = rng.choice([str(i), f"+{i}", f"0{i}"]) if ids else rng.choice(FST_WORDS if spelled else FST_WORDS[:5])
        spelled = spelled or not INTEGER.fullmatch(word)
        ilabel = rng.choice([str(rng.randint(0, 60))] * 3 + (["x", "#0", "1.5"] if symbolic else []))
        arcs.append([src, dst, ilabel, word, *weight()])
    if not transducer and weights == "tropical" and arcs and all(a[4] is not None for a in arcs) and not any(
            re.search("[.eE]", a[4]) for a in arcs):
        arcs[0][4] = repr(arcs[0][5])
    lines = [("arc", [str(s), str(d), *([il] if transducer else []), w, *([wt] if wt else [])])
             for s, d, il, w, wt, _, _ in arcs]
    final_weights = {state: weight() for state in finals}
    lines += [("final", [str(state), *([final_weights[state][0]] if final_weights[state][0] else [])])
              for state in finals]
    first = next(i for i, (_, fields) in enumerate(lines) if int(fields[0]) == order[0])
    shuffled = rng.sample([*range(first), *range(first + 1, len(lines))], len(lines) - 1)
    rows = []
    for i in [first, *shuffled]:
        if rows and rng.random() < 0.15:
            rows.append(Row("blank", rng.choice(["", " ", "\t"])))
        rows.append(Row(lines[i][0], rng.choice([" ", "\t", "  "]).join(lines[i][1]) + rng.choice(["", "", " ", "\t"])))
    file_arcs = [arcs[i] for i in [first, *shuffled] if i < len(arcs)]
    words = [a[3] for a in file_arcs]
    table = list(SYMBOLS if ids else symbols or ["<eps>"])
    if not ids:
        table += [w for w in dict.fromkeys(words) if w not in table]
    all_int = all(INTEGER.fullmatch(a[2]) for a in file_arcs)
    written = [w for a in file_arcs for w in a[4:5] if w] + [w for w, _, _ in final_weights.values() if w]
    expected = {
        "key": "k", "num_states": n, "start": order[0],
        "arcs": [(s, d, table[int(w)] if ids else w, 0.0 - gc, 0.0 - ac) for s, d, _, w, _, gc, ac in file_arcs],
        "finals": [(s, 0.0 - gc, 0.0 - ac) for s, (_, gc, ac) in sorted(final_weights.items())],
        "symbols": tuple(table),
        "meta": {"openfst_type": "transducer" if transducer else "acceptor",
                 "openfst_weight": weights if written else "tropical", "openfst_word_ids": ids},
        "arc_extra": {} if not transducer else {"openfst_ilabel": ("torch.int64", [int(a[2]) for a in file_arcs])}
        if all_int else {"openfst_ilabel": ("tuple", tuple(a[2] for a in file_arcs))},
        "final_extra": {}, "negative_zeros": 0, "dtypes": FACT_DTYPES}
    layout = {"transducer": transducer, "states": n, "order": order, "ids": ids, "weights": weights,
              "int_ilabels": all_int}
    return rows, symbols, expected, layout


@FUZZ
@given(openfst_texts(), st.sampled_from(["\n", "\r\n"]))
def test_fuzz_valid_fsts_read_as_the_format_defines_them(fst, newline):
    rows, symbols, expected, _ = fst
    text = render(rows, newline)
    assert facts(read_openfst(text, symbols, source="x.fst", key="k")) == expected
    assert reference_openfst(text, symbols) == [expected]  # the reference the random-text tests trust reads it so too


BAD_WEIGHTS = {"tropical": ["1e999", "-1.5e400", "1,2,3", "1,x", "x,1", ","],
               "lattice": ["1,x", "x,1", "1,2,3", "1e999,0", "0,-1e999", ",", "1,", "1e999"],
               "none": ["1e999", "1,2,3", "1,x", "nan,1"]}


@st.composite
def broken_openfst_texts(draw) -> tuple[str, list[str] | None, set[int], str, str]:
    """(a valid FST with one line broken or added (:func:`break_graph`), its symbols, the lines the
    error may name, its field, the kind of break)."""
    pick = draw(st.integers(0, 2**10))  # drawn first: hypothesis shrinks the last draws towards 0 most
    rows, symbols, _, layout = draw(openfst_texts())
    lines = [i for i, row in enumerate(rows) if row.kind != "blank"]
    transducer = layout["transducer"]
    where, field, kind = break_graph(draw, pick, rows, lines, transducer, layout["states"], layout["order"],
                                     layout["ids"], BAD_WEIGHTS[layout["weights"]], 3 if transducer else 2,
                                     "olabel" if transducer else "label", layout["int_ilabels"])
    return render(rows), symbols, where, field, kind


@FUZZ
@given(broken_openfst_texts())
def test_fuzz_a_broken_line_is_named(case):
    text, symbols, lines, field, kind = case
    with pytest.raises(LatticeFormatError) as info:
        read_openfst(text, symbols, source="x.fst", key="k")
    error = info.value
    assert error.line in lines and (error.field, error.source, error.key) == (field, "x.fst", "k"), (
        kind, lines, field, str(error))


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
@given(st.one_of(st.text(max_size=200), st.text(alphabet=" \t\r\n0123,.e-+AB<eps>x", max_size=200)), st.booleans())
def test_fuzz_arbitrary_text(text, with_symbols):
    check_read(text, SYMBOLS if with_symbols else None)


@FUZZ
@given(st.one_of(st.sampled_from([(ACCEPTOR, None), (TRANSDUCER, None), ("0 1 A 1,2\n1 2 B\n2 0,1\n", None)]),
                 openfst_texts().map(lambda fst: (render(fst[0]), fst[1]))),
       st.lists(st.tuples(st.sampled_from(MUTATIONS[:-1]), st.integers(0, 10**6), st.sampled_from(TOKENS)),
                min_size=1, max_size=3), st.booleans())
def test_fuzz_mutations_of_a_valid_fst(base, mutations, with_symbols):
    text, symbols = base
    check_read(mutate_lines(text, mutations), symbols or (SYMBOLS if with_symbols else None))


@FUZZ
@given(st.sampled_from([ACCEPTOR, TRANSDUCER]),
       st.lists(st.tuples(st.sampled_from(VALID_MUTATIONS), st.integers(0, 10**6)), min_size=1, max_size=6))
def test_fuzz_neutral_mutations_of_a_valid_fst_still_parse_the_same(base, ops):
    """Every line after the first (whose source is the start state) may come in any order, with
    any blanks: it reads, to the same lattice."""
    lines = base.strip("\n").split("\n")
    mutated = "\n".join(neutral_mutation(lines, list(range(1, len(lines))), ops)) + "\n"
    assert canonical(read_openfst(mutated, None)) == canonical(read_openfst(base, None))
