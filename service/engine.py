"""The work behind the endpoints, run in worker threads: parse, check limits, rescore, serialize.

Everything here is synchronous and CPU/GPU bound; the routes hand it to a thread pool so the
event loop stays free. LM scoring goes through the shared :class:`~afp.batching.BatchingScorer`.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from lattices.diagnostics import input_warnings, untuned_weights_warning
from lattices.formats import output_format, read_json_value, read_lattices, write_lattices
from lattices.formats.jsonfmt import lattice_to_json
from lattices.formats.k2 import k2_dict_to_json, write_k2
from lattices.lattice import Lattice, LatticeFormatError
from lattices.ops import check_deadline
from lattices.rescore import RescoreOptions, rescore
from lattices.scored import WeightError
from lattices.scorer import ContextScorer
from lm.checkpoint import LoadedModel
from lm.corpus import strip_boundaries
from lm.scorer import text_score
from afp.batching import BatchingScorer
from afp.symbols import SymbolTableError, words_table
from afp.options import OptionsError, build_options
from afp.weights import SETS, TunedWeights, WeightsFileError
from service.errors import APIError
from service.metrics import Metrics
from service.schemas import RescoreOptionsModel, RescoreRequest
from service.settings import Settings

SOURCE = "request"
T = TypeVar("T")


@dataclass
class Runtime:
    """What the app holds while it runs: settings, the model, the batching scorer, metrics, and
    a count of the work running in worker threads (shutdown waits for it)."""

    settings: Settings
    loaded: LoadedModel
    scorer: BatchingScorer
    metrics: Metrics
    old_lm: ContextScorer | None = None  # AFP_OLD_LM: subtracted exactly from every request's graph scores
    weights: TunedWeights | None = None  # AFP_WEIGHTS: the weights of requests that give none
    features: dict[str, Any] = field(default_factory=dict)  # AFP_FEATURES: window models by name
    pool: Any = None  # AFP_PROCESSES > 1: the worker processes doing request work (service.pool.RequestPool)
    _idle: threading.Condition = field(default_factory=threading.Condition)
    _running: int = 0

    def tracked(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call ``fn`` counted as running work; when the last running work ends, give the freed
        heap back to the system (:func:`release_memory`)."""
        with self._idle:
            self._running += 1
        try:
            return fn(*args, **kwargs)
        finally:
            with self._idle:
                self._running -= 1
                idle = self._running == 0
                self._idle.notify_all()
            if idle:
                release_memory()

    @property
    def device(self) -> torch.device:
        return self.loaded.device

    def info(self) -> dict[str, Any]:
        info = self.loaded.info()
        name = self.settings.model_name or (self.loaded.path.name if self.loaded.path else info["name"])
        return {"name": name, **{k: info[k] for k in ("cell", "layers", "hidden", "rho", "context_size",
                                                       "vocab_size", "parameters", "device")},
                "score_precision": self.scorer.inner.precision, "batching": self.scorer.enabled,
                "old_lm": str(self.settings.old_lm) if self.settings.old_lm is not None else None,
                "weights": self.weights.to_json() if self.weights is not None else None,
                "features": {name: {"name": f.loaded.config.describe(), "rho": f.rho, "future": f.future}
                             for name, f in self.features.items()},
                "default_unk_penalty": self.loaded.default_unk_penalty}

    def close(self, timeout: float = 60.0) -> None:
        """Wait for running work (a timed-out request stops at its deadline), then stop the batcher."""
        with self._idle:
            self._idle.wait_for(lambda: self._running == 0, timeout)
        self.scorer.close()


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None on another C library."""
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def release_memory() -> bool:
    """Return the C heap's free memory to the system (glibc ``malloc_trim(0)``); False where
    there is no such call. A large request (a long lattice's expansion and searches) frees
    hundreds of MB in many small numpy/torch blocks, which glibc otherwise keeps mapped: the
    server's resident memory would stay at its largest request's peak."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def parse_lattices(request: RescoreRequest, settings: Settings, deadline: float | None = None) -> list[Lattice]:
    """The request's lattices, read by the formats' one dispatcher (text: :func:`read_lattices`;
    a JSON value: :func:`read_json_value`) and checked against the size limits (archives stop
    between lattices once ``deadline`` has passed)."""
    payload, fmt = request.lattice, request.format
    try:
        symbols = None if request.words is None else words_table(request.words, source="words")
    except SymbolTableError as err:
        raise APIError(422, "invalid_request", str(err), field="words") from None
    if isinstance(payload, str):
        lattices = read_lattices(payload, fmt, symbols, source=SOURCE, deadline=deadline)
    else:
        lattices = read_json_value(payload, fmt, symbols, source=SOURCE, deadline=deadline)
    if not lattices:
        raise APIError(422, "invalid_request", "the request holds no lattice", field="lattice")
    if len(lattices) > settings.max_lattices:
        raise APIError(422, "too_large", f"{len(lattices)} lattices in one request; the limit is "
                                         f"{settings.max_lattices}", field="lattice")
    for lattice in lattices:
        if lattice.num_arcs > settings.max_lattice_arcs:
            raise APIError(422, "too_large", f"lattice {lattice.key!r} has {lattice.num_arcs} arcs; the limit is "
                                             f"{settings.max_lattice_arcs}", key=lattice.key, field="lattice")
    return lattices


def options_for(request: RescoreRequest, settings: Settings, default_weights: TunedWeights | None = None,
                unk_default: float = 0.0) -> RescoreOptions:
    """The engine's options of a request: its fields, over the request's ``weights`` (a weights
    file's object) or else the server's ``AFP_WEIGHTS`` (``default_weights``); a weight field the
    request sets itself wins over both."""
    if request.nbest > settings.max_nbest:  # the server's own limit (AFP_MAX_NBEST); the engine's are the schema's
        raise APIError(422, "invalid_request", f"nbest {request.nbest} is over the limit {settings.max_nbest}",
                       field="nbest")
    given = {name: getattr(request, name) for name in request.model_fields_set
             if name in RescoreOptionsModel.model_fields and name not in ("weights", "features")}
    given.update(max_arcs=settings.max_expanded_arcs)  # the server's memory limit: a request cannot raise it
    if given.get("target_arcs") is None:  # unset or null: the server's (a request may set its own, capped by the limit)
        given["target_arcs"] = settings.target_expanded_arcs
    try:  # RescoreOptions checks its numbers (finite weights and scales...): a bad one is the client's error
        tuned = None if request.weights is None else TunedWeights.from_json(request.weights, source="weights")
        return build_options(given, weights=tuned, default_weights=default_weights, fields_win=True,
                             unk_default=unk_default)
    except WeightsFileError as err:
        raise APIError(422, "invalid_request", str(err), field="weights") from None
    except ValueError as err:
        raise APIError(422, "invalid_request", str(err),
                       field=getattr(err, "field", None) if isinstance(err, (WeightError, OptionsError)) else None) from None


def serialize_lattice(lattice: Lattice, fmt: str) -> str | dict[str, Any] | list[Any]:
    """A rescored lattice in the request's format (text formats as text, JSON and k2 as objects)."""
    if fmt == "json":
        return lattice_to_json(lattice)
    if fmt == "k2":
        return k2_dict_to_json(write_k2([lattice]))  # type: ignore[arg-type]
    return write_lattices([lattice], fmt).decode("utf-8")


def request_features(request: RescoreRequest, runtime: Runtime) -> dict[str, Any]:
    """The window models a request uses: those it names (``features``), by default every one the
    server has (``AFP_FEATURES``); a name the server lacks is a 422 naming those it has."""
    if request.features is None:
        return dict(runtime.features)
    unknown = [name for name in request.features if name not in runtime.features]
    if unknown:
        raise APIError(422, "invalid_request", f"no feature named {unknown[0]!r}; this server has "
                       f"{', '.join(sorted(runtime.features)) or 'none'} (AFP_FEATURES)", field="features")
    return {name: runtime.features[name] for name in request.features}


def rescore_request(request: RescoreRequest, runtime: Runtime,
                    deadline: float | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Parse, rescore and serialize every lattice of a request: one result per lattice and LM
    weight, and the request's warnings (each kind once: mostly unknown words, words looked up in another case, untuned weights)."""
    settings = runtime.settings
    options = dataclasses.replace(options_for(request, settings, runtime.weights,
                                              runtime.loaded.default_unk_penalty), deadline=deadline)
    lattices = parse_lattices(request, settings, deadline)
    features = request_features(request, runtime)
    out, warnings = [], []
    warned: set[str] = set()
    untuned = (runtime.weights is None and request.weights is None
               and not request.model_fields_set & set(SETS))
    for lattice in lattices:
        check_deadline(deadline)
        for result in rescore(lattice, runtime.scorer.until(deadline), options, device=runtime.device,
                              old_lm=runtime.old_lm, features=features):
            for kind, text in input_warnings(result.key, result.stats, runtime.scorer.known).items():
                if kind not in warned:  # each kind once per request, as afp rescore warns once per job
                    warned.add(kind)
                    warnings.append(text)
            if untuned:
                warnings.append(untuned_weights_warning(result.stats, result.old_lm_weight, result.lm_weight))
                untuned = False
            row = result.to_json()
            if result.lattice is not None:
                row["lattice"] = serialize_lattice(result.lattice.to("cpu"), output_format(request.format, lattice))
            out.append(row)
        runtime.metrics.lattices.inc()
        runtime.metrics.expanded_arcs.observe(out[-1]["expanded_arcs"])
    return out, warnings


def perplexity_request(sentences: list[str], runtime: Runtime, deadline: float | None = None) -> dict[str, Any]:
    """Perplexity of independent sentences: ``afp ppl``'s scoring path (:func:`lm.scorer.text_score`,
    boundaries stripped as :func:`lm.corpus.strip_boundaries` strips them) through the batcher."""
    settings = runtime.settings
    if len(sentences) > settings.max_sentences:
        raise APIError(422, "too_large", f"{len(sentences)} sentences; the limit is {settings.max_sentences}",
                       field="sentences")
    words = [strip_boundaries(s.split()) for s in sentences]
    for i, w in enumerate(words):
        if len(w) > settings.max_sentence_words:
            raise APIError(422, "too_large", f"sentence {i} has {len(w)} words; the limit is "
                                             f"{settings.max_sentence_words}", field=f"sentences[{i}]")
    check_deadline(deadline)
    per_sentence: list[dict[str, Any]] = []
    result = text_score(runtime.scorer.until(deadline), words, on_sentence=lambda _, values: per_sentence.append(
        {"logprob": float(values.sum()), "tokens": values.numel()}))
    return {"ppl": result.ppl, "tokens": result.tokens, "oov": result.oov, "per_sentence": per_sentence}


__all__ = ["LatticeFormatError", "Runtime", "parse_lattices", "perplexity_request", "rescore_request"]
