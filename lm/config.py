"""Frozen configurations of a model and of a training run.

Both are plain dataclasses that validate themselves on construction (``ValueError`` naming the
field) and round-trip through JSON dicts, which is how checkpoints and ``afp train --config``
store them.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from lm.cells import ACTIVATIONS, CELL_TYPES
from lm.device import DEFAULT_DEVICE

ARCHITECTURES = ("rnn", "ffnn")
MODES = ("exact", "afp")
SOFTMAXES = ("full", "adaptive")
PRECISIONS = ("fp32", "bf16", "auto")
#: Default bound on the output-layer logits evaluation holds at once (elements; 256 MiB of float32).
DEFAULT_EVAL_ELEMENTS = 1 << 26

C = TypeVar("C", bound="_JsonConfig")


class _JsonConfig:
    """Dict/JSON round trip shared by the configs; unknown or mistyped fields are errors."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any], where: str = "config") -> C:
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        try:
            return cls(**data)
        except TypeError as err:
            raise ValueError(f"{where}: {err}") from None

    def replace(self: C, **changes: Any) -> C:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


def read_json_file(path: str | Path, error: type[Exception] = ValueError, hint: str = "") -> Any:
    """Parse a JSON file; a missing file or bad JSON raises ``error`` naming the file (and line)."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: no such file{hint}") from None
    except UnicodeDecodeError as err:
        raise error(f"{path}: not UTF-8 text (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise error(f"{path}:{err.lineno}: invalid JSON: {err.msg}") from None


def _check(condition: bool, field: str, message: str) -> None:
    if not condition:
        raise ValueError(f"{field}: {message}")


def _check_int(value: Any, field: str, minimum: int) -> None:
    _check(isinstance(value, int) and not isinstance(value, bool) and value >= minimum,
           field, f"must be an integer >= {minimum}, got {value!r}")


def _check_number(value: Any, field: str, low: float, high: float, low_open: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = ok and (value > low if low_open else value >= low) and value <= high
    _check(ok, field, f"must be a number in {'(' if low_open else '['}{low}, {high}], got {value!r}")


@dataclass(frozen=True)
class ModelConfig(_JsonConfig):
    """What a language model is; enough to rebuild it before loading weights.

    Fields:
      arch: ``rnn`` (a recurrent cell) or ``ffnn`` (a feed-forward n-gram model).
      vocab_size: softmax width; None in the configuration handed to :func:`lm.train.train`,
        which sets it to the size of the vocabulary it builds or reads.
      cell, layers, hidden, activation: the recurrent cell (``activation`` for Elman only).
      context_units, decay, learn_decay: SCRN slow context units.
      embedding: input embedding width (defaults to ``hidden``).
      mode: ``afp`` (prediction depends on the last ``rho`` tokens) or ``exact`` (full history);
        an rnn setting only.
      rho: fixed-point iterations in ``afp`` mode; None otherwise.
      order: n of an ``ffnn`` n-gram model (its context is ``order - 1`` tokens).
      tie_weights: share the embedding and output matrices (needs equal widths; full softmax only).
      dropout: on embeddings and output features, training only.
      softmax: ``full`` (one matrix over the whole vocabulary) or ``adaptive`` (Grave et al.'s
        adaptive softmax: a head over the ``cutoffs[0]`` most frequent ids plus one entry per tail
        cluster, each cluster a low-rank softmax of its own; still a normalised distribution, so
        rescoring stays exact). Ids must be in frequency order, as a vocabulary built from text is.
      cutoffs: adaptive softmax cluster boundaries, increasing, each in ``(0, vocab_size - 1)``;
        None picks :func:`default_cutoffs`.
      div_value: each tail cluster's projection is ``div_value`` times narrower than the last.
      adaptive_input: embed the input words by the same clusters (Baevski & Auli's adaptive
        input, :mod:`lm.embedding`): full-width vectors for the ``cutoffs[0]`` most frequent ids,
        ``div_value ** i`` times narrower ones projected to full width for tail cluster ``i``.
      future: ``K > 0`` makes an acausal window model (:mod:`lm.window`): word ``t`` is scored
        from the ``rho`` words before it and the ``K`` after it, itself masked; its sentence score
        is a pseudo-log-likelihood. An afp-mode rnn setting; 0 (the default) is a causal model.
    """

    vocab_size: int | None = None
    arch: str = "rnn"
    cell: str = "elman"
    layers: int = 1
    hidden: int = 100
    activation: str = "tanh"
    context_units: int = 0
    decay: float = 0.95
    learn_decay: bool = False
    embedding: int | None = None
    mode: str = "exact"
    rho: int | None = None
    order: int = 2
    tie_weights: bool = False
    dropout: float = 0.0
    softmax: str = "full"
    cutoffs: tuple[int, ...] | None = None
    div_value: float = 4.0
    adaptive_input: bool = False
    future: int = 0

    def __post_init__(self) -> None:
        if self.vocab_size is not None:
            _check_int(self.vocab_size, "vocab_size", 4)
        _check(self.arch in ARCHITECTURES, "arch", f"must be one of {ARCHITECTURES}, got {self.arch!r}")
        _check(self.cell in CELL_TYPES, "cell", f"must be one of {CELL_TYPES}, got {self.cell!r}")
        _check(self.activation in ACTIVATIONS, "activation", f"must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")
        _check_int(self.layers, "layers", 1)
        _check_int(self.hidden, "hidden", 1)
        if self.embedding is not None:
            _check_int(self.embedding, "embedding", 1)
        _check_int(self.context_units, "context_units", 0)
        _check(self.cell != "scrn" or self.context_units > 0, "context_units", "an SCRN cell needs at least 1")
        _check_number(self.decay, "decay", 0.0, 1.0, low_open=True)
        _check(self.decay < 1.0, "decay", f"must be below 1, got {self.decay}")
        _check(self.mode in MODES, "mode", f"must be one of {MODES}, got {self.mode!r}")
        if self.arch == "rnn" and self.mode == "afp":
            _check_int(self.rho, "rho", 1)
        elif self.rho is not None:
            raise ValueError(f"rho: only used by an afp-mode rnn; set it to null for arch={self.arch} mode={self.mode}")
        _check_int(self.order, "order", 2)
        _check_number(self.dropout, "dropout", 0.0, 0.95)
        _check(self.softmax in SOFTMAXES, "softmax", f"must be one of {SOFTMAXES}, got {self.softmax!r}")
        _check_number(self.div_value, "div_value", 1.0, 64.0)
        if self.cutoffs is not None:
            _check(isinstance(self.cutoffs, (list, tuple)) and len(self.cutoffs) > 0, "cutoffs",
                   f"must be a non-empty list of integers, got {self.cutoffs!r}")
            object.__setattr__(self, "cutoffs", tuple(self.cutoffs))
            for value in self.cutoffs:
                _check_int(value, "cutoffs", 1)
            _check(list(self.cutoffs) == sorted(set(self.cutoffs)), "cutoffs", f"must increase, got {self.cutoffs}")
            _check(self.vocab_size is None or self.cutoffs[-1] < self.vocab_size - 1, "cutoffs",
                   f"must stay below vocab_size - 1 = {(self.vocab_size or 0) - 1}, got {self.cutoffs}")
            _check(self.softmax == "adaptive", "cutoffs", "only used by softmax=adaptive")
        _check(not (self.tie_weights and self.softmax == "adaptive"), "tie_weights",
               "cannot be combined with softmax=adaptive")
        _check(isinstance(self.adaptive_input, bool), "adaptive_input", f"must be true or false, got {self.adaptive_input!r}")
        _check(not (self.tie_weights and self.adaptive_input), "tie_weights", "cannot be combined with adaptive_input")
        _check_int(self.future, "future", 0)
        if self.future:
            _check(self.arch == "rnn" and self.mode == "afp", "future",
                   f"a window model is an afp-mode rnn (--mode afp --rho R), got arch={self.arch} mode={self.mode}")
            _check(not self.tie_weights, "tie_weights", "a window model's embedding has a MASK row: cannot tie")

    @property
    def is_window(self) -> bool:
        """An acausal window model (``future > 0``): it scores words, not (context, word) pairs."""
        return self.future > 0

    @property
    def input_vocab_size(self) -> int:
        """Embedding rows: the vocabulary, and a window model's ``MASK`` (id ``vocab_size``)."""
        return self.known_vocab_size + (1 if self.future else 0)

    @property
    def adaptive_cutoffs(self) -> tuple[int, ...]:
        """The adaptive softmax's cluster boundaries (the configured ones or the default)."""
        return self.cutoffs if self.cutoffs is not None else default_cutoffs(self.known_vocab_size)

    @property
    def known_vocab_size(self) -> int:
        """``vocab_size``, which a model needs (an error naming the field while it is unset)."""
        if self.vocab_size is None:
            raise ValueError("vocab_size: not set; a model needs it (lm.train.train sets it from the vocabulary)")
        return self.vocab_size

    @property
    def embedding_size(self) -> int:
        return self.embedding if self.embedding is not None else self.hidden

    @property
    def context_size(self) -> int | None:
        """Tokens of history a prediction depends on; None for an exact (unbounded) RNN."""
        if self.arch == "ffnn":
            return self.order - 1
        return self.rho if self.mode == "afp" else None

    def describe(self) -> str:
        """A short human name, e.g. ``AFP-4 elman(tanh) 1x100``."""
        if self.arch == "ffnn":
            return f"FFNN {self.order}-gram {self.hidden}"
        cell = f"{self.cell}({self.activation})" if self.cell == "elman" else self.cell
        head = f"AFP-{self.rho}" if self.mode == "afp" else "exact"
        if self.future:
            head = f"window {self.rho}+{self.future} ({head})"
        return f"{head} {cell} {self.layers}x{self.hidden}"


def default_cutoffs(vocab_size: int) -> tuple[int, ...]:
    """Adaptive-softmax boundaries for a frequency-ordered vocabulary: a head of the 2,000 most
    frequent ids (about 85% of running words in English text), then clusters up to 10k, 50k and
    200k ids where the vocabulary is that large; half the vocabulary for tiny ones."""
    cutoffs = tuple(c for c in (2_000, 10_000, 50_000, 200_000) if c < vocab_size - 1)
    return cutoffs or (max(1, vocab_size // 2),)


@dataclass(frozen=True)
class TrainConfig(_JsonConfig):
    """How to train: data, optimisation, and where to write.

    The training data is either ``train`` (a text or lhotse manifest, read into memory; the
    vocabulary is built from it by ``max_vocab``/``min_count`` or read from ``words_txt``) or
    ``data`` (a directory written by ``afp prepare``, memory-mapped, with its own vocabulary:
    :mod:`lm.shards`). ``valid`` is a text scored with that vocabulary; without it, ``data``'s own
    prepared validation split is used when there is one. ``batch_tokens`` replaces ``batch_size``
    sentences per batch by a token budget: length-bucketed batches of at most that many padded
    positions (:func:`lm.corpus.batches`). ``max_train_sentences`` keeps the first sentences; with
    ``train`` the vocabulary is built from those alone, with ``data`` it stays the prepared one.

    ``init_from`` names a model directory whose weights start the run instead of random ones (a
    warm start: fine-tuning, or the same network trained on at another ``rho``); its tensor shapes
    and vocabulary must be the run's, and the optimizer starts fresh.

    ``detach`` selects FPI|theta (no gradient through earlier fixed-point iterations) for an
    afp-mode model. ``lr_decay`` multiplies the learning rate after an epoch whose validation
    perplexity did not improve (1.0 keeps it constant). ``max_vocab``/``min_count`` apply when
    the vocabulary is built from the training text; ``words_txt`` reads it from a Kaldi table.
    ``precision`` ``bf16`` runs the training forward pass under bfloat16 autocast (weights,
    optimizer and validation stay float32): an epoch takes 0.57x-0.72x of the float32 time on a
    CPU with AVX512-BF16/AMX (``bench/results/epoch_timing_cpu.json``); the output-layer
    matmul dominates, so GPUs should gain as well. A CPU without native bfloat16 (AVX2 only)
    emulates it and trains an order of magnitude slower: ``auto`` picks bf16 on CUDA and on CPUs with
    AVX512-BF16 or AMX, else fp32 (:func:`lm.train.resolve_precision`). ``tf32`` lets the float32
    matmuls of CUDA training steps run on TF32 tensor cores (10-bit mantissa inputs, float32
    accumulation: the rounding is far below the noise of SGD); validation, ``afp ppl`` and
    rescoring always compute in IEEE float32. No effect on a CPU.

    Interruption: ``checkpoint_every_steps`` and/or ``checkpoint_every_minutes`` also write the
    resume state (:mod:`lm.resume`) within an epoch, after every that many optimizer steps or
    minutes (None: at epoch ends only); ``max_steps`` stops the run after that many optimizer
    steps in total, with a resume state to continue from. A resumed run continues exactly where
    the saved one stopped, mid-epoch included. These three, ``eval_max_elements`` (the bound on
    the logits validation holds at once, :func:`lm.evaluate.score_corpus`) and ``epochs`` may
    change between the sessions of one run, and so may ``tf32``.
    """

    train: str | None = None
    data: str | None = None
    valid: str | None = None
    words_txt: str | None = None
    max_vocab: int | None = None
    min_count: int = 1
    epochs: int = 20
    batch_size: int = 20
    batch_tokens: int | None = None
    lr: float = 1e-3
    lr_decay: float = 1.0
    weight_decay: float = 0.0
    clip: float = 1.0
    init_range: float = 0.05
    init_from: str | None = None
    detach: bool = False
    seed: int = 1
    device: str = DEFAULT_DEVICE
    num_threads: int | None = None
    max_train_sentences: int | None = None
    precision: str = "fp32"
    tf32: bool = True
    checkpoint_every_steps: int | None = None
    checkpoint_every_minutes: float | None = None
    max_steps: int | None = None
    eval_max_elements: int = DEFAULT_EVAL_ELEMENTS

    def __post_init__(self) -> None:
        _check((self.train is None) != (self.data is None), "train",
               f"give exactly one of train (a text or manifest) and data (a directory from afp prepare), got "
               f"train={self.train!r} and data={self.data!r}")
        if self.data is not None:
            for name, default in (("words_txt", None), ("max_vocab", None), ("min_count", 1)):
                _check(getattr(self, name) == default, name,
                       f"the vocabulary of prepared data ({self.data}) was fixed by afp prepare; set {name} there")
        _check_int(self.epochs, "epochs", 1)
        for name in ("checkpoint_every_steps", "max_steps"):
            if getattr(self, name) is not None:
                _check_int(getattr(self, name), name, 1)
        if self.checkpoint_every_minutes is not None:
            _check_number(self.checkpoint_every_minutes, "checkpoint_every_minutes", 0.0, 1e6, low_open=True)
        _check_int(self.eval_max_elements, "eval_max_elements", 1)
        _check(self.precision in PRECISIONS, "precision", f"must be one of {PRECISIONS}, got {self.precision!r}")
        _check_int(self.batch_size, "batch_size", 1)
        if self.batch_tokens is not None:
            _check_int(self.batch_tokens, "batch_tokens", 2)
        _check_number(self.lr, "lr", 0.0, 10.0, low_open=True)
        _check_number(self.lr_decay, "lr_decay", 0.0, 1.0, low_open=True)
        _check_number(self.weight_decay, "weight_decay", 0.0, 1.0)
        _check_number(self.clip, "clip", 0.0, 1e6)
        _check_number(self.init_range, "init_range", 0.0, 1.0, low_open=True)
        _check_int(self.min_count, "min_count", 1)
        if self.max_vocab is not None:
            _check_int(self.max_vocab, "max_vocab", 4)
        if self.max_train_sentences is not None:
            _check_int(self.max_train_sentences, "max_train_sentences", 1)
        if self.num_threads is not None:
            _check_int(self.num_threads, "num_threads", 1)


@dataclass(frozen=True)
class PrepareConfig(_JsonConfig):
    """What ``afp prepare`` tokenizes into shards (:func:`lm.shards.prepare`).

    Fields:
      text: training corpora (texts, one sentence per line, or lhotse cuts/supervisions manifests),
        read in this order.
      out: the directory to write.
      valid: a validation corpus, prepared with the same vocabulary.
      words_txt: read the vocabulary from a Kaldi symbol table; otherwise it is built from ``text``
        with ``min_count`` and ``max_vocab``, exactly as :class:`TrainConfig` builds it.
      shard_tokens: at most this many words per shard file (a longer sentence gets a shard alone).
    """

    text: tuple[str, ...]
    out: str
    valid: str | None = None
    words_txt: str | None = None
    min_count: int = 1
    max_vocab: int | None = None
    shard_tokens: int = 50_000_000

    def __post_init__(self) -> None:
        _check(isinstance(self.text, (list, tuple)) and len(self.text) > 0
               and all(isinstance(t, str) for t in self.text),
               "text", f"must be a non-empty list of file names, got {self.text!r}")
        object.__setattr__(self, "text", tuple(self.text))
        _check_int(self.min_count, "min_count", 1)
        if self.max_vocab is not None:
            _check_int(self.max_vocab, "max_vocab", 4)
        if self.words_txt is not None:
            _check(self.min_count == 1 and self.max_vocab is None, "words_txt",
                   "a vocabulary read from a symbol table takes no min_count or max_vocab")
        _check_int(self.shard_tokens, "shard_tokens", 1)
