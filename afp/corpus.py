"""Rescoring a corpus: one result file per input, written once, resumable, split into jobs.

``afp rescore --out-dir DIR INPUT...`` rescores input after input (a Kaldi archive
``lat.3.gz``, a lattice file, an n-best file, a directory of lattice files or an ESPnet n-best
directory) and writes, for each, ``DIR/NAME.jsonl``: one JSON line per lattice (and LM weight),
what ``afp rescore --json`` prints, and a failed lattice as ``{"key": ..., "error": ...}``.
``NAME`` is the input's file name without ``.gz`` (``lat.3.gz`` -> ``lat.3``); inputs of one job
whose names collide are named by their path under the inputs' common folder instead
(``dev_clean/lat.1.gz`` -> ``dev_clean__lat.1``). Asked for (``also``), beside it:

* ``lattices``: the rescored lattices in the input's format, under the input's own file name
  (``DIR/lat.3.gz``: a Kaldi archive that ``lattice-best-path "ark:gunzip -c DIR/lat.3.gz|"``
  reads; a directory of lattice files for HTK or OpenFst input);
* ``text``: ``DIR/NAME.text`` (``KEY WORD ...``; with several LM weights ``DIR/NAME.LMWT.text``);
* ``ctm``: ``DIR/NAME.ctm``; ``nbest-text``: ``DIR/NAME.nbest.text``.

**Written once.** Each input's files are written under ``DIR/.partial/NAME.<token>/`` and moved
into ``DIR`` when whole, the results file last: an input whose ``NAME.jsonl`` exists is done, and
is skipped (``force`` redoes it). A job killed at any point is finished by running it again;
nothing is lost or written twice. A lattice that fails (malformed, over the budget without
pruning) is recorded in its input's results with the reason, and the input's other lattices are
written; an input that cannot be read at all (no such file, a broken binary archive) writes
nothing and fails, so the next run tries it again. The job's summary names every failure.

**Jobs.** ``job`` of ``num_jobs`` (1-based, Kaldi's ``JOB``) takes inputs ``job``,
``job + num_jobs``, ... of the inputs as given, so ``--job $SLURM_ARRAY_TASK_ID --num-jobs 16``
over one list of inputs splits it as Kaldi's ``JOB=1:16`` does. Jobs share ``DIR``; each writes
``DIR/summary.json`` (``DIR/summary.JOB.json`` when ``num_jobs > 1``).

:func:`run_corpus_job` runs a job in this process; :mod:`afp.corpus_ray` runs the same job on a
Ray cluster with the same :class:`InputRescorer` in each worker, so both write the same files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from afp.batching import DEFAULT_BATCH_PAIRS
from afp.rescore_job import RescoreSetup
from lattices.formats import AUTO as AUTO_FORMAT
from lattices.times import DEFAULT_FRAME_SHIFT

__all__ = ["OUTPUT_KINDS", "PARTIAL_DIR", "CorpusError", "CorpusInput", "CorpusJob", "CorpusSummary",
           "InputOutcome", "InputRescorer", "Progress", "plan_inputs", "recorded_outcome", "run_corpus_job",
           "write_summary"]

#: what a corpus job can write beside each input's results
OUTPUT_KINDS = ("lattices", "text", "ctm", "nbest-text")
#: where inputs are written before they are whole (under the output directory)
PARTIAL_DIR = ".partial"
RESULTS_SUFFIX = ".jsonl"


class CorpusError(ValueError):
    """A corpus job that cannot start (an input without a name, names that collide...)."""


@dataclass(frozen=True)
class CorpusInput:
    """One input of a corpus job: ``spec`` as given, ``name`` its result files' stem in the output directory."""

    spec: str
    name: str

    def results(self, out_dir: str | Path) -> Path:
        """``DIR/NAME.jsonl``: the input's results; it exists only when the input is done."""
        return Path(out_dir) / f"{self.name}{RESULTS_SUFFIX}"


def plan_inputs(inputs: Sequence[str], job: int = 1, num_jobs: int = 1) -> list[CorpusInput]:
    """This job's inputs, named: ``job`` of ``num_jobs`` (1-based) takes every ``num_jobs``-th
    input from the ``job``-th on. Names come from all inputs, so every job names an input alike.
    Raises :class:`CorpusError` for standard input, a command, an input given twice, or
    ``job`` out of range."""
    from afp.jobs import InputSpec

    if not 1 <= job <= num_jobs:
        raise CorpusError(f"--job {job} --num-jobs {num_jobs}: need 1 <= job <= num-jobs")
    paths = []
    for spec in inputs:
        parsed = InputSpec.parse(spec)
        if parsed.kind != "file":
            raise CorpusError(f"{spec}: --out-dir writes a result file per input, named after it: give files or "
                              "directories, not standard input or a command")
        paths.append(Path(parsed.target))
    seen: dict[Path, str] = {}
    for spec, path in zip(inputs, paths):
        resolved = path.resolve()
        if resolved in seen:
            raise CorpusError(f"{spec}: given twice (also as {seen[resolved]})")
        seen[resolved] = spec
    names = [_stem(path.name) for path in paths]
    if len(set(names)) < len(names):  # name by the path under the common folder
        common = Path(os.path.commonpath([str(p.resolve()) for p in paths]))
        names = [_stem("__".join(p.resolve().relative_to(common).parts)) for p in paths]
    return [CorpusInput(spec, name) for k, (spec, name) in enumerate(zip(inputs, names)) if k % num_jobs == job - 1]


def _stem(name: str) -> str:
    stem = name.removesuffix(".gz") or name
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in stem).lstrip(".") or "input"


@dataclass(frozen=True)
class CorpusJob:
    """A corpus job: ``setup`` (the model and options, :class:`afp.rescore_job.RescoreSetup`),
    ``inputs`` in ``format``, the output directory ``out_dir``, this job's place ``job`` of
    ``num_jobs``, ``force`` (redo inputs that are done), ``also`` (of :data:`OUTPUT_KINDS`),
    ``frame_shift`` (CTM), and ``workers`` lattices at a time within an input with their LM
    scoring merged into model calls of at most ``batch_pairs`` pairs."""

    setup: RescoreSetup
    inputs: tuple[str, ...]
    out_dir: str
    format: str = AUTO_FORMAT
    job: int = 1
    num_jobs: int = 1
    force: bool = False
    also: tuple[str, ...] = ()
    frame_shift: float = DEFAULT_FRAME_SHIFT
    workers: int = 1
    batch_pairs: int = DEFAULT_BATCH_PAIRS

    def __post_init__(self) -> None:
        unknown = [kind for kind in self.also if kind not in OUTPUT_KINDS]
        if unknown:
            raise CorpusError(f"--also {', '.join(unknown)}: expected {', '.join(OUTPUT_KINDS)}")

    def plan(self) -> list[CorpusInput]:
        """This job's inputs (:func:`plan_inputs`); with ``lattices`` asked for, none may write
        its lattices over its own results file."""
        planned = plan_inputs(self.inputs, self.job, self.num_jobs)
        if "lattices" in self.also:
            for item in planned:
                if _lattice_name(item) == item.results(".").name:
                    raise CorpusError(f"{item.spec}: its rescored lattices would be written over its results "
                                      f"({item.results('.').name}); rename the input")
        return planned

    def done_before(self, item: CorpusInput) -> InputOutcome | None:
        """``item``'s outcome as its results file records it when it is done and not to be redone
        (``force``), else None: the one test of "skip it" every engine makes."""
        results = item.results(self.out_dir)
        return None if self.force or not results.exists() else recorded_outcome(item, results)

    @property
    def summary_path(self) -> Path:
        """``DIR/summary.json``, or ``DIR/summary.JOB.json`` for one of several jobs."""
        name = "summary.json" if self.num_jobs == 1 else f"summary.{self.job}.json"
        return Path(self.out_dir) / name


def _lattice_name(item: CorpusInput) -> str:
    """The rescored lattices' name in the output directory: the input's file name (a directory: its name)."""
    path = Path(item.spec)
    return item.name if path.is_dir() else path.name


@dataclass(frozen=True)
class InputOutcome:
    """What became of one input: ``status`` ``done`` (written now), ``skipped`` (done before) or
    ``failed`` (unreadable: nothing written, ``error`` says why); ``lattices`` rescored or
    recorded, ``failures`` the lattices recorded with an error (``{"key", "error"}``),
    ``seconds`` spent on it, ``peak_rss_mib`` of the process that did it, ``warnings`` it gave."""

    name: str
    spec: str
    status: str
    lattices: int = 0
    failures: tuple[dict[str, str], ...] = ()
    seconds: float = 0.0
    error: str | None = None
    peak_rss_mib: float = 0.0
    warnings: tuple[str, ...] = ()


def peak_rss_mib() -> float:
    """This process's peak resident memory in MiB (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class InputRescorer:
    """A corpus job's worker: loads the model once (:class:`afp.rescore_job.LoadedSetup`), then
    :meth:`run` rescores one input into its files. One serves the local job and each Ray worker."""

    def __init__(self, job: CorpusJob) -> None:
        from afp.rescore_job import LoadedSetup

        from afp.outputs import JobOutputs

        self.job = job
        # the workers start once the job's inputs have brought more than 4 lattices per worker
        self.ready = LoadedSetup(job.setup, return_lattice="lattices" in job.also, workers=job.workers,
                                 batch_pairs=job.batch_pairs)
        # outputs that cannot be written for these options (--also ctm with several LM weights...)
        # fail the job now, not every input one by one
        JobOutputs(self._output_options(CorpusInput("input", "input"), Path(job.out_dir)), input_format=job.format,
                   lm_weights=self.ready.options.lm_weights, symbols=self.ready.symbols)

    def run(self, item: CorpusInput) -> InputOutcome:
        """Rescore ``item`` and move its files into the output directory when whole; skip it when
        its results exist (unless ``force``). Never raises for the input's sake: an input that
        cannot be read or written is a ``failed`` outcome naming the error."""
        done = self.job.done_before(item)
        if done is not None:
            return done
        out_dir = Path(self.job.out_dir)
        started = time.perf_counter()
        warnings: list[str] = []
        staging = out_dir / PARTIAL_DIR / f"{item.name}.{uuid.uuid4().hex[:12]}"
        try:
            _remove_stale(out_dir / PARTIAL_DIR, item.name)
            staging.mkdir(parents=True)
            failures, lattices = self._rescore(item, staging, warnings.append)
            _commit(staging, out_dir, self._targets(item, staging))
        except Exception as err:  # noqa: BLE001 - this input fails, the job goes on and names it
            shutil.rmtree(staging, ignore_errors=True)
            return InputOutcome(item.name, item.spec, "failed", seconds=time.perf_counter() - started,
                                error=_describe(err), peak_rss_mib=peak_rss_mib(), warnings=tuple(warnings))
        return InputOutcome(item.name, item.spec, "done", lattices=lattices, failures=tuple(failures),
                            seconds=time.perf_counter() - started, peak_rss_mib=peak_rss_mib(),
                            warnings=tuple(warnings))

    def _rescore(self, item: CorpusInput, staging: Path, warn: Callable[[str], None]
                 ) -> tuple[list[dict[str, str]], int]:
        from afp.jobs import Failure, iter_lattices
        from afp.outputs import JobOutputs

        job, ready = self.job, self.ready
        options = self._output_options(item, staging)
        failures: list[dict[str, str]] = []
        keys: set[str] = set()

        def failed(failure: Failure) -> None:
            failures.append(failure.to_json())
            keys.add(failure.key)

        with open(staging / "results.jsonl", "w", encoding="utf-8") as stream:
            outputs = JobOutputs(options, input_format=job.format, lm_weights=ready.options.lm_weights,
                                 symbols=ready.symbols, results_to=stream)
            with outputs:
                def unreadable(key: str, err: Exception) -> None:
                    failure = Failure(key, str(err))
                    outputs.failed(failure)
                    failed(failure)

                lattices = iter_lattices([item.spec], job.format, ready.symbols, on_error=unreadable)
                ready.rescore_into(_counting(lattices, keys), outputs, warn=warn, on_failure=failed)
        return failures, len(keys)

    def _output_options(self, item: CorpusInput, staging: Path) -> Any:
        """The :class:`afp.outputs.OutputOptions` of an input written in ``staging``: its results as JSON
        lines, and what ``also`` asks for."""
        from afp.outputs import OutputOptions

        also = set(self.job.also)
        return OutputOptions(out=str(staging / _lattice_name(item)) if "lattices" in also else None,
                             nbest_text=str(staging / "nbest.text") if "nbest-text" in also else None,
                             text_dir=str(staging / "text") if "text" in also else None,
                             ctm=str(staging / "ctm") if "ctm" in also else None,
                             frame_shift=self.job.frame_shift, json=True)

    def _targets(self, item: CorpusInput, staging: Path) -> list[tuple[Path, str]]:
        """``(staged path, final name)`` of every file of the input, the results last."""
        targets: list[tuple[Path, str]] = []
        if "lattices" in self.job.also:
            targets.append((staging / _lattice_name(item), _lattice_name(item)))
        if "text" in self.job.also:
            weights = sorted((staging / "text").iterdir())
            for sub in weights:
                targets.append((sub / "text", f"{item.name}.text" if len(weights) == 1
                                else f"{item.name}.{sub.name}.text"))
        if "ctm" in self.job.also:
            targets.append((staging / "ctm", f"{item.name}.ctm"))
        if "nbest-text" in self.job.also:
            targets.append((staging / "nbest.text", f"{item.name}.nbest.text"))
        targets.append((staging / "results.jsonl", item.results(".").name))
        return targets


def _counting(lattices: Iterable[Any], keys: set[str]) -> Iterable[Any]:
    for lattice in lattices:
        keys.add(lattice.key)
        yield lattice


def _describe(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return text if isinstance(err, (ValueError, OSError)) else f"{type(err).__name__}: {text}"


def _remove_stale(partial: Path, name: str) -> None:
    """Remove what an earlier, killed attempt at input ``name`` left in ``DIR/.partial``."""
    if partial.is_dir():
        for stale in partial.glob(f"{name}.*"):
            if stale.name.rsplit(".", 1)[0] == name:
                shutil.rmtree(stale, ignore_errors=True)


def _commit(staging: Path, out_dir: Path, targets: list[tuple[Path, str]]) -> None:
    """Move the staged files into ``out_dir`` (each by a rename, the results last), then remove
    the staging folder (and ``.partial`` when it is empty)."""
    for staged, name in targets:
        final = out_dir / name
        if staged.is_dir() and final.exists():  # a directory of lattice files left by a killed commit or --force
            shutil.rmtree(final)
        os.replace(staged, final)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.parent.rmdir()
    except OSError:
        pass  # other inputs are being written


def recorded_outcome(item: CorpusInput, results: Path) -> InputOutcome:
    """A skipped input as its results file records it (lattices, failures)."""
    keys: set[str] = set()
    failures = []
    with open(results, encoding="utf-8") as lines:
        for line in lines:
            if not line.strip():
                continue
            record = json.loads(line)
            keys.add(record.get("key"))
            if "error" in record:
                failures.append({"key": record.get("key"), "error": record["error"]})
    return InputOutcome(item.name, item.spec, "skipped", lattices=len(keys), failures=tuple(failures))


@dataclass
class CorpusSummary:
    """What a corpus job did (written as ``summary.json``): inputs ``done`` now, ``skipped``
    (done before) and ``failed``; lattices rescored now; every failure, of a lattice or of an input."""

    engine: str
    job: int
    num_jobs: int
    outcomes: list[InputOutcome] = field(default_factory=list)
    seconds: float = 0.0
    retried: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def lattices(self) -> int:
        """Lattices rescored (or recorded as failed) by this run."""
        return sum(o.lattices for o in self.outcomes if o.status == "done")

    @property
    def failures(self) -> list[dict[str, str | None]]:
        """Every failure known to this job: lattices recorded with an error (this run's or a
        skipped input's) and inputs that could not be read."""
        out: list[dict[str, str | None]] = []
        for o in self.outcomes:
            out.extend({"input": o.spec, "key": f["key"], "error": f["error"]} for f in o.failures)
            if o.status == "failed":
                out.append({"input": o.spec, "key": None, "error": o.error})
        return out

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_json(self, job: CorpusJob, options: Any = None, model: str | None = None) -> dict[str, Any]:
        lattices = self.lattices
        done = [o for o in self.outcomes if o.status == "done"]
        return {"engine": self.engine, "job": self.job, "num_jobs": self.num_jobs, "out_dir": job.out_dir,
                "inputs": len(self.outcomes), "done": len(done), "skipped": self.count("skipped"),
                "failed": self.count("failed"), "lattices": lattices,
                "lattices_failed": sum(1 for f in self.failures if f["key"] is not None),
                "seconds": round(self.seconds, 3),
                "lattices_per_second": round(lattices / self.seconds, 3) if self.seconds > 0 else None,
                "input_seconds": round(sum(o.seconds for o in done), 3),
                "peak_rss_mib": round(max((o.peak_rss_mib for o in self.outcomes), default=0.0), 1),
                "retried": self.retried, "failures": self.failures, **self.extra,
                "model": model, "options": _jsonable(options), "also": list(job.also), "force": job.force,
                "workers": job.workers}

    def failure_message(self) -> str:
        """One line naming what failed (for the command's error)."""
        lattices = [f for f in self.failures if f["key"] is not None]
        inputs = [f for f in self.failures if f["key"] is None]
        parts = []
        if lattices:
            named = ", ".join(f"{f['key']} ({f['input']})" for f in lattices[:5])
            parts.append(f"{len(lattices)} lattice(s) failed and are recorded with their reason: {named}"
                         + (" ..." if len(lattices) > 5 else ""))
        if inputs:
            named = "; ".join(f"{f['input']}: {f['error']}" for f in inputs[:3])
            parts.append(f"{len(inputs)} input(s) could not be read and were not written (run again to retry): "
                         f"{named}" + (" ..." if len(inputs) > 3 else ""))
        return "; ".join(parts)


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.loads(json.dumps(value, default=str))


def write_summary(job: CorpusJob, summary: CorpusSummary, options: Any, model: str | None) -> dict[str, Any]:
    """Write ``summary.json`` (atomically) and return it (``model`` None: the bundled default's path)."""
    from afp.defaults import default_model_dir

    record = summary.to_json(job, options, model or str(default_model_dir()))
    path = job.summary_path
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    temporary.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(temporary, path)
    return record


class Progress:
    """A line on ``stream`` per finished input: inputs and lattices done, lattices/s, ETA."""

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total, self.stream, self.enabled = total, stream, enabled
        self.started = time.perf_counter()
        self.finished = self.worked = self.lattices = 0
        self.warned: set[str] = set()

    def warn(self, text: str) -> None:
        """Print a warning once per job (the workers give theirs with each input)."""
        if text not in self.warned:
            self.warned.add(text)
            print(f"afp: warning: {text}", file=self.stream or sys.stderr, flush=True)

    def say(self, text: str) -> None:
        if self.enabled:
            print(f"afp: {text}", file=self.stream or sys.stderr, flush=True)

    def update(self, outcome: InputOutcome) -> None:
        self.finished += 1
        for text in outcome.warnings:
            self.warn(text)
        if outcome.status == "skipped":
            if self.enabled:
                self.say(f"[{self.finished}/{self.total}] {outcome.name}: done before, skipped")
            return
        self.worked += 1
        self.lattices += outcome.lattices
        elapsed = time.perf_counter() - self.started
        left = self.total - self.finished
        eta = elapsed / self.worked * left if self.worked else 0.0
        what = (f"{outcome.lattices} lattices in {outcome.seconds:.1f} s"
                + (f", {len(outcome.failures)} failed" if outcome.failures else "")
                if outcome.status == "done" else f"FAILED: {outcome.error}")
        self.say(f"[{self.finished}/{self.total}] {outcome.name}: {what} | {self.lattices} lattices, "
                 f"{self.lattices / elapsed if elapsed > 0 else 0.0:.2f} lattices/s, "
                 f"ETA {time.strftime('%H:%M:%S', time.gmtime(eta))}")


def run_corpus_job(job: CorpusJob, show_progress: bool = True) -> tuple[CorpusSummary, dict[str, Any]]:
    """Run ``job`` in this process, input after input, and write its summary; returns the
    summary and its JSON record. The model is loaded only when some input is still to do.
    ``show_progress``: a line per input on standard error (:class:`Progress`)."""
    started = time.perf_counter()
    planned = job.plan()
    progress = Progress(len(planned), enabled=show_progress)
    summary = CorpusSummary("local", job.job, job.num_jobs)
    rescorer: InputRescorer | None = None
    try:
        for item in planned:
            outcome = job.done_before(item)
            if outcome is None:
                if rescorer is None:
                    rescorer = InputRescorer(job)
                outcome = rescorer.run(item)
            summary.outcomes.append(outcome)
            progress.update(outcome)
    finally:
        if rescorer is not None:
            rescorer.ready.close()  # the worker processes, if any
    summary.seconds = time.perf_counter() - started
    options = rescorer.ready.options if rescorer is not None else None
    return summary, write_summary(job, summary, options, job.setup.model.model)
