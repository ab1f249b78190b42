"""The server on every core: request work in worker processes.

With ``processes > 1`` (``afp serve --processes N``, ``AFP_PROCESSES``) the app's process keeps
the event loop (connections, bodies, limits, metrics of requests) and hands each request's work,
the same function the one-process server runs in a thread (:func:`service.deps.in_worker`), to
one of N worker processes. Each worker loads the model once, by the server's one loading path
(:func:`service.app.load_runtime` from the same settings), and takes one request at a time, so a
request goes to whichever worker is free: connections kept alive by a few clients cannot pile
their work onto one process, as they would with one listening socket shared by whole servers.

The request's deadline travels with it: the worker stops its work past the deadline as a thread
would (503), and a worker that overruns it by :data:`GRACE_S` (stuck in one long call) is killed
and replaced, so no request holds a core beyond its time. A worker that dies (killed, out of
memory) costs the request it held, answered 503, and nothing else: a fresh worker takes its
place (:class:`afp.processes.ProcessPool`). Answers, errors included, are the one-process
server's: the work is the same code, and an error raised in a worker is raised again here,
attributes and all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from service.errors import APIError
from service.settings import Settings

T = TypeVar("T")
#: how long past its deadline a request's worker may run before it is killed and replaced
GRACE_S = 5.0


class _Runtime:
    """Stands for the worker's own runtime among a call's arguments."""


RUNTIME = _Runtime()
_WORKER: Any = None  # the runtime of this worker process


def _start(settings: Settings) -> None:
    import torch

    from service.app import load_runtime
    from service.metrics import Metrics

    torch.set_num_threads(1)
    global _WORKER
    _WORKER = load_runtime(settings, Metrics())


def _run(fn: Callable[..., Any], args: tuple[Any, ...], deadline: float) -> Any:
    """In a worker: ``fn(*args, deadline=deadline)`` with its runtime in place of :data:`RUNTIME`."""
    args = tuple(_WORKER if isinstance(arg, _Runtime) else arg for arg in args)
    return _WORKER.tracked(fn, *args, deadline=deadline)


class RequestPool:
    """``processes`` worker processes with ``settings``' runtime each."""

    def __init__(self, settings: Settings, processes: int) -> None:
        from afp.processes import ProcessPool

        self.processes = processes
        self._pool = ProcessPool(processes, _start, (settings,), preload=("service.pool", "service.app"))

    def call(self, fn: Callable[..., T], args: tuple[Any, ...], runtime: Any, deadline: float) -> T:
        """``fn(*args, deadline=deadline)`` in a free worker, ``runtime`` among ``args`` standing
        for the worker's own; blocks until it is done (run it off the event loop)."""
        from afp.processes import StartFailed, WorkerDied

        args = tuple(RUNTIME if arg is runtime else arg for arg in args)
        future = self._pool.submit(_run, fn, args, deadline,
                                   timeout=max(0.0, deadline - time.monotonic()) + GRACE_S)
        try:
            return future.result()
        except TimeoutError:
            raise APIError(503, "timeout", f"the request's work ran {GRACE_S:g} s past its deadline: its worker "
                                           f"process was stopped and replaced") from None
        except WorkerDied as err:
            raise APIError(503, "worker_died", f"{err} while doing this request; a new one takes its place: "
                                               f"send it again") from None
        except StartFailed as err:
            raise APIError(503, "not_ready", f"the worker processes cannot start: {err}") from None

    def close(self) -> None:
        """Let the workers finish what they hold, then stop them."""
        self._pool.close()
