"""Rescoring jobs as library calls: what ``afp rescore`` and ``afp rescore-cuts`` do, and the
setup they share with ``afp tune`` (:mod:`afp.tune_job`).

A :class:`RescoreSetup` is everything a rescoring job is given besides its inputs: the model
(:class:`afp.scoring.ModelSpec`), a symbol table, the old LM, acausal features, the weight and
budget options (named as the flags and HTTP fields, :func:`afp.options.build_options`) or a
weights file of ``afp tune --save``. The command line builds one from its flags::

    from afp.rescore_job import RescoreJob, RescoreSetup, run_rescore_job
    from afp.outputs import OutputOptions

    setup = RescoreSetup(options={"lm_weight": [0.5], "nbest": 2})
    summary = run_rescore_job(RescoreJob(setup, inputs=("examples/lattice.txt",),
                                         outputs=OutputOptions(text_dir="out")))
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from afp.batching import DEFAULT_BATCH_PAIRS
from afp.jobs import Failure
from afp.outputs import JobOutputs, OutputOptions
from afp.scoring import ExtraScorers, ModelSpec, load_extra_scorers
from lattices.formats import AUTO as AUTO_FORMAT
from lattices.lattice import Lattice
from lattices.rescore import RescoreOptions, RescoreResult

if TYPE_CHECKING:
    from lattices.scored import ScoredLattice

__all__ = ["LoadedSetup", "RescoreJob", "RescoreSetup", "RescoreSummary", "check_rescorable", "run_rescore_cuts_job",
           "run_rescore_job"]


@dataclass(frozen=True)
class RescoreSetup:
    """What a rescoring job is given besides its inputs.

    ``model``: the model and its scoring. ``words``: a ``words.txt`` for integer word ids.
    ``old_lm``: the n-gram (ARPA file or n-gram model directory) that built the decoding graph,
    subtracted exactly. ``features``: acausal window models, ``NAME=DIR`` each
    (:mod:`afp.features`). ``options``: rescoring options by their door names (the flags without
    ``--``, the HTTP fields: :data:`lattices.options.OPTIONS`; ``match_case`` False for
    ``--keep-case``; None: not given). ``weights``: a weights file of ``afp tune --save``; it sets
    the weights, so give it or weight options, not both."""

    model: ModelSpec = field(default_factory=ModelSpec)
    words: str | None = None
    old_lm: str | None = None
    features: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    weights: str | None = None

    @property
    def untuned(self) -> bool:
        """No weights file and no weight option: the untuned defaults (a job says so once)."""
        from afp.weights import SETS

        return not self.weights and all(self.options.get(name) is None for name in SETS)

    def symbols(self) -> tuple[str, ...] | None:
        """The ``words.txt`` table, read once (one tuple every lattice of the job shares), or None."""
        from afp.symbols import read_words_txt

        return read_words_txt(self.words) if self.words else None

    def rescore_options(self, unk_default: float = 0.0, *, tuned: Any = None, **job_options: Any) -> RescoreOptions:
        """The engine's options (:func:`afp.options.build_options`) from ``options``, the weights
        file and ``job_options``, what the job itself sets (``return_lattice=True`` when it writes
        the rescored lattices; None: not set); ``unk_default``: the model's own unknown-word penalty;
        ``tuned``: the weights file as read already (None: read here).
        Raises :class:`afp.options.OptionsError` (a ``ValueError``) naming the options at fault."""
        from afp.options import OptionsError, OptionValueError, build_options
        from afp.weights import SETS
        from lattices.options import option_spec

        weights = tuned if tuned is not None else _read_weights(self.weights)
        try:
            return build_options({**self.options, **job_options}, weights=weights, unk_default=unk_default)
        except OptionsError as err:
            if weights is not None and not isinstance(err, OptionValueError) and err.field in SETS:
                flags = [option_spec(name).flag_name for name in SETS if self.options.get(name) is not None]
                raise OptionsError(f"--weights {self.weights} sets the weights: give it or {', '.join(flags)}, "
                                   "not both", err.field) from None
            raise

    def extra_scorers(self, loaded: Any) -> ExtraScorers:
        """The old LM and the features, the features on ``loaded``'s device
        (:func:`afp.scoring.load_extra_scorers`)."""
        return load_extra_scorers(self.old_lm, self.features, str(loaded.device), self.model.precision)


@dataclass(frozen=True)
class RescoreJob:
    """An ``afp rescore`` job: ``setup``, the ``inputs`` (files, Kaldi specifiers, directories:
    :func:`afp.jobs.iter_lattices`) in ``format``, this process's ``shard`` (``"i/n"``; None:
    the torchrun rank and world size), the ``outputs`` (:class:`afp.outputs.OutputOptions`), and
    ``workers`` lattices rescored at a time with their scoring merged into model calls of at most
    ``batch_pairs`` pairs."""

    setup: RescoreSetup
    inputs: tuple[str, ...]
    format: str = AUTO_FORMAT
    shard: str | None = None
    outputs: OutputOptions = field(default_factory=OutputOptions)
    workers: int = 1
    batch_pairs: int = DEFAULT_BATCH_PAIRS


@dataclass(frozen=True)
class RescoreSummary:
    """What a job did: ``seen`` lattices read, ``failed`` of them not rescored or not written."""

    seen: int
    failed: int


class LoadedSetup:
    """A :class:`RescoreSetup` made ready once for many inputs: the symbol table, the model and its
    scorer, the engine's options, the old LM and the features. Every rescoring door loads its model
    this way (``afp rescore``, ``afp rescore-cuts``, ``afp tune``'s scoring pass, a corpus job's
    inputs, each worker process of :mod:`afp.workers`), so each refuses and warns alike.

    ``workers``: lattices at a time (:meth:`outcomes`): worker processes on a CPU, each with this
    setup loaded once (:class:`afp.workers.LatticePool`, started at the first use and kept for the
    job: :meth:`close`); on a GPU, threads whose scoring meets in merged model calls of at most
    ``batch_pairs`` pairs (:func:`afp.jobs.rescore_all`). Starting the workers costs about a model
    load: the job's first ``processes_from`` lattices (None: 4 per worker), counted over every call
    (a corpus job's inputs), are done here, one after another, and the workers start for a call
    that brings more."""

    def __init__(self, setup: RescoreSetup, return_lattice: bool = False, workers: int = 1,
                 batch_pairs: int = DEFAULT_BATCH_PAIRS, processes_from: int | None = None) -> None:
        self.setup = setup
        self.return_lattice = return_lattice
        self.workers, self.batch_pairs = workers, batch_pairs
        self.processes_from = 4 * workers if processes_from is None else processes_from
        self.symbols = setup.symbols()
        self.loaded = setup.model.load()
        check_rescorable(self.loaded, setup.model.model)
        self.weights = _read_weights(setup.weights)  # read once: these options and the server's per request
        self.options = setup.rescore_options(self.loaded.default_unk_penalty, tuned=self.weights,
                                             return_lattice=return_lattice or None)
        self.scorer = setup.model.scorer(self.loaded)
        self.old_lm, self.features = setup.extra_scorers(self.loaded)
        self.untuned = setup.untuned  # the untuned-weights warning is still to be given
        self._pool: Any = None
        self._done_here = 0  # lattices done in this process before the workers started

    @property
    def device(self) -> str:
        """The model's device type (``cpu``, ``cuda``)."""
        return self.loaded.device.type

    @property
    def uses_processes(self) -> bool:
        """Whether :meth:`outcomes` runs worker processes (``workers > 1`` on a CPU)."""
        return self.workers > 1 and self.device == "cpu"

    def close(self) -> None:
        """Stop the worker processes, if any were started."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> LoadedSetup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def rescore_one(self, lattice: Lattice) -> list[RescoreResult] | Failure:
        """One lattice rescored here (one result per LM weight), or a :class:`afp.jobs.Failure`
        saying why it could not be."""
        from afp.jobs import rescore_lattice

        return rescore_lattice(lattice, self.scorer, self.options, self.device, self.old_lm, self.features)

    def score_one(self, lattice: Lattice) -> ScoredLattice:
        """One lattice pruned, expanded and scored here, the weight-independent part of rescoring
        (:func:`lattices.rescore.score_for_options`: what ``afp tune`` tabulates)."""
        from lattices.rescore import score_for_options

        return score_for_options(lattice, self.scorer, self.options, self.device, self.old_lm, self.features)

    def _processes(self) -> Any:
        if self._pool is None:
            from afp.workers import LatticePool

            self._pool = LatticePool(self.setup, self.workers, self.return_lattice)
        return self._pool

    def _worth_processes(self, lattices: Iterable[Lattice]) -> tuple[bool, Iterable[Lattice]]:
        """Whether ``lattices`` go to the worker processes (started already, or more lattices than
        :attr:`processes_from` with those done here before, by earlier calls: a corpus job's
        inputs), and the same lattices (the ones looked at ahead put back)."""
        if not self.uses_processes:
            return False, lattices
        if self._pool is not None:
            return True, lattices
        stream = iter(lattices)
        room = max(0, self.processes_from - self._done_here)
        ahead = list(itertools.islice(stream, room + 1))
        if len(ahead) > room:
            return True, itertools.chain(ahead, stream)
        self._done_here += len(ahead)
        return False, ahead

    def outcomes(self, lattices: Iterable[Lattice], warn: Callable[[str], None] | None = None,
                 progress: bool | None = None) -> Iterator[list[RescoreResult] | Failure]:
        """:meth:`rescore_one` of every lattice, in input order, ``workers`` at a time; ``warn``
        is told each input warning once (:func:`afp.jobs.rescore_all`)."""
        from afp.jobs import Failure, rescore_all, warn_once, with_progress

        processes, lattices = self._worth_processes(lattices)
        if not processes:
            yield from rescore_all(iter(lattices), self.scorer, self.options, device=self.device, progress=progress,
                                   old_lm=self.old_lm, warn=warn, workers=self.workers if self.device != "cpu" else 1,
                                   batch_pairs=self.batch_pairs,
                                   features=self.features)
            return
        outcomes = self._processes().map("rescore", with_progress(lattices, progress),
                                         on_death=lambda lattice, reason: Failure(lattice.key, reason))
        yield from warn_once(outcomes, warn, self.scorer)

    def scored(self, lattices: Iterable[Lattice]) -> Iterator[ScoredLattice]:
        """:meth:`score_one` of every lattice, in input order, ``workers`` processes at a time on a
        CPU (one at a time elsewhere); an error in any lattice is raised. (A progress bar is the
        caller's: :meth:`afp.tune.Tuner.add` draws one.)"""
        processes, lattices = self._worth_processes(lattices)
        if not processes:
            yield from map(self.score_one, lattices)
            return
        yield from self._processes().map("score", lattices)

    def rescore_into(self, lattices: Iterable[Lattice], outputs: JobOutputs,
                     warn: Callable[[str], None] | None = None,
                     on_failure: Callable[[Failure], None] | None = None) -> RescoreSummary:
        """Rescore ``lattices`` and write each one's results to the open ``outputs``; a lattice that
        cannot be rescored or written is reported to ``outputs`` and ``on_failure``, and the rest
        go on. ``warn`` is told, once each: untuned weights, input warnings
        (:func:`afp.jobs.rescore_all`)."""
        from afp.outputs import LatticeOutputError

        say = warn or (lambda text: None)
        failed = seen = 0
        for results in self.outcomes(lattices, say):
            seen += 1
            if not isinstance(results, Failure):
                self.warn_untuned(results, say)
                try:
                    outputs.write(results)
                    continue
                except LatticeOutputError as err:  # nothing of it was written
                    results = Failure(err.key, str(err))
            failed += 1  # this lattice failed; the job goes on
            outputs.failed(results)
            if on_failure is not None:
                on_failure(results)
        return RescoreSummary(seen=seen, failed=failed)

    def warn_untuned(self, results: list[RescoreResult], warn: Callable[[str], None]) -> None:
        """Say once per job that the weights are the untuned defaults (when they are)."""
        if self.untuned:
            from lattices.diagnostics import untuned_weights_warning

            first = results[0]
            warn(untuned_weights_warning(first.stats, first.old_lm_weight, first.lm_weight)
                 + " (this warning is given once per job)")
            self.untuned = False


def check_rescorable(loaded: Any, name: str | None = None) -> None:
    """Refuse a model that cannot rescore lattices exactly (an exact RNN: its context is unbounded),
    the same way at every door, with a :class:`ValueError` naming it."""
    if loaded.config.context_size is None:
        raise ValueError(f"{name or 'the model'}: an exact (unbounded) RNN cannot rescore lattices exactly; use an "
                         f"AFP-rho or n-gram model")


def _read_weights(path: str | None) -> Any:
    """The :class:`afp.weights.TunedWeights` of a weights file, or None."""
    from afp.weights import TunedWeights

    return TunedWeights.read(path) if path else None


def run_rescore_job(job: RescoreJob, warn: Callable[[str], None] | None = None,
                    on_failure: Callable[[Failure], None] | None = None) -> RescoreSummary:
    """Rescore every lattice of ``job`` and write its outputs (:class:`afp.outputs.JobOutputs`:
    results on standard output unless an output goes there). A lattice that cannot be rescored or
    written is reported to its outputs and to ``on_failure`` (an :class:`afp.jobs.Failure`), and
    the job goes on. ``warn`` is told, once each: untuned weights, input warnings
    (:func:`afp.jobs.rescore_all`), posteriors that the transcript lines leave out, no lattice read."""
    from afp.jobs import default_shard, iter_lattices, parse_shard
    from afp.outputs import JobOutputs

    setup, say = job.setup, warn or (lambda text: None)
    shard = parse_shard(job.shard) if job.shard else default_shard()
    ready = LoadedSetup(setup, return_lattice=job.outputs.out is not None, workers=job.workers,
                        batch_pairs=job.batch_pairs)
    outputs = JobOutputs(job.outputs, input_format=job.format, lm_weights=ready.options.lm_weights,
                         symbols=ready.symbols, rank=None if shard[1] == 1 or job.shard else shard[0])
    if setup.options.get("posteriors") and not job.outputs.json and outputs.results_on_stdout:
        say("--posteriors: the transcript lines hold words only; the word posteriors are in --json output "
            "(best.word_posteriors) and in the --ctm confidence column")
    lattices = iter_lattices(list(job.inputs), job.format, ready.symbols, shard)
    with ready, outputs:
        summary = ready.rescore_into(lattices, outputs, warn, on_failure)
    if summary.seen == 0:
        say(f"no lattice was read from {', '.join(job.inputs)}" + (f" (shard {shard[0]}/{shard[1]})"
                                                                     if shard[1] > 1 else ""))
    return summary


def run_rescore_cuts_job(setup: RescoreSetup, cuts: str, out: str, workers: int = 1, batch_pairs: int = DEFAULT_BATCH_PAIRS,
                         warn: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Rescore the lattices a lhotse CutSet names and write it with hypotheses
    (:func:`afp.cuts.rescore_cuts`); the summary ``afp rescore-cuts`` prints (``failed``: cuts
    without a hypothesis, each told to ``warn``)."""
    from afp.cuts import rescore_cuts

    with LoadedSetup(setup, workers=workers, batch_pairs=batch_pairs) as ready:
        return rescore_cuts(cuts, out, ready, warn=warn)
