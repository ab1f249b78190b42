"""Linear interpolation of context scorers (lattices/interpolate.py): its own word table, per-part
context cutting, the documented unknown-word semantics, and exact rescoring with a mixture."""

from __future__ import annotations

import math
import random

import pytest
import torch

from lattices.interpolate import InterpolatedScorer
from lattices.rescore import RescoreOptions, rescore
from lattices.scorer import ContextScorer
from lm.checkpoint import LoadedModel
from lm.corpus import encode
from lm.scorer import LMScorer, score_sentences
from lm.vocab import Vocabulary
from tests.factories import kn_arpa, make_model, patterned_sentences, random_lattice, replacing_options, tiny_vocab
from tests.lm.ngram_reference import NgramScorer, read_arpa


def ngram(tmp_path, name: str, order: int, sentences: list[list[str]]) -> NgramScorer:
    """A Kneser-Ney model of ``sentences`` written as ARPA and read back (a consistent model)."""
    vocab = Vocabulary.from_sentences(sentences)
    encoded = [s.tolist() for s in encode(sentences, vocab).ids]
    return NgramScorer(read_arpa(kn_arpa(tmp_path / f"{name}.arpa", encoded, vocab, order)))


def corpus_a() -> list[list[str]]:
    return patterned_sentences(150, seed=1)


def corpus_b() -> list[list[str]]:
    """Another vocabulary: 'cat' is 'kitten' here, and 'x y z' occur; 'big' and 'small' never do."""
    swap = {"cat": "kitten", "big": "red", "small": "red"}
    return [[swap.get(w, w) for w in s] for s in patterned_sentences(150, seed=2)] + [["x", "y", "z"]] * 5


def neural() -> LMScorer:
    vocab = tiny_vocab()
    model = make_model(vocab, seed=3, cell="gru", mode="afp", rho=2)
    return LMScorer(LoadedModel(model.config, vocab, model))


def predictable(scorer: NgramScorer) -> set[str]:
    return {w for w in scorer.model.words[: scorer.model.num_file_words] if w != "<s>"}


def distribution(scorer, history: list[str], words: list[str]) -> torch.Tensor:
    """Log-probabilities of every word of ``words`` after ``history`` through ``scorer.score``."""
    contexts = scorer.word_ids(history).unsqueeze(0)
    return scorer.score(contexts, torch.tensor([len(history)]), scorer.word_ids(words),
                        torch.zeros(len(words), dtype=torch.int64))


HISTORIES = [["<s>"], ["<s>", "the"], ["<s>", "a", "red"], ["the", "cat", "sat"], ["kitten", "ran", "on"],
             ["zebra", "the"], ["x", "y"], ["and", "the", "dog", "ran", "on", "a"]]


def test_a_zero_weight_part_is_dropped(tmp_path):
    a, b = ngram(tmp_path, "a", 2, corpus_a()), ngram(tmp_path, "b", 4, corpus_b())
    mixed = InterpolatedScorer([a, b], [1.0, 0.0])
    assert mixed.context_size == a.context_size == 1 and mixed.scorers == (a,) and isinstance(mixed, ContextScorer)
    sentences = corpus_a()[:5] + corpus_b()[:5] + [["zebra", "the", "kitten"]]
    for got, single in zip(score_sentences(mixed, sentences), score_sentences(a, sentences)):
        assert got.tolist() == pytest.approx(single.tolist(), abs=1e-12)
    assert mixed.known(["kitten", "cat", "zebra"]).tolist() == [False, True, False]


def test_the_mixture_is_the_weighted_sum_of_probabilities_token_by_token(tmp_path):
    a, b, c = ngram(tmp_path, "a", 3, corpus_a()), ngram(tmp_path, "b", 4, corpus_b()), neural()
    weights = [0.5, 0.3, 0.2]
    mixed = InterpolatedScorer([a, b, c], weights)
    assert mixed.context_size == 3  # the largest: b's order 4
    rng = random.Random(0)
    words = sorted(predictable(a) | predictable(b)) + ["zebra"]
    sentences = [[rng.choice(words) for _ in range(rng.randint(0, 9))] for _ in range(40)]
    parts = [score_sentences(s, sentences) for s in (a, b, c)]
    for k, got in enumerate(score_sentences(mixed, sentences)):
        expected = [math.log(sum(w * math.exp(float(p[k][t])) for w, p in zip(weights, parts)))
                    for t in range(len(sentences[k]) + 1)]
        assert got.dtype == torch.float64 and got.tolist() == pytest.approx(expected, abs=1e-5)


def test_same_vocabulary_sums_to_one_and_each_part_cuts_its_own_context(tmp_path):
    sentences = corpus_a()
    a, b = ngram(tmp_path, "a", 2, sentences), ngram(tmp_path, "b", 5, sentences[::-1][:100] + sentences[:20])
    assert predictable(a) == predictable(b)
    mixed = InterpolatedScorer([a, b], [0.25, 0.75])
    words = sorted(predictable(a))
    for history in HISTORIES:
        got = distribution(mixed, history, words)
        assert float(got.exp().sum()) == pytest.approx(1.0, abs=1e-9), history
        expected = 0.25 * distribution(a, history[-1:], words).exp() + 0.75 * distribution(b, history[-4:], words).exp()
        assert got.exp().tolist() == pytest.approx(expected.tolist(), abs=1e-12)


def test_words_unknown_to_a_part_get_its_unk_probability(tmp_path):
    """Over the union vocabulary U the mass is sum_i w_i (1 + |U minus V_i| P_i(<unk> | h)) (module docstring)."""
    a, b = ngram(tmp_path, "a", 3, corpus_a()), ngram(tmp_path, "b", 3, corpus_b())
    union = sorted(predictable(a) | predictable(b))
    only_a, only_b = predictable(a) - predictable(b), predictable(b) - predictable(a)
    assert {"big", "small"} <= only_a and {"kitten", "x"} <= only_b
    weights = (0.4, 0.6)
    mixed = InterpolatedScorer([a, b], weights)
    assert mixed.known(["big", "kitten", "zebra", "</s>"]).tolist() == [True, True, False, True]
    for history in HISTORIES:
        got = distribution(mixed, history, union)
        unk_a = float(distribution(a, history, ["<unk>"]).exp())
        unk_b = float(distribution(b, history, ["<unk>"]).exp())
        expected = weights[0] * (1 + len(only_b) * unk_a) + weights[1] * (1 + len(only_a) * unk_b)
        assert float(got.exp().sum()) == pytest.approx(expected, abs=1e-9), history
        big = union.index("big")
        assert float(got[big].exp()) == pytest.approx(
            weights[0] * float(distribution(a, history, ["big"]).exp()) + weights[1] * unk_b, abs=1e-12)


def test_the_word_table_grows_and_ids_stay_put(tmp_path):
    mixed = InterpolatedScorer([ngram(tmp_path, "a", 2, corpus_a()), neural()], [0.5, 0.5])
    assert (mixed.bos_id, mixed.eos_id) == (0, 1) and mixed.words == ["<s>", "</s>"]
    first = mixed.word_ids(["the", "zebra", "the", "</s>"]).tolist()
    assert first == [2, 3, 2, 1] and mixed.words == ["<s>", "</s>", "the", "zebra"]
    assert mixed.word_ids(["cat", "zebra"]).tolist() == [4, 3]
    with pytest.raises(ValueError, match="outside"):
        mixed.score(torch.tensor([[0, 2]]), torch.tensor([2]), torch.tensor([5]), torch.tensor([0]))
    assert mixed.known([]).shape == (0,)


class Unbounded:
    """A scorer with an unbounded context (an exact RNN)."""

    context_size = None
    bos_id, eos_id, unk_id = 0, 1, 2


@pytest.mark.parametrize(("weights", "parts", "message"), [
    ([0.5, 0.6], 2, "sum to 1"),
    ([1.2, -0.2], 2, "non-negative"),
    ([math.nan, 1.0], 2, "non-negative"),
    ([1.0], 2, "1 weights for 2 scorers"),
    ([], 0, "at least one"),
    ([0.5, 0.5], "unbounded", "finite context_size"),
])
def test_bad_mixtures_are_refused(tmp_path, weights, parts, message):
    scorers = [Unbounded(), neural()] if parts == "unbounded" else [neural()] * parts
    with pytest.raises(ValueError, match=message):
        InterpolatedScorer(scorers, weights)


def test_rescoring_with_a_mixture_is_exact(tmp_path):
    """Every n-best hypothesis's LM score is the sum of its tokens' mixture log-probabilities."""
    a, c = ngram(tmp_path, "a", 4, corpus_a()), neural()
    mixed = InterpolatedScorer([a, c], [0.7, 0.3])
    options = replacing_options(lm_weights=(1.0,), acoustic_scale=0.0, nbest=5)
    for seed in range(3):
        (result,) = rescore(random_lattice(seed, num_states=7, extra_arcs=6), mixed, options)
        assert result.stats["rho"] == 3 and result.nbest
        sentences = [h.words for h in result.nbest]
        per_part = [score_sentences(s, sentences) for s in (a, c)]
        for k, hyp in enumerate(result.nbest):
            tokens = torch.logaddexp(per_part[0][k] + math.log(0.7), per_part[1][k].double() + math.log(0.3))
            assert hyp.lm_logprob == pytest.approx(float(tokens.sum()), abs=1e-5)
            assert hyp.unk == sum(w == "zebra" for w in hyp.words)  # known to neither part
