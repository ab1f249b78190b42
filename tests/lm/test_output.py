"""bf16 output layer of scoring: within 1e-3 nats of float32 (lm/output.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from lm.checkpoint import load_checkpoint
from lm.corpus import load_corpus
from lm.output import logsumexp_in_place, picked_log_softmax, resolve_score_precision
from lm.scorer import LMScorer, sentence_pairs
from tests.factories import DEVICES, make_model, random_sentences, shared_data_file, tiny_vocab

REPO = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-3  # nats
#: each bundled neural model (the AFP part of a bundled mixture) with a validation text of its domain
BUNDLED = {"conversational/afp": "switchboard/valid.txt", "librispeech/afp": "books/valid.txt", "ptb": "ptb/ptb.valid.txt",
           "conversational-text": "conversational-text/valid.txt"}


def peaked_layer(device: str, vocab: int = 4000, width: int = 64, rows: int = 200, seed: int = 0):
    """Features and a float32 output layer whose logits reach ~20 with a dominant word per row, as
    a trained LM's do: where rounding logits to bfloat16 costs the most."""
    g = torch.Generator().manual_seed(seed)
    features = torch.tanh(torch.randn(rows, width, generator=g) * 2)
    weight = torch.randn(vocab, width, generator=g) * 0.6
    bias = torch.randn(vocab, generator=g) * 2
    bias[:3] = float("-inf")  # blocked ids
    return features.to(device), weight.to(device), bias.to(device)


@pytest.mark.parametrize("device", DEVICES)
def test_fp32_picks_the_log_softmax(device):
    features, weight, bias = peaked_layer(device)
    rows = torch.arange(200, device=device).repeat_interleave(3)
    cols = torch.randint(3, 4000, (600,), generator=torch.Generator().manual_seed(1)).to(device)  # past the blocked
    cols[:5] = torch.tensor([0, 1, 2, 3, 4])  # the three blocked ids first
    expected = F.linear(features, weight, bias).log_softmax(dim=1)[rows, cols]
    got = picked_log_softmax(features, weight, bias, rows, cols, "fp32")
    assert torch.isneginf(got[:3]).all() and torch.isfinite(got[3:]).all()
    assert torch.allclose(got[3:], expected[3:], atol=2e-5)


def test_picked_log_softmax_has_the_gradient_of_log_softmax():
    """With autograd on (training, a caller's own backward pass), no in-place step breaks it: the
    same values and gradients as ``log_softmax``."""
    features, weight, bias = peaked_layer("cpu", vocab=50, rows=6)
    rows, cols = torch.tensor([0, 1, 5, 5]), torch.tensor([3, 7, 8, 49])
    grads = []
    for pick in (lambda f, w: picked_log_softmax(f, w, bias, rows, cols, "fp32"),
                 lambda f, w: F.linear(f, w, bias).log_softmax(dim=1)[rows, cols]):
        f, w = features.clone().requires_grad_(), weight.clone().requires_grad_()
        out = pick(f, w)
        out.sum().backward()
        grads.append((out.detach(), f.grad, w.grad))
    for got, expected in zip(*grads):
        assert torch.allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_the_in_place_log_sum_exp_is_torchs_bit_for_bit(device):
    """Peaked rows, blocked (-inf) ids, a row blocked everywhere, huge and tiny values, rows of one
    column: the same float32 bits as ``torch.logsumexp``, written over its input."""
    features, weight, bias = peaked_layer(device)
    g = torch.Generator().manual_seed(5)
    cases = [F.linear(features, weight, bias),
             torch.randn(33, 1001, generator=g).to(device) * 1e3,
             torch.randn(7, 1, generator=g).to(device),
             torch.full((4, 50), float("-inf"), device=device),
             torch.cat([torch.randn(5, 300, generator=g) - 1e4, torch.randn(5, 300, generator=g) * 1e-7]).to(device)]
    cases[0][17] = float("-inf")  # a row whose every id is blocked
    for values in cases:
        expected = torch.logsumexp(values, dim=1)
        got = logsumexp_in_place(values.clone())
        assert got.dtype == torch.float32 and torch.equal(got.isneginf(), expected.isneginf())
        assert torch.equal(got[~expected.isneginf()], expected[~expected.isneginf()])  # bit for bit


def allocated_bytes(work) -> int:
    """Bytes of CPU memory the torch operators of ``work()`` allocate (each operator's own, from
    the profiler's memory events; in-place results and views allocate none)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        work()
    return sum(e.self_cpu_memory_usage for e in prof.events() if e.self_cpu_memory_usage > 0)


def test_the_in_place_log_sum_exp_makes_no_other_vocabulary_sized_tensor():
    """logsumexp_in_place (the bf16 path's) allocates only (N,) vectors; torch.logsumexp on the
    same logits allocates another (N, V) tensor (measured here, so the check can fail)."""
    features, weight, bias = peaked_layer("cpu", vocab=20_000, rows=100)
    logits = F.linear(features, weight, bias)
    ours = allocated_bytes(lambda: logsumexp_in_place(logits.clone()))
    theirs = allocated_bytes(lambda: torch.logsumexp(logits.clone(), dim=1))
    logits_bytes = 100 * 20_000 * 4
    assert logits_bytes <= ours < logits_bytes + 64 * 100 and theirs >= 2 * logits_bytes, (ours, theirs)


def largest_allocation(work) -> int:
    """Bytes of the largest single CPU allocation of ``work()``'s torch operators."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        work()
    return max((e.self_cpu_memory_usage for e in prof.events()), default=0)


def test_the_cpu_output_layer_goes_in_cache_sized_blocks_of_rows(monkeypatch):
    """On the CPU the fp32 output layer makes at most CPU_BLOCK_LOGITS logits at a time (not every
    row's at once), with the values of one block of every row to float32 rounding; a block of rows
    no entry is wanted from is skipped."""
    import lm.output

    features, weight, bias = peaked_layer("cpu", vocab=20_000, rows=300)
    rows = torch.arange(300).repeat_interleave(2)
    cols = torch.randint(3, 20_000, (600,), generator=torch.Generator().manual_seed(2))
    block = lm.output.CPU_BLOCK_LOGITS
    assert block < 300 * 20_000
    blocked = picked_log_softmax(features, weight, bias, rows, cols, "fp32")
    block_bytes = largest_allocation(lambda: picked_log_softmax(features, weight, bias, rows, cols, "fp32"))
    monkeypatch.setattr(lm.output, "CPU_BLOCK_LOGITS", 1 << 40)
    whole_bytes = largest_allocation(lambda: picked_log_softmax(features, weight, bias, rows, cols, "fp32"))
    whole = picked_log_softmax(features, weight, bias, rows, cols, "fp32")
    assert block_bytes <= block * 4 < whole_bytes == 300 * 20_000 * 4
    assert blocked.shape == (600,) and torch.allclose(blocked, whole, rtol=0, atol=1e-5)
    monkeypatch.setattr(lm.output, "CPU_BLOCK_LOGITS", block)
    last = rows >= 290  # entries from the last ten rows only: the blocks before make no logits
    few = largest_allocation(lambda: picked_log_softmax(features, weight, bias, rows[last], cols[last], "fp32"))
    assert torch.allclose(picked_log_softmax(features, weight, bias, rows[last], cols[last], "fp32"), whole[last],
                          rtol=0, atol=1e-5)
    assert few <= block * 4


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_is_within_a_thousandth_of_a_nat_where_plain_bf16_is_not(device):
    features, weight, bias = peaked_layer(device)
    logits = F.linear(features, weight, bias)
    assert logits.max() > 15  # the layer is as peaked as it should be
    rows = torch.arange(200, device=device).repeat_interleave(20)
    cols = torch.cat([logits.topk(10, dim=1).indices, torch.randint(3, 4000, (200, 10), device=device)], 1).flatten()
    reference = picked_log_softmax(features, weight, bias, rows, cols, "fp32")
    got = picked_log_softmax(features, weight, bias, rows, cols, "bf16")
    assert got.dtype == torch.float32
    assert (got - reference).abs().max() < TOLERANCE
    plain = (F.linear(features.bfloat16(), weight.bfloat16()).float() + bias).log_softmax(dim=1)[rows, cols]
    assert (plain - reference).abs().max() > 10 * TOLERANCE  # what the refinement removes


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("softmax", ["full", "adaptive"])
def test_bf16_context_scoring_matches_fp32(device, softmax):
    vocab = tiny_vocab()
    fields = {"softmax": "adaptive", "cutoffs": (5, 10), "div_value": 2.0} if softmax == "adaptive" else {}
    model = make_model(vocab, cell="gru", mode="afp", rho=3, hidden=32, init_range=1.0, device=device, **fields)
    sentences = random_sentences(30, seed=4)
    contexts, lengths, targets, target_context, _ = sentence_pairs(
        [vocab.encode(s) for s in sentences], vocab.bos_id, vocab.eos_id, 3)
    targets[:2] = vocab.bos_id  # blocked: -inf in both
    fp32 = model.score_contexts(contexts, lengths, targets, target_context)
    bf16 = model.score_contexts(contexts, lengths, targets, target_context, precision="bf16", max_elements=64)
    assert torch.isneginf(bf16[:2]).all() and torch.isneginf(fp32[:2]).all()
    assert (bf16[2:] - fp32[2:]).abs().max() < TOLERANCE


def test_the_cached_bf16_weights_follow_the_model():
    vocab = tiny_vocab()
    model = make_model(vocab, cell="gru", mode="afp", rho=2, hidden=16)
    contexts, lengths, targets, target_context, _ = sentence_pairs(
        [vocab.encode(s) for s in random_sentences(10, seed=1)], vocab.bos_id, vocab.eos_id, 2)
    first = model.score_contexts(contexts, lengths, targets, target_context, precision="bf16")
    with torch.no_grad():
        model.output_layer.weight.mul_(3.0)  # as an optimizer step would change it
    fp32 = model.score_contexts(contexts, lengths, targets, target_context)
    bf16 = model.score_contexts(contexts, lengths, targets, target_context, precision="bf16")
    assert (bf16 - first).abs().max() > 0.1
    assert (bf16 - fp32).abs().max() < TOLERANCE


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_bundled_models_score_real_text_in_bf16_within_a_thousandth_of_a_nat(name, device):
    path = shared_data_file(*BUNDLED[name].split("/"))  # a skip only without ../shared/data itself
    loaded = load_checkpoint(REPO / "models" / name, device=device)
    vocab = loaded.vocab
    sentences = load_corpus(path)[:120]
    contexts, lengths, targets, target_context, _ = sentence_pairs(
        [vocab.encode(s) for s in sentences], vocab.bos_id, vocab.eos_id, loaded.config.context_size)
    fp32 = LMScorer(loaded, precision="fp32").score(contexts, lengths, targets, target_context)
    bf16 = LMScorer(loaded, precision="bf16").score(contexts, lengths, targets, target_context)
    assert (bf16 - fp32).abs().max() < TOLERANCE


def test_auto_precision_is_bf16_on_cuda_only():
    assert resolve_score_precision("auto", "cpu") == "fp32"
    assert resolve_score_precision("auto", torch.device("cuda", 0)) == "bf16"
    assert resolve_score_precision("fp32", "cuda") == "fp32"
    assert resolve_score_precision("bf16", "cpu") == "bf16"
    with pytest.raises(ValueError, match="score precision must be one of"):
        resolve_score_precision("fp16", "cpu")
