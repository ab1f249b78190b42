"""The KN 5-gram reference of the reproduction: a proper distribution with Kneser-Ney's counts."""

from __future__ import annotations

import math
import random

import pytest

from bench.kneser_ney import KneserNey
from lm.corpus import encode
from lm.vocab import Vocabulary
from tests.factories import patterned_sentences


def _model(order: int, sentences: list[list[str]]) -> tuple[KneserNey, Vocabulary, list[list[int]]]:
    vocab = Vocabulary.from_sentences(sentences)
    encoded = [s.tolist() for s in encode(sentences, vocab).ids]
    words = sum(vocab.predictable_mask())
    return KneserNey.fit(encoded, order, words, vocab.bos_id), vocab, encoded


@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_every_history_gives_a_distribution_over_the_predictable_words(order):
    rng = random.Random(order)
    sentences = patterned_sentences(200, seed=4) + [rng.sample("x y z w v u".split(), rng.randint(1, 5))
                                                     for _ in range(30)]
    model, vocab, encoded = _model(order, sentences)
    predictable = [i for i, ok in enumerate(vocab.predictable_mask()) if ok]
    histories = [[vocab.bos_id], [vocab.bos_id, vocab.id("the")], [vocab.id("x"), vocab.id("the"), vocab.id("cat")],
                 [vocab.id("zebra") if "zebra" in vocab else vocab.unk_id] * 4, *(s[:k] for s in encoded[:20]
                                                                                 for k in range(1, len(s)))]
    for history in histories:
        total = sum(model.prob(history, w) for w in predictable)
        assert total == pytest.approx(1.0, abs=1e-9), history


def test_lower_orders_use_continuation_counts_and_start_ngrams_keep_raw_counts():
    model, vocab, _ = _model(2, [["a", "b"], ["c", "b"], ["a", "b"]])
    a, b, eos, bos = vocab.id("a"), vocab.id("b"), vocab.eos_id, vocab.bos_id
    unigrams = model.orders[0].counts
    assert unigrams[(b,)] == 2  # seen after a and after c (three times in all)
    assert unigrams[(eos,)] == 1  # only ever after b
    assert unigrams[(a,)] == 1  # only ever after <s>
    assert model.orders[1].counts[(bos, a)] == 2  # the highest order keeps raw counts


def test_more_context_fits_the_grammar_better_and_unseen_words_keep_mass():
    train, valid = patterned_sentences(400, seed=1), patterned_sentences(100, seed=2)
    ppl = []
    for order in (1, 2, 3, 5):
        model, vocab, _ = _model(order, train)
        ppl.append(model.perplexity(s.tolist() for s in encode(valid, vocab).ids))
    assert ppl[0] > ppl[1] > ppl[2] >= ppl[3] * 0.999
    assert ppl[3] < 3.0  # the grammar is nearly deterministic given two words
    model, vocab, _ = _model(3, train)
    assert 0 < model.prob([vocab.bos_id, vocab.id("the")], vocab.id("log")) < 0.05
    assert math.isfinite(model.logprob([vocab.bos_id, vocab.unk_id, vocab.id("cat"), vocab.eos_id]))
