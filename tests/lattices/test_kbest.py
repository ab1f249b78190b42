"""The k best distinct label sequences (lattices.kbest): exact against brute force, bounded work."""

from __future__ import annotations

import random

import pytest
import torch

from lattices.kbest import search_distinct
from lattices.lattice import Lattice
from lattices.rescore import RescoreOptions, rescore
from lattices.search import Dag
from lm.checkpoint import LoadedModel
from lm.scorer import LMScorer
from tests.factories import replacing_options, DEVICES, LATTICE_SYMBOLS, make_model, tiny_vocab


def make_dag(num_states: int, arcs: list[tuple[int, int, float, int]], finals: dict[int, float],
             device: str = "cpu") -> tuple[Dag, torch.Tensor]:
    """A Dag over states 0..n-1 (start 0, level = state id) from ``(src, dst, score, label)`` arcs."""
    src, dst, score, labels = zip(*arcs) if arcs else ((), (), (), ())
    long = {"dtype": torch.int64, "device": device}
    dag = Dag(num_states, 0, torch.tensor(src, **long), torch.tensor(dst, **long),
              torch.tensor(score, dtype=torch.float64, device=device), torch.tensor(list(finals), **long),
              torch.tensor(list(finals.values()), dtype=torch.float64, device=device),
              torch.arange(num_states, device=device))
    return dag, torch.tensor(labels, **long)


def random_dag(seed: int, device: str = "cpu", ties: bool = True) -> tuple[Dag, torch.Tensor]:
    """Small random DAG with epsilons (label -1), parallel arcs, few labels (many paths per
    sequence), final states inside the graph and dead states; integer scores (many exact ties)
    when ``ties``, else scores that tie with probability 0."""
    rng = random.Random(seed)
    n = rng.randint(1, 8)

    def score() -> float:
        return float(rng.choice([0, -1, -2])) if ties else -rng.random()

    arcs = [(s, s + 1, score(), rng.choice([-1, 0, 1, 2])) for s in range(n - 1)]
    for _ in range(rng.randint(0, 14) if n > 1 else 0):
        s = rng.randrange(n - 1)
        arcs.append((s, rng.randrange(s + 1, n), score(), rng.choice([-1, -1, 0, 1, 2])))
    finals = {s: score() for s in range(n) if rng.random() < 0.4} or {n - 1: 0.0}
    return make_dag(n, arcs, finals, device)


def brute_force(dag: Dag, labels: torch.Tensor) -> list[tuple[float, tuple[int, ...]]]:
    """Every path by depth-first search; the best score of each label sequence, sorted by
    (score descending, sequence ascending)."""
    src, dst, score, label = (t.tolist() for t in (dag.src, dag.dst, dag.score, labels))
    final = dict(zip(dag.finals.tolist(), dag.final_score.tolist()))
    best: dict[tuple[int, ...], float] = {}

    def walk(state: int, total: float, sequence: tuple[int, ...]) -> None:
        if state in final:
            best[sequence] = max(best.get(sequence, -float("inf")), total + final[state])
        for a in range(len(src)):
            if src[a] == state:
                walk(dst[a], total + score[a], sequence + ((label[a],) if label[a] >= 0 else ()))

    walk(dag.start, 0.0, ())
    return sorted(((s, q) for q, s in best.items()), key=lambda item: (-item[0], item[1]))


def check_path(dag: Dag, labels: torch.Tensor, arcs: torch.Tensor, score: float) -> tuple[int, ...]:
    """Assert ``arcs`` is a complete path scoring ``score``; return its label sequence."""
    src, dst = dag.src.cpu()[arcs].tolist(), dag.dst.cpu()[arcs].tolist()
    assert src == [dag.start, *dst[:-1]][: len(src)], (src, dst)
    end = dst[-1] if dst else dag.start
    assert end in dag.finals.tolist(), (end, dag.finals)
    final = dict(zip(dag.finals.tolist(), dag.final_score.tolist()))[end]
    total = 0.0
    for a in arcs.tolist():
        total += float(dag.score[a])
    assert total + final == score, (total + final, score)
    return tuple(x for x in labels.cpu()[arcs].tolist() if x >= 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(150))
def test_equals_brute_force_including_ties_and_epsilons(seed, device):
    """Exact ties come in lexicographic order of the sequences (a sequence before its extensions)."""
    dag, labels = random_dag(seed, device)
    expected = brute_force(dag, labels)
    for k in sorted({1, 2, 3, len(expected), len(expected) + 2} - {0}):
        result = search_distinct(dag, labels, k, max_expansions=10**6)
        assert not result.truncated
        got = [(score, check_path(dag, labels, arcs, score)) for score, arcs in result.found]
        assert got == expected[:k], (seed, k)


@pytest.mark.parametrize("seed", range(150))
def test_without_ties_the_default_bound_of_k_times_states_suffices(seed):
    dag, labels = random_dag(seed, ties=False)
    expected = brute_force(dag, labels)
    for k in sorted({1, 2, 3, len(expected), len(expected) + 2} - {0}):
        result = search_distinct(dag, labels, k)
        assert not result.truncated and result.expanded <= k * dag.num_states
        got = [(score, check_path(dag, labels, arcs, score)) for score, arcs in result.found]
        assert [q for _, q in got] == [q for _, q in expected[:k]], (seed, k)
        assert [s for s, _ in got] == pytest.approx([s for s, _ in expected[:k]], abs=1e-12)


def test_no_complete_path_gives_nothing():
    dag, labels = make_dag(3, [(0, 1, 0.0, 1)], {2: 0.0})  # state 2 is unreachable
    assert search_distinct(dag, labels, 3).found == []


def test_start_that_is_final_gives_the_empty_sequence():
    dag, labels = make_dag(2, [(0, 1, -1.0, 4), (0, 1, 0.0, -1)], {0: -3.0, 1: 0.0})
    found = search_distinct(dag, labels, 5).found  # best: epsilon (0), then "4" (-1); the empty one via 0 is worse
    assert [(s, a.tolist()) for s, a in found] == [(0.0, [1]), (-1.0, [0])]


def parallel_arcs(num_states: int, variant_at: int | None = None) -> tuple[Dag, torch.Tensor]:
    """A chain with two parallel arcs per step, same word on both, and an epsilon arc beside them
    every third step: 3^(n/3) * 2^(2n/3) paths, one word sequence (two with a different word at
    step ``variant_at``)."""
    rng = random.Random(0)
    arcs = []
    for s in range(num_states - 1):
        word = -1 if s % 3 == 2 else s % 5
        arcs += [(s, s + 1, -rng.random(), word), (s, s + 1, -rng.random(), word)]
        if s % 3 == 2:
            arcs.append((s, s + 1, -rng.random(), -1))
    if variant_at is not None:
        arcs.append((variant_at, variant_at + 1, -0.5, 7))
    return make_dag(num_states, arcs, {num_states - 1: 0.0})


def test_paths_that_share_their_words_cost_one_expansion_per_state():
    dag, labels = parallel_arcs(401)
    result = search_distinct(dag, labels, 2)
    assert len(result.found) == 1 and not result.truncated
    assert result.expanded == 401  # every (state, prefix) once, never a path
    assert result.pushed <= 2 * 401
    assert result.found[0][0] == pytest.approx(float(dag.forward()[400]))

    dag, labels = parallel_arcs(401, variant_at=200)
    result = search_distinct(dag, labels, 2)
    assert len(result.found) == 2 and not result.truncated
    assert result.expanded <= 2 * 401
    assert [7 in labels[arcs].tolist() for _, arcs in result.found].count(True) == 1


def test_rescore_of_a_lattice_of_same_word_paths_is_bounded():
    vocab = tiny_vocab()
    model = make_model(vocab, cell="elman", mode="afp", rho=1)
    scorer = LMScorer(LoadedModel(model.config, vocab, model))
    symbols = LATTICE_SYMBOLS
    rng = random.Random(1)
    arcs = []
    for s in range(400):  # 401 states, 2^400 paths: parallel "the"/"cat"... arcs, then !SIL or epsilon
        word = symbols.index("!SIL") if s % 2 else 1 + (s // 2) % 5
        arcs += [(s, s + 1, word, -rng.random(), -rng.random()), (s, s + 1, word if s % 2 == 0 else 0, -rng.random(),
                                                                  -rng.random())]
    lattice = Lattice.from_arcs("same-words", arcs, {400: (0.0, 0.0)}, symbols)
    (result,) = rescore(lattice, scorer, replacing_options(nbest=2))
    assert len(result.nbest) == 1 and result.nbest_complete
    assert result.kbest_expanded <= result.stats["expanded_states"] == 401


def alternatives(positions: int, words: int) -> tuple[Dag, torch.Tensor]:
    """``positions`` steps of ``words`` alternative labelled arcs: ``words^positions`` sequences."""
    rng = random.Random(2)
    arcs = [(s, s + 1, -rng.random(), w) for s in range(positions) for w in range(words)]
    return make_dag(positions + 1, arcs, {positions: 0.0})


def test_the_expansion_bound_is_honoured_and_what_was_found_is_exact():
    dag, labels = alternatives(8, 3)
    full = search_distinct(dag, labels, 40)
    assert len(full.found) == 40 and not full.truncated and full.expanded <= 40 * dag.num_states
    for bound in (1, 5, 20):
        cut = search_distinct(dag, labels, 40, max_expansions=bound)
        assert cut.truncated and cut.expanded == bound
        assert [s for s, _ in cut.found] == [s for s, _ in full.found[: len(cut.found)]]
    assert len(search_distinct(dag, labels, 40, max_expansions=full.expanded).found) == 40
    with pytest.raises(ValueError, match="max_expansions"):
        search_distinct(dag, labels, 2, max_expansions=0)
    with pytest.raises(ValueError, match="k must be"):
        search_distinct(dag, labels, 0)


def test_rescore_honours_max_kbest_paths():
    vocab = tiny_vocab()
    model = make_model(vocab, cell="elman", mode="afp", rho=1)
    scorer = LMScorer(LoadedModel(model.config, vocab, model))
    rng = random.Random(3)
    arcs = [(s, s + 1, 1 + w, -rng.uniform(0, 5), 0.0) for s in range(6) for w in range(3)]
    lattice = Lattice.from_arcs("alternatives", arcs, {6: (0.0, 0.0)}, LATTICE_SYMBOLS)
    (full,) = rescore(lattice, scorer, replacing_options(nbest=100))
    (cut,) = rescore(lattice, scorer, replacing_options(nbest=100, max_kbest_paths=1))
    assert full.nbest_complete and len(full.nbest) == 100
    assert not cut.nbest_complete and cut.kbest_expanded == cut.stats["expanded_states"]
    assert cut.to_json()["nbest_complete"] is False
    assert 1 <= len(cut.nbest) < 100
    assert [h.words for h in cut.nbest] == [h.words for h in full.nbest[: len(cut.nbest)]]
    with pytest.raises(ValueError, match="max_kbest_paths"):
        replacing_options(max_kbest_paths=0)
