"""Exact line searches on lattices (afp.mert.LatticeLines, issue 40) against brute force: every
path of small random lattices listed, the best path's errors along a line evaluated exhaustively,
ties included (the compiled multi-point best path itself: tests/afp/test_viterbi.py)."""

from __future__ import annotations

import random

import numpy
import pytest
import torch

from afp import mert
from lattices.search import Dag
from tests.factories import all_paths, random_lattice


def graph(seed: int, components: int = 3, integer: bool = False):
    """A random lattice as the search sees it: its Dag, float64 ``(X, C)`` arc and ``(G, C)``
    final components (small integers when ``integer``: many equal scores), and each path's errors."""
    lattice = random_lattice(seed, num_states=7 + seed % 4, extra_arcs=8 + seed % 7)
    rng = numpy.random.default_rng(seed)
    shape_arc, shape_fin = (lattice.num_arcs, components), (len(lattice.finals), components)
    if integer:
        arc_parts, final_parts = rng.integers(-3, 4, shape_arc).astype(float), rng.integers(-2, 3, shape_fin).astype(float)
    else:
        arc_parts, final_parts = rng.normal(size=shape_arc), rng.normal(size=shape_fin)
    empty = torch.empty(0, dtype=torch.float64)
    dag = Dag(lattice.num_states, lattice.start, lattice.src, lattice.dst, empty, lattice.finals, empty, lattice.levels)
    words = lattice.words.tolist()
    return lattice, dag, arc_parts, final_parts, lambda arcs: sum(words[a] for a in arcs.tolist()) % 5


def best_errors(dag: Dag, arc_parts, final_parts, errors_of, vector) -> int:
    """The errors of rescoring's decision under ``vector``: Dag.best_path, as the engine runs it."""
    scored = dag.with_scores(torch.from_numpy(arc_parts @ vector), torch.from_numpy(final_parts @ vector))
    _, arcs = scored.best_path()
    return errors_of(arcs.numpy())


def step_value(cuts: list[float], values: list[int], t: float) -> int:
    return values[sum(1 for c in cuts if c < t)]


@pytest.mark.parametrize("seed", range(40))
def test_a_lattice_line_search_is_what_exhaustive_evaluation_finds(seed):
    integer = seed % 2 == 1  # every other lattice is full of equal scores and equal lines
    lattice, dag, arc_parts, final_parts, errors_of = graph(seed, integer=integer)
    rng = random.Random(seed)
    v = numpy.array([rng.choice([0.0, 0.5, 1.0, 2.0]) if integer else rng.uniform(-1, 2) for _ in range(3)])
    dv = numpy.zeros(3)
    dv[seed % 3] = 1.0
    lines = mert.LatticeLines(dag, arc_parts, final_parts, lambda point: v + point["t"] * dv, errors_of)
    lo, hi = -4.0, 5.0
    cuts, values = lines.steps({"t": 0.0}, {"t": 1.0}, lo, hi)
    # brute force: every path's line, the envelope's breakpoints where the errors change
    paths = all_paths(lattice)
    table = numpy.stack([arc_parts[arcs].sum(axis=0) + final_parts[final] for arcs, final in paths])
    errors = numpy.array([errors_of(numpy.array(arcs, dtype=numpy.int64)) for arcs, _ in paths])
    brute_cuts, _ = mert._steps(errors, table @ v, table @ dv, lo, hi)
    assert all(lo < c < hi for c in cuts) and cuts == sorted(cuts)
    # exhaustively: between any two breakpoints of either, the errors are rescoring's own
    marks = sorted({lo, hi, *cuts, *brute_cuts})
    probes = [(x + y) / 2 for x, y in zip(marks, marks[1:])] + list(numpy.linspace(lo + 1e-3, hi - 1e-3, 41))
    for t in probes:
        if min((abs(t - c) for c in marks[1:-1]), default=1.0) < 1e-7:
            continue
        assert step_value(cuts, values, t) == best_errors(dag, arc_parts, final_parts, errors_of, v + t * dv), t
    if not integer:  # distinct lines: the same breakpoints as the brute-force envelope's
        assert cuts == pytest.approx(brute_cuts, abs=1e-9)
    assert lines.errors({"t": 0.5}) == best_errors(dag, arc_parts, final_parts, errors_of, v + 0.5 * dv)


@pytest.mark.parametrize("seed", range(15))
def test_coordinate_descent_on_lattices_chooses_what_the_table_of_all_paths_chooses(seed):
    """The whole search (line searches over two coordinates, restarts) on lattices equals the
    same search on each lattice's every path as an n-best table: the same point, the same errors."""
    graphs = [graph(seed * 10 + k) for k in range(4)]
    names = ("c0", "c1")

    def vector(point):
        return numpy.array([point["c0"], point["c1"], 1.0])

    lines = [mert.LatticeLines(dag, ap, fp, vector, err) for _, dag, ap, fp, err in graphs]
    tables = []
    for lattice, _, ap, fp, err in graphs:
        paths = all_paths(lattice)
        parts = numpy.stack([ap[arcs].sum(axis=0) + fp[final] for arcs, final in paths])
        tables.append(mert.Table(parts, numpy.array([err(numpy.array(a, dtype=numpy.int64)) for a, _ in paths]), 0.1))

    class Problem(mert.Problem):
        def vector(self, point, acoustic_scale):
            return vector(point)

    saved = dict(mert.RANGES)
    mert.RANGES.update({"c0": (-2.0, 3.0), "c1": (-2.0, 3.0)})
    try:
        start = {"c0": 1.0, "c1": 0.5}
        on_lattices = mert.search(Problem([], names, {}, lines), start, names, restarts=2, seed=seed)
        on_tables = mert.search(Problem(tables, names, {}), start, names, restarts=2, seed=seed)
    finally:
        mert.RANGES.clear()
        mert.RANGES.update(saved)
    assert on_lattices.point == pytest.approx(on_tables.point)
    assert on_lattices.errors == on_tables.errors
    truth = sum(best_errors(dag, ap, fp, err, vector(on_lattices.point)) for _, dag, ap, fp, err in graphs)
    assert on_lattices.errors == truth
