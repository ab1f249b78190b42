"""A lattice whose states have at most one incoming arc (a chain, an n-best prefix tree) is
expanded by pointer jumping: the same expansion as the level-by-level pass, state for state."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lattices.expand import PAD, _expand_levels, _expand_tree, expand, lattice_word_map
from lattices.lattice import Lattice

SYMBOLS = ("<eps>", "a", "b", "c", "!SIL", "d")


@st.composite
def trees(draw):
    """A random tree: state i > 0 hangs under a random earlier state, by a random symbol
    (epsilons and skipped !SIL included); every leaf is final."""
    n = draw(st.integers(2, 25))
    arcs = [(draw(st.integers(0, i - 1)), i, draw(st.integers(0, len(SYMBOLS) - 1)), -float(i), -1.0)
            for i in range(1, n)]
    parents = {a for a, *_ in arcs}
    finals = {i: (0.0, -0.5) for i in range(n) if i not in parents}
    return Lattice.from_arcs("tree", arcs, finals, SYMBOLS)


def as_sets(expansion):
    """The expansion without its numbering: states as (orig, history), arcs as (src, dst, orig arc)."""
    state = [(int(o), tuple(h.tolist())) for o, h in zip(expansion.state_orig, expansion.state_history)]
    arcs = {(state[int(s)], state[int(d)], int(a)) for s, d, a in zip(expansion.src, expansion.dst, expansion.arc_orig)}
    finals = {(state[int(f)], int(g)) for f, g in zip(expansion.finals, expansion.final_orig)}
    return set(state), arcs, finals, state[0]


@settings(max_examples=150, deadline=None)
@given(trees(), st.integers(1, 4))
def test_the_tree_expansion_equals_the_level_by_level_one(lattice, rho):
    lattice.validate()
    arc_word = lattice_word_map(lattice).numpy()[lattice.words.numpy()]
    tree, levels = _expand_tree(lattice, arc_word, rho, 7), _expand_levels(lattice, arc_word, rho, 7, None, None)
    assert as_sets(tree) == as_sets(levels)
    assert bool((tree.src[1:] >= tree.src[:-1]).all())  # arcs grouped by source
    levels_of = lattice.levels[tree.state_orig]
    assert bool((levels_of[tree.dst] > levels_of[tree.src]).all())  # ids in topological order


def test_a_long_chain_history_is_its_last_words():
    n = 100_000
    lattice = Lattice.from_arcs("chain", [(i, i + 1, 1 + i % 3, 0.0, 0.0) for i in range(n)], {n: (0.0, 0.0)},
                                ("<eps>", "a", "b", "c"))
    expansion = expand(lattice, lattice_word_map(lattice), 3, bos_id=9)
    assert expansion.num_states == n + 1 and expansion.num_arcs == n
    assert expansion.state_history[0].tolist() == [PAD, PAD, 9]
    assert expansion.state_history[2].tolist() == [9, 1, 2]
    assert expansion.state_history[-1].tolist() == [(n - 3) % 3 + 1, (n - 2) % 3 + 1, (n - 1) % 3 + 1]
    assert torch.equal(expansion.arc_orig, torch.arange(n))
