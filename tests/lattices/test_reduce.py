"""The stages before expansion (lattices/reduce.py) as the engine runs them: the expansion bound
is an upper bound, determinizing and minimizing change no answer, and a real decoder's lattice
rescores within its budget by default, saying what it pruned."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

import dataclasses
import random

import numpy as np
import torch

from lattices.expand import PAD, expand, expansion_bound, lattice_word_map
from lattices.formats.nbest import NBestHypothesis, NBestList, nbest_to_lattice
from lattices.formats.pocketsphinx import read_pocketsphinx
from lattices.lattice import Lattice
from lattices.reduce import MIN_STATES_CAP, _fit, first_pass_scores, reduce_lattice, states_cap
from lattices.rescore import (DEFAULT_MAX_EXPANDED_ARCS, DEFAULT_TARGET_EXPANDED_ARCS, DENSE_FACTOR, RescoreOptions,
                              reduction, rescore)
from lattices.search import Dag
from lm.checkpoint import LoadedModel
from lm.scorer import LMScorer
from tests.factories import make_model, random_lattice, replacing_options, tiny_vocab
from tests.lattices.test_long_lattices import TinyScorer, chain

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pocketsphinx"


def scorer(rho: int = 2) -> LMScorer:
    vocab = tiny_vocab()
    model = make_model(vocab, cell="gru", mode="afp", rho=rho)
    return LMScorer(LoadedModel(model.config, vocab, model))


@pytest.mark.parametrize("seed", range(60))
def test_the_bound_is_never_below_the_expansion(seed):
    lattice = random_lattice(seed, num_states=9, extra_arcs=14)
    for rho in (1, 2, 3):
        expansion = expand(lattice, lattice_word_map(lattice), rho, len(lattice.symbols))
        assert expansion_bound(lattice, rho) >= expansion.num_arcs


def counted_suffixes(lattice, rho: int, keep: list[bool]) -> float:
    """expansion_bound's count by enumerating paths (small lattices only): for each kept arc, the
    kept paths into its source that start with a word arc and hold exactly ``rho`` words, plus
    the kept paths from the start into it with fewer than ``rho`` words."""
    is_word = (lattice_word_map(lattice)[lattice.words] != PAD).tolist()
    src, dst = lattice.src.tolist(), lattice.dst.tolist()
    leaving: dict[int, list[int]] = {}
    for a in range(lattice.num_arcs):
        if keep[a]:
            leaving.setdefault(src[a], []).append(a)
    suffixes = [0] * lattice.num_states
    wholes = [0] * lattice.num_states

    def walk(state: int, words: int, counts: list[int], limit: int) -> None:
        if words == limit:
            counts[state] += 1
        elif counts is wholes:
            counts[state] += 1
        for a in leaving.get(state, []):
            more = words + is_word[a]
            if more <= limit and not (counts is wholes and more == limit):
                walk(dst[a], more, counts, limit)

    walk(lattice.start, 0, wholes, rho)  # whole paths: fewer than rho words
    for a in range(lattice.num_arcs):
        if keep[a] and is_word[a]:
            walk(dst[a], 1, suffixes, rho)
    return float(sum(suffixes[src[a]] + wholes[src[a]] for a in range(lattice.num_arcs) if keep[a]))


@pytest.mark.parametrize("seed", range(40))
def test_the_compiled_bound_counts_every_suffix(seed):
    """The compiled pass counts what its docstring says, with and without ``keep`` (here arbitrary
    arcs: the count over those arcs alone), against enumerating the paths."""
    lattice = random_lattice(seed, num_states=9, extra_arcs=14)
    generator = torch.Generator().manual_seed(seed)
    subsets = [None, (torch.rand(lattice.num_arcs, generator=generator) < 0.7).numpy()]
    for rho in (1, 2, 3):
        for keep in subsets:
            kept = [True] * lattice.num_arcs if keep is None else keep.tolist()
            if keep is not None and np.bincount(lattice.dst.numpy()[keep], minlength=9).max() <= 1:
                continue  # a tree: counted without the pass
            assert expansion_bound(lattice, rho, keep=keep) == counted_suffixes(lattice, rho, kept)


@pytest.mark.parametrize("seed", range(25))
def test_determinizing_changes_no_answer(seed):
    """Exact determinization (no beam) and minimization: the same best words, score and n-best
    as the lattice expanded as it is, with the old LM kept at a weight and the new LM added."""
    lattice = random_lattice(seed, num_states=8, extra_arcs=12)
    lm = scorer()
    common = dict(lm_weights=(0.5, 1.0), old_lm_weight=0.7, acoustic_scale=0.1, word_penalty=-0.3, nbest=3,
                  determinize_beam=None, max_determinized_states=None)
    plain = rescore(lattice, lm, replacing_options(determinize="never", **common))
    reduced = rescore(lattice, lm, replacing_options(determinize="always", **common))
    assert [s["stage"] for s in reduced[0].stats["stages"]] == ["input", "determinize", "minimize"]
    assert reduced[0].pruned is None  # nothing was cut: exact
    for a, b in zip(plain, reduced):
        assert [h.words for h in a.nbest] == [h.words for h in b.nbest]
        assert [h.score for h in b.nbest] == pytest.approx([h.score for h in a.nbest], abs=1e-5)
        assert b.best.lm_logprob == pytest.approx(a.best.lm_logprob, abs=1e-6)


def fixture_lattice(index: int = 0) -> Lattice:
    path = sorted(FIXTURES.glob("*.slf.gz"))[index]
    return read_pocketsphinx(gzip.decompress(path.read_bytes()).decode(), path.name)


def test_the_documented_defaults():
    options = RescoreOptions()
    assert (options.target_expanded_arcs, options.max_expanded_arcs) == (20_000, 5_000_000)
    assert (DEFAULT_TARGET_EXPANDED_ARCS, DEFAULT_MAX_EXPANDED_ARCS, DENSE_FACTOR) == (20_000, 5_000_000, 100)
    for bad in (-5, 2.5, True, "100"):
        with pytest.raises(ValueError, match="target_expanded_arcs"):
            RescoreOptions(target_expanded_arcs=bad)
    assert RescoreOptions(target_expanded_arcs=0) == RescoreOptions(target_expanded_arcs=None)  # 0: no target


def test_a_long_chain_is_expanded_whole_at_the_defaults():
    """30,000 words: not dense (its bound is its arcs), under the limit: no stage, nothing pruned,
    and it never meets the determinizer (which once took 90 s on it, then failed)."""
    lattice = chain(30_000)
    assert reduction(lattice, RescoreOptions(), 2) == (False, DEFAULT_MAX_EXPANDED_ARCS)
    (result,) = rescore(lattice, TinyScorer(), RescoreOptions())
    assert "stages" not in result.stats and result.pruned is None
    assert result.stats["expanded_arcs"] == 30_000 and result.best.arcs == list(range(30_000))


def test_an_nbest_list_is_expanded_whole_at_the_defaults():
    rng = random.Random(3)
    words = ["a", "b", "c", "d", "e"]
    hyps = [NBestHypothesis(tuple(rng.choice(words) for _ in range(rng.randint(20, 60))),
                            {"decoder": -rng.random() * 30}) for _ in range(200)]
    lattice = nbest_to_lattice(NBestList("list", hyps))
    assert expansion_bound(lattice, 4) == lattice.num_arcs  # a prefix tree: its own expansion
    assert not reduction(lattice, RescoreOptions(), 4).reduce
    (result,) = rescore(lattice, scorer(rho=4), RescoreOptions(target_expanded_arcs=10))
    assert "stages" not in result.stats and result.pruned is None
    assert result.stats["expanded_arcs"] == lattice.num_arcs


def test_a_chain_through_the_determinizer_keeps_its_best_path_and_reports_no_pruning():
    """A budget below the chain's own size: the state cap leaves room for the longest path and the
    fit stage keeps the best path, the whole chain, which is no pruning."""
    lattice = chain(3_000)
    assert states_cap(lattice, 20_000) == 3_001 + MIN_STATES_CAP
    reduced = reduce_lattice(lattice, 2, 2_000, {"acoustic": 0.1, "graph": 1.0}, acoustic_scale=0.1,
                             word_penalty=0.0, determinize_beam=15.0, max_states=1_000)
    assert [s.stage for s in reduced.stages] == ["input", "determinize", "minimize", "fit"]
    assert reduced.lattice.num_arcs == 3_000 and reduced.pruned is None


def test_a_dense_lattice_is_reduced_to_at_most_the_target():
    lattice = fixture_lattice()
    assert expansion_bound(lattice, 4) > DENSE_FACTOR * lattice.num_arcs  # dense
    lm = scorer(rho=4)
    plan = reduction(lattice, RescoreOptions(), 4)
    assert plan == (True, DEFAULT_TARGET_EXPANDED_ARCS)
    (result,) = rescore(lattice, lm, replacing_options())  # the defaults
    assert 0 < result.stats["expanded_arcs"] <= DEFAULT_TARGET_EXPANDED_ARCS
    assert result.pruned is not None and result.pruned["budget"] == DEFAULT_TARGET_EXPANDED_ARCS
    assert result.pruned["arcs_before"] == lattice.num_arcs
    stages = result.stats["stages"]
    assert [s["stage"] for s in stages] == ["input", "determinize", "minimize", "fit"]
    assert stages[0]["arcs"] == lattice.num_arcs and all(s["seconds"] >= 0 for s in stages)
    assert result.best.words and all(w == w.lower() for w in result.best.words)
    (small,) = rescore(lattice, lm, replacing_options(target_expanded_arcs=5_000))
    assert small.stats["expanded_arcs"] <= 5_000 and small.pruned["budget"] == 5_000


def test_the_target_is_capped_by_the_limit_and_off_without_auto_prune():
    lattice = fixture_lattice()
    assert reduction(lattice, RescoreOptions(max_expanded_arcs=8_000), 4) == (True, 8_000)
    assert reduction(lattice, RescoreOptions(auto_prune=False), 4) == (True, DEFAULT_MAX_EXPANDED_ARCS)
    assert reduction(lattice, RescoreOptions(target_expanded_arcs=None), 4) == (True, DEFAULT_MAX_EXPANDED_ARCS)
    assert not reduction(lattice, RescoreOptions(determinize="never"), 4).reduce
    assert not reduction(lattice, RescoreOptions(posteriors=True), 4).reduce
    assert reduction(chain(50), RescoreOptions(determinize="always"), 4) == (True, DEFAULT_MAX_EXPANDED_ARCS)
    # dense (5 levels of 5 parallel words) but already under the target: expanded whole
    dense = Lattice.from_arcs("dense", [(i, i + 1, 1 + j, -1.0 * j, -1.0) for i in range(5) for j in range(5)],
                              {5: (0.0, 0.0)}, ("<eps>", "a", "b", "c", "d", "e"))
    assert DENSE_FACTOR * dense.num_arcs < expansion_bound(dense, 4) <= DEFAULT_TARGET_EXPANDED_ARCS
    assert reduction(dense, RescoreOptions(), 4) == (False, DEFAULT_TARGET_EXPANDED_ARCS)


def test_the_target_equal_to_the_limit_is_the_old_single_budget():
    """``--target-arcs`` equal to ``--max-arcs`` (or no target): one budget, as before the target."""
    lattice = fixture_lattice()
    lm = scorer(rho=4)
    budget = 20_000
    with pytest.raises(Exception, match="budget"):  # as it is, it does not fit
        rescore(lattice, lm, replacing_options(determinize="never", max_expanded_arcs=budget, auto_prune=False))
    (same,) = rescore(lattice, lm, replacing_options(max_expanded_arcs=budget, target_expanded_arcs=budget))
    (single,) = rescore(lattice, lm, replacing_options(max_expanded_arcs=budget, target_expanded_arcs=None))
    assert same.pruned == single.pruned and same.pruned["budget"] == budget
    assert same.best.words == single.best.words and same.stats["expanded_arcs"] == single.stats["expanded_arcs"]


@pytest.mark.parametrize("index", range(5))
def test_the_fit_finds_the_largest_fitting_beam_exactly(index):
    """Brute force over every distinct beam of the minimized fixture lattice: the fit keeps the arcs
    of the largest beam whose pruned lattice's bound is within the budget, and no more."""
    lattice = fixture_lattice(index)
    reduced = reduce_lattice(lattice, 4, None, {"acoustic": 1.0, "graph": 1.0}, acoustic_scale=0.1, word_penalty=0.0,
                             determinize_beam=12.0, fit=False)
    small = reduced.lattice
    budget = int(expansion_bound(small, 4) // 7)
    fitted, beam, bound = _fit(small, 4, budget, 0.1, 0.0, {}, frozenset(), None)
    assert bound <= budget and expansion_bound(fitted, 4, frozenset()) == bound
    scores, finals = first_pass_scores(small, 0.1, 0.0, {}, frozenset())
    through = Dag(small.num_states, small.start, small.src, small.dst, scores, small.finals, finals,
                  small.levels).arc_best_scores().numpy()
    best = through.max()
    gaps = np.unique(best - through)
    fitting = [g for g in gaps if expansion_bound(small.subset(torch.from_numpy(through >= best - g - 1e-9 * (1 + abs(best)))),
                                                  4, frozenset()) <= budget]
    assert beam == pytest.approx(max(fitting), abs=1e-12)
    assert fitted.num_arcs == int((through >= best - beam - 1e-9 * (1 + abs(best))).sum())


@pytest.mark.parametrize("seed", range(30))
def test_the_bound_of_kept_arcs_is_the_bound_of_the_subset(seed):
    lattice = random_lattice(seed, num_states=9, extra_arcs=14)
    scores, finals = first_pass_scores(lattice, 0.1, 0.0)
    through = Dag(lattice.num_states, lattice.start, lattice.src, lattice.dst, scores, lattice.finals, finals,
                  lattice.levels).arc_best_scores()
    for beam in (0.0, 0.5, 2.0, 1e9):
        keep = through >= through.max() - beam - 1e-9 * (1 + abs(float(through.max())))
        for rho in (1, 3):
            assert expansion_bound(lattice, rho, keep=keep.numpy()) == expansion_bound(lattice.subset(keep), rho)


def test_a_request_that_replaces_the_old_lm_is_determinized_as_the_first_pass_ranks():
    """Tuned weights replace the old LM (weight 0). The pruned determinization runs on the first
    pass's weights (the old LM in full), not the acoustic score alone: here the first pass's best
    sequence (B: acoustically a little worse, far better by the LM) lies outside an acoustic-only
    beam of 1. Each kept sequence carries its best path under the first pass, whatever the
    request weighs, and the reduction says so; without a beam it is exact under the request."""
    symbols = ("<eps>", "A", "B", "C")
    arcs = [(0, 1, 1, -1.0, -20.0), (0, 1, 2, -3.0, -1.0), (0, 1, 2, -2.5, -9.0), (1, 2, 3, -1.0, -1.0)]
    lattice = Lattice.from_arcs("replace", arcs, {2: (0.0, 0.0)}, symbols)
    request = {"acoustic": 1.0, "graph": 0.0}  # what the request weighs: the old LM replaced
    first_pass = {"acoustic": 1.0, "graph": 1.0}

    def sequences(reduced: Lattice) -> dict[tuple[str, ...], float]:
        """Every word sequence of ``reduced`` (a deterministic acyclic lattice) and its acoustic score."""
        finals = {int(f): float(a) for f, a in zip(reduced.finals, reduced.final_acoustic)}
        out: dict[tuple[str, ...], float] = {}

        def walk(state: int, words: tuple[str, ...], score: float) -> None:
            if state in finals:
                out[words] = score + finals[state]
            for arc in (reduced.src == state).nonzero().flatten().tolist():
                word = reduced.word(arc)
                walk(int(reduced.dst[arc]), words + ((word,) if word != "<eps>" else ()), score + float(reduced.acoustic[arc]))

        walk(reduced.start, (), 0.0)
        return out

    acoustic_only = reduce_lattice(lattice, 2, None, request, acoustic_scale=1.0, word_penalty=0.0,
                                   determinize_beam=1.0, fit=False).lattice
    reduced = reduce_lattice(lattice, 2, None, request, acoustic_scale=1.0, word_penalty=0.0, determinize_beam=1.0,
                             fit=False, first_pass=first_pass)
    ranked = reduced.lattice
    assert reduced.pruned is not None and reduced.pruned["determinized_on"] == "first pass"
    same = reduce_lattice(lattice, 2, None, first_pass, acoustic_scale=1.0, word_penalty=0.0, determinize_beam=1.0,
                          fit=False, first_pass=first_pass)
    assert "determinized_on" not in same.pruned  # the request weighs the scores as the first pass did
    exact = reduce_lattice(lattice, 2, None, request, acoustic_scale=1.0, word_penalty=0.0, determinize_beam=None,
                           fit=False, first_pass=first_pass)
    assert exact.pruned is None and sequences(exact.lattice)[("B", "C")] == -3.5  # the request's best B C
    assert sequences(acoustic_only) == {("A", "C"): -2.0}  # B C (best: -3.5 acoustic) is 1.5 behind A C: cut
    kept = sequences(ranked)
    assert kept[("B", "C")] == -4.0  # B C by its best path under the first pass (acoustic -3.0, then C's -1.0)
