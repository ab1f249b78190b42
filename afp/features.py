"""Acausal window models as named rescoring features: what ``--feature NAME=DIR`` makes.

``afp rescore --feature acausal=DIR --score-weights acausal=0.5 ...`` adds, for every path, the
window model's pseudo-log-likelihood of its words (each word from the words around it,
:mod:`lm.window`) as the named score ``acausal``, weighted like the recogniser's own named scores
and tuned by ``afp tune`` with them (from 0). Any number of features; the server loads them from
its ``AFP_FEATURES`` setting (``NAME=DIR,...``), never from a path in a request. Rescoring stays
exact: the lattice is expanded both ways (:func:`lattices.expand.expand_two_sided`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from lm.checkpoint import load_checkpoint
from lm.scorer import WindowScorer

#: a feature's name: a word (it is a named score, a weights-file key and an HTTP field value)
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


class FeatureSpecError(ValueError):
    """A ``--feature`` value (or ``AFP_FEATURES`` entry) that cannot be used; the message names it."""


def parse_feature(text: str) -> tuple[str, str]:
    """``NAME=DIR`` -> ``(NAME, DIR)`` (the first ``=`` splits, so paths may hold one)."""
    name, sep, path = text.partition("=")
    if not sep or not path or not NAME.fullmatch(name):
        raise FeatureSpecError(f"--feature {text!r}: expected NAME=MODEL_DIR with NAME a word (letters, digits, "
                               "_ . -), e.g. acausal=models/window")
    return name, path


def parse_features(texts: Iterable[str]) -> dict[str, str]:
    """Every ``NAME=DIR`` of ``texts``, by name; a name given twice is an error."""
    out: dict[str, str] = {}
    for text in texts:
        name, path = parse_feature(text)
        if name in out:
            raise FeatureSpecError(f"--feature {name!r} is given twice")
        out[name] = path
    return out


#: the ways a door names its features: ``NAME=DIR`` texts (``--feature``, repeatable), one text of
#: them separated by commas (the server's ``AFP_FEATURES``), or a mapping of names to model
#: directories or window scorers already loaded (:meth:`afp.Model.rescore`)
Features = str | Iterable[str] | Mapping[str, str | Path | WindowScorer]


def feature_specs(features: Features | None) -> dict[str, str | Path | WindowScorer]:
    """Every feature of ``features`` (any of :data:`Features`' forms; None: none) by name: a model
    directory, or a window scorer already loaded. A name given twice or a text that is not
    ``NAME=DIR`` is a :class:`FeatureSpecError`."""
    if not features:
        return {}
    if isinstance(features, Mapping):
        return dict(features)
    texts = features.split(",") if isinstance(features, str) else features
    return dict(parse_features(text.strip() for text in texts if text.strip()))


def load_features(specs: Mapping[str, str | Path], device: str = "cpu",
                  precision: str = "auto") -> dict[str, WindowScorer]:
    """The window scorer of each named model directory (a causal model is refused by name)."""
    out: dict[str, WindowScorer] = {}
    for name, path in specs.items():
        try:
            out[name] = WindowScorer(load_checkpoint(path, device=device), precision=precision)
        except ValueError as err:
            raise FeatureSpecError(f"feature {name!r}: {err}") from None
    return out
