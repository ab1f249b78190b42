"""Checkpoints: a directory with weights in safetensors and a JSON config with the vocabulary.

Layout of a checkpoint directory::

    model.safetensors   the model's parameters (tied weights stored once)
    config.json         {"format": "afp-rescore/1",
                         "model": ModelConfig fields,
                         "vocab": {"words": [word of id 0, word of id 1, ...], "unk": "<unk>"},
                         "training": free-form record (command, epochs, validation perplexity...)}

Loading reads JSON and safetensors only: nothing is ever unpickled.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model, save_model

from lm.config import ModelConfig, read_json_file
from lm.model import LanguageModel, build_model
from lm.vocab import Vocabulary, VocabularyError

FORMAT = "afp-rescore/1"
WEIGHTS = "model.safetensors"
CONFIG = "config.json"


class CheckpointError(ValueError):
    """A checkpoint directory is missing, incomplete or inconsistent; the message names the file."""


@dataclass
class LoadedModel:
    """A model ready to use: its config, vocabulary and the module (in eval mode)."""

    config: ModelConfig
    vocab: Vocabulary
    model: LanguageModel
    training: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def default_unk_penalty(self) -> float:
        """The unknown-word penalty this model implies: ``<unk>``'s probability spread over the
        distinct words that training mapped to it (``training["unk_types"]`` = U), so an unknown
        word costs ``log P(<unk> | h) - log U``, as much as one rare word, not as much as all of
        them together; 0 when U is not recorded or below 2 (a closed vocabulary)."""
        types = self.training.get("unk_types")
        return -math.log(types) if isinstance(types, int) and types >= 2 else 0.0

    def info(self) -> dict[str, Any]:
        """A JSON-able summary (what ``afp info --json`` prints)."""
        cfg = self.config
        return {
            "path": str(self.path) if self.path else None,
            "name": cfg.describe(),
            "arch": cfg.arch,
            "cell": cfg.cell if cfg.arch == "rnn" else "ffnn",
            "activation": cfg.activation if cfg.arch == "rnn" and cfg.cell == "elman" else None,
            "layers": cfg.layers,
            "hidden": cfg.hidden,
            "embedding": cfg.embedding_size,
            "mode": cfg.mode if cfg.arch == "rnn" else None,
            "rho": cfg.rho,
            "order": cfg.order if cfg.arch == "ffnn" else None,
            "context_size": cfg.context_size,
            "future": cfg.future,
            "scores": ("acausal: each word from the rho words before and the future words after it (a "
                       "pseudo-log-likelihood; a rescoring feature)") if cfg.is_window else "causal: next-word "
                      "log-probabilities",
            "vocab_size": cfg.vocab_size,
            "softmax": cfg.softmax,
            "cutoffs": list(cfg.adaptive_cutoffs) if cfg.softmax == "adaptive" else None,
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "device": str(self.device),
            "unk_types": self.training.get("unk_types"),
            "default_unk_penalty": self.default_unk_penalty,
            "training": self.training,
        }


def prepare_model(model: LanguageModel, vocab: Vocabulary) -> LanguageModel:
    """Tell the model which ids it may never predict (``<s>``, ``<eps>``, gaps, ``#k``)."""
    model.block_tokens([i for i, ok in enumerate(vocab.predictable_mask()) if not ok])
    return model


def save_checkpoint(directory: str | Path, model: LanguageModel, vocab: Vocabulary,
                    training: dict[str, Any] | None = None) -> Path:
    """Write ``model.safetensors`` and ``config.json`` into ``directory`` (created if needed).

    Files are written under temporary names and renamed, so a reader never sees half a checkpoint.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if model.config.vocab_size != vocab.size:
        raise ValueError(f"model vocab_size {model.config.vocab_size} != vocabulary size {vocab.size}")
    config = {
        "format": FORMAT,
        "model": model.config.to_dict(),
        "vocab": {"words": list(vocab.words), "unk": vocab.unk},
        "training": training or {},
    }
    tmp_weights = directory / (WEIGHTS + ".tmp")
    tmp_config = directory / (CONFIG + ".tmp")
    save_model(model, str(tmp_weights), metadata={"format": FORMAT})
    tmp_config.write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    tmp_weights.replace(directory / WEIGHTS)
    tmp_config.replace(directory / CONFIG)
    return directory


def read_config(directory: str | Path) -> tuple[ModelConfig, Vocabulary, dict[str, Any]]:
    """Parse ``config.json`` of a checkpoint: model config, vocabulary, training record."""
    path = Path(directory) / CONFIG
    data = read_json_file(path, CheckpointError, hint=f" (is {directory} a model directory?)")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise CheckpointError(f"{path}: field 'format' must be {FORMAT!r}, got {found!r}")
    try:
        config = ModelConfig.from_dict(data.get("model"), where=f"{path}: field 'model'")
        vocab_data = data.get("vocab")
        if not isinstance(vocab_data, dict) or not isinstance(vocab_data.get("words"), list):
            raise CheckpointError(f"{path}: field 'vocab' must be an object with a 'words' list")
        vocab = Vocabulary(tuple(vocab_data["words"]), unk=vocab_data.get("unk", "<unk>"))
    except (ValueError, VocabularyError) as err:
        raise CheckpointError(str(err) if str(path) in str(err) else f"{path}: {err}") from None
    if vocab.size != config.vocab_size:
        raise CheckpointError(f"{path}: vocabulary has {vocab.size} words but model.vocab_size is {config.vocab_size}")
    training = data.get("training") or {}
    return config, vocab, training


def _wrong_shapes(model: LanguageModel, weights: Path) -> list[str]:
    """``"name: shape in file, shape the config gives"`` for every stored tensor whose shape differs
    from the model's (read from the safetensors header only; no tensor is loaded)."""
    expected = {name: tuple(value.shape) for name, value in model.state_dict().items()}
    with safe_open(str(weights), framework="pt") as stored:
        shapes = {name: tuple(stored.get_slice(name).get_shape()) for name in stored.keys()}
    return [f"{name} is {list(shape)} in the weights but {list(expected[name])} by the config"
            for name, shape in shapes.items() if name in expected and shape != expected[name]]


def _load_weights(model: LanguageModel, weights: Path, mismatch: str, device: str) -> None:
    """Load ``weights`` into ``model``; a shape, missing or unexpected tensor raises
    ``CheckpointError`` as ``"{weights}: {mismatch}: ..."``, an unreadable file as "cannot load"."""
    try:
        wrong = _wrong_shapes(model, weights)
        if wrong:  # checked before loading: any RuntimeError of the load itself keeps its own message
            raise CheckpointError(f"{weights}: {mismatch}: {'; '.join(wrong)}")
        missing, unexpected = load_model(model, str(weights), strict=False, device=device)
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{weights}: cannot load weights: {err}") from None
    if missing or unexpected:
        raise CheckpointError(f"{weights}: {mismatch}: missing {sorted(missing)}, unexpected {sorted(unexpected)}")


def warm_start(model: LanguageModel, directory: str | Path, vocab: Vocabulary) -> dict[str, Any]:
    """Copy the weights of the checkpoint ``directory`` into ``model`` (a training run's warm start,
    ``afp train --init-from``): fine-tuning, or the same network run with another ``rho``. Every
    stored tensor must have the model's shape and the checkpoint's vocabulary must be ``vocab``
    word for word (the rows of the embedding and the output layer are words). Stored bf16 weights
    are widened to the model's dtype. Returns a record of where the weights came from.

    Raises ``CheckpointError`` naming the file and what differs."""
    directory = Path(directory)
    config, saved_vocab, training = read_config(directory)
    if saved_vocab.words != vocab.words:
        differ = next((i for i, (a, b) in enumerate(zip(saved_vocab.words, vocab.words)) if a != b),
                      min(saved_vocab.size, vocab.size))
        raise CheckpointError(f"{directory / CONFIG}: init_from needs the data's vocabulary ({vocab.size} words); "
                              f"the checkpoint has {saved_vocab.size}, first difference at id {differ}")
    _load_weights(model, directory / WEIGHTS, f"cannot start {model.config.describe()} from it", "cpu")
    prepare_model(model, vocab)
    return {"init_from": str(directory), "init_model": config.describe(),
            "init_steps": training.get("steps", training.get("step"))}


def open_single_model(path: str | Path, device: str | torch.device = "cpu") -> Any:
    """One language model, not a mixture: a model directory (:func:`load_checkpoint`), or an ARPA
    n-gram file (``.arpa``, ``.arpa.gz``) or n-gram model directory (``ngram.json``):
    :func:`lm.ngram.store.load_ngram`, always on the CPU. (What ``--model`` names, mixtures
    included, is opened by :func:`afp.mixtures.open_model`, which calls this for each part.)"""
    from lm.ngram.store import is_arpa_path, is_store_dir, load_ngram

    if is_arpa_path(path) or is_store_dir(path):
        return load_ngram(path)
    return load_checkpoint(path, device)


def load_checkpoint(directory: str | Path, device: str | torch.device = "cpu") -> LoadedModel:
    """Load a checkpoint directory onto ``device``; the model is returned in eval mode."""
    directory = Path(directory)
    config, vocab, training = read_config(directory)
    model = build_model(config)
    weights = directory / WEIGHTS
    if not weights.is_file():
        raise CheckpointError(f"{weights}: no such file")
    _load_weights(model, weights, f"does not match {directory / CONFIG}", str(device))
    model.to(device).eval()
    prepare_model(model, vocab)
    return LoadedModel(config=config, vocab=vocab, model=model, training=training, path=directory)
