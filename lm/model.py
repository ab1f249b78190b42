"""Language models: a recurrent LM with exact and AFP forward passes, and a feed-forward n-gram LM.

Both predict token ``t`` of a sentence from features of its history and a full softmax:

  ``features(inputs) -> (B, T, F)``  for ``inputs = [<s>, w_1 .. w_n]`` (padded),
  ``log_probs = log_softmax(output(features))`` over the vocabulary, ``<s>`` never predicted.

The recurrent LM computes the features one of two ways:

  * :meth:`RecurrentLM.exact`: the ordinary recurrence ``h_t = cell(h_{t-1}, x_t)`` over the whole
    history (what BPTT trains);
  * :meth:`RecurrentLM.afp`: Algorithm 1 of Wang & Ragni, "Approximate fixed-points in recurrent
    neural networks": all states start at the initial state (zeros), then ``rho`` iterations each
    update every position in parallel from the previous iteration's state one position to the
    left. The state at position ``t`` then depends on exactly the last ``rho`` inputs, which is the
    same as running the cell from zeros over those ``rho`` tokens. ``detach=True`` is FPI|theta:
    the same values, with no gradient through earlier iterations.

So an AFP-rho LM and an n-gram FFNN are both finite-context models, and :meth:`score_contexts`
scores (context, next token) pairs directly: the entry point of lattice rescoring.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lm.cells import RecurrentCell, make_cell
from lm.config import ModelConfig
from lm.embedding import AdaptiveEmbedding
from lm.output import low_precision_weight, picked_log_softmax
from lm.window import WINDOW_METHODS, build_windows

#: Upper bound on logits held at once by :meth:`LanguageModel.score_contexts` (elements).
DEFAULT_SCORE_ELEMENTS = 1 << 24


class LanguageModel(nn.Module, ABC):
    """Common part: output layer (full or adaptive softmax), masked softmax, sentence and context scoring."""

    def __init__(self, config: ModelConfig, feature_size: int) -> None:
        super().__init__()
        self.config = config
        self.embedding: nn.Module = (
            AdaptiveEmbedding(config.input_vocab_size, config.embedding_size, config.adaptive_cutoffs, config.div_value)
            if config.adaptive_input else nn.Embedding(config.input_vocab_size, config.embedding_size))
        self.dropout = nn.Dropout(config.dropout)
        if config.softmax == "adaptive":
            narrowest = int(feature_size // config.div_value ** len(config.adaptive_cutoffs))
            if narrowest < 1:
                raise ValueError(f"adaptive softmax: {len(config.adaptive_cutoffs)} tail clusters with div_value "
                                 f"{config.div_value} leave the last cluster a projection of width 0 from "
                                 f"{feature_size} features; use fewer cutoffs or a smaller div_value")
            self.adaptive: nn.AdaptiveLogSoftmaxWithLoss | None = nn.AdaptiveLogSoftmaxWithLoss(
                feature_size, config.vocab_size, list(config.adaptive_cutoffs), div_value=config.div_value,
                head_bias=True)
            self.output_layer: nn.Linear | None = None
        else:
            self.adaptive = None
            self.output_layer = nn.Linear(feature_size, config.vocab_size)
        if config.tie_weights:
            if feature_size != config.embedding_size:
                raise ValueError(
                    f"tie_weights needs the output features ({feature_size}) to be as wide as the embedding "
                    f"({config.embedding_size})")
            assert self.output_layer is not None  # the config rejects tied adaptive softmax
            self.output_layer.weight = self.embedding.weight
        self.register_buffer("logit_mask", torch.zeros(config.vocab_size), persistent=False)
        #: bfloat16 copies of output-layer weights for ``bf16`` scoring: name -> (data_ptr, version, copy)
        self._low_weights: dict[str, tuple[int, int, Tensor]] = {}

    @property
    def device(self) -> torch.device:
        """The device of the model's parameters."""
        return self.embedding.weight.device

    # ------------------------------------------------------------------ to implement
    @abstractmethod
    def features(self, inputs: Tensor, detach: bool = False) -> Tensor:
        """History features for every position. ``inputs: int64 (B, T) -> (B, T, F)``.

        ``detach`` asks for the FPI|theta gradient (values unchanged); models without fixed-point
        iterations ignore it."""

    @abstractmethod
    def context_features(self, contexts: Tensor, lengths: Tensor) -> Tensor:
        """Features after reading each context.

        Args:
          contexts: int64 ``(N, C)``, right-aligned: row ``i``'s tokens are ``contexts[i, C - lengths[i]:]``,
            the rest is padding (any id).
          lengths: int64 ``(N,)``, each in ``[1, C]``.
        Returns:
          ``(N, F)``: equal to ``features(sentence)`` at the last context position, for a sentence
          whose history within the model's reach is that context.
        """

    # ------------------------------------------------------------------ shared
    @property
    def context_size(self) -> int | None:
        """Tokens of history a prediction depends on (rho, or n-1); None when unbounded."""
        return self.config.context_size

    def block_tokens(self, token_ids: list[int]) -> None:
        """Never predict these ids (``<s>``, Kaldi's ``<eps>``...): their logits become -inf."""
        self.logit_mask.zero_()
        if token_ids:
            self.logit_mask[torch.tensor(token_ids, dtype=torch.long)] = float("-inf")

    def logits(self, features: Tensor) -> Tensor:
        """Full-softmax output layer with the blocked ids at -inf. ``(..., F) -> (..., vocab_size)``.

        The block is added to the bias, so it costs nothing and its gradient is zero."""
        if self.output_layer is None:
            raise ValueError("an adaptive-softmax model has no single logit matrix: use log_probs")
        return F.linear(self.dropout(features), self.output_layer.weight, self.output_layer.bias + self.logit_mask)

    def log_probs(self, features: Tensor) -> Tensor:
        """Normalized log-probabilities of every id. ``(..., F) -> (..., vocab_size)``, natural log."""
        if self.adaptive is None:
            return self.logits(features).log_softmax(dim=-1)
        shape = features.shape[:-1]
        features = self.dropout(features).reshape(-1, features.shape[-1])
        head = self._adaptive_head(features)
        parts = [head[:, : self.adaptive.shortlist_size]]
        for i, (lo, hi) in enumerate(self._clusters()):
            parts.append(head[:, self.adaptive.shortlist_size + i, None] + self._adaptive_tail(i, features, lo, hi))
        return torch.cat(parts, dim=1).reshape(*shape, self.config.vocab_size)

    def target_log_probs(self, features: Tensor, targets: Tensor,
                         max_elements: int | None = None) -> Tensor:
        """Log-probability of one target per row. ``features: (K, F)``, ``targets: int64 (K,)`` -> float32 ``(K,)``.

        Full softmax: a cross-entropy over the vocabulary. Adaptive softmax: the head for every row
        and, for rows whose target lies in a tail cluster, that cluster's softmax only; no
        full-vocabulary logits are built. With ``max_elements`` no logits tensor holds more than
        that many numbers (rows go :meth:`rows_within` at a time through the output layer, and as
        many as fit through each tail cluster), except that one row always goes through; None
        computes all rows at once, as training does."""
        step = features.shape[0] if max_elements is None else self.rows_within(max_elements)
        if features.shape[0] > step:
            return torch.cat([self.target_log_probs(features[first:first + step], targets[first:first + step],
                                                    max_elements)
                              for first in range(0, features.shape[0], step)])
        if self.adaptive is None:
            return -F.cross_entropy(self.logits(features).float(), targets, reduction="none")
        features = self.dropout(features)
        head = self._adaptive_head(features)
        shortlist = self.adaptive.shortlist_size
        out = head.gather(1, targets.clamp(max=shortlist - 1).unsqueeze(1)).squeeze(1)
        for i, (lo, hi) in enumerate(self._clusters()):
            rows = ((targets >= lo) & (targets < hi)).nonzero().squeeze(1)
            step = rows.numel() if max_elements is None else max(1, max_elements // (hi - lo))
            for first in range(0, rows.numel(), max(step, 1)):
                part = rows[first:first + step]
                tail = self._adaptive_tail(i, features[part], lo, hi)
                picked = tail.gather(1, (targets[part] - lo).unsqueeze(1)).squeeze(1)
                out = out.index_copy(0, part, head[part, shortlist + i] + picked)
        return out

    @property
    def logit_width(self) -> int:
        """Logits one row costs in the output layer: the vocabulary for a full softmax; the head
        (shortlist plus one entry per tail cluster) for an adaptive one, whose tail clusters are
        bounded separately in :meth:`target_log_probs`."""
        return self.config.vocab_size if self.adaptive is None else self.adaptive.head_size

    def rows_within(self, max_elements: int) -> int:
        """Rows whose output-layer logits (:attr:`logit_width` each) fit in ``max_elements``
        numbers; at least 1."""
        return max(1, max_elements // self.logit_width)

    def _clusters(self) -> list[tuple[int, int]]:
        assert self.adaptive is not None
        bounds = self.adaptive.cutoffs  # [c0, c1, ..., vocab_size]
        return list(zip(bounds[:-1], bounds[1:]))

    def _adaptive_head(self, features: Tensor) -> Tensor:
        """float32 ``(K, shortlist + clusters)`` head log-probabilities, blocked shortlist ids at -inf."""
        assert self.adaptive is not None
        shortlist = self.adaptive.shortlist_size
        mask = F.pad(self.logit_mask[:shortlist], (0, self.adaptive.n_clusters))
        return (self.adaptive.head(features).float() + mask).log_softmax(dim=-1)

    def _adaptive_tail(self, cluster: int, features: Tensor, lo: int, hi: int) -> Tensor:
        """float32 ``(K, hi - lo)`` log-probabilities within tail cluster ``cluster`` (ids ``lo..hi-1``)."""
        assert self.adaptive is not None
        return (self.adaptive.tail[cluster](features).float() + self.logit_mask[lo:hi]).log_softmax(dim=-1)

    def forward(self, inputs: Tensor, targets: Tensor, lengths: Tensor, detach: bool = False) -> Tensor:
        """Same as :meth:`token_logprobs` (so that DDP and hooks see the training computation)."""
        return self.token_logprobs(inputs, targets, lengths, detach)

    def token_logprobs(self, inputs: Tensor, targets: Tensor, lengths: Tensor, detach: bool = False,
                       max_elements: int | None = None) -> Tensor:
        """Log-probability of every target. ``inputs, targets: (B, T)``, ``lengths: (B,)`` ->
        ``(B, T)``; padding positions give 0. The softmax runs on real positions only, through
        :meth:`target_log_probs` (never full-vocabulary logits for an adaptive softmax), holding
        at most ``max_elements`` logits at a time (None: every position at once)."""
        mask = torch.arange(inputs.shape[1], device=inputs.device).unsqueeze(0) < lengths.unsqueeze(1)
        if self.config.is_window:  # every target's window, in the mask's (row-major) order
            tokens = torch.cat([inputs[:, :1], targets], dim=1)
            windows, valid, _, _ = build_windows(tokens, lengths + 1, self.config.rho or 0, self.config.future,
                                                 self.mask_id)
            picked = self.target_log_probs(self.window_features(windows, valid), targets[mask], max_elements)
        else:
            picked = self.target_log_probs(self.features(inputs, detach)[mask], targets[mask], max_elements)
        out = picked.new_zeros(targets.shape)
        out[mask] = picked
        return out

    @torch.no_grad()
    def score_contexts(
        self,
        contexts: Tensor,
        lengths: Tensor,
        targets: Tensor,
        target_context: Tensor | None = None,
        max_elements: int = DEFAULT_SCORE_ELEMENTS,
        precision: str = "fp32",
    ) -> Tensor:
        """Natural-log probabilities of next tokens after contexts; the rescoring entry point.

        Args:
          contexts: int64 ``(N, C)``, right-aligned (see :meth:`context_features`). A context
            longer than :attr:`context_size` is cut to its last ``context_size`` tokens, which
            is exactly what the model would see. A context should start with ``<s>`` when the
            sentence start is within reach.
          lengths: int64 ``(N,)``.
          targets: int64 ``(M,)`` next tokens.
          target_context: int64 ``(M,)``, the context row of each target; defaults to
            ``arange(N)`` (one target per context, ``M == N``).
          max_elements: contexts are processed in chunks whose logits hold at most this many
            numbers, so memory stays bounded for any N and vocabulary.
          precision: the output layer's, ``fp32`` or ``bf16`` (a bfloat16 matmul for the
            log-sum-exp, refined in float32 to within 1e-3 nats: :mod:`lm.output`); the
            recurrence always runs in float32.
        Returns:
          float32 ``(M,)`` on the model's device.
        """
        device = self.device
        contexts, lengths = self._truncate(contexts.to(device), lengths.to(device))
        return self._score_rows(contexts.shape[0], targets, target_context, "contexts",
                                lambda a, b: self.context_features(contexts[a:b], lengths[a:b]), max_elements, precision)

    def _score_rows(self, rows: int, targets: Tensor, target_row: Tensor | None, what: str,
                    features_of: Callable[[int, int], Tensor], max_elements: int, precision: str) -> Tensor:
        """The chunked output layer of :meth:`score_contexts` and :meth:`score_windows`: the
        features of rows ``a:b`` (``features_of(a, b)``, ``(b - a, F)``) for chunks of rows within
        ``max_elements`` logits, and the log-probability of every target ``targets: int64 (M,)``
        at its row ``target_row: int64 (M,)`` (default ``arange(rows)``). float32 ``(M,)``."""
        device = self.device
        targets = targets.to(device).contiguous()
        if target_row is None:
            if targets.shape[0] != rows:
                raise ValueError(f"{targets.shape[0]} targets for {rows} {what}: give target_{what[:-1]}")
            target_row = torch.arange(rows, device=device)
        target_row = target_row.to(device)
        order = torch.argsort(target_row, stable=True)
        sorted_row = target_row[order]
        result = torch.empty(targets.shape[0], device=device)
        chunk = self.rows_within(max_elements)
        for start in range(0, rows, chunk):
            stop = min(start + chunk, rows)
            lo, hi = torch.searchsorted(sorted_row, torch.tensor([start, stop], device=device)).tolist()
            if lo == hi:
                continue
            features = self.dropout(features_of(start, stop))
            picked = order[lo:hi]
            result[picked] = self._pick(features, target_row[picked] - start, targets[picked], max_elements, precision)
        return result

    def _pick(self, features: Tensor, rows: Tensor, targets: Tensor, max_elements: int, precision: str) -> Tensor:
        """Log-probabilities of ``targets: int64 (M,)`` under the output layer at ``features[rows]``
        (``features: (C, F)``, ``rows: int64 (M,)``) -> float32 ``(M,)``; ``precision`` as in
        :meth:`score_contexts`."""
        if self.adaptive is None:
            assert self.output_layer is not None
            layer = self.output_layer
            return picked_log_softmax(features, layer.weight, layer.bias + self.logit_mask, rows, targets, precision,
                                      self._low("output", layer.weight, precision))
        return self._adaptive_pick(features, rows, targets, max_elements, precision)

    @property
    def mask_id(self) -> int:
        """A window model's ``MASK`` input id (:mod:`lm.window`): the embedding row after the vocabulary."""
        if not self.config.is_window:
            raise ValueError("only a window model (future > 0) has a MASK token")
        return self.config.known_vocab_size

    def window_features(self, windows: Tensor, valid: Tensor, method: str = "direct") -> Tensor:
        """A window model's features of each window (:mod:`lm.window`). ``windows: int64 (N, L)``,
        ``valid: bool (N, L)`` -> ``(N, F)``; ``method``: ``direct`` or ``afp``, the same values."""
        raise ValueError(f"{self.config.describe()} is not a window model")

    @torch.no_grad()
    def score_windows(self, windows: Tensor, valid: Tensor, targets: Tensor, target_window: Tensor | None = None,
                      max_elements: int = DEFAULT_SCORE_ELEMENTS, precision: str = "fp32") -> Tensor:
        """Natural-log probabilities of targets in windows: the acausal scoring entry point.

        ``windows: int64 (N, L)`` and ``valid: bool (N, L)`` (:mod:`lm.window`), ``targets: int64
        (M,)``, ``target_window: int64 (M,)`` each target's window (default ``arange(N)``, one
        each). The target is masked, so a window's features do not depend on it: each window
        is read once however many targets it has (a lattice's parallel arcs). Returns float32
        ``(M,)`` on the model's device; chunks of windows hold at most ``max_elements`` logits."""
        windows, valid = windows.to(self.device), valid.to(self.device)
        return self._score_rows(windows.shape[0], targets, target_window, "windows",
                                lambda a, b: self.window_features(windows[a:b], valid[a:b]), max_elements, precision)

    def _low(self, name: str, weight: Tensor, precision: str) -> Tensor | None:
        """:func:`lm.output.low_precision_weight` of ``weight`` for ``bf16`` scoring (None for
        ``fp32``), made once and kept until the weight changes (an optimizer step, ``.to``)."""
        if precision != "bf16":
            return None
        key = (weight.data_ptr(), weight._version)
        cached = self._low_weights.get(name)
        if cached is None or cached[:2] != key:
            cached = (*key, low_precision_weight(weight))
            self._low_weights[name] = cached
        return cached[2]

    def _adaptive_pick(self, features: Tensor, rows: Tensor, targets: Tensor, max_elements: int,
                       precision: str = "fp32") -> Tensor:
        """Adaptive-softmax log-probabilities of targets after contexts, each context's head and
        tail clusters computed once however many of its targets need them.

        ``features: (C, F)`` of C contexts (C within :meth:`rows_within` of ``max_elements``),
        ``rows: int64 (M,)`` each target's context, ``targets: int64 (M,)`` -> float32 ``(M,)``.
        The same numbers as :meth:`target_log_probs` on ``features[rows]``, which would compute
        the head once per target: with several targets per context (a lattice's arcs leaving one
        history) that is several times the work. A tail cluster goes through as many contexts at
        a time as fit ``max_elements``. ``precision`` as in :meth:`score_contexts`."""
        assert self.adaptive is not None
        adaptive, shortlist = self.adaptive, self.adaptive.shortlist_size
        clusters = self._clusters()
        # a shortlist word is its own head entry; a tail word goes through its cluster's entry
        cluster = torch.bucketize(targets, torch.tensor([lo for lo, _ in clusters], device=targets.device),
                                  right=True) - 1
        head_bias = adaptive.head.bias + F.pad(self.logit_mask[:shortlist], (0, adaptive.n_clusters))
        out = picked_log_softmax(features, adaptive.head.weight, head_bias, rows,
                                 torch.where(cluster < 0, targets, shortlist + cluster), precision,
                                 self._low("head", adaptive.head.weight, precision))
        for i, (lo, hi) in enumerate(clusters):
            wanted = (cluster == i).nonzero().squeeze(1)
            if wanted.numel() == 0:
                continue
            # no blocked id in the cluster: no bias (adding zeros to every logit copies a bias row
            # per context, as long as the matmul on the largest cluster; on the CPU the logits are
            # bit for bit the same, tests/lm/test_adaptive_softmax.py)
            mask = self.logit_mask[lo:hi]
            bias = mask if bool(mask.ne(0).any()) else None
            contexts, which = torch.unique(rows[wanted], return_inverse=True)
            projection, layer = adaptive.tail[i][0], adaptive.tail[i][1]
            step = max(1, max_elements // (hi - lo))
            for first in range(0, contexts.numel(), step):
                inside = (which >= first) & (which < first + step)
                part = wanted[inside]
                out[part] += picked_log_softmax(projection(features[contexts[first:first + step]]), layer.weight,
                                                bias, which[inside] - first, targets[part] - lo,
                                                precision, self._low(f"tail{i}", layer.weight, precision))
        return out

    def _truncate(self, contexts: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        if contexts.dim() != 2 or lengths.shape != contexts.shape[:1]:
            raise ValueError(f"contexts must be (N, C) with lengths (N,), got {tuple(contexts.shape)} and {tuple(lengths.shape)}")
        if contexts.shape[0] and (int(lengths.min()) < 1 or int(lengths.max()) > contexts.shape[1]):
            raise ValueError(f"context lengths must lie in [1, {contexts.shape[1]}]")
        limit = self.context_size
        if limit is not None and contexts.shape[1] > limit:
            contexts, lengths = contexts[:, -limit:], lengths.clamp(max=limit)
        return contexts, lengths

    def reset_parameters(self, init_range: float) -> None:
        """Uniform ``(-init_range, init_range)`` for every weight (the AFP paper's set-up);
        an SCRN's decay keeps its configured start value."""
        for name, param in self.named_parameters():
            if not name.endswith("decay_logit"):
                nn.init.uniform_(param, -init_range, init_range)


class RecurrentLM(LanguageModel):
    """Embedding, recurrent cell, full softmax. Forward passes :meth:`exact` and :meth:`afp`."""

    def __init__(self, config: ModelConfig) -> None:
        cell = make_cell(config.cell, config.embedding_size, config.hidden, config.layers, config.activation,
                         config.context_units, config.decay, config.learn_decay)
        super().__init__(config, cell.output_size)
        self.cell: RecurrentCell = cell

    def features(self, inputs: Tensor, detach: bool = False) -> Tensor:
        """The configured pass: :meth:`afp` with the config's rho, or :meth:`exact`."""
        if self.config.mode == "afp":
            assert self.config.rho is not None
            return self.afp(inputs, self.config.rho, detach)
        return self.exact(inputs)

    def _projected(self, inputs: Tensor) -> Tensor:
        return self.cell.project(self.dropout(self.embedding(inputs)))

    def exact(self, inputs: Tensor) -> Tensor:
        """Full recurrence over the history. ``inputs: int64 (B, T) -> (B, T, F)``."""
        u = self._projected(inputs)
        state = self.cell.initial_state(u, (inputs.shape[0],))
        states = []
        for t in range(inputs.shape[1]):
            state = self.cell.step(state, u[:, t])
            states.append(state)
        return self.cell.output(torch.stack(states, dim=1))

    def afp(self, inputs: Tensor, rho: int, detach: bool = False) -> Tensor:
        """Approximate fixed point after ``rho`` parallel iterations. ``(B, T) -> (B, T, F)``.

        Iteration ``n`` computes ``state[:, t] = cell(state_prev[:, t - 1], x_t)`` for every ``t``
        at once (``state_prev[:, -1]`` is the initial state). With ``detach`` the first ``rho - 1``
        iterations run without autograd, so gradients flow through the last one only.
        """
        if rho < 1:
            raise ValueError(f"rho must be at least 1, got {rho}")
        u = self._projected(inputs)
        state = self.cell.initial_state(u, tuple(inputs.shape))
        start = self.cell.initial_state(u, (inputs.shape[0], 1))
        for n in range(rho):
            with torch.set_grad_enabled(torch.is_grad_enabled() and not (detach and n < rho - 1)):
                state = self.cell.step(torch.cat([start, state[:, :-1]], dim=1), u)
        return self.cell.output(state)

    def window_features(self, windows: Tensor, valid: Tensor, method: str = "direct") -> Tensor:
        """The cell from its initial state over each window's valid tokens, output after the last.
        ``windows: int64 (N, L)``, ``valid: bool (N, L)`` -> ``(N, F)``.

        ``direct``: ``L`` steps, each advancing every window by one token (a position outside the
        sentence keeps the state). ``afp``: ``L`` fixed-point iterations updating every position
        of every window at once from the previous iteration's state one position to the left
        (positions outside the sentence pass that state on); after ``L`` iterations the last
        position holds the direct pass's state."""
        if method not in WINDOW_METHODS:
            raise ValueError(f"method must be one of {WINDOW_METHODS}, got {method!r}")
        u = self._projected(windows)
        width = windows.shape[1]
        keep = valid.unsqueeze(-1)
        if method == "direct":
            state = self.cell.initial_state(u, (windows.shape[0],))
            for t in range(width):
                state = torch.where(keep[:, t], self.cell.step(state, u[:, t]), state)
            return self.cell.output(state)
        state = self.cell.initial_state(u, tuple(windows.shape))
        start = self.cell.initial_state(u, (windows.shape[0], 1))
        for _ in range(width):
            previous = torch.cat([start, state[:, :-1]], dim=1)
            state = torch.where(keep, self.cell.step(previous, u), previous)
        return self.cell.output(state[:, -1])

    def context_features(self, contexts: Tensor, lengths: Tensor) -> Tensor:
        """Run the cell from the initial state over each right-aligned context. ``(N, C) -> (N, F)``.

        Contexts that begin alike share those steps: step ``t`` runs once per distinct prefix
        ``contexts[:, :t + 1]`` (padding included), from the state of its parent prefix. The
        contexts of an expanded lattice share most of their beginnings (every word that follows
        one history), so this does a fraction of ``N * C`` cell steps, with the same values as
        running every row (each row's state is computed by the same steps from the same inputs)."""
        n, width = contexts.shape
        tokens = torch.where(torch.arange(width, device=contexts.device).unsqueeze(0) >= (width - lengths).unsqueeze(1),
                             contexts, -1)  # padding as -1: part of the prefix, never stepped through
        owner = torch.zeros(n, dtype=torch.int64, device=contexts.device)  # each row's prefix at step t - 1
        words, word_of = torch.unique(tokens.clamp(min=0), return_inverse=True)
        projected = self._projected(words)  # (U, P): each distinct word's input part once, not once per prefix
        state = self.cell.initial_state(projected, (1,))
        base = int(tokens.max()) + 2 if n else 1  # token + 1 in [0, base): padding -1 included
        for t in range(width):
            # a prefix of step t is (its parent prefix, its token t): one int64 key per row, so a
            # 1-D unique (a sort) finds the distinct prefixes instead of a row-wise unique(dim=0)
            keys, inverse = torch.unique(owner * base + (tokens[:, t] + 1), return_inverse=True)
            row = torch.empty(keys.shape[0], dtype=torch.int64, device=contexts.device)
            row.scatter_(0, inverse, torch.arange(n, device=contexts.device))  # a row of each prefix
            previous = state.index_select(0, owner[row])
            word = tokens[row, t]
            state = self.cell.step_from(previous, projected, word_of[row, t])
            padding = (word < 0).nonzero().squeeze(1)  # prefixes still all padding (rows near a sentence start)
            state.index_copy_(0, padding, previous.index_select(0, padding))  # keep their state
            owner = inverse
        return self.cell.output(state[owner])


class FeedForwardLM(LanguageModel):
    """Feed-forward n-gram LM (Bengio et al.; the AFP paper's FFNN_2 when ``order == 2``).

    ``features_t = tanh(H [e(w_{t-n+2}); ...; e(w_t)] + b)``: concatenated embeddings of the
    last ``order - 1`` inputs; positions before the sentence start contribute zero vectors.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, config.hidden)
        self.hidden_layer = nn.Linear((config.order - 1) * config.embedding_size, config.hidden)

    def _window_features(self, windows: Tensor, valid: Tensor) -> Tensor:
        """``windows: int64 (..., n-1)``, ``valid: bool (..., n-1)`` -> ``(..., hidden)``."""
        emb = self.dropout(self.embedding(windows)) * valid.unsqueeze(-1)
        return torch.tanh(self.hidden_layer(emb.flatten(-2)))

    def features(self, inputs: Tensor, detach: bool = False) -> Tensor:
        width = self.config.order - 1
        padded = F.pad(inputs, (width - 1, 0))
        valid = F.pad(torch.ones_like(inputs, dtype=torch.bool), (width - 1, 0))
        return self._window_features(padded.unfold(1, width, 1), valid.unfold(1, width, 1))

    def context_features(self, contexts: Tensor, lengths: Tensor) -> Tensor:
        width = self.config.order - 1
        if contexts.shape[1] < width:
            contexts = F.pad(contexts, (width - contexts.shape[1], 0))
        contexts = contexts[:, -width:]
        valid = torch.arange(width, device=contexts.device).unsqueeze(0) >= (width - lengths).unsqueeze(1)
        return self._window_features(contexts, valid)


def build_model(config: ModelConfig) -> LanguageModel:
    """The model class for ``config.arch``, freshly initialized by PyTorch defaults."""
    config.known_vocab_size  # a model needs it; unset, this names the field
    if config.arch == "ffnn":
        return FeedForwardLM(config)
    return RecurrentLM(config)
