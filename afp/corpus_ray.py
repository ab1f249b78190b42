"""A corpus job on a Ray cluster: ``afp rescore --ray ADDRESS --out-dir DIR INPUT...``.

The same job as :func:`afp.corpus.run_corpus_job`, the same files: each Ray worker is an actor
holding one :class:`afp.corpus.InputRescorer` (the model loaded once per worker) and writing
its inputs' files itself, each atomically (:mod:`afp.corpus`), so the output directory must be
one that every node sees (a shared file system), and so must the inputs and the model.

Scheduling: the driver hands each worker one input at a time (its path, never lattices: Ray's
object store would hold every lattice as a large Python object) and the next as soon as it is
free, so a slow archive delays no one else. A worker that dies (its process, or its node) loses
only the input it held: that input goes back to the front of the queue and a new worker is
started in its place (Ray puts it wherever resources are free; with none free, the others go
on). An input whose workers died ``max_attempts`` times is recorded as failed. Ray Data's writers
are not used: they give no exactly-once output per input, and the results file is this job's
record of what is done.

Ray is an optional extra (from a clone, ``.venv/bin/pip install -e '.[ray]'``; ``make install`` has it); without it :func:`run_on_ray`
raises :class:`RayMissing` at once.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from afp.corpus import (CorpusError, CorpusInput, CorpusJob, CorpusSummary, InputOutcome, InputRescorer, Progress,
                        write_summary)

__all__ = ["RayMissing", "RayOptions", "run_on_ray"]


class RayMissing(CorpusError):
    """``--ray`` without Ray installed."""


@dataclass(frozen=True)
class RayOptions:
    """Where and how: ``address`` (``auto``: the cluster this machine belongs to, or
    ``HOST:PORT``, ``ray://HOST:PORT``), ``workers`` actors, each with ``cpus`` CPUs and
    ``gpus`` GPUs (fractions share a GPU), ``threads`` torch threads in each, ``max_attempts``
    per input, and ``start_timeout`` seconds to wait with no worker alive before giving up."""

    address: str = "auto"
    workers: int = 2
    cpus: float = 1.0
    gpus: float = 0.0
    threads: int = 1
    max_attempts: int = 3
    start_timeout: float = 600.0

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise CorpusError(f"--ray-workers {self.workers}: need at least 1")
        if self.cpus < 0 or self.gpus < 0:
            raise CorpusError("--ray-cpus-per-worker and --ray-gpus-per-worker must be >= 0")
        if self.max_attempts < 1:
            raise CorpusError("the attempts per input must be at least 1")


class _Worker:
    """A Ray actor: loads the model once, then rescores the inputs it is given."""

    def __init__(self, job: CorpusJob, threads: int) -> None:
        import dataclasses

        import torch

        torch.set_num_threads(threads)
        self.rescorer = InputRescorer(dataclasses.replace(job, workers=1))  # Ray's workers are the parallelism

    def ready(self) -> str:
        """The node this worker runs on (answered once the model is loaded)."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def run(self, item: CorpusInput) -> InputOutcome:
        return self.rescorer.run(item)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayMissing("--ray needs Ray, an optional extra: from a clone, .venv/bin/pip install -e '.[ray]' "
                         "(make install has it)") from None
    return ray


def run_on_ray(job: CorpusJob, options: RayOptions, show_progress: bool = True
               ) -> tuple[CorpusSummary, dict[str, Any]]:
    """Run ``job`` on the Ray cluster at ``options.address`` and write its summary (as
    :func:`afp.corpus.run_corpus_job`, with ``retried`` naming inputs whose worker died and
    ``ray_overhead_seconds_per_input``: each input's time at the driver less its time in the worker)."""
    ray = _import_ray()
    from ray.exceptions import RayActorError, RayTaskError

    started = time.perf_counter()
    given = {item.name: item.spec for item in job.plan()}  # the summary names inputs as they were given
    planned = [CorpusInput(str(Path(spec).resolve()), name) for name, spec in given.items()]
    job = _absolute(job)
    progress = Progress(len(planned), enabled=show_progress)
    summary = CorpusSummary("ray", job.job, job.num_jobs)
    todo: deque[CorpusInput] = deque()
    for item in planned:  # inputs done before are recorded here: no worker is started for them
        outcome = job.done_before(item)
        if outcome is not None:
            summary.outcomes.append(outcome)
            progress.update(outcome)
        else:
            todo.append(item)
    overheads: list[float] = []
    if todo:
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        with contextlib.redirect_stdout(sys.stderr):  # Ray's own notices (a raylet died...): stdout is the summary's
            ray.init(address=options.address, log_to_driver=False, logging_level="ERROR", configure_logging=False)
            try:
                _schedule(ray, RayActorError, RayTaskError, job, options, todo, summary, progress, overheads)
            finally:
                ray.shutdown()
    summary.outcomes = [replace(o, spec=given[o.name]) for o in summary.outcomes]
    summary.seconds = time.perf_counter() - started
    summary.extra = {"ray_workers": options.workers, "ray_cpus_per_worker": options.cpus,
                     "ray_gpus_per_worker": options.gpus,
                     "ray_overhead_seconds_per_input": round(sum(overheads) / len(overheads), 4) if overheads else None}
    return summary, write_summary(job, summary, None, job.setup.model.model)


def _schedule(ray: Any, actor_error: type, task_error: type, job: CorpusJob, options: RayOptions,
              todo: deque[CorpusInput], summary: CorpusSummary, progress: Progress, overheads: list[float]) -> None:
    """Hand the inputs out one at a time to whichever worker is free until all are done."""
    remote = ray.remote(num_cpus=options.cpus, num_gpus=options.gpus, max_restarts=0, max_task_retries=0)(_Worker)
    starting: dict[Any, Any] = {}  # ready() ref -> actor
    running: dict[Any, tuple[Any, CorpusInput, float]] = {}  # run() ref -> (actor, input, submitted at)
    idle: list[Any] = []
    attempts: dict[str, int] = {}
    alive_since = time.monotonic()

    def start() -> None:
        actor = remote.remote(job, options.threads)
        starting[actor.ready.remote()] = actor

    for _ in range(min(options.workers, len(todo))):
        start()
    while todo or running:
        while idle and todo:
            actor, item = idle.pop(), todo.popleft()
            running[actor.run.remote(item)] = (actor, item, time.perf_counter())
        waiting = [*starting, *running]
        done, _ = ray.wait(waiting, num_returns=1, timeout=5.0)
        if not done:
            if not running and not idle and time.monotonic() - alive_since > options.start_timeout:
                raise CorpusError(f"no Ray worker could start in {options.start_timeout:g} s (each asks for "
                                  f"{options.cpus:g} CPU and {options.gpus:g} GPU: does the cluster have them?)")
            continue
        ref = done[0]
        if ref in starting:
            actor = starting.pop(ref)
            try:
                node = ray.get(ref)
            except actor_error as err:
                if getattr(err, "actor_init_failed", False):
                    raise CorpusError(f"a Ray worker could not load the model: {_cause(err)}") from None
                progress.say(f"ray: a worker died while starting ({_cause(err)}); starting another")
                start()
                continue
            idle.append(actor)
            alive_since = time.monotonic()
            progress.say(f"ray: worker ready on node {node[:12]} "
                         f"({len(idle) + len({a for a, _, _ in running.values()})} ready)")
            continue
        actor, item, submitted = running.pop(ref)
        try:
            outcome = ray.get(ref)
        except actor_error as err:  # the worker or its node died: only this input is lost
            attempts[item.name] = attempts.get(item.name, 0) + 1
            ray.kill(actor, no_restart=True)
            if attempts[item.name] < options.max_attempts:
                summary.retried.append(item.name)
                todo.appendleft(item)
                progress.say(f"ray: the worker rescoring {item.name} died ({_cause(err)}); it goes back to the queue")
            else:
                outcome = InputOutcome(item.name, item.spec, "failed",
                                       error=f"its Ray workers died {attempts[item.name]} times: {_cause(err)}")
                summary.outcomes.append(outcome)
                progress.update(outcome)
            start()
            continue
        except task_error as err:  # InputRescorer.run does not raise for an input: a bug, named
            outcome = InputOutcome(item.name, item.spec, "failed", error=f"the worker raised: {_cause(err)}")
        else:
            overheads.append(max(0.0, time.perf_counter() - submitted - outcome.seconds))
        idle.append(actor)
        alive_since = time.monotonic()
        summary.outcomes.append(outcome)
        progress.update(outcome)
    for actor in [*idle, *starting.values()]:
        ray.kill(actor, no_restart=True)


def _absolute(job: CorpusJob) -> CorpusJob:
    """``job`` with every path absolute: a Ray worker does not run in the driver's folder."""
    def path(text: str | None) -> str | None:
        return str(Path(text).resolve()) if text else text

    def after(text: str, sep: str, last: bool) -> str:  # "MODEL:W" (the path before the last ':'), "NAME=DIR"
        head, mark, tail = text.rpartition(sep) if last else text.partition(sep)
        return f"{path(head)}{mark}{tail}" if last and mark else f"{head}{mark}{path(tail)}" if mark else text

    setup = job.setup
    model = replace(setup.model, model=path(setup.model.model),
                    interpolate=tuple(after(t, ":", True) for t in setup.model.interpolate))
    setup = replace(setup, model=model, words=path(setup.words), old_lm=path(setup.old_lm),
                    weights=path(setup.weights), features=tuple(after(t, "=", False) for t in setup.features))
    return replace(job, setup=setup, out_dir=str(Path(job.out_dir).resolve()),
                   inputs=tuple(str(Path(spec).resolve()) for spec in job.inputs))


def _cause(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:300] if text else type(err).__name__
