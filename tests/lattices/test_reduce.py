"""The stages before expansion (lattices/reduce.py) as the engine runs them: the expansion bound
is an upper bound, determinizing and minimizing change no answer, and a real decoder's lattice
rescores within its budget by default, saying what it pruned."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from lattices.expand import expand, expansion_bound, lattice_word_map
from lattices.formats.pocketsphinx import read_pocketsphinx
from lattices.rescore import rescore
from lm.checkpoint import LoadedModel
from lm.scorer import LMScorer
from tests.factories import make_model, random_lattice, replacing_options, tiny_vocab

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


def test_a_real_decoder_lattice_rescores_within_the_budget_by_default():
    text = gzip.decompress(next(iter(sorted(FIXTURES.glob("*.slf.gz")))).read_bytes()).decode()
    lattice = read_pocketsphinx(text, "utt.slf")
    lm = scorer(rho=4)
    budget = 20_000
    with pytest.raises(Exception, match="budget"):  # as it is, it does not fit
        rescore(lattice, lm, replacing_options(determinize="never", max_expanded_arcs=budget, auto_prune=False))
    (result,) = rescore(lattice, lm, replacing_options(max_expanded_arcs=budget))
    assert result.stats["expanded_arcs"] <= budget
    assert result.pruned is not None and result.pruned["arcs_before"] == lattice.num_arcs
    stages = result.stats["stages"]
    assert [s["stage"] for s in stages][:3] == ["input", "determinize", "minimize"]
    assert stages[0]["arcs"] == lattice.num_arcs and all(s["seconds"] >= 0 for s in stages)
    assert result.best.words and all(w == w.lower() for w in result.best.words)
