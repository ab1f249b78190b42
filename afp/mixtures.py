"""Language models as scorers, mixed or not: what ``--model`` and ``--interpolate`` make.

``--interpolate PATH:W`` (repeatable) mixes other models into the ``--model`` one, token by token
in probability space (:class:`lattices.interpolate.InterpolatedScorer`): each added model gets
weight ``W`` and the ``--model`` one what is left (``1 - sum W``). A mixture is one finite-context
language model, so rescoring with it stays exact. A part is a model directory or a back-off ARPA
n-gram (``.arpa``, ``.arpa.gz``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lattices.interpolate import InterpolatedScorer
from lattices.scorer import ContextScorer
from lm.checkpoint import LoadedModel, open_model
from lm.scorer import scorer_of


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
                               f"(e.g. models/ptb:0.3 or lm.arpa.gz:0.2)")
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
