"""The Python API: load a model, score sentences, rescore lattices and n-best lists.

For users of icefall, ESPnet and NeMo, who live in Python. Everything here goes through the code
the command line and the server use (:func:`lm.scorer.text_score` for sentences,
:func:`afp.jobs.rescore_all` for lattices), so the same input gets the same answer from
``afp score``, ``afp rescore``, ``POST /v1/rescore`` and this module::

    import afp

    model = afp.load_model()                      # the bundled default model
    model.score(["YEAH I THINK SO"])[0].logprob   # natural log, </s> included
    for results in model.rescore("examples/lattice.txt", nbest=2, lm_weight=0.5):
        print(results[0].key, results[0].best.words)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from afp.jobs import Failure, iter_lattices, rescore_all
from afp.mixtures import mixed_scorer
from afp.scoring import load_extra_scorers
from lattices.formats import AUTO as AUTO_FORMAT
from afp.symbols import read_words_txt
from lattices.formats import read_json_value
from lattices.lattice import Lattice
from afp.options import OptionsError, OptionValueError, build_options
from afp.weights import SETS, TunedWeights
from lattices.rescore import RescoreOptions, RescoreResult
from lattices.scorer import ContextScorer
from lm.checkpoint import LoadedModel
from lm.device import DEFAULT_DEVICE
from lm.ngram.store import StoreScorer
from lm.scorer import LMScorer, TextScore, text_score

__all__ = ["Model", "RescoreFailed", "SentenceScore", "load_model", "rescore_options"]

#: what :meth:`Model.rescore` takes: a path or Kaldi specifier, a parsed JSON value (an n-best
#: list, a JSON lattice, a k2 dict, or a list of them), a :class:`~lattices.lattice.Lattice`
Input = str | Path | dict[str, Any] | Lattice


class RescoreFailed(ValueError):
    """A lattice could not be rescored (over the expansion budget, malformed...); ``key`` names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class SentenceScore:
    """One sentence's score: its ``words``, ``token_logprobs`` (one per word, then ``</s>``;
    natural logs) and their sum ``logprob``; ``unknown``: words scored as ``<unk>``."""

    words: list[str]
    token_logprobs: list[float]
    logprob: float
    unknown: int


def rescore_options(model: Model, /, *, weights: str | Path | None = None, **options: Any) -> RescoreOptions:
    """The :class:`~lattices.rescore.RescoreOptions` :meth:`Model.rescore` uses with these arguments:
    ``options`` named as the HTTP request fields and the command-line flags (``lm_weight``, a number or
    a list, ``old_lm_weight``, ``acoustic_scale``, ``word_penalty``, ``unk_penalty``,
    ``score_weights``, a dict, ``nbest``, ``decode``, ``mbr_nbest``, ``mbr_scale``, ``posteriors``,
    ``prune_beam``, ``target_arcs``, ``max_arcs``, ``prune_if_too_large``, ``determinize``,
    ``old_lm_score``...: :data:`lattices.options.OPTIONS` says what each takes; ``RescoreOptions``'
    own field names are accepted too), over a weights file of ``afp tune --save`` (``weights``; it
    sets the weights, so give it or weight options, not both), by the one builder of every door
    (:func:`afp.options.build_options`): unset, ``RescoreOptions``' defaults, with ``model``'s own
    unknown-word penalty (``model.loaded.default_unk_penalty``).

    Raises:
      ValueError: a value an option cannot take (:class:`afp.options.OptionValueError`, naming it).
      TypeError: an unknown option, or a weight option beside ``weights``.
    """
    tuned = None if weights is None else TunedWeights.read(weights)
    try:
        return build_options(options, weights=tuned, unk_default=model.loaded.default_unk_penalty)
    except OptionValueError:
        raise
    except OptionsError as err:
        raise TypeError(f"weights= {err}" if weights is not None and err.field in SETS else str(err)) from None


class Model:
    """A loaded language model with the scorer every front end uses (``precision``: the output
    layer's, ``auto`` = bf16 on CUDA and fp32 on a CPU, as ``afp rescore`` and ``afp serve``)."""

    def __init__(self, loaded: LoadedModel, score_precision: str = "auto",
                 interpolate: Sequence[tuple[str, float]] = ()) -> None:
        self.loaded = loaded
        self.score_precision = score_precision
        self.scorer: ContextScorer = mixed_scorer(loaded, score_precision, interpolate)

    @property
    def info(self) -> dict[str, Any]:
        """What ``afp info --json`` prints."""
        precision = self.scorer.precision if isinstance(self.scorer, (LMScorer, StoreScorer)) else None
        return {**self.loaded.info(), "score_precision": precision}

    def score(self, sentences: Iterable[str | Sequence[str]]) -> list[SentenceScore]:
        """Each sentence's log-probability (``afp score``): a string is split at white space."""
        out: list[SentenceScore] = []
        unknown = self.scorer.known

        def keep(words: Sequence[str], values: Any) -> None:
            known = unknown(list(words)).tolist() if words else []
            out.append(SentenceScore(list(words), values.tolist(), float(values.sum()), known.count(False)))

        text_score(self.scorer, _sentences(sentences), on_sentence=keep)
        return out

    def perplexity(self, sentences: Iterable[str | Sequence[str]]) -> TextScore:
        """Perplexity over words and one ``</s>`` per sentence (``afp ppl``); ``.to_json()`` gives
        ``{"ppl", "tokens", "sentences", "oov", "logprob"}``."""
        return text_score(self.scorer, _sentences(sentences))

    def rescore(self, inputs: Input | Sequence[Input], *, format: str = AUTO_FORMAT, words: str | Path | None = None,
                old_lm: str | Path | ContextScorer | None = None, workers: int = 1,
                weights: str | Path | None = None, features: Mapping[str, Any] | None = None,
                **options: Any) -> list[list[RescoreResult]]:
        """Rescore lattices or n-best lists exactly (``afp rescore``); one list per lattice, with a
        :class:`~lattices.rescore.RescoreResult` per LM weight (``.best.words``, ``.best.score``,
        ``.nbest``...).

        Args:
          inputs: a file or Kaldi specifier (``"ark:lat.1"``, ``"ark:gunzip -c lat.1.gz |"``), an
            ESPnet n-best directory, a parsed JSON value (an n-best list ``{"key", "hypotheses":
            [{"words", "scores"}]}``, a JSON lattice, a k2 dict), a ``Lattice``, or a list of these.
          format: the input format (``auto`` guesses).
          words: a ``words.txt`` for integer word ids.
          old_lm: the ARPA file (or scorer) of the old LM, subtracted exactly (``--old-lm``).
          workers: lattices rescored at a time, their scoring merged (``--workers``).
          features: acausal window models by name (``--feature NAME=DIR``): a model directory or
            a :class:`lm.scorer.WindowScorer` each; weight them with ``score_weights``.
          weights: a weights file of ``afp tune --save`` (``--weights``); it sets the weights, so
            give it or weight options, not both.
          options: the rescoring options, by name (:func:`rescore_options`).
        Raises:
          RescoreFailed: a lattice could not be rescored (the message says why).
        """
        from afp.rescore_job import RescoreSetup, check_rescorable

        check_rescorable(self.loaded, str(self.loaded.path) if self.loaded.path else None)
        settings = rescore_options(self, weights=weights, **options)
        untuned = RescoreSetup(options=options, weights=str(weights) if weights is not None else None).untuned
        symbols = read_words_txt(words) if words is not None else None
        lattices = _lattices(inputs if isinstance(inputs, (list, tuple)) else [inputs], format, symbols)
        extra = load_extra_scorers(old_lm, features, str(self.loaded.device), self.score_precision)
        out = []
        for outcome in rescore_all(lattices, self.scorer, settings, device=self.loaded.device.type, progress=False,
                                   old_lm=extra.old_lm, workers=workers, features=extra.features):
            if isinstance(outcome, Failure):
                raise RescoreFailed(outcome.key, outcome.message)
            if untuned:  # as a job says it once, so does a call (a UserWarning)
                import warnings

                from lattices.diagnostics import untuned_weights_warning

                first = outcome[0]
                warnings.warn(untuned_weights_warning(first.stats, first.old_lm_weight, first.lm_weight), stacklevel=2)
                untuned = False
            out.append(outcome)
        return out


def load_model(path: str | Path | None = None, device: str = DEFAULT_DEVICE, score_precision: str = "auto",
               interpolate: Sequence[tuple[str, float]] = ()) -> Model:
    """A model directory (default: ``$AFP_MODEL_DIR``, else the bundled default model) on
    ``device`` (``auto``: CUDA when there is a GPU, else the CPU); ``interpolate``: ``(model,
    weight)`` pairs mixed in (``--interpolate``, :mod:`afp.mixtures`)."""
    from afp.scoring import ModelSpec

    return Model(ModelSpec(model=str(path) if path is not None else None, device=device).load(), score_precision,
                 interpolate)


def _sentences(sentences: Iterable[str | Sequence[str]]) -> Iterator[list[str]]:
    from lm.corpus import strip_boundaries

    for sentence in sentences:
        yield strip_boundaries(sentence.split() if isinstance(sentence, str) else list(sentence))


def _lattices(inputs: Sequence[Input], fmt: str, symbols: Sequence[str] | None) -> Iterator[Lattice]:
    for item in inputs:
        if isinstance(item, Lattice):
            yield item
        elif isinstance(item, (str, Path)):
            yield from iter_lattices([str(item)], fmt, symbols)
        else:
            yield from read_json_value(item, fmt, symbols, source="input")
