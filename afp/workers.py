"""Every core from one command: lattices rescored in worker processes.

Python holds one core per process for its own work, so threads do not multiply a lattice's
reading, reduction, expansion and scoring on a CPU: processes do. A :class:`LatticePool` starts
``workers`` processes; each loads the job's model once, by the one loading path every door uses
(:class:`afp.rescore_job.LoadedSetup` from the job's :class:`~afp.rescore_job.RescoreSetup`), and
takes whole lattices as they free up. The caller keeps reading the inputs and writing the
results, in input order, each exactly once::

    with LatticePool(setup, workers=4) as pool:
        for outcome in pool.map("rescore", lattices):   # list[RescoreResult] or Failure, in order
            ...

Lattices and results travel pickled. At most ``2 * workers`` lattices are read ahead of the one
being yielded, so memory stays bounded however long the job.

A worker that dies while it holds a lattice (killed, out of memory) costs that lattice only: a
fresh worker takes its place (:class:`afp.processes.ProcessPool`), the lattice is tried once
more, and if its worker dies again it is a :class:`afp.jobs.Failure` naming the exit; the other
lattices go on.

Each pair's score depends on its own context only, and each worker runs the same code on one
thread as the caller would, so the results are those of ``workers=1``.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from afp.rescore_job import LoadedSetup, RescoreSetup

__all__ = ["AUTO", "LatticePool", "LostLattice", "available_cores", "parse_workers"]

#: ``--workers auto``: as many workers as the cores this process may use
AUTO = "auto"
#: tries of a lattice whose worker died (the first and one more)
TRIES = 2
#: what the fork server imports once for the workers (torch and the rescoring code)
PRELOAD = ("afp.workers", "afp.rescore_job", "lattices.rescore", "lm.checkpoint", "afp.mixtures")


class LostLattice(RuntimeError):
    """A worker process died twice on the same lattice of a task that has no failure record
    (``score``: tuning needs every lattice); the message names the lattice and the exit."""


def available_cores() -> int:
    """The cores this process may use: its CPU affinity (a cpuset counts), less where a cgroup's
    CPU quota (``docker --cpus``, a Kubernetes limit) allows fewer, rounded up."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(cores, quota) if quota else cores)


def _cgroup_quota(path: str = "/sys/fs/cgroup/cpu.max") -> int | None:
    """A cgroup v2 CPU limit ``QUOTA PERIOD`` as whole cores (rounded up); None without one."""
    import math

    try:
        with open(path, encoding="ascii") as stream:
            quota, period = stream.read().split()[:2]
        return None if quota == "max" else max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        return None


def parse_workers(value: int | str, flag: str = "--workers") -> int:
    """``auto`` -> :func:`available_cores`; a positive integer (or its text) -> itself; anything
    else a :class:`ValueError` naming ``flag``, the value and what it takes."""
    given = value
    if isinstance(value, str):
        if value.strip().lower() == AUTO:
            return available_cores()
        value = int(value) if value.strip().isdigit() else -1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{flag} {given!r}: expected a positive integer or 'auto' (the cores this process may "
                         f"use: {available_cores()})")
    return value


# ----------------------------------------------------------------------------- in the worker
_READY: LoadedSetup | None = None
_FAULT = ""


def _start_worker(setup: RescoreSetup, return_lattice: bool, fault: str) -> None:
    """A worker's initializer: one torch thread (the pool is the parallelism), the job's setup
    loaded once by the one loading path."""
    import torch

    from afp.rescore_job import LoadedSetup

    torch.set_num_threads(1)
    global _READY, _FAULT
    _READY = LoadedSetup(setup, return_lattice=return_lattice)
    _FAULT = fault


def _rescore(ready: LoadedSetup, lattice: Any) -> Any:
    return ready.rescore_one(lattice)


def _score(ready: LoadedSetup, lattice: Any) -> Any:
    return ready.score_one(lattice)


#: what a worker can do with a lattice: ``rescore`` (list[RescoreResult] or Failure, as
#: :func:`afp.jobs.rescore_all`) and ``score`` (a ScoredLattice, :func:`lattices.rescore.score_for_options`)
TASKS: dict[str, Callable[[Any, Any], Any]] = {"rescore": _rescore, "score": _score}


def _run(task: str, lattice: Any) -> Any:
    assert _READY is not None, "worker not initialized"
    if _FAULT:
        _inject_fault(_FAULT, getattr(lattice, "key", None))
    return TASKS[task](_READY, lattice)


#: for tests of a worker's death, read when a pool starts: ``KEY`` makes the worker that takes
#: lattice ``KEY`` kill itself (SIGKILL), every time; ``KEY@PATH`` only while the file ``PATH``
#: does not exist (it is made first, so the retry succeeds)
FAULT_ENV = "AFP_TEST_WORKER_FAULT"


def _inject_fault(spec: str, key: str | None) -> None:
    import signal

    wanted, _, marker = spec.partition("@")
    if key != wanted:
        return
    if marker:
        try:
            open(marker, "x").close()
        except FileExistsError:
            return
    os.kill(os.getpid(), signal.SIGKILL)


# ----------------------------------------------------------------------------- in the caller
class LatticePool:
    """``workers`` processes, each with ``setup`` loaded once (``return_lattice``: results carry
    the rescored lattice, for outputs that write it). Use it as a context manager, or
    :meth:`close` it; :meth:`map` may be called many times (a corpus job's inputs)."""

    def __init__(self, setup: RescoreSetup, workers: int, return_lattice: bool = False) -> None:
        from afp.processes import ProcessPool

        self.workers = workers
        self._pool = ProcessPool(workers, _start_worker, (setup, return_lattice, os.environ.get(FAULT_ENV, "")),
                                 preload=PRELOAD)

    def __enter__(self) -> LatticePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers (after the last :meth:`map`)."""
        self._pool.close(wait_for_tasks=False)

    def map(self, task: str, lattices: Iterable[Any],
            on_death: Callable[[Any, str], Any] | None = None) -> Iterator[Any]:
        """``TASKS[task]`` of every lattice, in input order, ``2 * workers`` read ahead at most.

        A lattice whose worker died :data:`TRIES` times gives ``on_death(lattice, reason)``
        (``rescore``: a Failure), or raises :class:`LostLattice` without ``on_death``. An exception
        raised in a worker is raised here, as it would be in one process."""
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
        pending: deque[tuple[Any, Any]] = deque()
        try:
            for lattice in lattices:
                pending.append((lattice, self._pool.submit(_run, task, lattice)))
                if len(pending) >= 2 * self.workers:
                    yield self._result(task, *pending.popleft(), on_death)
            while pending:
                yield self._result(task, *pending.popleft(), on_death)
        finally:  # stopped early (an error, or the consumer went away): drop what has not started
            for _, future in pending:
                future.cancel()

    def _result(self, task: str, lattice: Any, future: Any, on_death: Callable[[Any, str], Any] | None) -> Any:
        from afp.processes import WorkerDied, exit_text

        for attempt in range(1, TRIES + 1):
            try:
                return future.result()
            except WorkerDied as err:
                reason = (f"the worker process rescoring it died ({exit_text(err.exitcode)}), "
                          f"{attempt} time{'s' if attempt > 1 else ''}")
                if attempt < TRIES:
                    future = self._pool.submit(_run, task, lattice)
        if on_death is None:
            raise LostLattice(f"{getattr(lattice, 'key', 'a lattice')}: {reason}")
        return on_death(lattice, reason)
