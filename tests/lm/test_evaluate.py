"""Perplexity under a logits budget: the same numbers, and no output-layer tensor over the budget."""

from __future__ import annotations

import json

import pytest
import torch

from lm.corpus import encode
from lm.evaluate import corpus_logprob, plan_batches, score_corpus
from lm.model import LanguageModel
from tests.factories import make_model, random_sentences, saved_model, tiny_vocab, write_text

ADAPTIVE = {"softmax": "adaptive", "cutoffs": (5, 10), "div_value": 2.0}


def largest_logits(model: LanguageModel, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the element count of every output-layer logits tensor the model computes; the list's
    max is the largest. Full softmax: :meth:`LanguageModel.logits`; adaptive: the head and each
    tail cluster (forward hooks). ``log_probs`` (the full distribution) is made to fail."""
    sizes: list[int] = [0]
    if model.adaptive is None:
        real = model.logits

        def logits(features: torch.Tensor) -> torch.Tensor:
            out = real(features)
            sizes.append(out.numel())
            return out

        monkeypatch.setattr(model, "logits", logits)
    else:
        for module in (model.adaptive.head, *model.adaptive.tail):
            module.register_forward_hook(lambda _m, _i, out: sizes.append(out.numel()))

    def full_distribution(features: torch.Tensor) -> torch.Tensor:
        raise AssertionError("evaluation built full-vocabulary log-probabilities")

    monkeypatch.setattr(model, "log_probs", full_distribution)
    return sizes


@pytest.mark.parametrize("fields", [{}, ADAPTIVE], ids=["full", "adaptive"])
def test_a_tiny_budget_gives_the_same_scores_and_bounds_every_logits_tensor(fields, monkeypatch):
    vocab = tiny_vocab()
    model = make_model(vocab, cell="gru", mode="afp", rho=3, **fields)
    # a 40-word sentence is longer than the budget's rows: the model splits its positions
    sentences = random_sentences(25, seed=4) + random_sentences(1, seed=5, min_len=40, max_len=40)
    corpus = encode(sentences, vocab)
    sizes = largest_logits(model, monkeypatch)
    unbounded = score_corpus(model, corpus, max_elements=1 << 30)
    assert max(sizes) > 3 * vocab.size  # the counter sees the big tensors (so the bound below can fail)

    widest_tail = max((hi - lo for lo, hi in model._clusters()), default=0) if model.adaptive else 0
    budget = max(3 * model.logit_width, widest_tail)
    sizes.clear()
    bounded = score_corpus(model, corpus, max_elements=budget)
    assert 0 < max(sizes) <= budget
    assert len(plan_batches(model, corpus, max_elements=budget)) > len(plan_batches(model, corpus))
    assert bounded.tokens == unbounded.tokens == sum(len(s) + 1 for s in sentences)
    for got, expected in zip(bounded.token_logprobs, unbounded.token_logprobs, strict=True):
        assert torch.allclose(got, expected, rtol=0, atol=1e-6)
    assert bounded.logprob == pytest.approx(unbounded.logprob, rel=1e-6)


def test_corpus_logprob_in_one_process_is_the_corpus_sum():
    vocab = tiny_vocab()
    model = make_model(vocab, cell="lstm", mode="afp", rho=2, **ADAPTIVE)
    corpus = encode(random_sentences(30, seed=6), vocab)
    logprob, tokens = corpus_logprob(model, corpus, batch_size=4, max_elements=64)
    expected = score_corpus(model, corpus, batch_size=4, max_elements=64)
    assert tokens == expected.tokens
    assert logprob == pytest.approx(expected.logprob, rel=1e-12)
    with pytest.raises(ValueError, match="rank 2 is not in"):
        corpus_logprob(model, corpus, rank=2, world_size=2)


def test_afp_ppl_takes_a_logits_budget(tmp_path, capsys):
    from service.cli import main

    model_dir = saved_model(tmp_path / "m", cell="gru")
    text = write_text(tmp_path / "t.txt", random_sentences(20, seed=7))
    results = []
    for extra in ([], ["--max-elements", "20"]):
        assert main(["ppl", "--model", str(model_dir), "--text", str(text), "--json", *extra]) == 0
        results.append(json.loads(capsys.readouterr().out))
    assert results[1]["tokens"] == results[0]["tokens"]
    assert results[1]["ppl"] == pytest.approx(results[0]["ppl"], rel=1e-6)
