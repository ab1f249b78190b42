"""Language models as scorers, mixed or not: what ``--model`` and ``--interpolate`` make.

``--interpolate PATH:W`` (repeatable) mixes other models into the ``--model`` one, token by token
in probability space (:class:`lattices.interpolate.InterpolatedScorer`): each added model gets
weight ``W`` and the ``--model`` one what is left (``1 - sum W``). A mixture is one finite-context
language model, so rescoring with it stays exact. A part is a model directory or a back-off ARPA
n-gram (``.arpa``, ``.arpa.gz``).

``afp mix --text dev.txt --out DIR MODEL...`` estimates the weights by EM on held-out text
(:func:`estimate_weights`, SRILM's ``compute-best-mix``) and writes a *mixture directory*
(``DIR/mixture.json``: ``{"format": "afp-mixture/1", "parts": [{"model": PATH, "weight": W}],
"estimated": {...}}``, paths relative to ``DIR``) that ``--model DIR`` loads like any model
(:func:`open_model`), so a mixture can be a bundled default.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from lattices.interpolate import InterpolatedScorer
from lattices.scorer import ContextScorer
from lm.checkpoint import LoadedModel
from lm.checkpoint import open_single_model
from lm.model import DEFAULT_SCORE_ELEMENTS
from lm.scorer import scorer_of as model_scorer


class MixtureSpecError(ValueError):
    """A ``--interpolate`` value that cannot be used; the message names it."""


def parse_interpolate(text: str) -> tuple[str, float]:
    """``PATH:W`` -> ``(PATH, W)`` with ``0 < W < 1`` (the last ``:`` splits, so paths may hold one)."""
    path, sep, weight = text.rpartition(":")
    try:
        value = float(weight)
    except ValueError:
        value = float("nan")
    if not sep or not path or not 0.0 < value < 1.0:
        raise MixtureSpecError(f"--interpolate {text!r}: expected MODEL:WEIGHT with 0 < WEIGHT < 1 "
                               f"(e.g. models/ptb:0.3 or lm.ngram.arpa.gz:0.2)")
    return path, value


def part_scorer(path: str | Path, device: str, precision: str) -> ContextScorer:
    """The scorer of one model: a model directory, or an ARPA n-gram (by its name)."""
    return scorer_of(open_model(path, device=device), precision=precision)


def mixed_scorer(loaded: LoadedModel | Any, precision: str = "auto",
                 interpolate: Sequence[tuple[str, float]] = ()) -> ContextScorer:
    """``loaded``'s scorer, mixed with the ``interpolate`` models at their weights (the loaded
    model gets the rest); without ``interpolate``, the plain :class:`~lm.scorer.LMScorer`."""
    main = scorer_of(loaded, precision=precision)
    if not interpolate:
        return main
    rest = 1.0 - sum(w for _, w in interpolate)
    if not rest > 0:
        raise MixtureSpecError(f"--interpolate weights sum to {1 - rest:g}: the --model one must keep a weight above 0")
    parts = [part_scorer(path, str(loaded.device), precision) for path, _ in interpolate]
    return InterpolatedScorer([main, *parts], [rest, *(w for _, w in interpolate)])


# ---------------------------------------------------------------------------------- mixture directories
MIXTURE_FILE = "mixture.json"
MIXTURE_FORMAT = "afp-mixture/1"


@dataclass(frozen=True)
class _MixtureConfig:
    """What the front ends ask of a model's config, for a mixture."""

    parts: tuple[Any, ...]
    weights: tuple[float, ...]
    is_window: bool = False
    rho: int | None = None
    future: int = 0

    @property
    def context_size(self) -> int | None:
        sizes = [p.config.context_size for p in self.parts]
        return None if any(s is None for s in sizes) else max(sizes)

    def describe(self) -> str:
        return "mixture of " + " + ".join(f"{w:.3g} {p.config.describe()}" for p, w in zip(self.parts, self.weights))


@dataclass(frozen=True)
class _MixtureVocab:
    unk: str = "<unk>"


@dataclass(frozen=True, eq=False)
class LoadedMixture:
    """A mixture directory (:func:`write_mixture`) loaded for the front ends: its parts (model
    directories or ARPA files), their weights, and the members of
    :class:`lm.checkpoint.LoadedModel` the front ends use."""

    parts: tuple[Any, ...]
    weights: tuple[float, ...]
    path: Path
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def config(self) -> _MixtureConfig:
        return _MixtureConfig(parts=self.parts, weights=self.weights)

    @property
    def vocab(self) -> _MixtureVocab:
        return _MixtureVocab()

    @property
    def device(self) -> Any:
        return self.parts[0].device

    @property
    def default_unk_penalty(self) -> float:
        """The parts' unknown-word penalty (``log`` of one over the unknown types each part's
        ``<unk>`` stands for) when every part that records one gives the same: the mixture's
        ``<unk>`` probability is the weighted sum of theirs, over the same types (parts built on
        one vocabulary and text, as ``afp mix`` expects); else 0."""
        penalties = {round(p.default_unk_penalty, 9) for p in self.parts if p.default_unk_penalty != 0.0}
        return penalties.pop() if len(penalties) == 1 else 0.0

    @property
    def training(self) -> dict[str, Any]:
        return dict(self.record)

    def info(self) -> dict[str, Any]:
        infos = [p.info() for p in self.parts]
        rhos = [i["rho"] for i in infos if i.get("rho") is not None]
        return {"path": str(self.path), "name": self.config.describe(), "arch": "mixture", "cell": "mixture",
                "layers": 0, "hidden": 0, "rho": max(rhos) if rhos else None,
                "context_size": self.config.context_size, "future": 0,
                "vocab_size": max(int(i.get("vocab_size") or 0) for i in infos),
                "parameters": sum(int(i.get("parameters") or 0) for i in infos), "device": str(self.device),
                "default_unk_penalty": self.default_unk_penalty,
                "parts": [{"model": str(p.path), "weight": w, "name": p.config.describe()}
                          for p, w in zip(self.parts, self.weights)],
                "scores": "causal: next-word log-probabilities, mixed token by token", "training": self.training}


def is_mixture_dir(path: str | Path) -> bool:
    return (Path(path) / MIXTURE_FILE).is_file()


def _part_path(directory: str | Path, model: str) -> Path:
    """A part's path as ``mixture.json`` names it (relative to the mixture's directory) -> a path."""
    where = Path(model)
    return where if where.is_absolute() else Path(directory) / where


def check_parts(models: Sequence[str | Path]) -> None:
    """Refuse a mixture directory as a part of a new mixture (:func:`open_model` would refuse the
    mixture written): :class:`MixtureSpecError` naming it and, where its ``mixture.json`` reads,
    its own parts to give instead."""
    for model in models:
        if not is_mixture_dir(model):
            continue
        try:
            data = json.loads((Path(model) / MIXTURE_FILE).read_text(encoding="utf-8"))
            parts = [os.path.normpath(_part_path(model, part["model"])) for part in data["parts"]]
        except (OSError, ValueError, KeyError, TypeError):
            parts = []
        raise MixtureSpecError(f"{model}: a mixture (it holds {MIXTURE_FILE}) cannot be a part of a mixture"
                               + (f"; give its parts instead: {' '.join(parts)}" if parts else ""))


def open_model(path: str | Path, device: str = "cpu") -> Any:
    """What ``--model`` (and ``afp.load_model``, ``AFP_MODEL_DIR``) names, the one opener of every
    door: a mixture directory (``mixture.json``: its parts opened and mixed, :class:`Mixture`), or
    one model (:func:`lm.checkpoint.open_single_model`: an AFP model directory, an ARPA file or an
    n-gram model directory)."""
    if is_mixture_dir(path):
        data = json.loads((Path(path) / MIXTURE_FILE).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != MIXTURE_FORMAT or not data.get("parts"):
            raise MixtureSpecError(f"{Path(path) / MIXTURE_FILE}: not an {MIXTURE_FORMAT} file with parts")
        parts = []
        for part in data["parts"]:
            where = _part_path(path, part["model"])
            if is_mixture_dir(where):
                raise MixtureSpecError(f"{where}: a mixture's part cannot be a mixture")
            parts.append(open_single_model(where, device))
        return LoadedMixture(parts=tuple(parts), weights=tuple(float(p["weight"]) for p in data["parts"]),
                             path=Path(path), record=data.get("estimated", {}))
    return open_single_model(path, device)


def scorer_of(loaded: Any, precision: str = "auto", max_elements: int = DEFAULT_SCORE_ELEMENTS) -> ContextScorer:
    """The context scorer of what :func:`open_model` loaded (a mixture: its interpolated parts)."""
    if isinstance(loaded, LoadedMixture):
        return InterpolatedScorer([model_scorer(p, precision, max_elements) for p in loaded.parts], loaded.weights)
    return model_scorer(loaded, precision, max_elements)


def estimate_weights(scorers: Sequence[Any], sentences: Sequence[Sequence[str]], iterations: int = 500,
                     tolerance: float = 1e-7) -> tuple[list[float], dict[str, Any]]:
    """Interpolation weights that maximise the likelihood of held-out ``sentences`` (EM, as
    SRILM's ``compute-best-mix``), from equal weights: each part's log-probability of every
    token (words and ``</s>``, unknown words as the part scores them) is computed once, then
    ``w_k <- mean_t w_k p_k(t) / sum_j w_j p_j(t)`` until no weight moves by ``tolerance``.
    Returns the weights and a report: iterations, each part's and the mixture's perplexity."""
    import numpy

    from lm.scorer import score_sentences

    columns = [torch.cat(score_sentences(s, sentences)).numpy() for s in scorers]
    logp = numpy.stack(columns)  # (K, T)
    k = logp.shape[0]
    weights = numpy.full(k, 1.0 / k)
    steps = 0
    for steps in range(1, iterations + 1):
        joint = logp + numpy.log(weights)[:, None]
        total = numpy.logaddexp.reduce(joint, axis=0)
        new = numpy.exp(joint - total).mean(axis=1)
        moved = float(numpy.abs(new - weights).max())
        weights = new
        if moved < tolerance:
            break
    mixture = numpy.logaddexp.reduce(logp + numpy.log(numpy.maximum(weights, 1e-300))[:, None], axis=0)
    tokens = logp.shape[1]
    return weights.tolist(), {"iterations": steps, "tokens": tokens, "sentences": len(sentences),
                              "part_ppl": [float(numpy.exp(-c.mean())) for c in logp],
                              "mixture_ppl": float(numpy.exp(-mixture.mean()))}


def write_mixture(directory: str | Path, models: Sequence[str | Path], weights: Sequence[float],
                  estimated: dict[str, Any] | None = None) -> Path:
    """Write a mixture directory (``mixture.json``; each part's path relative to it) that
    ``--model DIR`` loads like any model. A part cannot be a mixture: :func:`check_parts` refuses
    it before anything is written."""
    check_parts(models)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    parts = [{"model": os.path.relpath(Path(m).resolve(), directory.resolve()), "weight": float(w)}
             for m, w in zip(models, weights)]
    (directory / MIXTURE_FILE).write_text(json.dumps({"format": MIXTURE_FORMAT, "parts": parts,
                                                      "estimated": estimated or {}}, indent=1) + "\n",
                                          encoding="utf-8")
    return directory
