"""What a command's model options make: the model, and the scorer every job of it uses.

``--model DIR`` (or an ARPA n-gram, an n-gram model directory, a mixture directory; default: the
bundled model), ``--interpolate MODEL:W`` (repeatable), ``--device``, ``--score-precision`` and
``--max-elements`` are one :class:`ModelSpec`; the command line builds it from its flags, a Python
caller builds it directly::

    from afp.scoring import ModelSpec

    spec = ModelSpec(model="models/librispeech", device="cpu")
    loaded = spec.load()
    scorer = spec.scorer(loaded)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from lattices.scorer import ContextScorer
from lm.device import DEFAULT_DEVICE

if TYPE_CHECKING:
    from afp.features import Features
    from lm.scorer import WindowScorer

__all__ = ["ExtraScorers", "ModelSpec", "load_extra_scorers"]


@dataclass(frozen=True)
class ModelSpec:
    """A language model and how to score with it.

    ``model``: a model directory, ARPA file, n-gram model directory or mixture directory (None:
    the bundled default, :func:`afp.defaults.default_model_dir`). ``device``: ``auto`` (CUDA when
    there is a GPU, else the CPU), ``cpu``, ``cuda``, ``cuda:N``. ``score_precision``: the output
    layer's, ``auto``/``fp32``/``bf16`` (None: ``auto``). ``interpolate``: ``MODEL:W`` texts, other
    models mixed in token by token (:mod:`afp.mixtures`). ``max_elements``: output-layer logits held
    at once (None: :data:`lm.model.DEFAULT_SCORE_ELEMENTS`)."""

    model: str | None = None
    device: str = DEFAULT_DEVICE
    score_precision: str | None = None
    interpolate: tuple[str, ...] = ()
    max_elements: int | None = None

    @property
    def precision(self) -> str:
        """The score precision asked for (``auto`` where none is given)."""
        return self.score_precision or "auto"

    def load(self) -> Any:
        """The model (:func:`afp.mixtures.open_model`: a :class:`lm.checkpoint.LoadedModel`, an
        n-gram or a mixture) on the resolved device."""
        from afp.defaults import default_model_dir
        from afp.mixtures import open_model
        from lm.device import resolve_device

        return open_model(self.model or default_model_dir(), device=str(resolve_device(self.device)))

    def scorer(self, loaded: Any, windows: bool = False) -> ContextScorer | Any:
        """The scorer of ``loaded`` with this precision, mixed with the ``interpolate`` models.
        ``windows``: a window model (``afp train --future K``) is scored as one (a
        :class:`lm.scorer.WindowScorer`: ``afp ppl``, ``afp score``); elsewhere it is refused
        with a :class:`ValueError` saying what it is."""
        from afp.mixtures import mixed_scorer, parse_interpolate, scorer_of
        from lm.model import DEFAULT_SCORE_ELEMENTS
        from lm.scorer import WindowScorer

        max_elements = self.max_elements or DEFAULT_SCORE_ELEMENTS
        interpolate = [parse_interpolate(text) for text in self.interpolate]
        if windows and loaded.config.is_window and not interpolate:
            return WindowScorer(loaded, precision=self.precision, max_elements=max_elements)
        if interpolate:
            return mixed_scorer(loaded, self.precision, interpolate)
        return scorer_of(loaded, precision=self.precision, max_elements=max_elements)


class ExtraScorers(NamedTuple):
    """The scorers a rescoring uses beside its model: ``old_lm``, the first pass's n-gram,
    subtracted exactly (None: none), and ``features``, acausal window models by name."""

    old_lm: ContextScorer | None
    features: dict[str, WindowScorer]


def load_extra_scorers(old_lm: str | Path | ContextScorer | None = None, features: Features | None = None,
                       device: str = "cpu", precision: str = "auto") -> ExtraScorers:
    """The old LM and the acausal features of every door, loaded once: ``afp rescore``, ``afp tune``
    and ``afp rescore-cuts`` (``--old-lm``, ``--feature``), the server (``AFP_OLD_LM``,
    ``AFP_FEATURES``) and :meth:`afp.Model.rescore` (``old_lm=``, ``features=``).

    ``old_lm``: an ARPA file or n-gram model directory (an exact
    :class:`lm.ngram.store.StoreScorer`), or a scorer already made. ``features``: any form of
    :data:`afp.features.Features`; a model directory is loaded as a window scorer on ``device`` with
    the output ``precision`` (:func:`afp.features.load_features`), a scorer is kept as it is."""
    from afp.features import feature_specs, load_features

    if isinstance(old_lm, (str, Path)):
        from lm.ngram.store import StoreScorer, load_store

        old_lm = StoreScorer(load_store(old_lm)) if str(old_lm) else None
    specs = feature_specs(features)
    paths = {name: spec for name, spec in specs.items() if isinstance(spec, (str, Path))}
    loaded = load_features(paths, device, precision)
    return ExtraScorers(old_lm, {name: loaded.get(name, spec) for name, spec in specs.items()})
