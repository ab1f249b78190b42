"""afp.baselines, the comparison methods of the WER table (n-best and Kaldi-style rescoring
with a full-history RNN), on lattices written out here and a tiny exact GRU: the values each
method gives, worked out independently (the RNN's own per-token log-probabilities)."""

from __future__ import annotations

import pytest

from afp.options import build_options
from afp.baselines import first_pass_nbest, kaldi_style_scored, nbest_scored
from lattices.lattice import Lattice
from lattices.rescore import rescore_scored
from lm.checkpoint import LoadedModel
from lm.corpus import encode
from lm.evaluate import score_corpus
from tests.factories import make_model, tiny_vocab

VOCAB = tiny_vocab()
SYMBOLS = ("<eps>", "the", "a", "cat", "dog")
#: (src, dst, word, acoustic, graph). Under 0.1 * acoustic + graph (+ 0 per word) the paths are
#: "the cat" -4.0, "the dog" -4.5, "a cat" -4.7, "a dog" -5.2, best first.
ARCS = [(0, 1, 1, -10.0, -1.0), (0, 1, 2, -5.0, -2.2), (1, 2, 3, -10.0, -1.0), (1, 2, 4, -20.0, -0.5)]


@pytest.fixture(scope="module")
def rnn() -> LoadedModel:
    model = make_model(VOCAB, seed=3, cell="gru", mode="exact", rho=None)
    return LoadedModel(model.config, VOCAB, model)


def token_logprobs(rnn: LoadedModel, words: list[str]) -> list[float]:
    """The RNN's log-probability of each word and of ``</s>``, full history."""
    return score_corpus(rnn.model, encode([words], VOCAB)).token_logprobs[0].tolist()


def test_first_pass_nbest_lists_the_distinct_sequences_best_first_with_their_own_scores():
    lattice = Lattice.from_arcs("four", ARCS, {2: (0.0, 0.0)}, SYMBOLS)
    listed = first_pass_nbest(lattice, 3, acoustic_scale=0.1, word_penalty=0.0)
    assert [h.words for h in listed.hypotheses] == [("the", "cat"), ("the", "dog"), ("a", "cat")]
    assert [h.scores for h in listed.hypotheses] == [{"acoustic": -20.0, "graph": -2.0},
                                                     {"acoustic": -30.0, "graph": -1.5},
                                                     {"acoustic": -15.0, "graph": -3.2}]
    # a large word penalty cannot reorder paths of equal length; a large acoustic scale can
    assert [h.words for h in first_pass_nbest(lattice, 4, 0.1, 5.0).hypotheses][:2] == [("the", "cat"), ("the", "dog")]
    assert first_pass_nbest(lattice, 1, 1.0, 0.0).hypotheses[0].words == ("a", "cat")  # -15 - 3.2


def test_nbest_scored_puts_each_hypothesis_full_sentence_score_in_the_new_lm(rnn):
    lattice = Lattice.from_arcs("four", ARCS, {2: (0.0, 0.0)}, SYMBOLS)
    options = build_options({"lm_weight": 1.0, "old_lm_weight": 0.0, "nbest": 4}, unk_default=0.0)
    listed = first_pass_nbest(lattice, 4, 0.1, 0.0)
    (result,) = rescore_scored(nbest_scored(listed, lattice, rnn, options), options)
    found = {tuple(h.words): h.lm_logprob for h in result.nbest}
    assert set(found) == {h.words for h in listed.hypotheses}
    for words, lm in found.items():
        assert lm == pytest.approx(sum(token_logprobs(rnn, list(words))), abs=1e-5)


def test_kaldi_style_gives_a_merged_state_the_first_historys_rnn_state(rnn):
    """"the cat" and "a cat" meet in one state when histories are cut at one word: their ``</s>``
    is scored from whichever history reached it first. The words before it keep their own
    histories, so one path is exact and the other has the first one's ``</s>``."""
    lattice = Lattice.from_arcs("merge", ARCS[:3], {2: (0.0, 0.0)}, SYMBOLS)
    options = build_options({"lm_weight": 1.0, "old_lm_weight": 0.0, "nbest": 2}, unk_default=0.0)
    (result,) = rescore_scored(kaldi_style_scored(lattice, rnn, 1, options), options)
    found = {tuple(h.words): h.lm_logprob for h in result.nbest}
    exact = {words: token_logprobs(rnn, list(words)) for words in (("the", "cat"), ("a", "cat"))}
    assert set(found) == set(exact)
    assert abs(exact["the", "cat"][2] - exact["a", "cat"][2]) > 1e-3  # the two histories' </s> differ
    right = [w for w in exact if found[w] == pytest.approx(sum(exact[w]), abs=1e-5)]
    assert len(right) == 1, (found, exact)
    (first,), (other,) = right, [w for w in exact if w not in right]
    assert found[other] == pytest.approx(sum(exact[other][:2]) + exact[first][2], abs=1e-5)
    # with two words of history nothing merges: every path exact
    (result,) = rescore_scored(kaldi_style_scored(lattice, rnn, 2, options), options)
    assert {tuple(h.words): h.lm_logprob for h in result.nbest} == pytest.approx(
        {w: sum(v) for w, v in exact.items()}, abs=1e-5)
