"""The properties that make AFP-rho rescoring exact, checked for every cell type."""

from __future__ import annotations

import pytest
import torch

from lm.corpus import encode
from tests.factories import collate, CELL_CONFIGS, DEVICES, make_model, random_sentences, tiny_vocab
from tests.lm.delayed_reference import delayed_from_stacked, run_delayed

VOCAB = tiny_vocab()
CELLS = list(CELL_CONFIGS)


def batch_of(sentences, device="cpu"):
    return collate(encode(sentences, VOCAB).ids).to(device)


@torch.no_grad()
def logprobs(model, batch):
    return model.token_logprobs(batch.inputs, batch.targets, batch.lengths)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cell", CELLS)
def test_afp_with_rho_at_least_sentence_length_equals_exact(cell, device):
    model = make_model(VOCAB, device=device, **CELL_CONFIGS[cell])
    batch = batch_of(random_sentences(6, seed=1, max_len=8), device)
    length = batch.inputs.shape[1]
    exact = model.exact(batch.inputs)
    for rho in (length, length + 3):
        assert torch.allclose(model.afp(batch.inputs, rho), exact, atol=1e-5), (cell, rho)
    # and with fewer iterations the states really are different (the test can fail)
    assert not torch.allclose(model.afp(batch.inputs, 1), exact, atol=1e-3)


@pytest.mark.parametrize("rho", [1, 2, 4])
@pytest.mark.parametrize("cell", CELLS)
def test_afp_prediction_depends_on_exactly_the_last_rho_tokens(cell, rho):
    model = make_model(VOCAB, mode="afp", rho=rho, **CELL_CONFIGS[cell])
    sentence = random_sentences(1, seed=2, min_len=9, max_len=9)[0]
    base = logprobs(model, batch_of([sentence]))[0]
    # target position t predicts word t (0-based over words + </s>); its context is the rho tokens before it
    for t in range(rho + 1, len(sentence) + 1):
        for changed in range(t):  # index into the sentence's words; token t-1-k of inputs is word t-1-k
            variant = list(sentence)
            variant[changed] = "big" if sentence[changed] != "big" else "small"
            new = logprobs(model, batch_of([variant]))[0]
            distance = t - changed  # 1 = the word right before the target
            if distance > rho:
                assert torch.allclose(new[t], base[t], rtol=0, atol=1e-7), (cell, rho, t, changed)
        # some change inside the window does change the prediction
        inside = []
        for changed in range(t - rho, t):
            variant = list(sentence)
            variant[changed] = "big" if sentence[changed] != "big" else "small"
            inside.append(float((logprobs(model, batch_of([variant]))[0][t] - base[t]).abs()))
        assert max(inside) > 1e-5, (cell, rho, t, inside)


@pytest.mark.parametrize("cell", CELLS)
def test_detach_gives_same_values_and_different_gradients(cell):
    model = make_model(VOCAB, mode="afp", rho=3, **CELL_CONFIGS[cell])
    batch = batch_of(random_sentences(4, seed=3, min_len=4), "cpu")

    def forward_and_grads(detach):
        model.zero_grad()
        out = model.token_logprobs(batch.inputs, batch.targets, batch.lengths, detach=detach)
        out.sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return out.detach(), grads

    plain, plain_grads = forward_and_grads(False)
    detached, detached_grads = forward_and_grads(True)
    assert torch.allclose(plain, detached, atol=1e-6)
    recurrent = [n for n in plain_grads if "recurrent_weights" in n]
    assert recurrent
    assert any(not torch.allclose(plain_grads[n], detached_grads[n], atol=1e-7) for n in recurrent)
    # the output layer sees the same features, so its gradient is the same
    assert torch.allclose(plain_grads["output_layer.bias"], detached_grads["output_layer.bias"], atol=1e-6)


def contexts_for(sentence_ids, limit):
    """Every prediction's (right-aligned context, target) of one encoded sentence."""
    rows, targets = [], []
    for t in range(1, len(sentence_ids)):
        history = sentence_ids[max(0, t - limit) if limit else 0: t]
        rows.append(history)
        targets.append(sentence_ids[t])
    width = max(len(r) for r in rows)
    contexts = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        contexts[i, width - len(r):] = torch.tensor(r)
    return contexts, torch.tensor([len(r) for r in rows]), torch.tensor(targets)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fields", [{"mode": "afp", "rho": r, **CELL_CONFIGS[c]} for c in CELLS for r in (1, 3)]
                         + [{"mode": "exact", "cell": "lstm"}, {"arch": "ffnn", "order": 2},
                            {"arch": "ffnn", "order": 4}],
                         ids=lambda f: "-".join(str(v) for v in f.values()))
def test_context_entry_point_equals_sentence_forward_pass(fields, device):
    model = make_model(VOCAB, device=device, **fields)
    sentences = random_sentences(5, seed=4, min_len=1, max_len=8)
    batch = batch_of(sentences, device)
    full = logprobs(model, batch)
    for row, ids in enumerate(encode(sentences, VOCAB).ids):
        contexts, lengths, targets = contexts_for(ids.tolist(), model.context_size)
        scored = model.score_contexts(contexts, lengths, targets)
        assert torch.allclose(scored, full[row, : len(ids) - 1], atol=1e-5), (fields, row)


def test_context_entry_point_cuts_long_contexts_and_chunks():
    model = make_model(VOCAB, mode="afp", rho=2, cell="lstm")
    ids = encode([["the", "cat", "sat", "on", "the", "mat"]], VOCAB).ids[0].tolist()
    contexts, lengths, targets = contexts_for(ids, None)  # full histories, longer than rho
    cut, cut_lengths, _ = contexts_for(ids, 2)
    expected = model.score_contexts(cut, cut_lengths, targets)
    # tiny chunks (1 context at a time) and many targets per context give the same numbers
    assert torch.allclose(model.score_contexts(contexts, lengths, targets, max_elements=1), expected, atol=1e-6)
    repeated = model.score_contexts(contexts, lengths, targets.repeat(3), torch.arange(len(targets)).repeat(3))
    assert torch.allclose(repeated, expected.repeat(3), atol=1e-6)


def test_blocked_start_symbol_is_never_predicted():
    model = make_model(VOCAB, mode="afp", rho=2)
    contexts = torch.tensor([[VOCAB.bos_id]])
    all_ids = torch.arange(VOCAB.size)
    scores = model.score_contexts(contexts.expand(VOCAB.size, 1), torch.ones(VOCAB.size, dtype=torch.long), all_ids)
    assert scores[VOCAB.bos_id] == float("-inf")
    assert torch.isclose(scores[all_ids != VOCAB.bos_id].exp().sum(), torch.tensor(1.0), atol=1e-5)


@pytest.mark.parametrize("layers", [2, 3])
@pytest.mark.parametrize("activation", ["tanh", "sigmoid"])
def test_stacked_elman_equals_delayed_single_layer_rnn(layers, activation):
    """Turek et al., Theorem 1: output of the d-RNN at t + k - 1 equals the stack's at t."""
    model = make_model(VOCAB, cell="elman", layers=layers, activation=activation)
    batch = batch_of(random_sentences(3, seed=5, min_len=4), "cpu")
    stacked = model.exact(batch.inputs)  # (B, T, n) top layer
    delayed_cell = delayed_from_stacked(model.cell)
    n = model.config.hidden
    assert delayed_cell.state_size == layers * n
    W = delayed_cell.recurrent_weights.weight
    for i in range(layers):  # block-bidiagonal: nothing above the diagonal, nothing below the sub-diagonal
        for j in range(layers):
            if j > i or j < i - 1:
                assert torch.count_nonzero(W[i * n:(i + 1) * n, j * n:(j + 1) * n]) == 0
    states = run_delayed(delayed_cell, model.embedding(batch.inputs), delay=layers - 1)
    top = states[:, layers - 1:, -n:]
    assert torch.allclose(top, stacked, atol=1e-5)
    # the outputs (log-probabilities) agree too
    assert torch.allclose(model.log_probs(top), model.log_probs(stacked), atol=1e-5)
    # without the delay they do not
    assert not torch.allclose(states[:, : stacked.shape[1], -n:], stacked, atol=1e-3)


@pytest.mark.parametrize("cell", ["elman", "lstm", "gru", "scrn"])
@pytest.mark.parametrize("layers", [1, 2])
def test_context_features_share_prefixes_and_equal_each_row_run_alone(cell, layers):
    """context_features steps each distinct prefix once (lattice contexts share beginnings); every
    row equals the cell run over that row alone (window_features' direct pass, one row at a time)."""
    from tests.factories import make_model, tiny_vocab

    vocab = tiny_vocab()
    fields = {"context_units": 3} if cell == "scrn" else {}
    model = make_model(vocab, cell=cell, mode="afp", rho=3, layers=layers, **fields)
    generator = torch.Generator().manual_seed(1)
    contexts = torch.randint(0, vocab.size, (60, 4), generator=generator)
    contexts[:20, :3] = contexts[0, :3]  # shared beginnings
    lengths = torch.randint(0, 5, (60,), generator=generator)
    valid = torch.arange(4).unsqueeze(0) >= (4 - lengths).unsqueeze(1)
    with torch.no_grad():
        shared = model.context_features(contexts, lengths)
        alone = torch.cat([model.window_features(contexts[i:i + 1], valid[i:i + 1], "direct") for i in range(60)])
    assert torch.allclose(shared, alone, atol=1e-6)
