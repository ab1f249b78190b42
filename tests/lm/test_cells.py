"""The GRU's scoring step (no autograd: fused, in place) against its autograd step."""

from __future__ import annotations

import pytest
import torch

from lm.cells import GRUCell


def gru_and_inputs(rows: int = 300, hidden: int = 32, words: int = 17, seed: int = 0):
    """A GRU with weights large enough to saturate some gates, states in (-1, 1), the projected
    inputs of ``words`` tokens and each row's token."""
    torch.manual_seed(seed)
    cell = GRUCell(12, hidden)
    with torch.no_grad():
        for param in cell.parameters():
            param.mul_(6.0)
    generator = torch.Generator().manual_seed(seed)
    state = torch.tanh(torch.randn(rows, hidden, generator=generator) * 2)
    projected = cell.project(torch.randn(words, 12, generator=generator)).detach()
    index = torch.randint(0, words, (rows,), generator=generator)
    return cell, state, projected, index


def test_the_scoring_step_is_the_training_step_to_float32_rounding():
    cell, state, projected, index = gru_and_inputs()
    reference = cell.step(state, projected[index])  # autograd on: the training path
    assert reference.requires_grad
    with torch.no_grad():
        fused = cell.step(state, projected[index])
        gathered = cell.step_from(state, projected, index)
    assert not fused.requires_grad and not torch.equal(fused, reference.detach())  # another computation
    assert torch.allclose(fused, reference.detach(), rtol=0, atol=1e-6)
    assert torch.allclose(gathered, reference.detach(), rtol=0, atol=1e-6)
    assert (reference.detach().abs() > 0.99).any()  # saturated units were checked too


@pytest.mark.parametrize("shape", [(5, 7), (4,)])
def test_the_scoring_step_keeps_leading_dimensions_and_its_inputs(shape):
    """The fixed-point pass steps (B, T, H) states at once; the inputs are left as they were."""
    cell, state, projected, index = gru_and_inputs(rows=35 if len(shape) == 2 else 4)
    state = state.reshape(*shape, -1)
    u = projected[index].reshape(*shape, -1)
    before = (state.clone(), u.clone())
    with torch.no_grad():
        fused = cell.step(state, u)
    assert fused.shape == state.shape
    assert torch.equal(state, before[0]) and torch.equal(u, before[1])
    assert torch.allclose(fused, cell.step(state, u).detach(), rtol=0, atol=1e-6)
