"""The one sentence-scoring path (``afp ppl``, ``afp score``, ``POST /v1/perplexity``)."""

from __future__ import annotations

import pytest
import torch

from lm.checkpoint import LoadedModel
from lm.corpus import encode
from lm.evaluate import score_corpus
from lm.scorer import LMScorer, iter_sentence_scores, sentence_pairs, text_score
from tests.factories import make_model, random_sentences, tiny_vocab


class Counting:
    """An :class:`LMScorer` that records how many (context, word) pairs each call scores."""

    def __init__(self, inner: LMScorer) -> None:
        self.inner, self.calls = inner, []
        self.context_size, self.bos_id, self.eos_id, self.unk_id = (
            inner.context_size, inner.bos_id, inner.eos_id, inner.unk_id)
        self.word_ids, self.known = inner.word_ids, inner.known

    def score(self, contexts, lengths, targets, target_context):
        self.calls.append(int(targets.shape[0]))
        return self.inner.score(contexts, lengths, targets, target_context)


def scorer_for(**fields) -> LMScorer:
    vocab = tiny_vocab()
    model = make_model(vocab, **fields)
    return LMScorer(LoadedModel(config=model.config, vocab=vocab, model=model, training={}))


@pytest.mark.parametrize("fields", [{"cell": "gru", "mode": "afp", "rho": 2}, {"cell": "lstm", "mode": "afp", "rho": 4},
                                    {"cell": "gru", "mode": "exact"}, {"arch": "ffnn", "order": 3}])
def test_equals_the_sentence_forward_pass(fields):
    scorer = scorer_for(**fields)
    sentences = random_sentences(40, seed=3, max_len=12) + [["zzz", "<unk>"], []]
    got = list(iter_sentence_scores(scorer, sentences))
    expected = score_corpus(scorer.loaded.model, encode(sentences, scorer.loaded.vocab)).token_logprobs
    assert [g.shape for g in got] == [e.shape for e in expected]
    for g, e in zip(got, expected):
        assert torch.allclose(g, e, atol=1e-5), (g, e)


def test_chunks_do_not_change_the_numbers():
    scorer = scorer_for(cell="gru", mode="afp", rho=3)
    sentences = random_sentences(60, seed=5, max_len=15)
    whole = torch.cat(list(iter_sentence_scores(scorer, sentences)))
    counting = Counting(scorer)
    chunked = torch.cat(list(iter_sentence_scores(counting, iter(sentences), max_elements=40)))
    assert len(counting.calls) > 5  # many chunks (each at most 40 window slots of width 3: 13 tokens)
    assert torch.allclose(whole, chunked, atol=1e-6, rtol=0)  # a smaller matmul may round differently


def test_each_distinct_context_and_word_is_scored_once():
    scorer = Counting(scorer_for(cell="gru", mode="afp", rho=2))
    # an n-best list: 3 hypotheses sharing "the cat"; 3 + 3 + 4 = 10 tokens with </s>
    nbest = [["the", "cat", "sat"], ["the", "cat", "ran"], ["the", "cat", "sat", "on"]]
    values = list(iter_sentence_scores(scorer, nbest))
    # distinct (last 2 tokens, word): (<s>,the) (<s> the,cat) (the cat,sat) (the cat,ran)
    # (cat sat,</s>) (cat ran,</s>) (cat sat,on) (sat on,</s>) = 8
    assert scorer.calls == [8]
    assert float(values[0][:2].sum()) == pytest.approx(float(values[2][:2].sum()), abs=1e-6)
    contexts, lengths, targets, target_context, target_sentence = sentence_pairs(
        [[5, 6, 7], [5, 6, 8]], bos_id=0, eos_id=1, context_size=2)
    assert targets.tolist() == [5, 6, 7, 1, 5, 6, 8, 1] and target_sentence.tolist() == [0] * 4 + [1] * 4
    rows = [tuple(contexts[i, contexts.shape[1] - int(lengths[i]):].tolist()) for i in target_context.tolist()]
    assert rows == [(0,), (0, 5), (5, 6), (6, 7), (0,), (0, 5), (5, 6), (6, 8)]
    assert contexts.shape[0] == 5  # (0,), (0,5), (5,6), (6,7), (6,8)


def test_text_score_counts_tokens_sentences_and_unknown_words():
    scorer = scorer_for(cell="gru", mode="afp", rho=2)
    sentences = [["the", "cat"], ["zzz", "<unk>", "dog"], ["a"]]
    seen = []
    result = text_score(scorer, iter(sentences), on_sentence=lambda words, values: seen.append((words, values)))
    assert [w for w, _ in seen] == sentences
    assert (result.tokens, result.sentences, result.oov) == (3 + 4 + 2, 3, 2)
    assert result.logprob == pytest.approx(sum(float(v.sum()) for _, v in seen))
    assert result.to_json()["ppl"] == pytest.approx(torch.exp(torch.tensor(-result.logprob / 9)).item(), rel=1e-6)
