"""Test data factories, in one place: tiny vocabularies, corpora, models of every cell type."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from lm.checkpoint import prepare_model, save_checkpoint
from lm.config import ModelConfig
from lm.model import LanguageModel, build_model
from lm.vocab import Vocabulary

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

WORDS = "the a cat dog sat ran on mat log and big small red".split()

#: every recurrent cell configuration the properties must hold for (name -> ModelConfig fields)
CELL_CONFIGS: dict[str, dict] = {
    "elman-tanh": {"cell": "elman", "activation": "tanh"},
    "elman-sigmoid": {"cell": "elman", "activation": "sigmoid"},
    "lstm": {"cell": "lstm"},
    "gru": {"cell": "gru"},
    "scrn-fixed": {"cell": "scrn", "context_units": 3},
    "scrn-learned": {"cell": "scrn", "context_units": 3, "learn_decay": True},
    "elman-2layers": {"cell": "elman", "layers": 2},
    "lstm-3layers": {"cell": "lstm", "layers": 3},
    "scrn-2layers": {"cell": "scrn", "context_units": 2, "layers": 2},
}

DEVICES = [pytest.param("cpu"),
           pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))]


def tiny_vocab() -> Vocabulary:
    return Vocabulary.from_sentences([WORDS])


def random_sentences(count: int, seed: int = 0, min_len: int = 1, max_len: int = 9) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(WORDS) for _ in range(rng.randint(min_len, max_len))] for _ in range(count)]


def make_model(vocab: Vocabulary, seed: int = 0, init_range: float = 0.5, device: str = "cpu",
               **fields) -> LanguageModel:
    """A randomly initialized model in eval mode; a wide init makes differences visible."""
    torch.manual_seed(seed)
    fields.setdefault("hidden", 8)
    model = build_model(ModelConfig(vocab_size=vocab.size, **fields))
    model.reset_parameters(init_range)
    prepare_model(model, vocab)
    return model.to(device).eval()


def write_text(path: Path, sentences: list[list[str]]) -> Path:
    path.write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
    return path


def saved_model(directory: Path, vocab: Vocabulary | None = None, **fields) -> Path:
    vocab = vocab or tiny_vocab()
    fields.setdefault("mode", "afp")
    fields.setdefault("rho", 3)
    return save_checkpoint(directory, make_model(vocab, **fields), vocab, {"note": "test model"})


def patterned_sentences(count: int, seed: int = 0) -> list[list[str]]:
    """Sentences from a small grammar, so that a model has something to learn."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        det = rng.choice(["the", "a"])
        adj = rng.choice(["big", "small", "red"])
        noun, verb, place = rng.choice([("cat", "sat", "mat"), ("dog", "ran", "log")])
        words = [det, adj, noun, verb, "on", det, place]
        if rng.random() < 0.3:
            words += ["and", "the", noun, verb]
        out.append(words)
    return out
