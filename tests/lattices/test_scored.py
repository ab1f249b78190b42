"""The score combination of lattices/scored.py, checked path by path against its formula."""

from __future__ import annotations

import math
import time

import pytest
import torch

from lattices.formats.nbest import NBestHypothesis, NBestList, nbest_to_lattice
from lattices.rescore import RescoreOptions, rescore, score_for_options
from lattices.scored import ScoreNameError
from lattices.search import Dag
from lm.checkpoint import LoadedModel
from lm.corpus import encode
from lm.scorer import LMScorer
from tests.factories import collate, replacing_options, all_paths, make_model, random_lattice, tiny_vocab

VOCAB = tiny_vocab()


def scorer(seed: int = 0, **fields) -> tuple[torch.nn.Module, LMScorer]:
    fields = {"cell": "gru", "mode": "afp", "rho": 2, **fields}
    model = make_model(VOCAB, seed=seed, **fields)
    return model, LMScorer(LoadedModel(model.config, VOCAB, model))


@torch.no_grad()
def logprob(model, words: list[str]) -> float:
    batch = collate(encode([words], VOCAB).ids)
    return float(model.token_logprobs(batch.inputs, batch.targets, batch.lengths).sum())


def nbest(key: str = "u1") -> NBestList:
    """Three hypotheses sharing prefixes; 'zebra' is not in the model's vocabulary."""
    rows = [("the cat sat", -1.0, -2.0, -9.0), ("the cat sat on zebra", -1.5, -1.0, -12.0),
            ("a dog ran", -3.0, -2.5, -8.0), ("the cat sat", -0.5, -4.0, -9.5)]
    return NBestList(key, tuple(NBestHypothesis(tuple(w.split()), {"decoder": d, "ctc": c, "lm": lm})
                                for w, d, c, lm in rows))


def test_every_hypothesis_total_is_the_documented_formula():
    model, lm = scorer()
    options = replacing_options(lm_weights=(0.7,), old_lm_weight=0.5, word_penalty=0.3, unk_penalty=-2.0,
                             score_weights={"decoder": 0.6, "ctc": 0.4}, nbest=10)
    (result,) = rescore(nbest_to_lattice(nbest()), lm, options)
    seen = set()
    for hyp in result.nbest:
        source = next(h for h in nbest().hypotheses if list(h.words) == hyp.words and h.scores == hyp.scores)
        new = logprob(model, hyp.words)
        unk = sum(w not in VOCAB for w in hyp.words)
        s = source.scores
        expected = (0.6 * s["decoder"] + 0.4 * s["ctc"] + 0.5 * s["lm"] + 0.7 * (new - 2.0 * unk)
                    + 0.3 * len(hyp.words))
        assert hyp.score == pytest.approx(expected, abs=1e-4)
        assert hyp.lm_logprob == pytest.approx(new, abs=1e-4) and hyp.old_lm == s["lm"] and hyp.unk == unk
        seen.add(tuple(hyp.words))
    # distinct word sequences: the duplicate 'the cat sat' appears once, with its better score
    assert len(result.nbest) == 3 and seen == {("the", "cat", "sat"), ("the", "cat", "sat", "on", "zebra"),
                                               ("a", "dog", "ran")}
    assert result.score_weights == {"decoder": 0.6, "ctc": 0.4}
    assert result.stats["old_lm_score"] == "lm" and result.stats["oov_words"] == ["zebra"]


def test_first_pass_of_an_nbest_list_is_its_first_hypothesis():
    _, lm = scorer()
    # under these weights hypothesis 3 would win the first pass; the recogniser chose hypothesis 1
    options = replacing_options(lm_weights=(0.0,), old_lm_weight=1.0, score_weights={"decoder": 0.0, "ctc": 0.0})
    (result,) = rescore(nbest_to_lattice(nbest()), lm, options)
    assert result.first_pass.words == ["the", "cat", "sat"] and result.first_pass.scores["lm"] == -9.0
    assert result.best.words == ["a", "dog", "ran"]
    assert result.to_json()["changed"] is True


@pytest.mark.parametrize("seed", range(3))
def test_first_pass_of_a_lattice_is_its_own_best_path(seed):
    lattice = random_lattice(seed, num_states=6, extra_arcs=5)
    _, lm = scorer(seed)
    (result,) = rescore(lattice, lm, replacing_options(acoustic_scale=0.1, word_penalty=0.5))
    best = None
    for arcs, final in all_paths(lattice):
        words = [lattice.symbols[int(lattice.words[a])] for a in arcs]
        count = sum(w in VOCAB.words[3:] or w == "zebra" for w in words)
        total = (0.1 * float(lattice.acoustic[arcs].sum() + lattice.final_acoustic[final])
                 + float(lattice.graph[arcs].sum() + lattice.final_graph[final]) + 0.5 * count)
        best = max(best or -math.inf, total)
    assert result.first_pass.score == pytest.approx(best, abs=1e-6)


def test_mbr_prefers_the_consensus_to_an_outlier():
    rows = [("a x c", 1.0), ("a b c", 0.9), ("a b d", 0.9), ("e b c", 0.9)]
    lists = NBestList("m", tuple(NBestHypothesis(tuple(w.split()), {"score": s}) for w, s in rows))
    _, lm = scorer()
    options = dict(lm_weights=(0.0,), old_lm_score="score", old_lm_weight=10.0)
    (viterbi,) = rescore(nbest_to_lattice(lists), lm, replacing_options(**options))
    (mbr,) = rescore(nbest_to_lattice(lists), lm, replacing_options(**options, decode="mbr"))
    assert viterbi.best.words == ["a", "x", "c"] and mbr.best.words == ["a", "b", "c"]
    assert mbr.decode == "mbr" and mbr.nbest[0].words == ["a", "x", "c"]  # the list stays best-first


def test_an_old_lm_scorer_is_subtracted_exactly():
    """With the old LM's own scorer, old_lm_weight 1 and no new LM give back the lattice's own
    scores; every path's old-LM part is that scorer's sentence log-probability."""
    old_model, old = scorer(seed=5, arch="ffnn", order=2, mode="exact", rho=None, cell="elman")
    _, new = scorer(seed=6)
    lattice = random_lattice(3, num_states=6, extra_arcs=5)
    keep = replacing_options(lm_weights=(0.0,), old_lm_weight=1.0, acoustic_scale=0.1, nbest=50)
    (with_old,) = rescore(lattice, new, keep, old_lm=old)
    (plain,) = rescore(lattice, new, keep)
    assert with_old.best.score == pytest.approx(plain.best.score, abs=1e-6)
    assert [h.words for h in with_old.nbest] == [h.words for h in plain.nbest]
    for hyp, same in zip(with_old.nbest, plain.nbest):
        assert hyp.old_lm == pytest.approx(logprob(old_model, hyp.words), abs=1e-4)
        # the graph score's rest (pronunciation, transitions) is the whole graph score minus the old LM
        assert hyp.scores["graph"] == pytest.approx(same.old_lm - hyp.old_lm, abs=1e-4)
    assert with_old.stats["old_lm_score"] == "old-lm scorer" and with_old.stats["rho"] == 2


def test_unknown_score_names_are_named():
    _, lm = scorer()
    with pytest.raises(ScoreNameError, match="no score named acustic"):
        rescore(nbest_to_lattice(nbest()), lm, replacing_options(score_weights={"acustic": 1.0}))
    with pytest.raises(ScoreNameError, match="old-LM score 'graph'"):
        rescore(nbest_to_lattice(nbest()), lm, replacing_options(old_lm_score="graph"))
    with pytest.raises(ValueError, match="unk_penalty"):
        replacing_options(unk_penalty=math.nan)


@pytest.mark.parametrize("seed", range(3))
def test_every_weight_setting_shares_one_grouped_graph(seed):
    """Each LM weight's Dag reuses the expanded graph's level groupings (Dag.with_scores) and its
    searches equal those of a Dag built from scratch with the same totals."""
    lattice = random_lattice(seed, num_states=8, extra_arcs=7)
    _, lm = scorer(seed)
    options = replacing_options(acoustic_scale=0.1, word_penalty=0.5)
    scored = score_for_options(lattice, lm, options)
    deadline = time.monotonic() + 3600
    dags = []
    for lm_weight in (0.0, 0.5, 2.0):
        vector = scored.vector(options.weights(lm_weight, scored))
        dag = scored.dag(vector, deadline=deadline)
        dag.best_path(), dag.arc_posteriors()  # fill the caches the searches use
        e = scored.expansion
        fresh = Dag(e.num_states, 0, e.src, e.dst, scored.arc_parts @ vector, e.finals,
                    scored.final_parts @ vector, lattice.levels[e.state_orig])
        assert dag.deadline == deadline
        assert dag.best_path()[0] == pytest.approx(fresh.best_path()[0], abs=1e-9)
        assert torch.equal(dag.best_path()[1], fresh.best_path()[1])
        assert torch.allclose(dag.arc_posteriors(), fresh.arc_posteriors(), atol=1e-12)
        dags.append(dag)
    assert {"_arrays", "_by_dst_level", "_by_src_level"} <= set(dags[0].groupings)
    assert all(d.groupings is dags[0].groupings for d in dags[1:])
    assert all(d._by_src_level is dags[0]._by_src_level for d in dags[1:])
