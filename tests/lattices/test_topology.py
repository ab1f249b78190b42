"""lattices.topology: levels and reachability against plain-Python references on random graphs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lattices import topology


@st.composite
def dags(draw, cyclic=False):
    """(num_states, src, dst): arcs go from a lower to a higher id (a DAG), or, with ``cyclic``,
    one extra arc closes a cycle."""
    n = draw(st.integers(2 if cyclic else 1, 12))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=30))
    arcs = [(a, b) if a < b else (b, a) for a, b in pairs if a != b]
    if cyclic:
        a = draw(st.integers(0, n - 2))
        b = draw(st.integers(a + 1, n - 1))
        arcs += [(a, b), (b, a)]
    src = np.array([a for a, _ in arcs], dtype=np.int64)
    dst = np.array([b for _, b in arcs], dtype=np.int64)
    return n, src, dst


def reference_levels(n, src, dst):
    level = [0] * n
    for state in range(n):  # ids are a topological order
        for a, b in zip(src.tolist(), dst.tolist()):
            if a == state:
                level[b] = max(level[b], level[a] + 1)
    return level


def reference_reachable(n, seeds, frm, to):
    mark, stack = [False] * n, list(seeds)
    while stack:
        s = stack.pop()
        if not mark[s]:
            mark[s] = True
            stack += [b for a, b in zip(frm.tolist(), to.tolist()) if a == s]
    return mark


@settings(max_examples=200, deadline=None)
@given(dags())
def test_levels_are_longest_path_depths(graph):
    n, src, dst = graph
    levels = topology.longest_path_levels(n, src, dst)
    assert levels is not None and levels.tolist() == reference_levels(n, src, dst)


@settings(max_examples=100, deadline=None)
@given(dags(cyclic=True))
def test_a_cycle_has_no_levels(graph):
    assert topology.longest_path_levels(*graph) is None


@settings(max_examples=200, deadline=None)
@given(dags(), st.data())
def test_reachable_forward_and_backward(graph, data):
    n, src, dst = graph
    levels = topology.longest_path_levels(n, src, dst)
    seeds = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3)), dtype=np.int64)
    forward = topology.reachable(n, seeds, src, dst, levels)
    backward = topology.reachable(n, seeds, dst, src, levels, backward=True)
    assert forward.tolist() == reference_reachable(n, seeds.tolist(), src, dst)
    assert backward.tolist() == reference_reachable(n, seeds.tolist(), dst, src)


def test_gather_returns_each_states_arcs_in_order():
    src = np.array([2, 0, 2, 1, 0], dtype=np.int64)
    order, starts = topology.arcs_by_state(4, src)
    assert topology.gather(order, starts, np.array([2, 0])).tolist() == [0, 2, 1, 4]
    assert topology.gather(order, starts, np.array([1])).tolist() == [3]
    assert topology.gather(order, starts, np.array([3])).tolist() == []
