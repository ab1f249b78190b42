"""``afp ngram`` as one library call: build a modified Kneser-Ney model from text or prepared
shards, or read an existing ARPA model; prune it; write it as ARPA and/or a model directory.

    from lm.ngram.job import NgramJob, run_ngram_job
    summary = run_ngram_job(NgramJob(text=("train.txt",), order=4, prune=1e-7, store="lm4"))

The command line (``afp ngram``) parses its flags into an :class:`NgramJob` and prints the
summary this returns; a Python caller gets the same.
"""

from __future__ import annotations

import resource
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["NgramJob", "NgramJobError", "run_ngram_job"]


class NgramJobError(ValueError):
    """Options of an n-gram job that cannot be used together; the message names the options."""


@dataclass(frozen=True)
class NgramJob:
    """What to build and where (the fields are ``afp ngram``'s flags).

    Exactly one source: ``text`` (files, gzip or not), ``data`` (a directory ``afp prepare``
    wrote) or ``arpa`` (an existing back-off model). ``words_txt``, ``min_count``, ``max_vocab``:
    the vocabulary, with ``text`` only. ``order``: the n to build (with ``arpa``: checked against
    the file). ``prune``: Stolcke's relative-entropy threshold (:mod:`lm.ngram.prune`). ``out``:
    an ARPA file (``.gz`` compressed); ``store``: a model directory; at least one of them."""

    text: tuple[str, ...] = ()
    data: str | None = None
    arpa: str | None = None
    words_txt: str | None = None
    min_count: int | None = None
    max_vocab: int | None = None
    order: int | None = None
    prune: float | None = None
    out: str | None = None
    store: str | None = None

    def check(self) -> None:
        """Raise :class:`NgramJobError` for options that cannot be used together."""
        if sum(bool(x) for x in (self.text, self.data, self.arpa)) != 1:
            raise NgramJobError("give one of --text FILE..., --data DIR (a directory afp prepare wrote) or --arpa LM.arpa")
        given = [f"--{n.replace('_', '-')}" for n in ("words_txt", "min_count", "max_vocab") if getattr(self, n) is not None]
        if (self.data or self.arpa) and given:
            raise NgramJobError(f"{', '.join(given)}: the vocabulary of --data DIR or --arpa FILE is its own; "
                                "give these to afp prepare, or use --text")
        if not (self.out or self.store):
            raise NgramJobError("give --out LM.arpa[.gz], --store DIR or both: where to write the model")
        if self.prune is not None and not self.prune >= 0:
            raise NgramJobError(f"--prune: the threshold must be a number >= 0, got {self.prune}")
        if self.order is None and not self.arpa:
            raise NgramJobError("--order N: the n of the model to build")
        if self.arpa and self.prune is None and self.out:
            raise NgramJobError("--arpa without --prune: give --store DIR (the file as a model directory)")


def run_ngram_job(job: NgramJob) -> dict[str, Any]:
    """Run ``job`` (checked first); the summary ``afp ngram`` prints: n-gram counts (before and
    after pruning), discounts, seconds per step, peak memory."""
    job.check()
    if job.arpa:
        return _from_arpa(job)
    from lm.config import PrepareConfig
    from lm.ngram import kneser_ney
    from lm.shards import open_prepared, prepare

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="afp-ngram-") as tmp:
        data = job.data
        if job.text:
            fields = {name: getattr(job, name) for name in ("words_txt", "min_count", "max_vocab")
                      if getattr(job, name) is not None}
            prepare(PrepareConfig.from_dict({**fields, "text": list(job.text), "out": str(Path(tmp) / "data")},
                                            where="ngram options"))
            data = str(Path(tmp) / "data")
        prepared = open_prepared(data, verify=False)
        vocab = prepared.vocab
        shards = [(shard.tokens, shard.offsets) for shard in prepared.train.shards]
        counted = time.perf_counter()
        predictable = np.array(vocab.predictable_mask())
        model = kneser_ney.build(kneser_ney.chunks_of(shards, vocab.bos_id, vocab.eos_id, vocab.unk_id), job.order,
                                 vocab.size, vocab.bos_id, predictable, vocab.words)
        built = time.perf_counter()
        seconds = {"prepare": counted - started, "build": built - counted}
        full_counts = [int(o.keys.shape[0]) for o in model.orders]
        counts, model = _prune_and_write(model, vocab.words, vocab.bos_id, vocab.eos_id, predictable, job, seconds)
    return {"out": job.out, "order": job.order, "vocab_size": vocab.size, "words": prepared.train.words,
            **counts, "discounts": {f"{o.n}-grams": list(o.discounts) for o in model.orders},
            **({"prune": job.prune, "before_pruning": {**{f"{n}-grams": c for n, c in enumerate(full_counts, 1)},
                                                         "1-grams": counts["1-grams"]}}  # never pruned
               if job.prune is not None else {}),
            "seconds": seconds, **({"store": job.store} if job.store else {}), "peak_rss_mib": _peak_mib()}


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _prune_and_write(model: Any, words: Sequence[str], bos: int, eos: int, predictable: Any, job: NgramJob,
                     seconds: dict[str, float]) -> tuple[dict[str, int], Any]:
    """The output stage: ``model`` (a :class:`lm.ngram.kneser_ney.KneserNeyModel`) pruned at
    ``job.prune`` when given, written to ``job.out`` (ARPA) and/or ``job.store`` (a model
    directory, straight from the arrays). Adds each step's seconds to ``seconds``; returns the
    n-gram counts written and the (pruned) model."""
    from lm.ngram import kneser_ney

    tick = time.perf_counter()
    if job.prune is not None:
        from lm.ngram.prune import prune

        model = prune(model, job.prune, bos, eos)
        seconds["prune"] = time.perf_counter() - tick
    counts: dict[str, int] = {}
    if job.out:
        tick = time.perf_counter()
        counts = kneser_ney.write_arpa(model, words, bos, predictable, job.out)
        seconds["write"] = time.perf_counter() - tick
    if job.store:  # the same model as mapped arrays: --model DIR loads it without parsing
        from lm.ngram.store import save_store

        tick = time.perf_counter()
        store = kneser_ney.to_store(model, words, bos, predictable)
        save_store(store, job.store)
        counts = {f"{n}-grams": c for n, c in enumerate(store.counts, 1)}
        seconds["store"] = time.perf_counter() - tick
    return counts, model


def _from_arpa(job: NgramJob) -> dict[str, Any]:
    """An existing back-off model, pruned (SRILM's ``ngram -lm LM -prune T -write-lm``) and/or
    written as a model directory."""
    from lm.ngram.prune import model_of_store
    from lm.ngram.store import read_arpa_store, save_store

    started = time.perf_counter()
    store = read_arpa_store(job.arpa, dtype=np.float64)
    if job.order is not None and job.order != store.order:
        raise NgramJobError(f"--order {job.order}: {job.arpa} is a {store.order}-gram model")
    before = {f"{n}-grams": c for n, c in enumerate(store.counts, 1)}
    seconds = {"read": time.perf_counter() - started}
    if job.prune is not None:
        model, predictable = model_of_store(store)
        counts, _ = _prune_and_write(model, store.words, store.bos_id, store.eos_id, predictable, job, seconds)
    else:  # the file as it is, as a model directory
        tick = time.perf_counter()
        save_store(store, job.store)
        counts = before
        seconds["store"] = time.perf_counter() - tick
    return {"arpa": job.arpa, "out": job.out, "order": len(before), **counts,
            **({"prune": job.prune, "before_pruning": before} if job.prune is not None else {}),
            "seconds": seconds, **({"store": job.store} if job.store else {}), "peak_rss_mib": _peak_mib()}
