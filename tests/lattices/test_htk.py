"""HTK SLF reading and writing: real AMI and theanolm lattices, both word layouts, errors, fuzzing."""

from __future__ import annotations

import gzip
import math
import re
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lattices.formats.htk import read_htk, write_htk
from lattices.lattice import Lattice, LatticeFormatError
from tests.factories import require_shared

from tests.factories import SHARED_DATA  # noqa: E402 (the one definition)
AMI_FILES = sorted((SHARED_DATA / "lattices" / "ami-htk").glob("*.lat.gz"))
THEANOLM_FILE = SHARED_DATA / "lattices" / "theanolm" / "lattice.slf"

# Words on nodes: <s> (node 1) then "a" or "the" (nodes 2, 3) then </s> (node 4).
# Best path by a+l: 0 -> 1 -> 3 -> 4 (<s> the </s>, total -1-0-2-1-1-0 = -5).
NODES_SLF = """VERSION=1.0
UTTERANCE=utt1
lmscale=14.00  wdpenalty=0.00
N=5 L=5
I=0 t=0.00 W=!NULL
I=1 t=0.10 W=<s>  v=1
I=2 t=0.50 W=a    v=2
I=3 t=0.55 W=the  v=1
I=4 t=0.90 W=</s> v=1
J=0 S=0 E=1 a=-1.00 l=0.000 r=0.00
J=1 S=1 E=2 a=-3.00 l=-2.500 r=0.00
J=2 S=1 E=3 a=-2.00 l=-1.000 r=0.00
J=3 S=2 E=4 a=-1.50 l=-0.500
J=4 S=3 E=4 a=-1.00 l=-0.000 r=0.00
"""

# Words on links, ids out of order, a comment and an epsilon (!NULL) link; two final nodes (3, 4).
# Best path: 0 -hello-> 1 -world-> 3 (total -2 - 1 = -3).
LINKS_SLF = """# a comment
VERSION=1.1
UTTERANCE="utterance 123"
lmscale=12.3 wdpenalty=0.7
N=5   L=4
I=3 t=1.0
I=0 t=0.0
I=1 t=0.5
I=2 t=0.5
I=4 t=0.9
J=2 S=1 E=3 W=world v=0 a=-1.0 l=0.0
J=0 S=0 E=1 W=hello v=0 a=-1.5 l=-0.5
J=1 S=0 E=2 W=!NULL a=-3.0
J=3 S=2 E=4 W=hullo v=1 a=-0.25 l=-0.75
"""


def assert_same(a: Lattice, b: Lattice) -> None:
    """Everything equal: structure, words (ids and table), scores, key, meta and extras."""
    assert (a.key, a.num_states, a.start, a.symbols, a.meta) == (b.key, b.num_states, b.start, b.symbols, b.meta)
    for name in ("src", "dst", "words", "acoustic", "graph", "finals", "final_acoustic", "final_graph"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert a.arc_extra == b.arc_extra
    assert a.state_extra.keys() == b.state_extra.keys()
    for name, values in a.state_extra.items():
        if isinstance(values, torch.Tensor):
            other = b.state_extra[name]
            assert bool(((values == other) | (values.isnan() & other.isnan())).all()), name
        else:
            assert values == b.state_extra[name], name


def assert_round_trip(lattice: Lattice) -> None:
    again = read_htk(write_htk(lattice))
    if "base" in lattice.meta:  # written as natural log without base=: only the lattice is kept
        lattice, again = (x.replace(meta={}) for x in (lattice, again))
    assert_same(lattice, again)


def spelled_arcs(lattice: Lattice) -> list[tuple[int, int, str, float, float]]:
    return [(int(s), int(d), lattice.symbols[int(w)], float(a), float(g)) for s, d, w, a, g in zip(
        lattice.src, lattice.dst, lattice.words, lattice.acoustic, lattice.graph)]


def header_counts(text: str) -> tuple[int, int]:
    match = re.search(r"^N=(\d+)\s+L=(\d+)", text, re.MULTILINE)
    assert match, "no N= L= line"
    return int(match.group(1)), int(match.group(2))


# ------------------------------------------------------------------------------------- real files
@pytest.mark.parametrize("path", AMI_FILES, ids=lambda p: p.name)
def test_ami_lattices_read_and_round_trip(path: Path) -> None:
    text = gzip.open(path, "rt", encoding="utf-8").read()
    lattice = read_htk(text, source=str(path))
    nodes, links = header_counts(text)
    assert (lattice.num_states, lattice.num_arcs) == (nodes, links)
    assert 1410 <= lattice.num_arcs <= 5842
    assert lattice.key == path.name.removesuffix(".lat.gz") + ".plp"
    assert lattice.meta["lmscale"] == 14.0 and lattice.meta["wdpenalty"] == 0.0
    assert lattice.meta["htk_words_on"] == "nodes" and lattice.meta["htk_start_word"] == "!NULL"
    assert "<s>" in lattice.symbols and "</s>" in lattice.symbols
    assert lattice.state_extra["time"].dtype == torch.float64 and float(lattice.state_extra["time"][0]) == 0.0
    assert len(lattice.state_extra["htk_v"]) == nodes and len(lattice.arc_extra["htk_r"]) == links
    # a node's word is the word of every link into it: all links into one node agree
    first_word: dict[int, int] = {}
    for d, w in zip(lattice.dst.tolist(), lattice.words.tolist()):
        assert first_word.setdefault(d, w) == w
    again = read_htk(write_htk(lattice))
    assert_same(lattice, again)
    assert write_htk(again) == write_htk(lattice)


def test_theanolm_lattice_words_on_links() -> None:
    require_shared(THEANOLM_FILE)
    text = THEANOLM_FILE.read_text(encoding="utf-8")
    lattice = read_htk(text, source=str(THEANOLM_FILE))
    assert (lattice.num_states, lattice.num_arcs) == header_counts(text) == (24, 39)
    assert lattice.key == "utterance 123"
    assert (lattice.meta["lmscale"], lattice.meta["wdpenalty"]) == (12.3, 0.7)
    assert lattice.meta["htk_words_on"] == "links"
    assert lattice.word(0) == "!ENTER" and "!EXIT" in lattice.symbols  # ordinary words
    assert spelled_arcs(lattice)[4] == (1, 5, "to", -2434.05, -87.29)
    assert lattice.arc_extra["htk_v"][4] == "3"
    assert lattice.finals.tolist() == [23] and lattice.start == 0
    assert_same(lattice, read_htk(write_htk(lattice)))


# ------------------------------------------------------------------------------------ small cases
def test_words_on_nodes() -> None:
    lattice = read_htk(NODES_SLF)
    assert spelled_arcs(lattice) == [(0, 1, "<s>", -1.0, 0.0), (1, 2, "a", -3.0, -2.5), (1, 3, "the", -2.0, -1.0),
                                     (2, 4, "</s>", -1.5, -0.5), (3, 4, "</s>", -1.0, 0.0)]
    assert lattice.key == "utt1" and lattice.start == 0 and lattice.finals.tolist() == [4]
    assert lattice.state_extra["time"].tolist() == [0.0, 0.1, 0.5, 0.55, 0.9]
    assert lattice.state_extra["htk_v"] == (None, "1", "2", "1", "1")
    assert lattice.arc_extra["htk_r"] == ("0.00", "0.00", "0.00", None, "0.00")
    assert lattice.meta["header"][2:4] == [["lmscale", "14.00"], ["wdpenalty", "0.00"]]
    text = write_htk(lattice)
    assert "I=0 t=0.0 W=!NULL" in text and "I=2 t=0.5 W=a v=2" in text  # words written on nodes again
    assert "W=" not in "".join(line for line in text.splitlines() if line.startswith("J="))
    assert "l=-0.0" not in text and "lmscale=14.00" in text
    assert_same(lattice, read_htk(text))


def test_words_on_links_any_order() -> None:
    lattice = read_htk(LINKS_SLF)
    assert spelled_arcs(lattice) == [(0, 1, "hello", -1.5, -0.5), (0, 2, "<eps>", -3.0, 0.0),
                                     (1, 3, "world", -1.0, 0.0), (2, 4, "hullo", -0.25, -0.75)]
    assert lattice.finals.tolist() == [3, 4] and lattice.key == "utterance 123"
    assert lattice.arc_extra["htk_v"] == ("0", None, "0", "1")
    text = write_htk(lattice)
    assert 'UTTERANCE="utterance 123"' in text and "J=1 S=0 E=2 W=!NULL" in text
    assert_same(lattice, read_htk(text))


def test_base_is_converted_to_natural_log() -> None:
    text = NODES_SLF.replace("VERSION=1.0", "VERSION=1.0\nbase=10.0")
    lattice = read_htk(text)
    natural = read_htk(NODES_SLF)
    assert lattice.meta["base"] == 10.0
    assert torch.allclose(lattice.acoustic, natural.acoustic * math.log(10.0), rtol=0, atol=1e-12)
    assert float(lattice.graph[1]) == -2.5 * math.log(10.0)
    again = read_htk(write_htk(lattice))  # written as natural log, no base= line
    assert "base" not in again.meta
    assert torch.equal(again.acoustic, lattice.acoustic) and torch.equal(again.graph, lattice.graph)


@pytest.mark.parametrize("base", ["0", "1", "-2", "e"])
def test_unsupported_base_is_refused(base: str) -> None:
    with pytest.raises(LatticeFormatError) as info:
        read_htk(NODES_SLF.replace("VERSION=1.0", f"VERSION=1.0\nbase={base}"), source="x.lat")
    assert info.value.field == "base" and info.value.line == 2 and info.value.source == "x.lat"


def test_quoted_values_and_long_field_names() -> None:
    # a two-word phrase, a word with a quote in it, long names for every field, start=/end= headers
    text = ('UTTERANCE="my utt"\nstart=0 end=2\nNODES=3 LINKS=2\nI=0 time=0.0\nI=1 time=0.5\nI=2 time=1\n'
            'J=0 START=0 END=1 WORD="new york" acoustic=-1.0 language=-2.0 var=3 div=x\n'
            'J=1 START=1 END=2 WORD="say \\"hi\\"" acoustic=-0.5\n')
    lattice = read_htk(text)
    assert lattice.key == "my utt"
    assert spelled_arcs(lattice) == [(0, 1, "new york", -1.0, -2.0), (1, 2, 'say "hi"', -0.5, 0.0)]
    assert lattice.arc_extra == {"htk_v": ("3", None), "htk_d": ("x", None)}
    written = write_htk(lattice)
    assert 'W="new york"' in written and 'W="say \\"hi\\""' in written
    assert_same(lattice, read_htk(written))


def test_awkward_words_survive_writing() -> None:
    # arcs from another format: spaces, a newline, a backslash, a leading quote, a lone "!NULL"-like word
    words = ("<eps>", "a b", "line\nbreak", "back\\slash", '"quoted', "tab\there", "x=y")
    arcs = [(i, i + 1, i + 1, -float(i), -0.0) for i in range(6)]
    lattice = Lattice.from_arcs("odd key", arcs, {6: (0.0, 0.0)}, words)
    text = write_htk(lattice)
    assert "=-0.0" not in text and "=-0 " not in text
    again = read_htk(text)
    assert spelled_arcs(again) == spelled_arcs(lattice) and again.key == "odd key"


def test_final_weights_and_exiting_finals_get_a_super_final_node() -> None:
    # 0 -a-> 1 -b-> 2; state 1 is final with weight (-1, -2) and has an arc leaving it; 2 is final
    lattice = Lattice.from_arcs("f", [(0, 1, 1, -1.0, 0.0), (1, 2, 2, -1.0, 0.0)],
                                {1: (-1.0, -2.0), 2: (0.0, 0.0)}, ("<eps>", "a", "b"))
    again = read_htk(write_htk(lattice))
    assert again.num_states == 4 and again.finals.tolist() == [3]
    assert spelled_arcs(again)[2:] == [(1, 3, "<eps>", -1.0, -2.0), (2, 3, "<eps>", 0.0, 0.0)]
    # a single state that is start and final, with a final weight
    alone = Lattice.from_arcs("h", [], {0: (-0.5, 0.0)}, ("<eps>",))
    assert spelled_arcs(read_htk(write_htk(alone))) == [(0, 1, "<eps>", -0.5, 0.0)]


def test_start_and_end_headers() -> None:
    text = "N=3 L=2\nend=1\nI=0\nI=1\nI=2\nJ=0 S=0 E=1 W=a\nJ=1 S=1 E=2 W=b\n"
    with pytest.raises(LatticeFormatError, match="dead"):  # node 2 cannot reach the end node
        read_htk(text)
    text = "N=3 L=3\nend=2\nI=0\nI=1\nI=2\nJ=0 S=0 E=1 W=a\nJ=1 S=1 E=2 W=b\nJ=2 S=0 E=2 W=c\n"
    lattice = read_htk(text)
    assert lattice.finals.tolist() == [2]
    assert "end=" not in write_htk(lattice)  # node 2 is the only one without outgoing links anyway
    assert [pair[0] for pair in lattice.meta["header"]] == []  # N, L, start, end describe the graph
    assert_same(lattice, read_htk(write_htk(lattice)))


def test_nodes_layout_falls_back_to_links_when_words_disagree() -> None:
    lattice = read_htk(NODES_SLF)
    changed = lattice.replace(words=torch.tensor([1, 2, 3, 4, 2]))  # two different words into node 4
    text = write_htk(changed)
    assert "J=4 S=3 E=4 W=a" in text
    assert spelled_arcs(read_htk(text)) == spelled_arcs(changed)


def test_changed_key_and_lmscale_are_written() -> None:
    lattice = read_htk(NODES_SLF)
    changed = lattice.replace(key="new", meta={**lattice.meta, "lmscale": 10.5})
    again = read_htk(write_htk(changed))
    assert again.key == "new" and again.meta["lmscale"] == 10.5


# ------------------------------------------------------------------------------------------ errors
@pytest.mark.parametrize(("text", "line", "field", "words"), [
    (NODES_SLF.replace("N=5 L=5", "N=6 L=5"), 4, "N", "6"),
    (NODES_SLF.replace("N=5 L=5", "N=5 L=4"), 4, "L", "4"),
    (NODES_SLF.replace("J=3 S=2 E=4", "J=3 S=2 E=9"), 13, "E", "node 9"),
    (NODES_SLF.replace("J=3 S=2 E=4", "J=3 E=4"), 13, "S", "no S="),
    (NODES_SLF.replace("a=-3.00", "a=minus3"), 11, "a", "minus3"),
    (NODES_SLF.replace("a=-3.00", "a=nan"), 11, "a", "finite"),
    (NODES_SLF.replace("I=3 t=0.55", "I=2 t=0.55"), 8, "I", "twice"),
    (NODES_SLF.replace("J=4 S=3", "J=-4 S=3"), 14, "J", "-4"),
    (NODES_SLF.replace("J=4 S=3", "J=7 S=3"), 14, "J", "0..4"),
    (NODES_SLF.replace("t=0.50", "t=half"), 7, "t", "half"),
    (NODES_SLF.replace("W=the", 'W="the'), 8, "W", "unterminated"),
    (NODES_SLF.replace("W=the", 'W="the"x'), 8, "W", "closing quote"),
    (NODES_SLF.replace("v=2", "v=2 junk"), 7, "junk", "name=value"),
    (NODES_SLF.replace("v=2", "v=2 v=3"), 7, "v", "twice"),
    (NODES_SLF.replace("v=2", "var=3 v=2"), 7, "v", "twice"),
    (NODES_SLF + "lmscale=3\n", 15, "lmscale", "header"),
    (NODES_SLF.replace("lmscale=14.00", "lmscale=x"), 3, "lmscale", "number"),
    (NODES_SLF.replace("I=2 t=0.50", "I=2 L=sub t=0.50"), 7, "L", "sub-lattices"),
])
def test_errors_name_line_and_field(text: str, line: int, field: str, words: str) -> None:
    with pytest.raises(LatticeFormatError) as info:
        read_htk(text, source="test.lat")
    assert (info.value.line, info.value.field, info.value.source) == (line, field, "test.lat")
    assert words in str(info.value) and "test.lat:" in str(info.value)


def test_structural_errors_name_the_lattice() -> None:
    cycle = NODES_SLF.replace("N=5 L=5", "N=5 L=6") + "J=5 S=3 E=1 a=0\n"
    with pytest.raises(LatticeFormatError, match="cycle|unreachable|start") as info:
        read_htk(cycle, source="c.lat")
    assert info.value.key == "utt1" and info.value.source == "c.lat"
    with pytest.raises(LatticeFormatError, match="2 nodes have no incoming link") as info:
        read_htk("I=0\nI=1\nI=2\nJ=0 S=0 E=2 W=a\nJ=1 S=1 E=2 W=b\n")  # nodes 0 and 1 both start
    assert info.value.field == "start"
    assert read_htk("start=1\nI=0\nI=1\nI=2\nJ=0 S=1 E=0 W=a\nJ=1 S=0 E=2 W=b\n").start == 1
    with pytest.raises(LatticeFormatError, match="no nodes"):
        read_htk("VERSION=1.0\n")
    with pytest.raises(LatticeFormatError, match="expected text"):
        read_htk(b"I=0")  # type: ignore[arg-type]


def test_key_from_source_when_no_utterance() -> None:
    lattice = read_htk("I=0\nI=1\nJ=0 S=0 E=1 W=a\n", source="/x/y/utt7.lat.gz")
    assert lattice.key == "utt7" and lattice.words.tolist() == [1]
    assert read_htk(write_htk(lattice)).key == "utt7"  # written as UTTERANCE=


# ----------------------------------------------------------------------------------------- fuzzing
_HTK_WORDS = st.sampled_from(["!NULL", "a", "the", "<s>", "</s>", "!SIL", "é"])


@st.composite
def slf_files(draw) -> tuple[list[str], dict]:
    """(lines of a valid SLF file, what it holds by the module docstring: states, start, finals,
    arcs (src, dst, word, acoustic, graph) in link-id order). A chain 0 -> ... -> n-1 and forward
    links, node and link lines in any order, words on nodes or on links, scores in base e or 10."""
    n = draw(st.integers(2, 6))
    pairs = [(i, i + 1) for i in range(n - 1)] + draw(st.lists(
        st.tuples(st.integers(0, n - 2), st.integers(1, n - 1)).filter(lambda p: p[0] < p[1]), max_size=4))
    pairs = draw(st.permutations(pairs))
    on_nodes = draw(st.booleans())
    base = draw(st.sampled_from([None, 10.0]))
    scale = math.log(base) if base else 1.0
    node_words = ["!NULL"] + [draw(_HTK_WORDS) for _ in range(n - 1)]
    nodes = [f"I={i} t={i / 10:.2f}" + (f" W={node_words[i]}" if on_nodes else "") for i in range(n)]
    links, arcs = [], []
    for j, (src, dst) in enumerate(pairs):
        a, l = draw(st.integers(-10**5, 0)) / 100, draw(st.integers(-10**4, 0)) / 100
        word = node_words[dst] if on_nodes else draw(_HTK_WORDS)
        links.append(f"J={j} S={src} E={dst}" + ("" if on_nodes else f" W={word}") + f" a={a} l={l}")
        arcs.append((src, dst, "<eps>" if word == "!NULL" else word, a * scale, l * scale))
    header = ["VERSION=1.0", "UTTERANCE=u7", "lmscale=12.0"] + ([f"base={base:g}"] if base else [])
    lines = header + [f"N={n} L={len(pairs)}"] + draw(st.permutations(nodes + links))
    return lines, {"num_states": n, "start": 0, "finals": [n - 1], "arcs": arcs}


@st.composite
def broken_slf_files(draw) -> tuple[str, int, str]:
    """(a valid file with one link or node line broken, its 1-based line number, the broken line)."""
    lines, held = draw(slf_files())
    kind = draw(st.sampled_from(["end", "score", "node id", "link id"]))
    row = draw(st.sampled_from([i for i, line in enumerate(lines)
                                if line.startswith("I=" if kind == "node id" else "J=")]))
    fields = lines[row].split()
    if kind == "end":
        fields[2] = f"E={held['num_states'] + draw(st.integers(0, 5))}"
    elif kind == "score":
        name = draw(st.sampled_from(["a=", "l="]))
        index = next(i for i, f in enumerate(fields) if f.startswith(name))
        fields[index] = fields[index][:2] + draw(st.sampled_from(["x", "", "1..2", "nan"]))
    else:
        fields[0] = fields[0][:2] + draw(st.sampled_from(["x", "-1", "1.5", ""]))
    lines[row] = " ".join(fields)
    return "\n".join(lines) + "\n", row + 1, lines[row]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slf_files())
def test_fuzz_valid_files_read_as_written(case) -> None:
    lines, held = case
    lattice = read_htk("\n".join(lines) + "\n", source="x.lat")
    assert (lattice.num_states, lattice.start, lattice.finals.tolist()) == (held["num_states"], 0, held["finals"])
    got = spelled_arcs(lattice)
    assert [arc[:3] for arc in got] == [arc[:3] for arc in held["arcs"]]
    for (_, _, _, a, g), (_, _, _, ea, eg) in zip(got, held["arcs"]):
        assert (a, g) == pytest.approx((ea, eg), rel=1e-12, abs=1e-12)
    assert lattice.key == "u7" and lattice.meta["lmscale"] == 12.0
    assert (lattice.final_acoustic.tolist(), lattice.final_graph.tolist()) == ([0.0], [0.0])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_slf_files())
def test_fuzz_a_broken_line_is_named(case) -> None:
    text, line, shown = case
    with pytest.raises(LatticeFormatError) as info:
        read_htk(text, source="x.lat")
    assert info.value.line == line and info.value.source == "x.lat", (shown, str(info.value))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(slf_files().map(lambda case: (case[1], "\n".join(case[0]))), st.text(
    alphabet=st.sampled_from(list('IJSEWNLatlv=0123456789 .-"\\#\n!<>')), max_size=200).map(lambda t: (None, t))))
def test_fuzz_random_text(case) -> None:
    """Random text (valid files among it): a valid file reads as it says, anything read
    survives the writer."""
    held, text = case
    try:
        lattice = read_htk(text)
    except LatticeFormatError as err:
        assert held is None, str(err)
        return
    if held is not None:
        assert [arc[:3] for arc in spelled_arcs(lattice)] == [arc[:3] for arc in held["arcs"]]
    assert isinstance(lattice, Lattice)
    assert_round_trip(lattice)


_EDITS = st.lists(st.tuples(st.sampled_from(["delete", "insert", "replace", "drop_line", "dup_line", "swap"]),
                            st.integers(0, 10_000), st.sampled_from(list('=" \n#-0123456789.xIJSEWaNL\\'))),
                  min_size=1, max_size=4)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([NODES_SLF, LINKS_SLF]), _EDITS)
def test_fuzz_garbled_valid_slf(text: str, edits: list[tuple[str, int, str]]) -> None:
    for kind, where, char in edits:
        lines = text.split("\n")
        at, row = where % (len(text) + 1), where % len(lines)
        if kind == "delete":
            text = text[:at] + text[at + 1:]
        elif kind == "insert":
            text = text[:at] + char + text[at:]
        elif kind == "replace":
            text = text[:at] + char + text[at + 1:]
        elif kind == "drop_line":
            text = "\n".join(lines[:row] + lines[row + 1:])
        elif kind == "dup_line":
            text = "\n".join(lines[:row + 1] + lines[row:])
        else:
            lines[row], lines[-1 - row] = lines[-1 - row], lines[row]
            text = "\n".join(lines)
    try:
        lattice = read_htk(text)
    except LatticeFormatError as err:
        assert err.line is None or err.line >= 1
        return
    assert_round_trip(lattice)


def test_a_header_field_named_with_a_hash_survives_the_round_trip():
    """``N=5 #L=4`` reads a field ``#L``; written on a line of its own it would come back as a
    comment (found by the fuzz test)."""
    lattice = read_htk(LINKS_SLF.replace("N=5", "N=5 #X=4", 1))
    assert ["#X", "4"] in lattice.meta["header"]
    assert_round_trip(lattice)
