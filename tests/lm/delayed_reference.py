"""Stacked Elman RNNs as single-layer delayed RNNs (Turek et al., Theorem 1).

A ``k``-layer stack of Elman cells with ``n`` units each equals one Elman cell with ``k n`` units,
block-bidiagonal recurrent weights and output delay ``d = k - 1``::

    W_hat = [[Wh1, 0,   ..., 0  ],      V_hat = [[Wx1],     b_hat = [b1; b2; ...; bk]
             [Wx2, Wh2, ..., 0  ],               [0  ],
             [ 0,  ...,  Wxk, Whk]]              [0  ]]

Block ``i`` of the delayed state at time ``t + i - 1`` is layer ``i``'s state at time ``t``; so the
top block at time ``t + k - 1`` is the stack's output at time ``t``. The initial condition of the
theorem (block ``i`` at time ``i - 1`` holds layer ``i``'s initial state) is imposed by
:func:`run_delayed`.

What it is for: the independent reference of the check that a stacked AFP model's context is
what DESIGN.md claims (the background papers' delayed-RNN view of stacking: a k-layer stack is a
single cell whose output lags by k - 1 steps, so its AFP context and the acausal window models'
futures are counted right), ``test_stacked_elman_equals_delayed_single_layer_rnn`` in
tests/lm/test_model_properties.py. No serving path uses it, so it lives beside its test, not in lm/.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lm.cells import ElmanCell, StackedCell


def delayed_from_stacked(stack: StackedCell) -> ElmanCell:
    """The single-layer Elman cell of Theorem 1 (weights copied, not shared)."""
    layers = list(stack.layers)
    if not all(isinstance(c, ElmanCell) for c in layers):
        raise ValueError("only stacks of Elman cells have the block-bidiagonal form")
    sizes = {c.state_size for c in layers}
    activations = {c.activation for c in layers}
    if len(sizes) != 1 or len(activations) != 1:
        raise ValueError(f"layers must share width and activation, got {sizes} and {activations}")
    n, k = sizes.pop(), len(layers)
    cell = ElmanCell(stack.input_size, k * n, activations.pop())
    with torch.no_grad():
        cell.recurrent_weights.weight.zero_()
        cell.input_weights.weight.zero_()
        for i, layer in enumerate(layers):
            rows = slice(i * n, (i + 1) * n)
            cell.recurrent_weights.weight[rows, rows] = layer.recurrent_weights.weight
            cell.input_weights.bias[rows] = layer.input_weights.bias
            if i == 0:
                cell.input_weights.weight[rows] = layer.input_weights.weight
            else:
                cell.recurrent_weights.weight[rows, (i - 1) * n: i * n] = layer.input_weights.weight
    return cell.to(layers[0].input_weights.weight.device)


def run_delayed(cell: ElmanCell, x: Tensor, delay: int) -> Tensor:
    """Run a delayed RNN over ``x: (B, T, input_size)`` followed by ``delay`` null (zero) inputs.

    Returns the states ``(B, T + delay, state_size)`` at times ``1 .. T + delay``. Block ``i + 1`` is
    reset to the initial state (zeros) at time ``i`` for ``i = 1 .. delay``, the theorem's
    initial condition.
    """
    batch, _, width = x.shape
    n = cell.state_size // (delay + 1)
    inputs = torch.cat([x, x.new_zeros(batch, delay, width)], dim=1)
    state = cell.initial_state(x, (batch,))
    states = []
    for t in range(inputs.shape[1]):
        state = cell.step(state, cell.project(inputs[:, t]))
        if t < delay:  # time t + 1: block t + 2 holds its layer's initial state
            state = torch.cat([state[:, : (t + 1) * n], state.new_zeros(batch, n), state[:, (t + 2) * n:]], dim=1)
        states.append(state)
    return torch.stack(states, dim=1)
