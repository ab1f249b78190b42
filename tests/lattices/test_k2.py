"""k2 ``Fsa.as_dict()`` lattices read and written without k2: layouts built by hand as k2 builds them."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lattices.formats import read_lattice_file
from lattices.formats.k2 import load_k2_bytes, read_k2, write_k2
from lattices.lattice import Lattice, LatticeFormatError
from tests.factories import require_shared

from tests.factories import SHARED_DATA  # noqa: E402 (the one definition)
AMI_FILES = sorted((SHARED_DATA / "lattices" / "ami-htk").glob("*.lat.gz"))


def k2_dict(rows: list[tuple[int, int, int, float]], **attributes: object) -> dict[str, object]:
    """What ``k2.Fsa.from_str(...).as_dict()`` gives: int32 (num_arcs, 4) with the float32 score bits."""
    src, dst, label, score = zip(*rows) if rows else ((), (), (), ())
    arcs = torch.stack([torch.tensor(src, dtype=torch.int32), torch.tensor(dst, dtype=torch.int32),
                        torch.tensor(label, dtype=torch.int32),
                        torch.tensor(score, dtype=torch.float32).view(torch.int32)], dim=1)
    return {"arcs": arcs, **attributes}


def fsa_vec_dict(fsas: list[tuple[int, list[tuple[int, int, int, float]]]], **attributes: object) -> dict[str, object]:
    """k2's FsaVecToTensor layout: [num_fsas, 0, row_splits1, row_splits12, arcs...] (local state ids)."""
    state_splits, arc_splits, body = [0], [0], []
    for num_states, rows in fsas:
        state_splits.append(state_splits[-1] + num_states)
        arc_splits.append(arc_splits[-1] + len(rows))
        if rows:
            body.append(k2_dict(rows)["arcs"].reshape(-1))
    head = torch.tensor([len(fsas), 0, *state_splits, *arc_splits], dtype=torch.int32)
    return {"arcs": torch.cat([head, *body]), **attributes}


# An acceptor as in k2's tutorial: 0 -10-> 1, 0 -20-> 2, then -1 arcs into the final state 3.
# Best path: 0 -20-> 2 -> 3, score 0.2 + 0.5 = 0.7 (float32).
ACCEPTOR = [(0, 1, 10, 0.1), (0, 2, 20, 0.2), (1, 3, -1, 0.3), (2, 3, -1, 0.5)]

# A transducer lattice as icefall keeps it: token labels, word aux_labels, lm_scores.
# Words: 0 -cat(1)-> 1 -sat(2)-> 2 -> 3, or 0 -dog(3)-> 2, or 0 -epsilon (aux label 0)-> 2.
# Arcs sorted by source state, as k2 requires.
LATTICE = [(0, 1, 7, -1.5), (0, 2, 9, -4.0), (0, 2, 5, -6.0), (1, 2, 8, -2.25), (2, 3, -1, 0.0)]
WORDS = ("<eps>", "cat", "sat", "dog")


def transducer() -> dict[str, object]:
    return k2_dict(LATTICE, aux_labels=torch.tensor([1, 3, 0, 2, -1], dtype=torch.int32),
                   lm_scores=torch.tensor([-0.5, -1.0, 0.0, -0.25, 0.0], dtype=torch.float32))


def assert_dicts_equal(a: dict[str, object], b: dict[str, object]) -> None:
    assert list(a) == list(b)
    for name, value in a.items():
        if isinstance(value, torch.Tensor):
            assert value.dtype == b[name].dtype and torch.equal(value, b[name]), name
        else:
            assert value == b[name], name


def best_score(lattice: Lattice) -> float:
    """Highest acoustic + graph total over complete paths: a plain-Python Viterbi over the states in
    a topological order of its own (Kahn's algorithm), nothing of the library's search."""
    src, dst = lattice.src.tolist(), lattice.dst.tolist()
    score = (lattice.acoustic + lattice.graph).tolist()
    leaving: dict[int, list[int]] = {}
    waiting = [0] * lattice.num_states
    for a, (s, d) in enumerate(zip(src, dst)):
        leaving.setdefault(s, []).append(a)
        waiting[d] += 1
    ready = [s for s in range(lattice.num_states) if waiting[s] == 0]
    best = [-math.inf] * lattice.num_states
    best[lattice.start] = 0.0
    while ready:
        s = ready.pop()
        for a in leaving.get(s, []):
            d = dst[a]
            best[d] = max(best[d], best[s] + score[a])
            waiting[d] -= 1
            if waiting[d] == 0:
                ready.append(d)
    return max(best[int(f)] + float(fa + fg) for f, fa, fg in zip(lattice.finals, lattice.final_acoustic,
                                                                   lattice.final_graph))


# ------------------------------------------------------------------------------------------ reading
def test_acceptor_words_are_labels_and_symbols_synthesized() -> None:
    (lattice,) = read_k2(k2_dict(ACCEPTOR), key="utt")
    assert lattice.key == "utt" and lattice.num_states == 4 and lattice.start == 0
    assert lattice.finals.tolist() == [3] and lattice.final_acoustic.tolist() == [0.0]
    assert lattice.words.tolist() == [10, 20, 0, 0]  # -1 on the final arcs is epsilon
    assert lattice.acoustic.tolist() == [float(torch.tensor(x, dtype=torch.float32)) for x in (0.1, 0.2, 0.3, 0.5)]
    assert lattice.graph.tolist() == [0.0] * 4
    assert lattice.symbols[:3] == ("<eps>", "1", "2") and len(lattice.symbols) == 21
    assert lattice.meta["k2_symbols"] == "synthesized" and lattice.meta["k2_lm_scores"] is False
    assert "k2_labels" not in lattice.arc_extra
    assert best_score(lattice) == pytest.approx(0.7, abs=1e-6)
    assert_dicts_equal(write_k2([lattice]), k2_dict(ACCEPTOR))  # no lm_scores invented


def test_transducer_with_lm_scores() -> None:
    d = transducer()
    (lattice,) = read_k2(d, symbols=WORDS)
    assert [lattice.word(a) for a in range(5)] == ["cat", "dog", "<eps>", "sat", "<eps>"]
    assert lattice.graph.tolist() == [-0.5, -1.0, 0.0, -0.25, 0.0]
    assert lattice.acoustic.tolist() == [-1.0, -3.0, -6.0, -2.0, 0.0]
    assert (lattice.acoustic + lattice.graph).tolist() == [-1.5, -4.0, -6.0, -2.25, 0.0]  # the k2 scores
    assert lattice.arc_extra["k2_labels"].tolist() == [7, 9, 5, 8, -1]
    assert "k2_symbols" not in lattice.meta and lattice.symbols == WORDS
    assert_dicts_equal(write_k2([lattice]), d)
    (again,) = read_k2(write_k2([lattice]), symbols=WORDS)
    for name in ("src", "dst", "words", "acoustic", "graph", "finals"):
        assert torch.equal(getattr(again, name), getattr(lattice, name)), name


def test_aux_labels_without_lm_scores_and_extra_attributes() -> None:
    d = k2_dict(LATTICE, aux_labels=torch.tensor([1, 3, 0, 2, -1], dtype=torch.int32),
                frame=torch.tensor([0, 3, 0, 1, 9], dtype=torch.int32), note="beam 8", scores=torch.zeros(5))
    (lattice,) = read_k2(d, symbols=WORDS)
    assert lattice.graph.tolist() == [0.0] * 5 and lattice.meta["k2_lm_scores"] is False
    assert lattice.arc_extra["k2_frame"].tolist() == [0, 3, 0, 1, 9]
    assert lattice.meta["k2_attributes"] == {"note": "beam 8"}
    out = write_k2([lattice])
    assert list(out) == ["arcs", "aux_labels", "frame", "note"]  # "scores" is a copy of arcs[:, 3]
    assert torch.equal(out["frame"], d["frame"]) and torch.equal(out["arcs"], d["arcs"])


def test_fsa_vec_layout() -> None:
    # FSA 0: 0 -a-> 1 -> 2 (final); FSA 1: 0 -b-> 1 -c-> 2 -> 3 (final). State ids are per FSA.
    d = fsa_vec_dict([(3, [(0, 1, 4, -1.0), (1, 2, -1, 0.0)]),
                      (4, [(0, 1, 5, -2.0), (1, 2, 6, -3.0), (2, 3, -1, -0.5)])],
                     lm_scores=torch.tensor([-0.25, 0.0, -0.5, -0.75, 0.0]))
    first, second = read_k2(d, key="batch")
    assert (first.key, second.key) == ("batch-0", "batch-1")
    assert (first.num_states, second.num_states) == (3, 4) and second.finals.tolist() == [3]
    assert second.words.tolist() == [5, 6, 0] and second.graph.tolist() == [-0.5, -0.75, 0.0]
    assert second.acoustic.tolist() == [-1.5, -2.25, -0.5]
    assert first.symbols == second.symbols and len(first.symbols) == 7  # one table for the batch
    written = write_k2([first, second])
    assert isinstance(written, list) and len(written) == 2
    assert [x.words.tolist() for x in read_k2(written)] == [[4, 0], [5, 6, 0]]


def test_word_on_an_arc_into_the_final_state_is_kept() -> None:
    # not what k2 writes (it puts -1 there), but meaningful: the word survives through a super-final state
    d = k2_dict(LATTICE, aux_labels=torch.tensor([1, 3, 0, 2, 3], dtype=torch.int32))
    (lattice,) = read_k2(d, symbols=WORDS)
    assert lattice.word(4) == "dog"
    out = write_k2([lattice])
    assert out["arcs"][:, 1].max() == 4 and out["aux_labels"].tolist() == [1, 3, 0, 2, 3, -1]


def test_list_of_dicts_and_empty_list() -> None:
    lattices = read_k2([k2_dict(ACCEPTOR), transducer()], symbols=[str(i) for i in range(21)], key="k")
    assert [x.key for x in lattices] == ["k-0", "k-1"] and lattices[1].words.tolist() == [1, 3, 0, 2, 0]
    assert read_k2([]) == [] and write_k2([]) == []


# ------------------------------------------------------------------------------------------ writing
def test_final_weights_get_a_super_final_state() -> None:
    # 0 -a-> 1 -b-> 2 with finals 1 (weight -1, -2) and 2 (weight 0); start is not state 0.
    lattice = Lattice.from_arcs("w", [(2, 0, 1, -1.0, -0.5), (0, 1, 2, -2.0, 0.0)], {0: (-1.0, -2.0), 1: (0.0, 0.0)},
                                ("<eps>", "a", "b"), start=2)
    out = write_k2([lattice])
    arcs = out["arcs"]
    src, dst, labels = arcs[:, 0], arcs[:, 1], arcs[:, 2]
    last = int(dst.max())
    assert last == 3 and int(src.min()) == 0 and bool((src[1:] >= src[:-1]).all())  # start 0, sorted
    assert torch.equal(labels == -1, dst == last)  # exactly the arcs into the last state are -1
    assert "aux_labels" not in out and out["lm_scores"].tolist() == [-0.5, 0.0, -2.0, 0.0]
    (again,) = read_k2(out, symbols=lattice.symbols)
    assert best_score(again) == best_score(lattice) == -1.5 - 2.0  # 2 -a-> 0 -b-> 1 beats stopping at 0
    assert sorted(again.word(a) for a in range(again.num_arcs)) == ["<eps>", "<eps>", "a", "b"]


def test_single_state_lattice() -> None:
    alone = Lattice.from_arcs("one", [], {0: (0.0, 0.0)}, ("<eps>",))
    out = write_k2([alone])
    assert out["arcs"].tolist() == [[0, 1, -1, 0]]
    assert read_k2(out)[0].num_states == 2


def test_htk_lattice_to_k2_and_back() -> None:
    require_shared(SHARED_DATA / "lattices" / "ami-htk")
    assert AMI_FILES, f"no AMI lattices under {SHARED_DATA}"
    from lattices.formats.htk import read_htk

    lattice = read_htk(gzip.open(AMI_FILES[1], "rt", encoding="utf-8").read())
    out = write_k2([lattice])
    (again,) = read_k2(out, symbols=lattice.symbols)
    assert again.num_arcs == lattice.num_arcs + 1  # words into the final node: one super-final arc
    n, order = lattice.num_arcs, torch.argsort(lattice.src, stable=True)  # k2 sorts arcs by source
    assert torch.equal(again.src[:n], lattice.src[order]) and torch.equal(again.dst[:n], lattice.dst[order])
    assert torch.equal(again.words[:n], lattice.words[order]) and int(again.words[n]) == 0
    total = (lattice.acoustic + lattice.graph)[order].to(torch.float32).to(torch.float64)
    assert torch.equal(again.acoustic[:n] + again.graph[:n], total)
    assert torch.equal(again.graph[:n], lattice.graph[order].to(torch.float32).to(torch.float64))
    assert best_score(again) == pytest.approx(best_score(lattice), abs=1e-2)


# ------------------------------------------------------------------------------------------- files
class NotATensor:
    """Any class: torch.load(weights_only=True) must refuse to unpickle it."""

    def __init__(self) -> None:
        self.payload = [1, 2, 3]


def test_file_saved_with_torch_save(tmp_path: Path) -> None:
    path = tmp_path / "lats.pt"
    torch.save(transducer(), path)
    (lattice,) = read_lattice_file(path, "k2", symbols=WORDS)
    assert lattice.key == "lats" and lattice.word(1) == "dog"
    torch.save([k2_dict(ACCEPTOR), transducer()], path)
    assert [x.key for x in read_lattice_file(str(path))] == ["lats-0", "lats-1"]  # format auto: a torch.save zip
    assert load_k2_bytes(path.read_bytes(), key="up")[1].key == "up-1"


def test_file_with_pickled_object_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evil.pt"
    torch.save({"arcs": NotATensor()}, path)
    with pytest.raises(LatticeFormatError, match="cannot load") as info:
        read_lattice_file(path)
    assert info.value.source == str(path) and str(path) in str(info.value)
    with pytest.raises(LatticeFormatError) as info:
        load_k2_bytes(path.read_bytes(), source="upload")
    assert info.value.source == "upload"


@pytest.mark.parametrize("content", [None, b"", b"not a torch file", b"PK\x03\x04broken"])
def test_missing_or_damaged_file(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "bad.pt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(LatticeFormatError) as info:
        read_lattice_file(path, "k2")
    assert info.value.source == str(path)


# ------------------------------------------------------------------------------------------ errors
def _score_bits(value: float) -> int:
    return int(torch.tensor([value], dtype=torch.float32).view(torch.int32))


@pytest.mark.parametrize(("obj", "field", "words"), [
    ({}, "arcs", "missing"),
    ({"arcs": [[0, 1, -1, 0]]}, "arcs", "int32"),
    ({"arcs": torch.zeros(2, 4)}, "arcs", "int32"),
    ({"arcs": torch.zeros(2, 3, dtype=torch.int32)}, "arcs", "4 columns"),
    ({"arcs": torch.zeros(2, 4, 1, dtype=torch.int32)}, "arcs", "int32"),
    ({"arcs": torch.tensor([[0, 1, -1, _score_bits(math.nan)]], dtype=torch.int32)}, "arcs", "NaN"),
    ({**k2_dict(ACCEPTOR), "aux_labels": torch.zeros(3, dtype=torch.int32)}, "aux_labels", "4 entries"),
    ({**k2_dict(ACCEPTOR), "aux_labels": torch.zeros(4)}, "aux_labels", "integer"),
    ({**k2_dict(ACCEPTOR), "aux_labels": [0, 0, 0, 0]}, "aux_labels", "tensor"),
    ({**k2_dict(ACCEPTOR), "lm_scores": torch.zeros(5)}, "lm_scores", "4 entries"),
    ({**k2_dict(ACCEPTOR), "lm_scores": torch.tensor([0, 0, math.nan, 0])}, "lm_scores", "finite"),
    ({**k2_dict(ACCEPTOR), "frame": torch.zeros(2)}, "frame", "4 entries"),
    (k2_dict([]), "arcs", "no arcs"),
    (k2_dict([(0, 1, 3, 0.0)]), "arcs", "label -1"),
    (k2_dict([(0, 1, -1, 0.0), (1, 2, -1, 0.0)]), "arcs", "label -1"),
    (k2_dict([(0, 1, 2, 0.0), (0, 2, -1, 0.0)]), None, "state 1 is dead"),
    (k2_dict([(0, 2, -1, 0.0), (0, 5, 3, 0.0)]), "arcs", "outside"),
    (k2_dict([(0, 1, -2, 0.0), (0, 2, -1, 0.0)]), "arcs", "label -2 is negative"),
    (k2_dict([(0, 1, 3, 0.0), (1, 9000000, -1, 0.0)]), "arcs", "unreachable"),
    (k2_dict(LATTICE, aux_labels=torch.tensor([1, -1, 3, 0, -1], dtype=torch.int32)), "aux_labels", "-1"),
    ({"arcs": torch.tensor([5, 0, 0, 1], dtype=torch.int32)}, "arcs", "FSAs"),
    ({"arcs": torch.tensor([1, 0, 0, 2, 0, 1], dtype=torch.int32)}, "arcs", "arc entries"),
    ({"arcs": torch.tensor([1, 0, 3, 2, 0, 0], dtype=torch.int32)}, "arcs", "row_splits1"),
    ({"arcs": torch.zeros(2, 4, dtype=torch.int32).to_sparse()}, "arcs", "dense"),
    ({**k2_dict(ACCEPTOR), "lm_scores": torch.zeros(4, device="meta")}, "lm_scores", "dense"),
])
def test_errors_name_the_field(obj: dict[str, object], field: str | None, words: str) -> None:
    with pytest.raises(LatticeFormatError) as info:
        read_k2(obj, source="f.pt", key="u")
    assert info.value.field == field if field is None else info.value.field.startswith(field)
    assert words in str(info.value) and (info.value.source, info.value.key) == ("f.pt", "u")


def test_error_for_word_outside_symbols_and_bad_inputs() -> None:
    with pytest.raises(LatticeFormatError, match="outside the symbol table") as info:
        read_k2(transducer(), symbols=("<eps>", "cat"))
    assert info.value.field == "aux_labels"
    with pytest.raises(LatticeFormatError, match="too large") as info:
        read_k2(k2_dict([(0, 1, 2**31 - 1, 0.0), (1, 2, -1, 0.0)]))  # no table of 2**31 made-up words
    assert info.value.field == "arcs"
    for bad in ("arcs", 3, None, b"x", [k2_dict(ACCEPTOR), 5]):
        with pytest.raises(LatticeFormatError):
            read_k2(bad)  # type: ignore[arg-type]
    with pytest.raises(LatticeFormatError) as info:
        read_k2([k2_dict(ACCEPTOR), {"arcs": torch.zeros(1)}])
    assert info.value.field == "[1].arcs"


# ------------------------------------------------------------------------------------------ fuzzing
_TENSORS = st.one_of(
    st.lists(st.integers(-3, 6), max_size=24).map(lambda v: torch.tensor(v, dtype=torch.int32)),
    st.lists(st.integers(-3, 6), min_size=4, max_size=24).map(
        lambda v: torch.tensor(v[:len(v) // 4 * 4], dtype=torch.int32).reshape(-1, 4)),
    st.lists(st.floats(allow_nan=True, width=32), max_size=6).map(lambda v: torch.tensor(v, dtype=torch.float32)),
    st.lists(st.integers(-3, 6), max_size=6).map(lambda v: torch.tensor(v, dtype=torch.int64)),
)
_VALUES = st.one_of(_TENSORS, st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=3))
_DICTS = st.dictionaries(st.sampled_from(["arcs", "aux_labels", "lm_scores", "scores", "labels", "frame"]),
                         _VALUES, max_size=5)


SYMBOLS = ("<eps>", *(f"w{i}" for i in range(1, 10)))
_F32 = st.floats(-100, 100, width=32, allow_nan=False)


@st.composite
def k2_fsas(draw) -> tuple[int, list[tuple[int, int, int, float]], list[int] | None, list[float] | None]:
    """One valid k2 FSA as k2 would hold it: (num_states, arcs sorted by source, aux_labels or
    None, lm_scores or None). A chain 0 -> ... -> n-2 and forward arcs among those states, and
    -1 arcs into the final state n-1 (from n-2 at least)."""
    n = draw(st.integers(2, 6))
    pairs = [(i, i + 1) for i in range(n - 2)] + draw(st.lists(
        st.tuples(st.integers(0, n - 2), st.integers(0, n - 2)).filter(lambda p: p[0] < p[1]), max_size=4))
    rows = [(s, d, draw(st.integers(0, 9)), draw(_F32)) for s, d in pairs]
    rows += [(s, n - 1, -1, draw(_F32)) for s in sorted({n - 2, *draw(st.lists(st.integers(0, n - 2), max_size=2))})]
    rows.sort(key=lambda row: row[0])
    aux = [-1 if row[2] == -1 else draw(st.integers(0, 9)) for row in rows] if draw(st.booleans()) else None
    lm = [0.0 if row[2] == -1 else draw(_F32) for row in rows] if draw(st.booleans()) else None
    return n, rows, aux, lm


def expected_arcs(fsa) -> list[tuple[int, int, str, float, float]]:
    """(src, dst, word, acoustic, graph) of each arc by k2's conventions (module docstring): the
    word is the aux label, else the label, -1 being epsilon; graph = lm_scores (0 without),
    acoustic = score - lm_scores, from the float32 values k2 keeps."""
    _, rows, aux, lm = fsa
    out = []
    for i, (src, dst, label, score) in enumerate(rows):
        word = (aux[i] if aux is not None else label)
        graph = float(numpy.float32(lm[i])) if lm is not None else 0.0
        out.append((src, dst, SYMBOLS[max(word, 0)], float(numpy.float32(score)) - graph, graph))
    return out


def spelled_arcs(lattice: Lattice) -> list[tuple[int, int, str, float, float]]:
    return [(int(s), int(d), lattice.symbols[int(w)], float(a), float(g)) for s, d, w, a, g in
            zip(lattice.src, lattice.dst, lattice.words, lattice.acoustic, lattice.graph)]


def as_dict(fsa) -> dict[str, object]:
    _, rows, aux, lm = fsa
    d = k2_dict(rows)
    if aux is not None:
        d["aux_labels"] = torch.tensor(aux, dtype=torch.int32)
    if lm is not None:
        d["lm_scores"] = torch.tensor(lm, dtype=torch.float32)
    return d


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(k2_fsas(), min_size=1, max_size=3), st.sampled_from(["dict", "list", "vec"]))
def test_fuzz_valid_fsas_read_as_k2_defines_them(fsas, layout: str) -> None:
    if layout == "vec":
        # one FsaVec: the per-arc attributes run over all FSAs, so all or none have them
        fsas = [(n, rows, [-1 if r[2] == -1 else r[2] for r in rows], [0.0] * len(rows)) for n, rows, _, _ in fsas]
        obj = fsa_vec_dict([(n, rows) for n, rows, _, _ in fsas],
                           aux_labels=torch.tensor(sum((aux for _, _, aux, _ in fsas), []), dtype=torch.int32),
                           lm_scores=torch.zeros(sum(len(rows) for _, rows, _, _ in fsas), dtype=torch.float32))
    elif layout == "dict":
        fsas, obj = fsas[:1], as_dict(fsas[0])
    else:
        obj = [as_dict(fsa) for fsa in fsas]
    lattices = read_k2(obj, symbols=SYMBOLS, source="x.pt")
    assert len(lattices) == len(fsas)
    for lattice, fsa in zip(lattices, fsas):
        assert (lattice.num_states, lattice.start, lattice.finals.tolist()) == (fsa[0], 0, [fsa[0] - 1])
        assert spelled_arcs(lattice) == expected_arcs(fsa)
        assert (lattice.final_acoustic.tolist(), lattice.final_graph.tolist()) == ([0.0], [0.0])


@st.composite
def broken_fsas(draw) -> tuple[dict[str, object], str, str]:
    """(a valid single-FSA dict with one thing broken, the field the error must name, a phrase
    the message must hold)."""
    fsa = draw(k2_fsas())
    n, rows, aux, lm = fsa
    inner = [i for i, row in enumerate(rows) if row[2] != -1]
    kind = draw(st.sampled_from(["aux -1", "aux id", "lm length", "label", "label id"]))
    if kind in ("aux -1", "aux id") and inner:
        aux = [-1 if row[2] == -1 else 0 for row in rows]
        k = draw(st.sampled_from(inner))
        aux[k] = -1 if kind == "aux -1" else len(SYMBOLS) + draw(st.integers(0, 5))
        d = as_dict((n, rows, aux, lm))
        return d, "aux_labels", f"arc {k} has aux_label -1" if kind == "aux -1" else f"word id {aux[k]} is outside"
    if kind == "lm length":
        d = as_dict(fsa)
        d["lm_scores"] = torch.zeros(len(rows) + draw(st.sampled_from([-1, 1, 3])), dtype=torch.float32)
        return d, "lm_scores", "one per arc"
    if kind == "label" and inner:
        k = draw(st.sampled_from(inner))
        rows = [(s, d, -draw(st.integers(2, 9)) if i == k else w, x) for i, (s, d, w, x) in enumerate(rows)]
        return as_dict((n, rows, None, lm)), "arcs", f"label {rows[k][2]} is negative"
    k = draw(st.sampled_from(inner)) if inner else None
    if k is None:  # only -1 arcs: give the arcs a wrong type instead
        d = as_dict(fsa)
        d["arcs"] = d["arcs"].tolist()
        return d, "arcs", "must be an int32 tensor"
    rows = [(s, d, len(SYMBOLS) + 3 if i == k else w, x) for i, (s, d, w, x) in enumerate(rows)]
    return as_dict((n, rows, None, lm)), "arcs", f"word id {len(SYMBOLS) + 3} is outside"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_fsas())
def test_fuzz_a_broken_fsa_names_its_field(case) -> None:
    d, field, phrase = case
    with pytest.raises(LatticeFormatError) as info:
        read_k2(d, symbols=SYMBOLS, source="x.pt")
    assert info.value.field == field and phrase in info.value.reason, str(info.value)
    assert info.value.source == "x.pt"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(k2_fsas().map(lambda fsa: (fsa, as_dict(fsa))),
                 st.one_of(_DICTS, st.lists(_DICTS, max_size=3), _VALUES).map(lambda obj: (None, obj))))
def test_fuzz_random_structures(case) -> None:
    """Random structures (valid FSAs among them): a valid FSA reads as k2 defines it, and
    whatever else is read survives the writer."""
    fsa, obj = case
    try:
        lattices = read_k2(obj, symbols=SYMBOLS if fsa is not None else None)  # type: ignore[arg-type]
    except LatticeFormatError as err:
        assert fsa is None, str(err)
        return
    if fsa is not None:
        (lattice,) = lattices
        assert spelled_arcs(lattice) == expected_arcs(fsa)
    for lattice in lattices:
        assert isinstance(lattice, Lattice)
        (again,) = read_k2(write_k2([lattice]), symbols=lattice.symbols)
        assert best_score(again) == pytest.approx(best_score(lattice), abs=1e-4)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 19), st.integers(-2, 5)), min_size=1, max_size=4),
       st.booleans())
def test_fuzz_garbled_valid_dicts(edits: list[tuple[int, int]], drop_aux: bool) -> None:
    d = transducer()
    flat = d["arcs"].clone().reshape(-1)  # type: ignore[union-attr]
    for where, value in edits:
        if where % 4 != 3:  # leave the score bits alone: they are any float
            flat[where] = value
    d["arcs"] = flat.reshape(-1, 4)
    if drop_aux:
        del d["aux_labels"]
    try:
        lattices = read_k2(d, symbols=[str(i) for i in range(10)])
    except LatticeFormatError:
        return
    (lattice,) = lattices
    out = write_k2(lattices)
    (again,) = read_k2(out, symbols=lattice.symbols)
    assert best_score(again) == pytest.approx(best_score(lattice), abs=1e-5)


def test_the_default_acoustic_scale_is_one_for_k2_and_a_tenth_for_kaldi() -> None:
    """icefall's k2 scores are already scaled: Kaldi's 0.1 would shrink them tenfold."""
    from lattices.formats import read_lattices
    from lattices.rescore import RescoreOptions, default_acoustic_scale

    (k2,) = read_k2(transducer(), symbols=WORDS)
    (kaldi,) = read_lattices("utt\n0 1 cat 1,2,\n1\n\n", "kaldi")
    (htk,) = read_lattices("VERSION=1.0\nlmscale=12.0\nN=2 L=1\nI=0 W=!NULL\nI=1 W=cat\nJ=0 S=0 E=1 a=-1 l=-1\n", "htk")
    assert (default_acoustic_scale(k2), default_acoustic_scale(kaldi)) == (1.0, 0.1)
    assert default_acoustic_scale(htk) == pytest.approx(1 / 12)
    assert RescoreOptions().scales_for(k2) == (1.0, 0.0)
    assert RescoreOptions(acoustic_scale=0.5).scales_for(k2) == (0.5, 0.0)  # a given scale wins
