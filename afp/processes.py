"""A pool of worker processes that survives its workers: the one process pool of the CLI's
``--workers`` (:mod:`afp.workers`) and of the server's ``--processes`` (:mod:`service.pool`).

Why not a library pool: :class:`concurrent.futures.ProcessPoolExecutor` and loky break the whole
pool, and fail every task in it, when one worker dies; pebble's pool does the same when a worker
dies while it holds no task (an idle worker killed by the out-of-memory killer takes the server
down). Here each worker has a pipe of its own, so the pool knows which task a dead worker held:
that task's future gets :class:`WorkerDied`, a fresh worker takes the dead one's place, and every
other task goes on.

A task is a module-level function and its arguments, pickled (plain pickle: torch's reduction
would put every tensor in a shared-memory segment of its own), run in the first free worker;
its result, or the exception it raised, comes back through the task's
:class:`concurrent.futures.Future`. A task given a ``timeout`` that it overruns has its worker
killed and replaced, and its future gets :class:`TimeoutError`. Workers start by ``forkserver``
(torch's thread pools are not safe to fork from a process that has used them); each runs the
``initializer`` once (loading a model) before it takes a task, and a worker whose initializer
fails makes every task fail with its error instead of being restarted without end.
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing.connection import Connection, wait
from typing import Any

__all__ = ["ProcessPool", "StartFailed", "WorkerDied"]


class WorkerDied(RuntimeError):
    """The worker process running a task died (killed, out of memory); ``exitcode`` says how."""

    def __init__(self, exitcode: int | None) -> None:
        super().__init__(f"the worker process died ({exit_text(exitcode)})")
        self.exitcode = exitcode


class StartFailed(RuntimeError):
    """A worker's initializer failed; the message is its error. No task can run."""


def exit_text(code: int | None) -> str:
    """``signal SIGKILL`` for a negative exit code, ``exit code N`` otherwise."""
    if code is not None and code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


#: workers in a row that may die before they are ready before the pool gives up
START_TRIES = 3


def _dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _pack_error(err: BaseException) -> tuple[type, tuple, dict]:
    """An exception as its class, ``args`` and attributes: rebuilds exceptions whose constructors
    take other arguments than their ``args`` (pickle's own way calls ``cls(*args)``)."""
    try:
        packed = (type(err), err.args, dict(err.__dict__))
        pickle.loads(_dumps(packed))
        return packed
    except Exception:  # noqa: BLE001 - an error that does not pickle: its text
        return RuntimeError, (f"{type(err).__name__}: {err}\n{traceback.format_exc()}",), {}


def _unpack_error(cls: type, args: tuple, state: dict) -> BaseException:
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    return err


def _worker(conn: Connection, initializer: Callable[..., None] | None, initargs: tuple) -> None:
    """A worker's life: the initializer, ``ready``, then one task at a time until the pipe closes.
    Ctrl-C is the caller's to handle (it closes the pool): a worker ignores SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if initializer is not None:
            initializer(*initargs)
    except BaseException as err:  # noqa: BLE001 - told to the pool, which fails every task with it
        conn.send_bytes(_dumps(("start-failed", f"{type(err).__name__}: {err}")))
        return
    conn.send_bytes(_dumps(("ready", None)))
    while True:
        try:
            payload = conn.recv_bytes()
        except (EOFError, OSError):
            return
        conn.send_bytes(_dumps(("took", None)))  # from here on, the task is this worker's
        fn, args = pickle.loads(payload)
        try:
            reply = ("ok", fn(*args))
        except BaseException as err:  # noqa: BLE001 - raised again in the caller
            reply = ("error", _pack_error(err))
        try:
            conn.send_bytes(_dumps(reply))
        except Exception as err:  # noqa: BLE001 - a result that does not pickle
            conn.send_bytes(_dumps(("error", _pack_error(err))))


class _Slot:
    """One worker process: its pipe, and the task it holds (None: idle or starting)."""

    def __init__(self, process: Any, conn: Connection) -> None:
        self.process, self.conn = process, conn
        self.ready = False
        self.task: tuple[Future, float | None] | None = None
        self.payload: tuple[bytes, float | None] | None = None  # the task given, until the worker says it took it


class ProcessPool:
    """``workers`` processes running ``initializer(*initargs)`` once each, then tasks."""

    def __init__(self, workers: int, initializer: Callable[..., None] | None = None, initargs: tuple = (),
                 context: str = "forkserver", preload: tuple[str, ...] = ()) -> None:
        """``preload``: modules the fork server imports once, before it forks the first worker
        (each worker then starts with them, shared, instead of importing torch itself); only the
        first pool of a process starts the fork server, so only its list counts."""
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.workers = workers
        self._context = multiprocessing.get_context(context)
        if context == "forkserver" and preload:
            self._context.set_forkserver_preload(list(preload))
        self._initializer, self._initargs = initializer, initargs
        self._lock = threading.Lock()
        self._pending: deque[tuple[Future, bytes, float | None]] = deque()
        self._slots: list[_Slot] = []
        self._failed: str | None = None
        self._closing = False
        self._start_deaths = 0  # workers in a row that died before they were ready
        self._wake_r, self._wake_w = multiprocessing.Pipe(duplex=False)
        self._thread = threading.Thread(target=self._loop, name="afp-process-pool", daemon=True)
        for _ in range(workers):
            self._slots.append(self._start())
        self._thread.start()

    def _start(self) -> _Slot:
        ours, theirs = self._context.Pipe()
        process = self._context.Process(target=_worker, args=(theirs, self._initializer, self._initargs), daemon=True)
        process.start()
        theirs.close()
        return _Slot(process, ours)

    def submit(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Future:
        """Run ``fn(*args)`` in a free worker; ``timeout``: seconds from when it starts there."""
        future: Future = Future()
        with self._lock:
            if self._closing:
                raise RuntimeError("the pool is closed")
            if self._failed is not None:
                future.set_exception(StartFailed(self._failed))
                return future
            self._pending.append((future, _dumps((fn, args)), timeout))
        self._wake_w.send_bytes(b"")
        return future

    def close(self, wait_for_tasks: bool = True) -> None:
        """Stop taking tasks; with ``wait_for_tasks``, let the workers finish what was submitted,
        then stop them (their pipes closed; killed if they do not end within seconds)."""
        with self._lock:
            self._closing = True
            if not wait_for_tasks:
                for future, _, _ in self._pending:
                    future.cancel()
                self._pending.clear()
        self._wake_w.send_bytes(b"")
        self._thread.join()
        for slot in self._slots:
            slot.conn.close()
        for slot in self._slots:
            slot.process.join(5)
            if slot.process.is_alive():
                slot.process.kill()
                slot.process.join()

    # ------------------------------------------------------------------ the pool's thread
    def _loop(self) -> None:
        try:
            self._serve()
        except BaseException as err:  # noqa: BLE001 - a bug here must not leave callers waiting forever
            with self._lock:
                self._failed = f"the pool's thread failed: {type(err).__name__}: {err}"
                waiting = [future for future, _, _ in self._pending] + [s.task[0] for s in self._slots if s.task]
                self._pending.clear()
            for future in waiting:
                if not future.done():
                    future.set_exception(StartFailed(self._failed))
            raise

    def _serve(self) -> None:
        while True:
            with self._lock:
                busy = any(slot.task is not None for slot in self._slots)
                if self._closing and not busy and not self._pending:
                    return
            self._dispatch()
            waits = [slot.conn for slot in self._slots] + [slot.process.sentinel for slot in self._slots]
            deadlines = [slot.task[1] for slot in self._slots if slot.task is not None and slot.task[1] is not None]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            if self._wake_r in wait([*waits, self._wake_r], timeout):
                while self._wake_r.poll():  # every wake-up sent so far
                    self._wake_r.recv_bytes()
            for slot in list(self._slots):
                self._tend(slot)

    def _tend(self, slot: _Slot) -> None:
        """Take ``slot``'s message if it sent one; replace it if it died or overran its task's time."""
        try:
            while slot.conn.poll():
                self._receive(slot, pickle.loads(slot.conn.recv_bytes()))
        except (EOFError, OSError):
            pass
        died = not slot.process.is_alive()
        overran = slot.task is not None and slot.task[1] is not None and time.monotonic() > slot.task[1]
        if not (died or overran):
            return
        if overran and not died:
            slot.process.kill()
        slot.process.join()
        self._start_deaths = 0 if slot.ready else self._start_deaths + 1
        if self._start_deaths >= START_TRIES and self._failed is None:  # dying at start, again and again
            self._receive(slot, ("start-failed", f"{START_TRIES} worker processes in a row died while starting "
                                                 f"(the last: {exit_text(slot.process.exitcode)})"))
        if slot.task is not None and slot.payload is not None:  # given but never taken: it goes to another worker
            with self._lock:
                self._pending.appendleft((slot.task[0], *slot.payload))
        elif slot.task is not None:
            future, _ = slot.task
            future.set_exception(TimeoutError("the task ran past its time limit: its worker was stopped") if overran
                                 and not died else WorkerDied(slot.process.exitcode))
        slot.conn.close()
        index = self._slots.index(slot)
        with self._lock:
            replace = self._failed is None and (not self._closing or bool(self._pending))
        if replace:
            self._slots[index] = self._start()
        else:
            del self._slots[index]

    def _receive(self, slot: _Slot, message: tuple[str, Any]) -> None:
        kind, value = message
        if kind == "ready":
            slot.ready = True
        elif kind == "took":
            slot.payload = None
        elif kind == "start-failed":
            with self._lock:
                self._failed = value
                pending = list(self._pending)
                self._pending.clear()
            for future, _, _ in pending:
                future.set_exception(StartFailed(value))
        else:
            assert slot.task is not None, "a result from a worker that holds no task"
            future, _ = slot.task
            slot.task = None
            if kind == "ok":
                future.set_result(value)
            else:
                future.set_exception(_unpack_error(*value))

    def _dispatch(self) -> None:
        """Give pending tasks to idle, started workers."""
        for slot in self._slots:
            if not slot.ready or slot.task is not None:
                continue
            with self._lock:
                task = None
                while self._pending and task is None:
                    future, payload, timeout = self._pending.popleft()
                    if future.running() or future.set_running_or_notify_cancel():  # running: given back by a dead worker
                        task = future, payload, timeout
            if task is None:
                return
            future, payload, timeout = task
            slot.task = future, (time.monotonic() + timeout if timeout is not None else None)
            slot.payload = payload, timeout
            try:
                slot.conn.send_bytes(payload)
            except (BrokenPipeError, OSError):
                pass  # it died: _tend finds it and fails the task with WorkerDied

