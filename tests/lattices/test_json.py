"""The JSON lattice form: round trips (also of lattices from other formats), errors with JSON paths, fuzzing."""

from __future__ import annotations

import copy
import gzip
import json
import math
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lattices.formats.jsonfmt import lattice_from_json, lattice_to_json
from lattices.lattice import Lattice, LatticeFormatError

from tests.factories import SHARED_DATA  # noqa: E402 (the one definition)
HTK_FILES = sorted((SHARED_DATA / "lattices" / "ami-htk").glob("*.lat.gz")) + sorted(
    (SHARED_DATA / "lattices" / "theanolm").glob("*.slf"))

# Two paths: "hello world" (-10.5 - 2 - 20.25 - 3.5 - 0.5 = -36.75) and "<eps> world" (-12 - 20.25
# - 3.5 - 0.5 = -36.25): the best path is the one with the epsilon arc.
EXAMPLE = {"key": "utt1", "start": 0,
           "arcs": [[0, 1, "hello", -10.5, -2.0], [0, 1, None, -12.0, 0.0], [1, 2, "world", -20.25, -3.5]],
           "finals": [[2, 0.0, -0.5]], "num_states": 3, "meta": {"lmscale": 14.0}}


def spelled(lattice: Lattice) -> tuple:
    """Everything the JSON form keeps, words by spelling (ids depend on the symbol table)."""
    arcs = [(int(s), int(d), lattice.symbols[int(w)], float(a), float(g)) for s, d, w, a, g in zip(
        lattice.src, lattice.dst, lattice.words, lattice.acoustic, lattice.graph)]
    finals = list(zip(lattice.finals.tolist(), lattice.final_acoustic.tolist(), lattice.final_graph.tolist()))
    return lattice.key, lattice.num_states, lattice.start, arcs, finals, lattice.meta


def through_text(lattice: Lattice) -> Lattice:
    return lattice_from_json(json.loads(json.dumps(lattice_to_json(lattice))))


def test_example_reads_and_round_trips() -> None:
    lattice = lattice_from_json(copy.deepcopy(EXAMPLE), source="req")
    assert spelled(lattice) == ("utt1", 3, 0, [(0, 1, "hello", -10.5, -2.0), (0, 1, "<eps>", -12.0, 0.0),
                                               (1, 2, "world", -20.25, -3.5)], [(2, 0.0, -0.5)], {"lmscale": 14.0})
    assert lattice.symbols == ("<eps>", "hello", "world")
    assert lattice_to_json(lattice) == EXAMPLE
    assert json.loads(json.dumps(lattice_to_json(lattice))) == EXAMPLE


def test_optional_parts_text_input_and_eps_spelling() -> None:
    text = '{"key": "u", "start": 0, "arcs": [[0, 1, "<eps>", -1, 2]], "finals": [[1, 0, 0]]}'
    lattice = lattice_from_json(text)
    assert lattice.words.tolist() == [0] and lattice.num_states == 2 and lattice.meta == {}
    assert lattice.acoustic.dtype == torch.float64 and lattice.graph.tolist() == [2.0]
    out = lattice_to_json(lattice)
    assert out["arcs"] == [[0, 1, None, -1.0, 2.0]] and "meta" not in out and out["num_states"] == 2


def test_negative_zero_is_written_as_zero() -> None:
    lattice = Lattice.from_arcs("z", [(0, 1, 1, -0.0, -0.0)], {1: (-0.0, 0.0)}, ("<eps>", "a"))
    text = json.dumps(lattice_to_json(lattice))
    assert "-0" not in text and spelled(lattice_from_json(text))[3] == [(0, 1, "a", 0.0, 0.0)]


def test_lattices_from_other_formats_survive() -> None:
    from lattices.formats.k2 import read_k2

    made = Lattice.from_arcs("m", [(0, 1, 2, -1.25, -0.5), (1, 2, 1, -3.0, 0.0), (0, 2, 0, -7.0, -1.0)],
                             {1: (-0.5, -0.25), 2: (0.0, 0.0)}, ("<eps>", "x", "y"), meta={"lmscale": 10.0},
                             arc_extra={"htk_v": ("1", None, "2")})
    arcs = torch.tensor([[0, 1, 3, 0], [1, 2, -1, 0]], dtype=torch.int32)
    arcs[:, 3] = torch.tensor([-2.5, 0.0], dtype=torch.float32).view(torch.int32)
    (from_k2,) = read_k2({"arcs": arcs, "lm_scores": torch.tensor([-0.5, 0.0])}, key="k")
    for lattice in (made, from_k2):
        again = through_text(lattice)
        assert spelled(again) == spelled(lattice)
        assert again.arc_extra == {}  # extras are not part of the JSON form
        assert lattice_to_json(again) == lattice_to_json(lattice)


@pytest.mark.parametrize("path", HTK_FILES, ids=lambda p: p.name)
def test_real_htk_lattices_survive(path: Path) -> None:
    from lattices.formats.htk import read_htk

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        lattice = read_htk(handle.read(), source=str(path))
    again = through_text(lattice)
    assert spelled(again) == spelled(lattice)
    assert again.meta["header"] == lattice.meta["header"]


# ------------------------------------------------------------------------------------------ errors
def _with(**changes: object) -> dict:
    obj = copy.deepcopy(EXAMPLE)
    for name, value in changes.items():
        if value is _DROP:
            del obj[name]
        else:
            obj[name] = value
    return obj


_DROP = object()
_ARCS = EXAMPLE["arcs"]


@pytest.mark.parametrize(("obj", "field", "words"), [
    ([EXAMPLE], None, "JSON object"),
    (_with(key=_DROP), "key", "missing"),
    (_with(key=7), "key", "string"),
    (_with(finals=_DROP), "finals", "missing"),
    (_with(start=-1), "start", "negative"),
    (_with(start=True), "start", "integer"),
    (_with(start=1.0), "start", "integer"),
    (_with(extra=1), "extra", "unknown"),
    (_with(arcs={"0": 1}), "arcs", "list"),
    (_with(arcs=[_ARCS[0], [0, 1, "x", -1.0]]), "arcs[1]", "5 entries"),
    (_with(arcs=[_ARCS[0], "0 1 x"]), "arcs[1]", "5 entries"),
    (_with(arcs=[_ARCS[0], [0, 1, 3, -1.0, 0.0]]), "arcs[1][2]", "word"),
    (_with(arcs=[_ARCS[0], [0, 1, "", -1.0, 0.0]]), "arcs[1][2]", "non-empty"),
    (_with(arcs=[_ARCS[0], [0, 1, "x", "-1", 0.0]]), "arcs[1][3]", "number"),
    (_with(arcs=[_ARCS[0], [0, 1, "x", -1.0, math.nan]]), "arcs[1][4]", "finite"),
    (_with(arcs=[_ARCS[0], [0, 1, "x", -1.0, 10 ** 400]]), "arcs[1][4]", "too large"),
    (_with(arcs=[_ARCS[0], [0, "1", "x", -1.0, 0.0]]), "arcs[1][1]", "integer"),
    (_with(arcs=[_ARCS[0], [0, 10 ** 30, "x", -1.0, 0.0]]), None, "at most"),
    (_with(finals=[]), "finals", "at least one"),
    (_with(finals=[[2, 0.0]]), "finals[0]", "3 entries"),
    (_with(finals=[[2, 0.0, 0.0], [2, 0.0, 0.0]]), "finals[1][0]", "twice"),
    (_with(finals=[[2, 0.0, None]]), "finals[0][2]", "number"),
    (_with(num_states=4), "num_states", "0..2"),
    (_with(num_states="3"), "num_states", "integer"),
    (_with(meta=[1]), "meta", "object"),
    (_with(arcs=[*_ARCS, [2, 0, "x", 0.0, 0.0]]), None, "cycle"),
    (_with(arcs=_ARCS[:2]), None, "unreachable"),
])
def test_errors_name_the_json_path(obj: object, field: str | None, words: str) -> None:
    with pytest.raises(LatticeFormatError) as info:
        lattice_from_json(obj, source="request")
    assert info.value.field == field and words in str(info.value) and info.value.source == "request"
    if isinstance(obj, dict) and isinstance(obj.get("key"), str):
        assert info.value.key == "utt1"


def test_invalid_json_text_names_the_line() -> None:
    with pytest.raises(LatticeFormatError) as info:
        lattice_from_json('{"key": "u",\n "start": 0,\n "arcs": [,]}', source="body")
    assert info.value.line == 3 and "not valid JSON" in str(info.value)


# ------------------------------------------------------------------------------------------ fuzzing
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 5) | st.floats(allow_nan=True) | st.sampled_from(["a", "<eps>", ""]),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(
        st.sampled_from(["key", "start", "arcs", "finals", "num_states", "meta", "x"]), children, max_size=6),
    max_leaves=30)


def expected_spelling(obj: dict) -> tuple:
    """What :func:`spelled` must give for a valid JSON object, read off the object itself (the
    module docstring's rules: null and "<eps>" are epsilon, num_states defaults to the largest
    state + 1, meta to {})."""
    arcs = [(s, d, "<eps>" if w is None else w, float(a), float(g)) for s, d, w, a, g in obj["arcs"]]
    states = [s for s, d, *_ in obj["arcs"]] + [d for s, d, *_ in obj["arcs"]] + [f[0] for f in obj["finals"]]
    num_states = obj.get("num_states", max([obj["start"], *states]) + 1)
    finals = sorted((f[0], float(f[1]), float(f[2])) for f in obj["finals"])  # kept in state order
    return obj["key"], num_states, obj["start"], arcs, finals, obj.get("meta", {})


_SCORE = st.one_of(st.integers(-10**6, 10**6), st.floats(-1e6, 1e6, allow_nan=False))


@st.composite
def valid_objects(draw) -> dict:
    """A valid JSON lattice: a chain 0 -> 1 -> ... -> n-1 (so every state is on a path to the last,
    final, state) plus forward arcs; some other states final too."""
    n = draw(st.integers(2, 7))
    pairs = [(i, i + 1) for i in range(n - 1)] + draw(st.lists(
        st.tuples(st.integers(0, n - 2), st.integers(1, n - 1)).filter(lambda p: p[0] < p[1]), max_size=6))
    pairs = draw(st.permutations(pairs))
    words = st.sampled_from([None, "<eps>", "a", "b", "hello", "é", "<unk>", "!SIL"])
    arcs = [[s, d, draw(words), draw(_SCORE), draw(_SCORE)] for s, d in pairs]
    finals = [[state, draw(_SCORE), draw(_SCORE)] for state in draw(st.permutations(
        [n - 1, *draw(st.lists(st.integers(0, n - 2), unique=True, max_size=2))]))]
    obj = {"key": draw(st.sampled_from(["utt1", "a b", "é"])), "start": 0, "arcs": arcs, "finals": finals}
    if draw(st.booleans()):
        obj["num_states"] = n
    if draw(st.booleans()):
        obj["meta"] = draw(st.dictionaries(st.sampled_from(["lmscale", "x"]), st.integers(0, 20), max_size=2))
    return obj


@st.composite
def broken_objects(draw) -> tuple[dict, str]:
    """(a valid object with one value broken, the JSON path of that value)."""
    obj = draw(valid_objects())
    kind = draw(st.sampled_from(["state", "word", "score", "final", "final state", "name", "key", "start"]))
    row = draw(st.integers(0, 10**6))
    if kind in ("state", "word", "score"):
        r = row % len(obj["arcs"])
        column, value = {"state": (row % 2, draw(st.sampled_from(["0", -1, 1.5, True, None]))),
                         "word": (2, draw(st.sampled_from([5, "", ["a"], True]))),
                         "score": (3 + row % 2, draw(st.sampled_from(["x", None, True, [1.0]])))}[kind]
        obj["arcs"][r][column] = value
        return obj, f"arcs[{r}][{column}]"
    if kind in ("final", "final state"):
        r = row % len(obj["finals"])
        column = 0 if kind == "final state" else 1 + row % 2
        obj["finals"][r][column] = draw(st.sampled_from(["x", None, False]))
        return obj, f"finals[{r}][{column}]"
    if kind == "name":
        obj[draw(st.sampled_from(["final", "Arcs", "weights"]))] = 1
        return obj, next(name for name in obj if name not in ("key", "start", "arcs", "finals", "num_states", "meta"))
    obj[kind] = draw(st.sampled_from([None, 1.5, ["utt"]] if kind == "key" else ["0", None, -1, 1.5]))
    return obj, kind


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_objects())
def test_fuzz_valid_objects_read_as_written(obj: dict) -> None:
    lattice = lattice_from_json(json.loads(json.dumps(obj)), source="req")
    assert spelled(lattice) == expected_spelling(obj)
    first_seen = list(dict.fromkeys(w for _, _, w, _, _ in obj["arcs"] if w not in (None, "<eps>")))
    assert lattice.symbols == ("<eps>", *first_seen)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_objects())
def test_fuzz_a_broken_value_is_named_by_its_json_path(case: tuple[dict, str]) -> None:
    obj, field = case
    with pytest.raises(LatticeFormatError) as info:
        lattice_from_json(json.loads(json.dumps(obj)), source="req")
    assert info.value.field == field and info.value.source == "req", (obj, str(info.value))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(valid_objects().map(lambda obj: (True, obj)), _JSON.map(lambda obj: (False, obj))))
def test_fuzz_random_structures(case: tuple[bool, object]) -> None:
    """Random structures (and valid objects among them): whatever is read is what the object
    says; whatever is refused names its field (or the whole object is not a lattice object)."""
    valid, obj = case
    try:
        lattice = lattice_from_json(obj)
    except LatticeFormatError as err:
        assert not valid, (obj, str(err))
        return
    assert spelled(lattice) == expected_spelling(obj)  # type: ignore[arg-type]
    assert lattice_to_json(through_text(lattice)) == lattice_to_json(lattice)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["arcs", "finals"]), st.integers(0, 9), st.integers(0, 4), _JSON),
                min_size=1, max_size=3))
def test_fuzz_garbled_valid_object(edits: list[tuple[str, int, int, object]]) -> None:
    obj = copy.deepcopy(EXAMPLE)
    for name, row, column, value in edits:
        rows = obj[name]
        if rows:
            row_list = rows[row % len(rows)]
            row_list[column % len(row_list)] = value
    try:
        lattice = lattice_from_json(obj)
    except LatticeFormatError as err:
        assert err.key == "utt1"
        return
    assert lattice_to_json(lattice_from_json(lattice_to_json(lattice))) == lattice_to_json(lattice)
