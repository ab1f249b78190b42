"""The adaptive softmax output layer: a normalised distribution, exact context scoring, training."""

from __future__ import annotations

import pytest
import torch

from lm.checkpoint import load_checkpoint, prepare_model, save_checkpoint
from lm.config import ModelConfig, TrainConfig, default_cutoffs
from lm.corpus import encode
from lm.scorer import sentence_pairs
from lm.train import train
from lm.vocab import Vocabulary
from tests.factories import collate, DEVICES, make_model, patterned_sentences, random_sentences, tiny_vocab, write_text

ADAPTIVE = {"softmax": "adaptive", "cutoffs": (5, 10), "div_value": 2.0}


def kaldi_vocab() -> Vocabulary:
    """A words.txt-style table with ``<eps>`` at 0 and a disambiguation symbol in the last cluster."""
    words = ["<eps>", "<s>", "</s>", "<unk>", *tiny_vocab().words[3:], "#0"]
    return Vocabulary(tuple(words))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cell", ["gru", "lstm", "elman"])
def test_distribution_is_normalised_and_blocked_ids_get_nothing(cell, device):
    vocab = kaldi_vocab()
    model = make_model(vocab, cell=cell, mode="afp", rho=2, device=device, **ADAPTIVE)
    features = torch.randn(11, 8, device=device)
    log_probs = model.log_probs(features)
    assert log_probs.shape == (11, vocab.size)
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(11, device=device), atol=1e-5)
    for blocked in ("<eps>", "<s>", "#0"):  # head, head, last tail cluster
        assert bool(torch.isneginf(log_probs[:, vocab.id(blocked)]).all()), blocked
    targets = torch.randint(0, vocab.size, (11,), device=device)
    picked = model.target_log_probs(features, targets)
    assert torch.allclose(picked, log_probs[torch.arange(11, device=device), targets], atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("max_elements", [16, 1 << 20])
@pytest.mark.parametrize("adaptive_input", [False, True])
def test_context_scoring_equals_the_sentence_pass(device, max_elements, adaptive_input):
    vocab = tiny_vocab()
    model = make_model(vocab, cell="gru", mode="afp", rho=3, device=device, adaptive_input=adaptive_input, **ADAPTIVE)
    sentences = random_sentences(12, seed=3)
    batch = collate(encode(sentences, vocab).ids).to(device)
    with torch.no_grad():
        full = model.token_logprobs(batch.inputs, batch.targets, batch.lengths)
    expected = torch.cat([full[i, : len(s) + 1] for i, s in enumerate(sentences)])
    contexts, lengths, targets, target_context, _ = sentence_pairs(
        [vocab.encode(s) for s in sentences], vocab.bos_id, vocab.eos_id, 3)
    got = model.score_contexts(contexts, lengths, targets, target_context, max_elements=max_elements)
    assert torch.allclose(got, expected, atol=1e-5)


def test_checkpoint_round_trip_and_info(tmp_path):
    vocab = tiny_vocab()
    model = make_model(vocab, cell="gru", mode="afp", rho=2, **ADAPTIVE)
    save_checkpoint(tmp_path / "m", model, vocab)
    loaded = load_checkpoint(tmp_path / "m")
    batch = collate(encode(random_sentences(4), vocab).ids)
    with torch.no_grad():
        assert torch.equal(model.token_logprobs(batch.inputs, batch.targets, batch.lengths),
                           loaded.model.token_logprobs(batch.inputs, batch.targets, batch.lengths))
    info = loaded.info()
    assert info["softmax"] == "adaptive" and info["cutoffs"] == [5, 10]
    assert load_checkpoint(tmp_path / "m").config.cutoffs == (5, 10)


def test_training_lowers_validation_perplexity(tmp_path):
    sentences = patterned_sentences(300, seed=1)
    train_file = write_text(tmp_path / "train.txt", sentences[:250])
    valid_file = write_text(tmp_path / "valid.txt", sentences[250:])
    cfg = TrainConfig(train=str(train_file), valid=str(valid_file), epochs=3, batch_size=10, lr=0.01, seed=2)
    result = train(ModelConfig(cell="gru", hidden=16, mode="afp", rho=3, **ADAPTIVE), cfg, tmp_path / "out",
                   progress=False)
    ppls = [m["valid_ppl"] for m in result.metrics]
    assert ppls[-1] < ppls[0] < 13  # below uniform over the 13 words + </s>
    assert load_checkpoint(tmp_path / "out").config.softmax == "adaptive"


def test_bad_configurations_are_named():
    with pytest.raises(ValueError, match="tie_weights"):
        ModelConfig(vocab_size=100, softmax="adaptive", tie_weights=True)
    with pytest.raises(ValueError, match="cutoffs"):
        ModelConfig(vocab_size=100, softmax="adaptive", cutoffs=(50, 20))
    with pytest.raises(ValueError, match="cutoffs"):
        ModelConfig(vocab_size=100, softmax="adaptive", cutoffs=(10, 99))
    with pytest.raises(ValueError, match="cutoffs"):
        ModelConfig(vocab_size=100, cutoffs=(10,))  # full softmax
    with pytest.raises(ValueError, match="softmax"):
        ModelConfig(vocab_size=100, softmax="sampled")
    with pytest.raises(ValueError, match="width 0"):
        make_model(tiny_vocab(), softmax="adaptive", cutoffs=(5, 10), div_value=4.0, hidden=8)


def test_default_cutoffs_follow_the_vocabulary_size():
    assert default_cutoffs(44_000) == (2_000, 10_000)
    assert default_cutoffs(250_000) == (2_000, 10_000, 50_000, 200_000)
    assert default_cutoffs(16) == (8,)
    assert ModelConfig(vocab_size=44_000, softmax="adaptive").adaptive_cutoffs == (2_000, 10_000)


def test_full_softmax_models_are_unchanged():
    vocab = tiny_vocab()
    model = prepare_model(make_model(vocab, cell="gru", mode="afp", rho=2), vocab)
    features = torch.randn(5, 8)
    assert torch.allclose(model.log_probs(features), model.logits(features).log_softmax(-1))
    targets = torch.randint(1, vocab.size, (5,))
    assert torch.allclose(model.target_log_probs(features, targets),
                          model.log_probs(features)[torch.arange(5), targets], atol=1e-6)


def test_afp_train_flags_reach_the_config(tmp_path, capsys):
    import json

    from service.cli import main

    sentences = patterned_sentences(40, seed=3)
    train_file = write_text(tmp_path / "train.txt", sentences)
    assert main(["train", "--train", str(train_file), "--out", str(tmp_path / "m"), "--cell", "gru",
                 "--hidden", "16", "--rho", "2", "--softmax", "adaptive", "--cutoffs", "5,9", "--div-value", "2",
                 "--epochs", "1"]) == 0
    capsys.readouterr()
    assert main(["info", "--model", str(tmp_path / "m"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["softmax"] == "adaptive" and info["cutoffs"] == [5, 9]


@pytest.mark.parametrize("max_elements", [7, 1 << 20])
def test_every_word_after_a_context_sums_to_one(max_elements):
    """Many targets per context (a lattice's arcs leaving one history): the head and each tail
    cluster are computed per context, and the whole vocabulary after a context sums to 1."""
    vocab = tiny_vocab()
    model = make_model(vocab, cell="gru", mode="afp", rho=2, **ADAPTIVE)
    contexts = torch.tensor([[vocab.bos_id, vocab.bos_id], [vocab.bos_id, 5], [6, 7]])
    lengths = torch.tensor([1, 2, 2])
    targets = torch.arange(vocab.size).repeat(3)
    target_context = torch.arange(3).repeat_interleave(vocab.size)
    got = model.score_contexts(contexts, lengths, targets, target_context, max_elements=max_elements)
    sums = torch.logsumexp(got.reshape(3, vocab.size), dim=1).exp()
    assert torch.allclose(sums, torch.ones(3), atol=1e-5)
    features = model.context_features(contexts, lengths)
    assert torch.allclose(got, model.target_log_probs(features[target_context], targets), atol=1e-6)


def test_a_tail_cluster_with_no_blocked_id_scores_the_same_without_its_zero_bias(monkeypatch):
    """_adaptive_pick drops a tail's bias when no id of it is blocked (the bias row copied per
    context cost as much as the matmul): bit for bit what adding the zeros gives, and a cluster
    with a blocked id keeps its -inf."""
    import lm.model
    from lm.output import picked_log_softmax

    vocab = kaldi_vocab()  # "#0" is blocked in the last tail cluster; the others have none
    model = make_model(vocab, cell="gru", mode="afp", rho=2, **ADAPTIVE)
    model.block_tokens([vocab.id("<eps>"), vocab.id("<s>"), vocab.id("#0")])
    contexts = torch.tensor([[vocab.bos_id, vocab.bos_id], [vocab.bos_id, 5], [6, 7]])
    lengths = torch.tensor([1, 2, 2])
    targets = torch.arange(vocab.size).repeat(3)
    target_context = torch.arange(3).repeat_interleave(vocab.size)
    biases = []

    def always_a_bias(features, weight, bias, *args, **kwargs):
        biases.append(bias)
        if bias is None:
            bias = torch.zeros(weight.shape[0])
        return picked_log_softmax(features, weight, bias, *args, **kwargs)

    got = model.score_contexts(contexts, lengths, targets, target_context, max_elements=1 << 20)
    monkeypatch.setattr(lm.model, "picked_log_softmax", always_a_bias)
    zeros_added = model.score_contexts(contexts, lengths, targets, target_context, max_elements=1 << 20)
    assert any(b is None for b in biases) and any(b is not None and bool(torch.isneginf(b).any()) for b in biases)
    assert torch.equal(got, zeros_added)
    assert bool(torch.isneginf(got[targets == vocab.id("#0")]).all())
