"""Epsilon removal, (pruned) determinization and minimization (lattices.determinize, lattices.minimize):
exact against brute force on many small random lattices (several score components, epsilons,
fillers, many paths per word sequence, ties), Kaldi's pruning guarantees, and tiny lattices."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
import torch

from lattices.determinize import (DeterminizationTooLarge, _best_in_groups, _best_of_groups_by_components, determinize,
                                  ordering_vector, score_components)
from lattices.expand import DEFAULT_SKIP
from lattices.lattice import Lattice
from lattices.minimize import minimize, push

SYMBOLS = ("<eps>", "a", "b", "c", "!SIL", "<s>")  # !SIL and <s> are skipped by default
SKIPPED = {0, 4, 5}
NAMES = {1: ("acoustic",), 2: ("acoustic", "graph"), 3: ("decoder", "ctc", "lm")}


def make_lattice(arcs: list[tuple[int, int, int, tuple[float, ...]]], finals: dict[int, tuple[float, ...]],
                 components: int = 2, symbols: tuple[str, ...] = SYMBOLS) -> Lattice:
    """A lattice from ``(src, dst, word, component values)`` arcs and final state -> values; two
    components are ``acoustic``/``graph``, other counts are named scores (``NAMES``)."""
    if components == 2:
        return Lattice.from_arcs("t", [(s, d, k, *x) for s, d, k, x in arcs], finals, symbols)
    plain = Lattice.from_arcs("t", [(s, d, k, 0.0, 0.0) for s, d, k, _ in arcs], {f: (0.0, 0.0) for f in finals},
                              symbols)
    order = plain.finals.tolist()
    scores = {n: torch.tensor([x[i] for *_, x in arcs], dtype=torch.float64) for i, n in enumerate(NAMES[components])}
    final_scores = {n: torch.tensor([finals[f][i] for f in order], dtype=torch.float64)
                    for i, n in enumerate(NAMES[components])}
    return plain.replace(scores=scores, final_scores=final_scores).validate()


def random_lattice(seed: int, components: int = 2, integer: bool = True, unweighted: bool = False) -> Lattice:
    """Random acyclic lattice: a chain plus random forward arcs, three words, epsilons and fillers,
    final states inside the graph; integer scores (many exact ties) or random floats."""
    rng = random.Random(seed)
    n = rng.randint(2, 8)

    def values() -> tuple[float, ...]:
        if unweighted:
            return (0.0,) * components
        return tuple(float(rng.randint(-3, 0)) if integer else -rng.random() * 4 for _ in range(components))

    def word() -> int:
        return rng.choice([0, 1, 1, 2, 2, 3, 4, 5])

    arcs = [(s, s + 1, word(), values()) for s in range(n - 1)]
    for _ in range(rng.randint(0, 12)):
        s = rng.randrange(n - 1)
        arcs.append((s, rng.randrange(s + 1, n), word(), values()))
    finals = {s: values() for s in range(1, n) if rng.random() < 0.3}
    finals[n - 1] = values()
    return make_lattice(arcs, finals, components)


def random_weights(seed: int, components: int) -> np.ndarray:
    rng = random.Random(seed + 1000)
    return np.array([rng.choice([0.5, 1.0, 2.0, 0.25]) for _ in range(components)])


def paths(lattice: Lattice, skipped: set[int] = SKIPPED) -> list[tuple[tuple[int, ...], np.ndarray, list[int]]]:
    """Every complete path: (word sequence without skipped symbols, component totals, arc ids)."""
    _, x, fx = score_components(lattice)
    out: dict[int, list[int]] = {}
    for a, s in enumerate(lattice.src.tolist()):
        out.setdefault(s, []).append(a)
    final = {s: i for i, s in enumerate(lattice.finals.tolist())}
    dst, words = lattice.dst.tolist(), lattice.words.tolist()
    found = []

    def walk(state: int, arcs: list[int]) -> None:
        if state in final:
            seq = tuple(words[a] for a in arcs if words[a] not in skipped)
            found.append((seq, x[arcs].sum(axis=0) + fx[final[state]], list(arcs)))
        for a in out.get(state, []):
            walk(dst[a], arcs + [a])

    walk(lattice.start, [])
    return found


def best_vectors(lattice: Lattice, w: np.ndarray, skipped: set[int] = SKIPPED) -> dict[tuple[int, ...], np.ndarray]:
    """Each word sequence's best component vector: highest ``w . x``, ties to the highest components."""
    best: dict[tuple[int, ...], np.ndarray] = {}
    for seq, total, _ in paths(lattice, skipped):
        if seq not in best or (float(total @ w), *total) > (float(best[seq] @ w), *best[seq]):
            best[seq] = total
    return best


def assert_same_best(got: dict, want: dict, exact: bool) -> None:
    assert set(got) == set(want)
    for seq in want:
        if exact:
            assert np.array_equal(got[seq], want[seq]), (seq, got[seq], want[seq])
        else:
            np.testing.assert_allclose(got[seq], want[seq], atol=1e-5, err_msg=str(seq))


def is_deterministic(lattice: Lattice) -> bool:
    """Whether no arc is epsilon (id 0) and no state has two arcs with the same word."""
    pairs = list(zip(lattice.src.tolist(), lattice.words.tolist()))
    return all(word != 0 for _, word in pairs) and len(set(pairs)) == len(pairs)


def snapshot(lattice: Lattice) -> list:
    return [t.clone() for t in (lattice.src, lattice.dst, lattice.words, lattice.acoustic, lattice.graph,
                                lattice.finals, lattice.final_acoustic, lattice.final_graph)]


# ------------------------------------------------------------------------------ tiny lattices
def tiny() -> Lattice:
    # 0 -a(-1,-1)-> 1 -b(-1,0)-> 3
    # 0 -a(-2,0)-> 2 -!SIL(-0.5,0)-> 4 -b(0,-0.25)-> 3
    # 2 -<eps>(-3,0)-> 3, final 3 (0,0)
    # sequences under w=(1,1): "a b" best (-2.5,-0.25) (via the filler; the direct path is -3);
    # "a" (-5, 0) (through the epsilon)
    # determinized: 0 -a-> 1 (final), 1 -b-> 2 (final); 3 states, 2 arcs
    arcs = [(0, 1, 1, (-1.0, -1.0)), (1, 3, 2, (-1.0, 0.0)), (0, 2, 1, (-2.0, 0.0)), (2, 4, 4, (-0.5, 0.0)),
            (4, 3, 2, (0.0, -0.25)), (2, 3, 0, (-3.0, 0.0))]
    return make_lattice(arcs, {3: (0.0, 0.0)})


def test_tiny_determinize_keeps_each_sequence_best_vector():
    out = determinize(tiny(), {"acoustic": 1.0, "graph": 1.0})
    assert (out.num_states, out.num_arcs) == (3, 2)
    assert is_deterministic(out)
    assert_same_best(best_vectors(out, np.ones(2)), {(1, 2): np.array([-2.5, -0.25]), (1,): np.array([-5.0, 0.0])},
                     exact=True)


def test_tiny_weights_change_which_path_is_best():
    # with w = (1, 10) the direct "a b" path (-2,-1): -12 loses to (-2.5,-0.25): -5; with w = (10, 1)
    # the direct one wins: -21 against -25.25
    assert_same_best(best_vectors(determinize(tiny(), [10.0, 1.0]), np.array([10.0, 1.0])),
                     {(1, 2): np.array([-2.0, -1.0]), (1,): np.array([-5.0, 0.0])}, exact=True)


def test_tiny_minimize_merges_equal_futures():
    # a b | b b | a c | b c (all weights 0): the minimal automaton is 0 -{a,b}-> 1 -{b,c}-> 2
    arcs = [(0, 1, 1), (1, 2, 2), (0, 3, 2), (3, 2, 2), (0, 4, 1), (4, 2, 3), (0, 5, 2), (5, 2, 3)]
    lattice = make_lattice([(s, d, k, (0.0, 0.0)) for s, d, k in arcs], {2: (0.0, 0.0)})
    out = minimize(determinize(lattice, [1.0, 1.0]))
    assert (out.num_states, out.num_arcs, out.start) == (3, 4, 0)
    assert sorted(zip(out.src.tolist(), out.words.tolist(), out.dst.tolist())) == [(0, 1, 1), (0, 2, 1), (1, 2, 2),
                                                                                   (1, 3, 2)]


def test_tiny_minimize_pushes_weights_to_merge_states():
    # 0 -a(0)-> 1 -c(-1)-> 3 and 0 -b(-5)-> 2 -c(-3)-> 3, final 3: states 1 and 2 differ by a
    # constant (-2) once pushed, so they merge: 0 -{a: -1, b: -8}-> 1 -c(0)-> 2
    arcs = [(0, 1, 1, (0.0,)), (1, 3, 3, (-1.0,)), (0, 2, 2, (-5.0,)), (2, 3, 3, (-3.0,))]
    out = minimize(make_lattice(arcs, {3: (0.0,)}, components=1))
    assert out.num_states == 3
    assert_same_best(best_vectors(out, np.ones(1)), {(1, 3): np.array([-1.0]), (2, 3): np.array([-8.0])}, exact=True)


def test_lattices_without_words():
    # a single final state: stays one state with its final weight
    single = make_lattice([], {0: (-1.0, -2.0)})
    out = minimize(determinize(single, [1.0, 1.0]))
    assert (out.num_states, out.num_arcs) == (1, 0)
    assert (out.final_acoustic.tolist(), out.final_graph.tolist()) == ([-1.0], [-2.0])
    # 0 -<eps>(-1,0)-> 1 -!SIL(0,-1)-> 2, 0 -<eps>(-3,0)-> 2, final 2 (0, 0): only the empty
    # sequence, best (-1,-1) under w = (1, 1)
    only_eps = make_lattice([(0, 1, 0, (-1.0, 0.0)), (1, 2, 4, (0.0, -1.0)), (0, 2, 0, (-3.0, 0.0))], {2: (0.0, 0.0)})
    out = determinize(only_eps, [1.0, 1.0])
    assert (out.num_states, out.num_arcs) == (1, 0)
    assert (out.final_acoustic.tolist(), out.final_graph.tolist()) == ([-1.0], [-1.0])


def test_multiple_components_with_named_scores_keep_their_names():
    lattice = random_lattice(3, components=3)
    out = minimize(determinize(lattice, {"decoder": 1.0, "ctc": 0.5, "lm": 2.0, "new_lm": 7.0}))
    assert set(out.scores) == set(out.final_scores) == {"decoder", "ctc", "lm"}
    assert not bool(out.acoustic.any())


# ------------------------------------------------------------------------------ brute force
@pytest.mark.parametrize("components,integer", [(1, True), (2, True), (3, True), (2, False), (3, False)])
def test_determinize_is_exact_and_deterministic(components, integer):
    for seed in range(80):
        lattice = random_lattice(seed, components, integer)
        w = random_weights(seed, components)
        before = snapshot(lattice)
        out = determinize(lattice, w)
        assert all(torch.equal(a, b) for a, b in zip(before, snapshot(lattice)))  # input unchanged
        assert is_deterministic(out), seed
        assert not bool(torch.isin(out.words, torch.tensor(sorted(SKIPPED))).any())  # fillers removed like epsilons
        assert out.start == 0
        assert_same_best(best_vectors(out, w), best_vectors(lattice, w), exact=integer)
        again = determinize(out, w)  # idempotent: a deterministic lattice determinizes to itself
        assert (again.num_states, again.num_arcs) == (out.num_states, out.num_arcs)
        assert_same_best(best_vectors(again, w), best_vectors(out, w), exact=integer)


def test_determinize_single_component_is_exact_for_every_positive_weight():
    for seed in range(30):
        lattice = random_lattice(seed, components=1, integer=False)
        out = determinize(lattice, [1.0])
        for scale in (0.1, 3.0):
            scaled = np.array([scale])
            assert_same_best(best_vectors(out, scaled), best_vectors(lattice, scaled), exact=False)


def right_functions(best: dict[tuple[int, ...], np.ndarray], unweighted: bool) -> int:
    """Brute-force size of the minimal deterministic (trim) acceptor of ``best`` (sequence ->
    vector): the number of distinct right functions ``v -> best[u v]`` over the prefixes ``u``,
    taken up to a constant vector (each normalised by its componentwise maximum)."""
    prefixes = {seq[:i] for seq in best for i in range(len(seq) + 1)}
    classes = set()
    for u in prefixes:
        future = {v[len(u):]: x for v, x in best.items() if v[:len(u)] == u}
        top = np.max(np.stack(list(future.values())), axis=0)
        classes.add(tuple(sorted((v, () if unweighted else tuple(np.round(x - top, 6))) for v, x in future.items())))
    return len(classes)


@pytest.mark.parametrize("components,integer,unweighted", [(1, True, True), (2, True, False), (3, False, False),
                                                           (1, False, False)])
def test_minimize_is_exact_and_minimal(components, integer, unweighted):
    for seed in range(80):
        lattice = random_lattice(seed, components, integer, unweighted)
        w = random_weights(seed, components)
        det = determinize(lattice, w)
        before = snapshot(det)
        out = minimize(det)
        assert all(torch.equal(a, b) for a, b in zip(before, snapshot(det)))
        assert is_deterministic(out) and out.start == 0
        assert out.num_states <= det.num_states
        assert_same_best(best_vectors(out, w), best_vectors(lattice, w), exact=False)
        assert out.num_states == right_functions(best_vectors(lattice, w), unweighted), seed
        again = minimize(out)
        assert (again.num_states, again.num_arcs) == (out.num_states, out.num_arcs)


def test_minimize_of_a_nondeterministic_lattice_keeps_every_path_total():
    for seed in range(40):
        lattice = random_lattice(seed, 2)
        out = minimize(lattice)
        assert out.num_states <= lattice.num_states
        want = sorted((seq, tuple(x)) for seq, x, _ in paths(lattice, skipped=set()))
        got = sorted((seq, tuple(x)) for seq, x, _ in paths(out, skipped=set()))
        assert {s for s, _ in got} == {s for s, _ in want}
        assert_same_best(best_vectors(out, np.ones(2), set()), best_vectors(lattice, np.ones(2), set()), exact=False)


def test_push_keeps_path_totals_and_zeroes_the_best_future():
    lattice = random_lattice(5, 2, integer=False)
    pushed = push(lattice)
    for (s1, x1, a1), (s2, x2, a2) in zip(paths(lattice, set()), paths(pushed, set())):
        assert a1 == a2 and s1 == s2
        np.testing.assert_allclose(x1, x2, atol=1e-9)


# ------------------------------------------------------------------------------ pruning
def pruning_scores(lattice: Lattice, w: np.ndarray) -> dict[tuple[int, ...], float]:
    """Each sequence's best pruning score (``w . x`` of its paths): what the beam is measured on."""
    best: dict[tuple[int, ...], float] = {}
    for seq, x, _ in paths(lattice):
        best[seq] = max(best.get(seq, -math.inf), float(x @ w))
    return best


@pytest.mark.parametrize("components", [1, 2, 3])
def test_pruned_determinize_keeps_kaldis_guarantees(components):
    for seed, beam in itertools.product(range(60), (0.0, 0.7, 2.0, 5.0)):
        lattice = random_lattice(seed, components, integer=False)
        w = random_weights(seed, components)
        out = determinize(lattice, w, beam=beam)
        assert is_deterministic(out)
        score = pruning_scores(lattice, w)
        top = max(score.values())
        full = best_vectors(lattice, w)
        kept = best_vectors(out, w)
        # (a) every sequence within the beam is kept, with its exact best vector
        within = {s for s, v in score.items() if v >= top - beam - 1e-9}
        assert within <= set(kept), (seed, beam)
        for seq, x in kept.items():
            if seq in within:
                np.testing.assert_allclose(x, full[seq], atol=1e-6)
            else:  # outside the beam: the components of one of its paths
                assert any(np.allclose(x, total, atol=1e-6) for s, total, _ in paths(lattice) if s == seq)
        # (b) every arc and final weight is on a kept path whose sequence is within the beam
        used_arcs, used_finals = set(), set()
        final_index = {s: i for i, s in enumerate(out.finals.tolist())}
        for seq, _, arcs in paths(out):
            if score[seq] >= top - beam - 1e-9:
                used_arcs.update(arcs)
                used_finals.add(int(out.dst[arcs[-1]]) if arcs else out.start)
        assert used_arcs == set(range(out.num_arcs)), (seed, beam)
        assert used_finals == set(final_index), (seed, beam)


def test_beam_zero_keeps_the_best_sequence_and_infinite_beam_keeps_all():
    for seed in range(40):
        lattice = random_lattice(seed, 2, integer=False)
        w = random_weights(seed, 2)
        full = best_vectors(lattice, w)
        best_seq = max(full, key=lambda s: float(full[s] @ w))
        assert best_seq in best_vectors(determinize(lattice, w, beam=0.0), w)
        assert set(best_vectors(determinize(lattice, w, beam=math.inf), w)) == set(full)


def test_max_states_reports_the_beam_that_fits():
    hit = 0
    for seed in range(60):
        lattice = random_lattice(seed, 2, integer=False)
        w = random_weights(seed, 2)
        size = determinize(lattice, w).num_states
        if size < 3:
            continue
        limit = size - 1
        with pytest.raises(DeterminizationTooLarge) as caught:
            determinize(lattice, w, beam=100.0, max_states=limit)
        error = caught.value
        hit += 1
        assert error.max_states == limit
        if error.effective_beam is None:  # the best path alone needs more states
            continue
        assert 0 <= error.effective_beam <= 100.0
        score = pruning_scores(lattice, w)
        top = max(score.values())
        if error.partial is not None:  # every sequence within the effective beam is kept, exactly
            kept = best_vectors(error.partial, w)
            assert {s for s, v in score.items() if v >= top - error.effective_beam} <= set(kept)
            for seq, x in kept.items():
                np.testing.assert_allclose(x, best_vectors(lattice, w)[seq], atol=1e-6)
        fits = determinize(lattice, w, beam=error.effective_beam, max_states=limit)  # the beam that fits does
        assert fits.num_states <= limit
        assert {s for s, v in score.items() if v >= top - error.effective_beam} <= set(best_vectors(fits, w))
    assert hit > 20


# ------------------------------------------------------------------------------ input checks
def test_bad_arguments_raise_value_errors():
    lattice = tiny()
    for weights, message in (([1.0], "2 score components"), ({"acoustic": 1.0}, "lack"), ([1.0, -1.0], "non-negative"),
                             ([0.0, 0.0], "not all zero"), ([math.nan, 1.0], "finite")):
        with pytest.raises(ValueError, match=message):
            determinize(lattice, weights)
    with pytest.raises(ValueError, match="beam"):
        determinize(lattice, [1.0, 1.0], beam=-1.0)
    with pytest.raises(ValueError, match="max_states"):
        determinize(lattice, [1.0, 1.0], max_states=0)
    assert ordering_vector(torch.tensor([1.0, 2.0]), ("acoustic", "graph")).tolist() == [1.0, 2.0]


def test_skip_symbols_are_chosen_by_the_caller():
    lattice = tiny()
    out = determinize(lattice, [1.0, 1.0], skip=())  # !SIL is now a word: "a !SIL b" is its own sequence
    assert set(best_vectors(out, np.ones(2), {0})) == {(1, 2), (1, 4, 2), (1,)}


def test_larger_random_lattices_agree_with_brute_force():
    rng = random.Random(7)
    for seed in range(6):
        n = 14
        arcs = [(s, s + 1, rng.choice([0, 1, 2, 3, 4]), (-rng.random(), -rng.random())) for s in range(n - 1)]
        for _ in range(30):
            s = rng.randrange(n - 1)
            arcs.append((s, rng.randrange(s + 1, min(n, s + 4)), rng.choice([0, 1, 2, 3, 4]),
                         (-rng.random(), -rng.random())))
        lattice = make_lattice(arcs, {n - 1: (0.0, 0.0), n - 3: (-1.0, 0.0)})
        w = np.array([1.0, 0.3])
        out = minimize(determinize(lattice, w))
        assert_same_best(best_vectors(out, w), best_vectors(lattice, w), exact=False)


def dag_of(lattice: Lattice, w: np.ndarray, skipped: set[int] = SKIPPED):
    """The lattice as a :class:`lattices.search.Dag` scored by ``w . x``, and its labels
    (skipped symbols -1), for the k-best searches."""
    from lattices.search import Dag

    _, x, fx = score_components(lattice)
    labels = lattice.words.clone()
    labels[torch.isin(labels, torch.tensor(sorted(skipped)))] = -1
    dag = Dag(lattice.num_states, lattice.start, lattice.src, lattice.dst, torch.from_numpy(x @ w), lattice.finals,
              torch.from_numpy(fx @ w), lattice.levels)
    return dag, labels


@pytest.mark.parametrize("seed", range(4))
def test_n_best_of_a_large_lattice_survives_pruned_determinization_and_minimization(seed):
    # a 300-state, 3000-arc random lattice (PocketSphinx-like: fillers, epsilons, many paths per
    # sequence): the input's best distinct word sequences within the beam (by A* search over
    # sequences, lattices.kbest) are exactly the output's best paths, with the same scores
    from lattices.kbest import search_distinct

    rng = np.random.default_rng(seed)
    n, extra = 300, 2700
    src = np.concatenate([np.arange(n - 1), rng.integers(0, n - 1, extra)])
    dst = np.concatenate([np.arange(1, n), np.minimum(src[n - 1:] + rng.integers(1, 12, extra), n - 1)])
    words = rng.integers(0, len(SYMBOLS), len(src))
    x = -rng.uniform(0, 3, (len(src), 2))
    lattice = make_lattice([(int(s), int(d), int(k), tuple(v)) for s, d, k, v in zip(src, dst, words, x)],
                           {n - 1: (0.0, 0.0), n - 2: (-0.5, -0.5)})
    w, beam, k = np.array([1.0, 0.5]), 1.0, 40
    out = minimize(determinize(lattice, w, beam=beam))
    assert is_deterministic(out)
    dag, labels = dag_of(lattice, w)
    want = [(score, tuple(labels[arcs][labels[arcs] >= 0].tolist())) for score, arcs in search_distinct(dag, labels, k).found]
    want = [(score, seq) for score, seq in want if score >= want[0][0] - beam]
    out_dag, out_labels = dag_of(out, w)  # deterministic: its best paths are its best distinct sequences
    got = [(score, tuple(out_labels[arcs][out_labels[arcs] >= 0].tolist()))
           for score, arcs in search_distinct(out_dag, out_labels, len(want)).found]
    assert [seq for _, seq in got] == [seq for _, seq in want]
    np.testing.assert_allclose([s for s, _ in got], [s for s, _ in want], atol=1e-6)
    assert len(want) > 3


def _determinized(lattice: Lattice, w, **kwargs) -> tuple:
    """Everything of a determinization that must not change: the graph, the scores (bit for bit),
    the report, and a state limit's beam."""
    report: dict = {}
    try:
        out, stop = determinize(lattice, w, report=report, **kwargs), None
    except DeterminizationTooLarge as error:
        out, stop = error.partial, error.effective_beam
    if out is None:
        return None, stop, report
    scores = [(values.tolist(), finals.tolist()) for values, finals in out.named_scores().values()]
    return (out.num_states, out.src.tolist(), out.dst.tolist(), out.words.tolist(), out.finals.tolist(), scores,
            stop, report)


@pytest.mark.parametrize("components", [1, 2, 3])
def test_dropping_rows_before_grouping_changes_nothing(monkeypatch, components):
    """The determinizer drops the input's arcs and a state's rows whose best complete path is
    outside the beam (by more than a rounding margin) before the epsilon closure and before
    grouping rows by (word, destination): the same lattice, scores and report as grouping every
    row of every arc, on small lattices and on a large one with many paths."""
    import lattices.determinize as module

    rng = np.random.default_rng(components)
    n, extra = 40, 300
    src = np.concatenate([np.arange(n - 1), rng.integers(0, n - 1, extra)])
    dst = np.concatenate([np.arange(1, n), np.minimum(src[n - 1:] + rng.integers(1, 10, extra), n - 1)])
    words = rng.integers(0, len(SYMBOLS), len(src))
    x = np.round(-rng.uniform(0, 3, (len(src), components)), 1)  # many ties
    large = make_lattice([(int(s), int(d), int(k), tuple(v)) for s, d, k, v in zip(src, dst, words, x)],
                         {n - 1: (0.0,) * components, n - 2: (-0.5,) * components}, components)
    cases = [(large, 0.5, None), (large, 1.5, None), (large, 4.0, 30)]
    cases += [(random_lattice(seed, components, integer=seed % 2 == 0), beam, None)
              for seed in range(30) for beam in (0.0, 1.0, 3.0)]
    pruned_arcs = 0
    for lattice, beam, limit in cases:
        w = random_weights(int(beam * 10), components)
        results = []
        for rows in (0, 10 ** 9):
            monkeypatch.setattr(module, "PREFILTER_ROWS", rows)
            results.append(_determinized(lattice, w, beam=beam, max_states=limit))
        with monkeypatch.context() as every_arc:
            every_arc.setattr(module, "_within_beam", lambda g, w, beam, levels: (g, False))
            results.append(_determinized(lattice, w, beam=beam, max_states=limit))
        assert results[0] == results[1] and results[0][:-1] == results[2][:-1], (beam, limit)
        vector = ordering_vector(w, score_components(lattice)[0])
        went = module._within_beam(module._graph(lattice, vector, DEFAULT_SKIP), vector, beam,
                                   lattice.levels.numpy())[1]
        # the report: whether the beam took anything out, arcs outside it included
        assert results[0][-1]["cut"] == (results[2][-1]["cut"] or went), (beam, limit)
        pruned_arcs += went
    assert pruned_arcs > 10  # the arcs outside the beam were there to take out


@pytest.mark.parametrize("seed", range(30))
def test_the_compiled_best_of_groups_is_the_sort_by_every_component(seed):
    """Each group's best row (highest score, then highest components in order, then lowest index)
    and highest p, as the numpy sort over every component gives them: rows drawn from a few
    values, so that scores and components tie often."""
    rng = np.random.default_rng(seed)
    n, c = int(rng.integers(1, 60)), int(rng.integers(1, 4))
    key = rng.integers(0, 7, n).astype(np.int64)
    x = rng.integers(-2, 3, (n, c)).astype(np.float64) / 4
    score = x.sum(axis=1) if seed % 2 else rng.integers(0, 3, n).astype(np.float64)  # ties within and across
    p = rng.normal(size=n)
    best, top = _best_in_groups(key, score, x, p)
    expected_best, expected_top = _best_of_groups_by_components([key], x, score, p)
    assert best.tolist() == expected_best.tolist() and top.tolist() == expected_top.tolist()
