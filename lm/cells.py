"""Recurrent cells behind one interface: state in, projected token in, state out.

Every cell carries its whole recurrent state in one tensor of width ``state_size`` (an LSTM's
``[h, c]``, an SCRN's ``[h, s]``, a stack's layers side by side) and works on any leading shape,
so that the same ``step`` serves the sequential recurrence (``(B, S)`` per time step) and the
parallel fixed-point iteration (``(B, T, S)`` for all positions at once). The initial state is
always zeros.

A step is split in two so that the input part is computed once per token, not once per
fixed-point iteration:

  ``u = cell.project(x)``          ``x: (..., input_size)  -> u: (..., projection_size)``
  ``state' = cell.step(state, u)`` ``state: (..., state_size) -> (..., state_size)``
  ``y = cell.output(state)``       ``-> (..., output_size)``: what the softmax layer reads.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch
from torch import Tensor, nn

ACTIVATIONS = {"tanh": torch.tanh, "sigmoid": torch.sigmoid}


class RecurrentCell(nn.Module, ABC):
    """One recurrent step; see the module docstring for the contract."""

    input_size: int
    state_size: int
    output_size: int

    @abstractmethod
    def project(self, x: Tensor) -> Tensor:
        """Input part of a step. ``x: (..., input_size) -> (..., projection_size)``."""

    @abstractmethod
    def step(self, state: Tensor, u: Tensor) -> Tensor:
        """New state from the previous state and a projected input; shapes ``(..., state_size)``."""

    def step_from(self, state: Tensor, projected: Tensor, index: Tensor) -> Tensor:
        """``step(state, projected[index])``: ``state: (N, state_size)``, ``projected: (U,
        projection_size)`` the input parts of U tokens, ``index: int64 (N,)`` each row's token. A
        cell may fuse the gather into its step (the GRU does, without autograd)."""
        return self.step(state, projected.index_select(0, index))

    def output(self, state: Tensor) -> Tensor:
        """Features for the output layer. ``(..., state_size) -> (..., output_size)``."""
        return state

    def initial_state(self, like: Tensor, shape: tuple[int, ...]) -> Tensor:
        """Zeros of shape ``(*shape, state_size)`` on ``like``'s device and dtype."""
        return like.new_zeros(*shape, self.state_size)


class ElmanCell(RecurrentCell):
    """``h' = phi(W h + V x + b)`` with ``phi`` tanh or sigmoid. State ``h: (..., hidden)``."""

    def __init__(self, input_size: int, hidden: int, activation: str = "tanh") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.input_size, self.state_size, self.output_size = input_size, hidden, hidden
        self.activation = activation
        self._phi = ACTIVATIONS[activation]
        self.input_weights = nn.Linear(input_size, hidden)  # V and b
        self.recurrent_weights = nn.Linear(hidden, hidden, bias=False)  # W

    def project(self, x: Tensor) -> Tensor:
        return self.input_weights(x)

    def step(self, state: Tensor, u: Tensor) -> Tensor:
        return self._phi(self.recurrent_weights(state) + u)


class LSTMCell(RecurrentCell):
    """Long short-term memory; state ``[h, c]: (..., 2 * hidden)``, output ``h``."""

    def __init__(self, input_size: int, hidden: int) -> None:
        super().__init__()
        self.input_size, self.state_size, self.output_size = input_size, 2 * hidden, hidden
        self.hidden = hidden
        self.input_weights = nn.Linear(input_size, 4 * hidden)
        self.recurrent_weights = nn.Linear(hidden, 4 * hidden, bias=False)

    def project(self, x: Tensor) -> Tensor:
        return self.input_weights(x)

    def step(self, state: Tensor, u: Tensor) -> Tensor:
        h, c = state.split(self.hidden, dim=-1)
        gates = u + self.recurrent_weights(h)
        i, f, g, o = gates.chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return torch.cat([h, c], dim=-1)

    def output(self, state: Tensor) -> Tensor:
        return state[..., : self.hidden]


class GRUCell(RecurrentCell):
    """Gated recurrent unit (the formulation of ``torch.nn.GRUCell``); state ``h: (..., hidden)``."""

    def __init__(self, input_size: int, hidden: int) -> None:
        super().__init__()
        self.input_size, self.state_size, self.output_size = input_size, hidden, hidden
        self.input_weights = nn.Linear(input_size, 3 * hidden)
        self.recurrent_weights = nn.Linear(hidden, 3 * hidden)

    def project(self, x: Tensor) -> Tensor:
        return self.input_weights(x)

    def step(self, state: Tensor, u: Tensor) -> Tensor:
        if not torch.is_grad_enabled():
            return self._step_in_place(state, u)
        ur, uz, un = u.chunk(3, dim=-1)
        hr, hz, hn = self.recurrent_weights(state).chunk(3, dim=-1)
        r = torch.sigmoid(ur + hr)
        z = torch.sigmoid(uz + hz)
        n = torch.tanh(un + r * hn)
        return (1 - z) * n + z * state

    def step_from(self, state: Tensor, projected: Tensor, index: Tensor) -> Tensor:
        if torch.is_grad_enabled():
            return super().step_from(state, projected, index)
        return self._fused(state, self._gate_table(projected).index_select(0, index))

    def _step_in_place(self, state: Tensor, u: Tensor) -> Tensor:
        """:meth:`step` without autograd: :meth:`_fused` on ``u``'s rows."""
        leading = state.shape[:-1]
        out = self._fused(state.reshape(-1, self.state_size), self._gate_table(u.reshape(-1, u.shape[-1])))
        return out.view(*leading, self.state_size)

    def _gate_table(self, u: Tensor) -> Tensor:
        """``(K, 4 * hidden)``: ``[u_r + b_r, u_z + b_z, b_n, u_n]`` of projected inputs ``u: (K, 3 *
        hidden)`` and the recurrent bias ``b``: what each row's gates start from in :meth:`_fused`."""
        hidden, bias = self.state_size, self.recurrent_weights.bias
        return torch.cat([u[:, :2 * hidden] + bias[:2 * hidden], bias[2 * hidden:].expand(u.shape[0], hidden),
                          u[:, 2 * hidden:]], dim=1)

    def _fused(self, state: Tensor, gates: Tensor) -> Tensor:
        """One step of the rows of ``state: (N, hidden)`` from their :meth:`_gate_table` rows
        ``gates: (N, 4 * hidden)`` (overwritten), the values of :meth:`step` to float32 rounding
        (``tests/lm/test_cells.py``) at a fraction of its memory traffic: the recurrent matmul
        accumulates into ``gates`` (no bias copied per row), the gates are computed in its memory,
        ``tanh(x)`` is ``2 sigmoid(2 x) - 1`` (torch's CPU ``tanh`` is several times slower than its
        ``sigmoid``; doubling is exact) and ``(1 - z) n + z h`` is ``n + z (h - n)``, the one fresh
        ``(N, hidden)`` tensor besides ``gates``."""
        hidden = self.state_size
        gates[:, :3 * hidden].addmm_(state, self.recurrent_weights.weight.t())
        rz = gates[:, :2 * hidden].sigmoid_()
        n = gates[:, 2 * hidden:3 * hidden].mul_(rz[:, :hidden]).add_(gates[:, 3 * hidden:])
        n.mul_(2).sigmoid_().mul_(2).sub_(1)  # tanh
        return torch.sub(state, n).mul_(rz[:, hidden:]).add_(n)


class SCRNCell(RecurrentCell):
    """Structurally constrained recurrent network (Mikolov et al., 2015).

    Slow context units ``s' = (1 - a) * B x + a * s`` (no non-linearity, decay ``a`` fixed or
    learned per unit in (0, 1)) and fast hidden units ``h' = sigmoid(P s' + A x + R h)``.
    State ``[h, s]: (..., hidden + context)``; the output layer reads both, as in the paper's
    ``softmax(U h + V s)``.
    """

    def __init__(self, input_size: int, hidden: int, context: int, decay: float = 0.95, learn_decay: bool = False) -> None:
        super().__init__()
        if context < 1:
            raise ValueError(f"SCRN needs at least one context unit, got {context}")
        if not 0.0 < decay < 1.0:
            raise ValueError(f"SCRN decay must be in (0, 1), got {decay}")
        self.hidden, self.context = hidden, context
        self.input_size, self.state_size = input_size, hidden + context
        self.output_size = hidden + context
        self.context_input = nn.Linear(input_size, context, bias=False)  # B
        self.hidden_input = nn.Linear(input_size, hidden)  # A (and bias)
        self.context_to_hidden = nn.Linear(context, hidden, bias=False)  # P
        self.recurrent_weights = nn.Linear(hidden, hidden, bias=False)  # R
        logit = torch.full((context,), math.log(decay / (1 - decay)))
        if learn_decay:
            self.decay_logit = nn.Parameter(logit)
        else:
            self.register_buffer("decay_logit", logit)

    @property
    def decay(self) -> Tensor:
        """Per-unit decay ``a: (context,)`` in (0, 1)."""
        return torch.sigmoid(self.decay_logit)

    def project(self, x: Tensor) -> Tensor:
        return torch.cat([self.context_input(x), self.hidden_input(x)], dim=-1)

    def step(self, state: Tensor, u: Tensor) -> Tensor:
        h, s = state.split([self.hidden, self.context], dim=-1)
        bx, ax = u.split([self.context, self.hidden], dim=-1)
        a = self.decay
        s = (1 - a) * bx + a * s
        h = torch.sigmoid(self.context_to_hidden(s) + ax + self.recurrent_weights(h))
        return torch.cat([h, s], dim=-1)


class StackedCell(RecurrentCell):
    """``k`` cells stacked in depth: in one step, layer ``i`` reads layer ``i-1``'s new output.

    State: the layers' states side by side, ``(..., sum of state sizes)``; output: the top layer's.
    Only the bottom layer's input projection can be computed ahead; the others are done in
    ``step``.
    """

    def __init__(self, layers: list[RecurrentCell]) -> None:
        super().__init__()
        if len(layers) < 2:
            raise ValueError(f"a stack needs at least two layers, got {len(layers)}")
        for lower, upper in zip(layers, layers[1:]):
            if lower.output_size != upper.input_size:
                raise ValueError(f"layer sizes do not chain: output {lower.output_size} -> input {upper.input_size}")
        self.layers = nn.ModuleList(layers)
        self.input_size = layers[0].input_size
        self.state_size = sum(c.state_size for c in layers)
        self.output_size = layers[-1].output_size
        self._sizes = [c.state_size for c in layers]

    def project(self, x: Tensor) -> Tensor:
        return self.layers[0].project(x)

    def step(self, state: Tensor, u: Tensor) -> Tensor:
        new_states = []
        for i, (cell, layer_state) in enumerate(zip(self.layers, state.split(self._sizes, dim=-1))):
            if i > 0:
                u = cell.project(self.layers[i - 1].output(new_states[-1]))
            new_states.append(cell.step(layer_state, u))
        return torch.cat(new_states, dim=-1)

    def output(self, state: Tensor) -> Tensor:
        return self.layers[-1].output(state[..., -self._sizes[-1]:])


CELL_TYPES = ("elman", "lstm", "gru", "scrn")


def make_cell(
    kind: str,
    input_size: int,
    hidden: int,
    layers: int = 1,
    activation: str = "tanh",
    context: int = 0,
    decay: float = 0.95,
    learn_decay: bool = False,
) -> RecurrentCell:
    """Build a cell (or a stack of ``layers`` equal cells) by name; ``ValueError`` on a bad option."""
    if layers < 1:
        raise ValueError(f"layers must be at least 1, got {layers}")
    if hidden < 1:
        raise ValueError(f"hidden must be at least 1, got {hidden}")

    def one(in_size: int) -> RecurrentCell:
        if kind == "elman":
            return ElmanCell(in_size, hidden, activation)
        if kind == "lstm":
            return LSTMCell(in_size, hidden)
        if kind == "gru":
            return GRUCell(in_size, hidden)
        if kind == "scrn":
            return SCRNCell(in_size, hidden, context, decay, learn_decay)
        raise ValueError(f"cell must be one of {CELL_TYPES}, got {kind!r}")

    first = one(input_size)
    if layers == 1:
        return first
    stack = [first]
    for _ in range(layers - 1):
        stack.append(one(stack[-1].output_size))
    return StackedCell(stack)
