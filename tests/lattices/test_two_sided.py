"""The two-sided expansion (left history and right future on every state) against brute-force
enumeration of the paths of small random lattices and n-best lists."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from lattices.expand import PAD, ExpansionTooLarge, expand, expand_two_sided, lattice_word_map
from lattices.formats.nbest import NBestHypothesis, NBestList, nbest_to_lattice
from tests.factories import all_paths, random_lattice


def expanded_paths(expansion) -> list[tuple[list[int], int]]:
    """Every start-to-final path of an expansion: (expanded arcs, expanded final index)."""
    out: dict[int, list[int]] = {}
    for x, s in enumerate(expansion.src.tolist()):
        out.setdefault(s, []).append(x)
    final_of = {s: i for i, s in enumerate(expansion.finals.tolist())}
    dst = expansion.dst.tolist()
    paths = []

    def walk(state: int, arcs: list[int]) -> None:
        if state in final_of:
            paths.append((arcs, final_of[state]))
        for x in out.get(state, []):
            walk(dst[x], arcs + [x])

    walk(0, [])
    return paths


def check(lattice, rho: int, future: int) -> None:
    words = lattice_word_map(lattice)
    bos, eos = len(lattice.symbols), len(lattice.symbols) + 1
    two = expand_two_sided(lattice, words, rho, future, bos, eos)
    arc_orig, finals = two.arc_orig.tolist(), two.final_orig.tolist()
    got = Counter((tuple(arc_orig[x] for x in arcs), finals[f]) for arcs, f in expanded_paths(two))
    expected = Counter((tuple(arcs), f) for arcs, f in all_paths(lattice))
    assert got == expected  # every path exactly once: the same arcs and the same final state
    history, fut = two.state_history.tolist(), two.state_future.tolist()
    src, dst = two.src.tolist(), two.dst.tolist()
    for arcs, f in expanded_paths(two):
        lm = [int(words[lattice.words[arc_orig[x]]]) for x in arcs]
        tokens = [bos] + [w for w in lm if w != PAD] + [eos]
        position = 0
        for x, w in zip(arcs, lm):
            if w == PAD:
                continue
            position += 1  # this word is tokens[position]
            left = tokens[max(0, position - rho): position]
            right = tokens[position + 1: position + 1 + future]
            assert [h for h in history[src[x]] if h != PAD] == left
            assert [t for t in fut[dst[x]] if t != PAD] == right
        final_state = two.finals[f].item()
        assert [h for h in history[final_state] if h != PAD] == tokens[-1 - rho:-1]
        assert [t for t in fut[final_state] if t != PAD] in ([eos], [])  # [] only for an empty path's start


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("rho,future", [(1, 1), (2, 1), (2, 2), (3, 3)])
def test_two_sided_expansion_equals_brute_force_enumeration(seed, rho, future):
    check(random_lattice(seed, num_states=6 + seed % 3, extra_arcs=5), rho, future)


@pytest.mark.parametrize("seed", range(4))
def test_two_sided_expansion_of_an_nbest_list(seed):
    import random

    rng = random.Random(seed)
    vocab = ["a", "b", "c", "d", "<eps>"]
    hyps = tuple(NBestHypothesis(tuple(rng.choice(vocab[:4]) for _ in range(rng.randint(0, 5))), {"s": -1.0 * i})
                 for i in range(6))
    check(nbest_to_lattice(NBestList("u", hyps)), 2, 2)


def test_left_side_is_the_one_sided_expansions_and_the_budget_holds():
    lattice = random_lattice(3, num_states=8, extra_arcs=8)
    words = lattice_word_map(lattice)
    bos, eos = len(lattice.symbols), len(lattice.symbols) + 1
    two = expand_two_sided(lattice, words, 2, 2, bos, eos)
    one = expand(lattice, words, 2, bos)
    assert {tuple(h) for h in two.state_history.tolist()} == {tuple(h) for h in one.state_history.tolist()}
    assert two.num_arcs >= one.num_arcs
    with pytest.raises(ExpansionTooLarge):
        expand_two_sided(lattice, words, 2, 2, bos, eos, max_arcs=two.num_arcs - 1)
    assert torch.equal(two.src, torch.sort(two.src).values)  # arcs grouped by source, in topological order
