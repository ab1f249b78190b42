"""Batch rescoring jobs: read lattice inputs, shard them, rescore, write results.

Inputs are files or Kaldi-style specifiers:

  ``PATH`` / ``ark:PATH`` / ``ark,t:PATH``   a file (gzip or not)
  ``-`` / ``ark:-``                          standard input
  ``ark:CMD |``                              the output of a shell command (Kaldi's rxfilename pipe)

Kaldi archives are text (``ark,t``) or binary (``ark``, as decoders write ``lat.*.gz``): both are read.
Sharding: ``shard=(i, n)`` keeps the lattices whose running index (over all inputs, in order) is
``i`` modulo ``n``; under ``torchrun`` the rank and world size choose the shard by default.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from afp.batching import DEFAULT_BATCH_PAIRS
from lattices.diagnostics import input_warnings
from lattices.expand import ExpansionTooLarge
from lattices.formats import read_lattice_file, read_lattices, write_lattices
from lattices.lattice import Lattice, LatticeFormatError
from lattices.rescore import RescoreOptions, RescoreResult, rescore
from lattices.scorer import ContextScorer, WindowScorer

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class InputSpec:
    """A parsed input specifier."""

    kind: str  # "file", "stdin" or "pipe"
    target: str

    @classmethod
    def parse(cls, spec: str) -> InputSpec:
        body = spec
        if ":" in spec and spec.split(":", 1)[0].split(",")[0] in ("ark", "scp"):
            prefix, body = spec.split(":", 1)
            if prefix.startswith("scp"):
                raise ValueError(f"{spec}: scp: specifiers are not supported; give the archive itself (ark:...)")
        if body == "-":
            return cls("stdin", "-")
        if body.rstrip().endswith("|"):
            return cls("pipe", body.rstrip()[:-1].strip())
        return cls("file", body)

    def read(self) -> bytes:
        if self.kind == "stdin":
            return sys.stdin.buffer.read()
        if self.kind == "pipe":
            done = subprocess.run(self.target, shell=True, capture_output=True, check=False)
            if done.returncode != 0:
                raise ValueError(f"command {self.target!r} failed ({done.returncode}): "
                                 f"{done.stderr.decode(errors='replace')[-500:]}")
            return done.stdout
        try:
            return Path(self.target).read_bytes()
        except FileNotFoundError:
            raise ValueError(f"{self.target}: no such file") from None
        except OSError as err:
            raise ValueError(f"{self.target}: cannot read: {err.strerror}") from None

    @property
    def name(self) -> str:
        return {"stdin": "<stdin>", "pipe": f"<{self.target}>"}.get(self.kind, self.target)


def default_shard() -> tuple[int, int]:
    """``(rank, world_size)`` under torchrun, else ``(0, 1)``."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` -> ``(i, n)`` with ``0 <= i < n``."""
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: expected i/n, e.g. 0/4") from None
    if not 0 <= index < count:
        raise ValueError(f"--shard {text!r}: need 0 <= i < n")
    return index, count


def iter_lattices(inputs: Sequence[str], fmt: str, symbols: Sequence[str] | None = None,
                  shard: tuple[int, int] = (0, 1),
                  on_error: Callable[[str, LatticeFormatError], None] | None = None) -> Iterator[Lattice]:
    """Lattices of all inputs in order, only this shard's (lattice ``i`` of the running index over
    all inputs when ``i % n == shard index``; a Kaldi text archive's other lattices are skipped
    before they are parsed). An input that is a directory is an ESPnet n-best directory (its lists
    become lattices) or a directory of lattice files (:func:`lattices.formats.read_lattice_file`).
    ``on_error``: told each malformed lattice that can be left out (key, error) while the others
    are read (:func:`lattices.formats.read_lattices`)."""
    keep = ShardFilter(*shard)
    for spec_text in inputs:
        spec = InputSpec.parse(spec_text)
        if fmt == "espnet-nbest" or (spec.kind == "file" and Path(spec.target).is_dir()):
            yield from read_lattice_file(spec.target, fmt, symbols, keep=keep, on_error=on_error)
        else:
            yield from read_lattices(spec.read(), fmt, symbols, source=spec.name, keep=keep, on_error=on_error)


class ShardFilter:
    """``keep()`` for the lattices of a job taken in order: True for the ``index``-th of every
    ``count`` (the running index goes on across the job's inputs)."""

    def __init__(self, index: int, count: int) -> None:
        self.index, self.count, self.seen = index, count, 0

    def __call__(self) -> bool:
        take = self.seen % self.count == self.index
        self.seen += 1
        return take


def write_rescored(path: str | Path, lattices: Sequence[Lattice], fmt: str) -> list[Path]:
    """Write rescored lattices: one archive/file for Kaldi, k2 and JSON; for HTK and OpenFst (one
    lattice per file) ``path`` is a directory receiving ``<key>.lat`` files."""
    path = Path(path)
    if fmt in ("htk", "openfst"):
        path.mkdir(parents=True, exist_ok=True)
        written = []
        for lattice in lattices:
            name = "".join(c if c.isalnum() or c in "._-" else "_" for c in lattice.key) or "lattice"
            target = path / f"{name}.{'lat' if fmt == 'htk' else 'fst.txt'}"
            target.write_bytes(write_lattices([lattice], fmt))
            written.append(target)
        return written
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(write_lattices(lattices, fmt))
    return [path]


@dataclass(frozen=True)
class Failure:
    """A lattice that could not be rescored (over the expansion budget, nothing left after pruning)."""

    key: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"key": self.key, "error": self.message}


def rescore_all(lattices: Iterator[Lattice], scorer: ContextScorer, options: RescoreOptions,
                device: str | None = None, progress: bool | None = None, old_lm: ContextScorer | None = None,
                warn: Callable[[str], None] | None = None, workers: int = 1,
                batch_pairs: int = DEFAULT_BATCH_PAIRS,
                features: Mapping[str, WindowScorer] | None = None) -> Iterator[list[RescoreResult] | Failure]:
    """Rescore lattice after lattice (one result per LM weight each), in input order, with a
    progress bar. A lattice that cannot be rescored yields a :class:`Failure` and the job goes on.
    ``warn`` is called once per job when a lattice's words are mostly unknown to the model.
    ``old_lm`` and ``features`` (acausal window models by name) as in :func:`lattices.rescore.rescore`.

    ``workers > 1`` rescores that many lattices at a time in threads (parsing stays in the caller:
    ``lattices`` is read ahead by at most ``2 * workers``, so memory stays bounded however long
    the job), and their LM scoring goes through one :class:`~afp.batching.BatchingScorer`: the
    (context, word) pairs of the lattices in flight meet in one model call of up to
    ``batch_pairs`` pairs, the server's batching. Each pair's score depends on its own context
    only, so the results are the same as one at a time (up to float rounding of a larger matmul).
    """
    stream = with_progress(lattices, progress)
    if workers <= 1:
        outcomes: Iterator[list[RescoreResult] | Failure] = (
            rescore_lattice(lattice, scorer, options, device, old_lm, features) for lattice in stream)
        yield from warn_once(outcomes, warn, scorer)
        return
    from afp.batching import BatchingScorer

    batcher = BatchingScorer(scorer, enabled=True, max_pairs=batch_pairs)
    try:
        work = functools.partial(rescore_lattice, scorer=batcher, options=options, device=device, old_lm=old_lm,
                                 features=features)
        yield from warn_once(_in_order(stream, work, workers), warn, scorer)
    finally:
        batcher.close()


def with_progress(lattices: Iterable[T], progress: bool | None, desc: str = "rescoring") -> Iterable[T]:
    """``lattices`` with a progress bar on standard error (``progress`` None: when it is a terminal)."""
    from tqdm import tqdm

    show = sys.stderr.isatty() if progress is None else progress
    return tqdm(lattices, desc=desc, unit="lattice") if show else lattices


def rescore_lattice(lattice: Lattice, scorer: ContextScorer, options: RescoreOptions, device: str | None,
                    old_lm: ContextScorer | None,
                    features: Mapping[str, WindowScorer] | None = None) -> list[RescoreResult] | Failure:
    """One lattice rescored (:func:`lattices.rescore.rescore`), or a :class:`Failure` when this
    lattice cannot be (over the expansion budget, malformed): the job goes on."""
    try:
        return rescore(lattice, scorer, options, device=device, old_lm=old_lm, features=features)
    except (ExpansionTooLarge, LatticeFormatError) as err:  # this lattice only; the job goes on
        return Failure(lattice.key, str(err))


def _in_order(items: Iterable[T], fn: Callable[[T], R], workers: int) -> Iterator[R]:
    """``fn(item)`` for every item, ``workers`` threads at a time, yielded in input order; at most
    ``2 * workers`` items are taken from ``items`` ahead of the one being yielded."""
    pending: deque[Future[R]] = deque()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="afp-rescore") as pool:
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) >= 2 * workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:  # stopped early (an error, or the consumer went away): drop what has not started
            for future in pending:
                future.cancel()


def warn_once(outcomes: Iterable[list[RescoreResult] | Failure], warn: Callable[[str], None] | None,
               scorer: ContextScorer) -> Iterator[list[RescoreResult] | Failure]:
    """Pass ``outcomes`` through, giving each kind of input warning once per job (a lattice's words
    mostly unknown, words looked up in another case: :func:`lattices.diagnostics.input_warnings`)."""
    warned: set[str] = set()
    for results in outcomes:
        if not isinstance(results, Failure) and warn is not None:
            for kind, text in input_warnings(results[0].key, results[0].stats, scorer.known).items():
                if kind not in warned:
                    warned.add(kind)
                    warn(f"{text} (this warning is given once per job)")
        yield results


__all__ = ["Failure", "InputSpec", "default_shard", "iter_lattices", "parse_shard", "rescore_all",
           "rescore_lattice", "warn_once", "with_progress", "write_rescored"]
