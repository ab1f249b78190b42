"""Proof of exactness: the engine's scores equal the model's sentence scores, path by path."""

from __future__ import annotations

import math

import pytest
import torch

from lattices.expand import DEFAULT_SKIP, PAD, ExpansionTooLarge, expand, word_map
from lattices.lattice import Lattice
from lattices.rescore import RescoreOptions, prune, rescore  # prune: lattices.reduce, re-exported
from lm.checkpoint import LoadedModel
from lm.corpus import encode
from lm.scorer import LMScorer
from tests.factories import collate, replacing_options, DEVICES, all_paths, make_model, random_lattice, tiny_vocab

VOCAB = tiny_vocab()
MODELS = [
    {"cell": "elman", "mode": "afp", "rho": 1},
    {"cell": "lstm", "mode": "afp", "rho": 2},
    {"cell": "gru", "mode": "afp", "rho": 3, "layers": 2},
    {"cell": "scrn", "context_units": 3, "mode": "afp", "rho": 4},
    {"arch": "ffnn", "order": 3},
]


def scorer_for(fields, device="cpu"):
    model = make_model(VOCAB, device=device, **fields)
    return model, LMScorer(LoadedModel(model.config, VOCAB, model))


@torch.no_grad()
def sentence_logprob(model, words):
    batch = collate(encode([words], VOCAB).ids).to(model.device)
    return float(model.token_logprobs(batch.inputs, batch.targets, batch.lengths).sum())


def path_words(lattice, arcs):
    return [w for w in (lattice.symbols[int(lattice.words[a])] for a in arcs) if w not in DEFAULT_SKIP]


def brute_force(lattice, model, acoustic_scale, lm_weight=1.0, old_weight=0.0, penalty=0.0):
    """Every path's total score, computed from scratch with the sentence forward pass."""
    out = []
    for arcs, final in all_paths(lattice):
        words = path_words(lattice, arcs)
        lm = sentence_logprob(model, words)
        total = (acoustic_scale * float(lattice.acoustic[arcs].sum() + lattice.final_acoustic[final])
                 + lm_weight * lm + old_weight * float(lattice.graph[arcs].sum() + lattice.final_graph[final])
                 + penalty * len(words))
        out.append((total, words, lm, arcs))
    return sorted(out, key=lambda t: -t[0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fields", MODELS, ids=lambda f: "-".join(map(str, f.values())))
@pytest.mark.parametrize("seed", range(4))
def test_every_path_scores_exactly_and_best_is_brute_force_best(fields, seed, device):
    model, scorer = scorer_for(fields, device)
    lattice = random_lattice(seed, num_states=8, extra_arcs=8)
    options = replacing_options(nbest=10_000, acoustic_scale=0.07, old_lm_weight=0.3, word_penalty=-0.5)
    result = rescore(lattice, scorer, options, device=device)[0]
    expected = brute_force(lattice, model, 0.07, 1.0, 0.3, -0.5)
    # every distinct word sequence appears once, with its best path's score, in the right order
    best_per_sequence = {}
    for total, words, lm, _ in expected:
        best_per_sequence.setdefault(tuple(words), (total, lm))
    assert [tuple(h.words) for h in result.nbest] == list(best_per_sequence)
    for hyp in result.nbest:
        total, lm = best_per_sequence[tuple(hyp.words)]
        assert hyp.lm_logprob == pytest.approx(lm, abs=1e-4)
        assert hyp.score == pytest.approx(total, abs=1e-4)
    assert result.best.words == expected[0][1]
    assert result.best.score == pytest.approx(expected[0][0], abs=1e-4)


@pytest.mark.parametrize("fields", MODELS[:3], ids=lambda f: "-".join(map(str, f.values())))
def test_expanded_paths_are_the_original_paths(fields):
    model, scorer = scorer_for(fields)
    lattice = random_lattice(11, num_states=9, extra_arcs=9)
    mapping = word_map(lattice.symbols, scorer.word_ids(lattice.symbols))
    expansion = expand(lattice, mapping, scorer.context_size, scorer.bos_id)
    expanded = Lattice(key="x", num_states=expansion.num_states, start=0, src=expansion.src, dst=expansion.dst,
                       words=lattice.words[expansion.arc_orig], acoustic=lattice.acoustic[expansion.arc_orig],
                       graph=lattice.graph[expansion.arc_orig], finals=expansion.finals,
                       final_acoustic=lattice.final_acoustic[expansion.final_orig],
                       final_graph=lattice.final_graph[expansion.final_orig], symbols=lattice.symbols).validate()
    original = sorted(tuple(arcs) for arcs, _ in all_paths(lattice))
    mapped = sorted(tuple(expansion.arc_orig[arcs].tolist()) for arcs, _ in all_paths(expanded))
    assert mapped == original  # a bijection: no path lost, none duplicated
    # every arc leaves a state whose history is exactly the last rho model words of its path
    rho = scorer.context_size
    for arcs, _ in all_paths(expanded):
        seen = [scorer.bos_id]
        for arc in arcs:
            expected = ([PAD] * rho + seen)[-rho:]
            assert expansion.state_history[expansion.src[arc]].tolist() == expected
            if int(expansion.arc_lm_word[arc]) != PAD:
                seen.append(int(expansion.arc_lm_word[arc]))
            assert int(expansion.arc_lm_word[arc]) == int(mapping[lattice.words[expansion.arc_orig[arc]]])


def test_histories_merge_beyond_rho():
    """Two paths that differ only before the last rho words end in the same expanded state."""
    symbols = ("<eps>", "the", "a", "cat", "sat")
    # 0 -the-> 1 -cat-> 3 -sat-> 4 ; 0 -a-> 2 -cat-> 3 : with rho=1 state 3 is reached with history [cat] twice
    lattice = Lattice.from_arcs("m", [(0, 1, 1, 0, 0), (0, 2, 2, 0, 0), (1, 3, 3, 0, 0), (2, 3, 3, 0, 0),
                                      (3, 4, 4, 0, 0)], {4: (0.0, 0.0)}, symbols)
    _, scorer1 = scorer_for({"cell": "elman", "mode": "afp", "rho": 1})
    _, scorer2 = scorer_for({"cell": "elman", "mode": "afp", "rho": 2})
    one = expand(lattice, word_map(symbols, scorer1.word_ids(symbols)), 1, scorer1.bos_id)
    two = expand(lattice, word_map(symbols, scorer2.word_ids(symbols)), 2, scorer2.bos_id)
    assert (one.num_states, one.num_arcs) == (5, 5)  # state 3 and 4 shared
    # rho=2: state 3 splits into [the cat] and [a cat], and both merge again in 4 as [cat sat]
    assert (two.num_states, two.num_arcs) == (6, 6)
    assert sorted(two.state_orig.tolist()) == [0, 1, 2, 3, 3, 4]


def test_several_lm_weights_share_one_expansion():
    model, scorer = scorer_for(MODELS[1])
    lattice = random_lattice(3)
    results = rescore(lattice, scorer, replacing_options(lm_weights=(0.0, 1.0, 5.0), acoustic_scale=0.1))
    assert [r.lm_weight for r in results] == [0.0, 1.0, 5.0]
    for r in results:
        expected = brute_force(lattice, model, 0.1, r.lm_weight)[0]
        assert r.best.words == expected[1] and r.best.score == pytest.approx(expected[0], abs=1e-4)
    assert results[0].stats is results[2].stats  # one expansion and scoring pass


def test_posteriors_match_brute_force():
    model, scorer = scorer_for(MODELS[2])
    lattice = random_lattice(5)
    result = rescore(lattice, scorer, replacing_options(acoustic_scale=0.1, posteriors=True))[0]
    paths = brute_force(lattice, model, 0.1)
    z = torch.logsumexp(torch.tensor([t for t, *_ in paths], dtype=torch.float64), 0)
    expected = torch.zeros(lattice.num_arcs, dtype=torch.float64)
    for total, _, _, arcs in paths:
        expected[arcs] += math.exp(total - float(z))
    assert torch.allclose(result.arc_posteriors, expected, atol=1e-6)
    leaving_start = lattice.src == lattice.start
    assert float(result.arc_posteriors[leaving_start].sum()) == pytest.approx(1.0, abs=1e-9)


def test_budget_error_names_the_budget():
    _, scorer = scorer_for(MODELS[3])
    lattice = random_lattice(2, num_states=10, extra_arcs=20)
    with pytest.raises(ExpansionTooLarge, match="budget of 5 arcs"):
        rescore(lattice, scorer, replacing_options(max_expanded_arcs=5, auto_prune=False))


def test_pruning_keeps_paths_near_the_best_and_reports_it():
    model, scorer = scorer_for(MODELS[1])
    lattice = random_lattice(7, num_states=9, extra_arcs=12)
    pruned, report = prune(lattice, beam=3.0, acoustic_scale=0.1, word_penalty=0.0)
    assert report["arcs_after"] == pruned.num_arcs < lattice.num_arcs == report["arcs_before"]
    def scored_paths(lat):
        return [(round(0.1 * float(lat.acoustic[a].sum() + lat.final_acoustic[f])
                       + float(lat.graph[a].sum() + lat.final_graph[f]), 6), tuple(path_words(lat, a)), a)
                for a, f in all_paths(lat)]

    before, after = scored_paths(lattice), scored_paths(pruned)
    best = max(s for s, _, _ in before)
    within = {(s, w) for s, w, _ in before if s >= best - 3.0}
    assert len(within) < len(before)  # the beam really cuts something on this lattice
    assert within <= {(s, w) for s, w, _ in after}  # every path within the beam survives
    assert max(s for s, _, _ in after) == best
    for arc in range(pruned.num_arcs):  # and every kept arc lies on a path within the beam
        assert max(s for s, _, arcs in after if arc in arcs) >= best - 3.0 - 1e-6
    result = rescore(lattice, scorer, replacing_options(prune_beam=3.0, acoustic_scale=0.1, nbest=50))[0]
    assert result.pruned == report
    for hyp in result.nbest:  # exactness holds for every surviving path
        assert hyp.lm_logprob == pytest.approx(sentence_logprob(model, hyp.words), abs=1e-4)


def test_rescored_lattice_carries_the_new_scores():
    model, scorer = scorer_for(MODELS[1])
    lattice = random_lattice(9)
    result = rescore(lattice, scorer, replacing_options(acoustic_scale=0.1, return_lattice=True))[0]
    rescored = result.lattice.validate()
    assert rescored.num_arcs == result.stats["expanded_arcs"]
    own = [(0.1 * float(rescored.acoustic[a].sum() + rescored.final_acoustic[f])
            + float(rescored.graph[a].sum() + rescored.final_graph[f]), a) for a, f in all_paths(rescored)]
    score, arcs = max(own, key=lambda t: t[0])
    assert score == pytest.approx(result.best.score, abs=1e-6)
    assert path_words(rescored, arcs) == result.best.words


def test_oov_words_are_counted_and_scored_as_unk():
    model, scorer = scorer_for(MODELS[0])
    symbols = ("<eps>", "the", "zebra", "!SIL")
    lattice = Lattice.from_arcs("o", [(0, 1, 1, 0, 0), (1, 2, 3, 0, 0), (2, 3, 2, 0, 0)], {3: (0.0, 0.0)}, symbols)
    result = rescore(lattice, scorer, replacing_options())[0]
    assert result.stats["oov"] == 1 and result.stats["oov_words"] == ["zebra"]
    assert result.best.words == ["the", "zebra"]  # !SIL is not an LM word
    assert result.best.lm_logprob == pytest.approx(sentence_logprob(model, ["the", "zebra"]), abs=1e-5)


def test_unbounded_model_is_refused():
    _, scorer = scorer_for({"cell": "elman", "mode": "exact"})
    with pytest.raises(ValueError, match="unbounded context"):
        rescore(random_lattice(0), scorer)


def test_header_defaults_for_scales():
    lattice = random_lattice(0).replace(meta={"lmscale": 14.0, "wdpenalty": 7.0})
    assert replacing_options().scales_for(lattice) == (pytest.approx(1 / 14), pytest.approx(0.5))
    assert replacing_options(acoustic_scale=0.2, word_penalty=1.0).scales_for(lattice) == (0.2, 1.0)
    assert replacing_options().scales_for(random_lattice(0)) == (0.1, 0.0)


def test_auto_prune_shrinks_until_the_budget_fits():
    model, scorer = scorer_for(MODELS[1])
    lattice = random_lattice(2, num_states=10, extra_arcs=20)
    full = rescore(lattice, scorer, replacing_options(acoustic_scale=0.1))[0]
    budget = full.stats["expanded_arcs"] - 1
    for determinize in ("never", "auto"):  # the input pruned; or determinized, minimized and fitted
        result = rescore(lattice, scorer, replacing_options(acoustic_scale=0.1, max_expanded_arcs=budget,
                                                            determinize=determinize))[0]  # auto_prune: the default
        assert result.stats["expanded_arcs"] <= budget
        if determinize == "never":
            assert result.pruned is not None and result.pruned["arcs_after"] < lattice.num_arcs
        else:  # exact determinization and minimization may be enough: then nothing is reported as pruned
            stages = [s["stage"] for s in result.stats["stages"]]
            assert stages[:3] == ["input", "determinize", "minimize"]  # a fit stage only where still too large
            assert ("fit" in stages) == (result.pruned is not None and "budget" in result.pruned)
            if result.pruned is not None:
                assert result.pruned["expansion_bound"] >= result.stats["expanded_arcs"]
    assert result.best.lm_logprob == pytest.approx(sentence_logprob(model, result.best.words), abs=1e-4)


def test_deadline_stops_the_work():
    import time

    from lattices.ops import DeadlineExceeded

    _, scorer = scorer_for(MODELS[1])
    with pytest.raises(DeadlineExceeded):
        rescore(random_lattice(1), scorer, replacing_options(deadline=time.monotonic() - 1.0))
    assert rescore(random_lattice(1), scorer, replacing_options(deadline=time.monotonic() + 60.0))[0].best.words
