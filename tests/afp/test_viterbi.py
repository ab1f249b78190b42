"""afp.viterbi (the compiled multi-point best path of afp tune's line searches) against the
engine's Dag.best_path at every point, ties included, on random lattices of small integer
scores (many equal scores and equal lines) and of real-valued ones."""

from __future__ import annotations

import numpy
import pytest
import torch

from afp.viterbi import ArcLines, Graph, best_paths
from tests.afp.test_lattice_mert import graph


def reference(dag, lines: ArcLines, at: float) -> tuple[float, list[int]]:
    """Dag.best_path under the scores ``lines`` give at ``at``, each ``g * t + a`` (the kernel's order)."""
    scored = dag.with_scores(torch.from_numpy(lines.arc_g * at + lines.arc_a),
                             torch.from_numpy(lines.final_g * at + lines.final_a))
    value, path = scored.best_path()
    return value, path.tolist()


@pytest.mark.parametrize("seed", range(16))
def test_each_point_gets_the_engines_best_path(seed):
    _, dag, arc_parts, final_parts, _ = graph(seed, integer=seed % 2 == 0)
    rng = numpy.random.default_rng(200 + seed)
    v, dv = rng.integers(-2, 3, (2, 3)).astype(float) if seed % 2 == 0 else rng.normal(size=(2, 3))
    lines = ArcLines(arc_parts @ v, arc_parts @ dv, final_parts @ v, final_parts @ dv)
    points = numpy.array([-2.0, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 3.0, 0.5, *rng.normal(size=4)])
    totals, paths = best_paths(Graph.of(dag), lines, points)
    for t, at in enumerate(points):
        value, path = reference(dag, lines, float(at))
        assert paths[t].tolist() == path, (seed, t)
        assert totals[t] == value  # the same sums, operation for operation


def test_no_reachable_final_state_is_an_error():
    _, dag, arc_parts, final_parts, _ = graph(3)
    lines = ArcLines(arc_parts[:, 0], arc_parts[:, 1], numpy.full(len(final_parts), -numpy.inf), final_parts[:, 1])
    with pytest.raises(ValueError, match="no final state is reachable"):
        best_paths(Graph.of(dag), lines, numpy.array([0.0]))


def test_a_read_only_install_compiles_without_a_cache(monkeypatch):
    """Where numba finds nowhere to write its cache it refuses ``cache=True`` (RuntimeError at
    compilation, at the first call); the kernel is then compiled uncached, and works."""
    import numba

    from lattices.compiled import compiled

    real = numba.njit

    def njit(*args, **flags):
        if flags.get("cache"):
            raise RuntimeError("cannot cache function 'f': no locator available for file 'f.py'")
        return real(*args, **flags)

    monkeypatch.setattr(numba, "njit", njit)
    add_one = compiled(lambda x: x + 1)
    assert add_one(1) == 2
    assert type(add_one.dispatcher._cache).__name__ == "NullCache"  # numba's dispatcher, uncached
