"""FastAPI dependencies: the runtime, the bearer-token check, running work off the event loop."""

from __future__ import annotations

import functools
import secrets
import threading
import time
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import anyio
from fastapi import Depends, Request

from lattices.ops import DeadlineExceeded
from service.engine import Runtime
from service.errors import APIError

T = TypeVar("T")


def get_runtime(request: Request) -> Runtime:
    runtime = getattr(request.app.state, "runtime", None)
    if runtime is None:
        raise APIError(503, "not_ready", "the model is not loaded yet")
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def require_token(request: Request) -> None:
    """With ``AFP_AUTH_TOKEN`` set, the request needs ``Authorization: Bearer <token>``."""
    token = request.app.state.settings.auth_token
    if not token:
        return
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), token.encode()):
        raise APIError(401, "unauthorized", "missing or wrong bearer token")


class _Slot:
    """One worker slot of a request, held from before its thread starts until the thread's work
    has stopped, not until the request is answered: a request answered 503 at its timeout keeps
    its slot while its thread runs on to its next deadline check, so timed-out work can never
    pile up beyond ``workers`` threads.

    States: ``waiting`` (slot taken, thread not started), ``running``, ``done``, ``abandoned``
    (the request gave up before the thread started: the thread, if it starts, does nothing).
    Whoever moves the slot out of ``waiting``/``running`` last gives it back, once.
    """

    def __init__(self, limiter: anyio.CapacityLimiter) -> None:
        self._limiter, self._lock, self._state = limiter, threading.Lock(), "waiting"

    def run(self, work: Callable[[], T]) -> T:
        """In the worker thread: do ``work`` unless the request was abandoned; give the slot back after."""
        with self._lock:
            if self._state == "abandoned":
                raise DeadlineExceeded("the request was given up before its work started")
            self._state = "running"
        try:
            return work()
        finally:
            with self._lock:
                self._state = "done"
            try:
                anyio.from_thread.run_sync(self._limiter.release_on_behalf_of, self)
            except RuntimeError:  # the event loop is gone (shutdown): nothing waits for the slot
                pass

    def leave(self) -> None:
        """On the event loop, when the request stops waiting: give the slot back if no thread has it."""
        with self._lock:
            if self._state != "waiting":
                return  # running: the thread gives it back when its work stops; done: it already did
            self._state = "abandoned"
        self._limiter.release_on_behalf_of(self)


async def in_worker(runtime: Runtime, limiter: anyio.CapacityLimiter, fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args, deadline=...)`` in a worker thread under the request timeout (with worker
    processes, :mod:`service.pool`, the thread hands it to a free one and waits).

    ``fn`` gets the deadline (``time.monotonic()`` seconds) and checks it as it goes, so it stops
    by itself soon after; the request is answered 503 when the time runs out (waiting for a slot
    counts). The slot of ``limiter`` (``workers`` of them) stays taken until the thread's work has
    really stopped (:class:`_Slot`)."""
    timeout = runtime.settings.request_timeout_s
    deadline = time.monotonic() + timeout
    if runtime.pool is not None:  # a worker process does it; this thread waits for it
        work = functools.partial(runtime.pool.call, fn, args, runtime, deadline)
    else:
        work = functools.partial(runtime.tracked, fn, *args, deadline=deadline)
    with anyio.move_on_after(timeout) as scope:
        slot = _Slot(limiter)
        await limiter.acquire_on_behalf_of(slot)
        try:
            # the slot bounds the threads; anyio's default thread limiter (40) only has to admit them
            return await anyio.to_thread.run_sync(slot.run, work, abandon_on_cancel=True)
        finally:
            slot.leave()
    assert scope.cancelled_caught
    raise APIError(503, "timeout", f"the request took longer than {timeout} s")
