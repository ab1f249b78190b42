"""Dynamic batching of LM scoring work across concurrent requests (Triton-style).

Request handlers run in worker threads and call :meth:`BatchingScorer.score` as if they had the
model to themselves. With batching on, each call is queued; one batching thread takes the first
waiting call, then keeps collecting calls for up to ``max_wait`` seconds or until ``max_pairs``
(context, word) pairs are gathered, runs the model once on all of them, and hands every caller
its own slice of the result. With batching off, calls take turns on the model one at a time.
Either way the event loop never waits on the model.

Guarantees:

- **Failures stay with their caller.** When a merged model call raises (a bad item, or running
  out of memory: ``torch.cuda.OutOfMemoryError``, a ``RuntimeError`` saying "out of memory",
  ``MemoryError``), every item of it is scored again on its own, so only the failing item's
  caller gets the exception and the others get exactly what scoring alone gives.
- **No caller waits forever.** ``score`` and ``close`` are atomic with respect to each other: a
  ``score`` after ``close`` raises :class:`BatcherClosed` at once, and every item accepted
  before ``close`` is scored (or failed with :class:`BatcherClosed` when the batching thread
  cannot finish in ``close``'s timeout). ``score(..., timeout=...)`` bounds a caller's wait; an
  item whose time ran out is dropped before it is scored and its caller gets :class:`ScoringTimeout`.
- **Bounded model calls.** ``max_pairs`` caps one model call (the ``batch_max_pairs`` setting):
  a merged batch never goes past it, and a single call with more pairs is scored on its own in
  chunks of at most ``max_pairs`` targets (each chunk with just the contexts it uses). Every
  pair's score depends only on its own context, so chunked results are exact.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from lattices.ops import DeadlineExceeded
from lattices.scorer import ContextScorer, ForwardingScorer


#: the most (context, word) pairs one merged model call gets (``--batch-pairs``, ``AFP_BATCH_MAX_PAIRS``)
DEFAULT_BATCH_PAIRS = 262_144


@dataclass
class _Work:
    """One caller's scoring work (see :meth:`ContextScorer.score` for the tensors), its deadline
    (``time.monotonic()`` seconds, None: none) and the future its caller waits on."""

    contexts: Tensor
    lengths: Tensor
    targets: Tensor
    target_context: Tensor
    deadline: float | None = None
    future: Future[Tensor] = field(default_factory=Future)

    @property
    def pairs(self) -> int:
        return int(self.targets.shape[0])


class BatcherClosed(RuntimeError):
    """The batcher was shut down before this work could be scored."""


class ScoringTimeout(DeadlineExceeded):
    """The caller's timeout ran out before its work was scored."""


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` says the model ran out of (GPU or host) memory."""
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (isinstance(err, MemoryError) or (oom is not None and isinstance(err, oom))
            or (isinstance(err, RuntimeError) and "out of memory" in str(err)))


class BatchingScorer(ForwardingScorer):
    """A :class:`~lattices.scorer.ContextScorer` that merges concurrent calls into one model call.

    Args:
      inner: the scorer that owns the model.
      enabled: merge calls (True) or serialize them (False).
      max_wait: seconds to wait for more work after the first call of a batch.
      max_pairs: the most (context, word) pairs one model call gets; a call with more is scored
        alone in chunks of this many (see the module docstring).
      on_batch: called with ``(requests, pairs)`` of every model call (for metrics).
    """

    def __init__(self, inner: ContextScorer, enabled: bool = True, max_wait: float = 0.002,
                 max_pairs: int = DEFAULT_BATCH_PAIRS, on_batch: Callable[[int, int], None] | None = None) -> None:
        if max_pairs < 1:
            raise ValueError(f"max_pairs must be positive, got {max_pairs}")
        super().__init__(inner)
        self.enabled, self.max_wait, self.max_pairs = enabled, max_wait, max_pairs
        self.on_batch = on_batch
        self._model_lock = threading.Lock()
        self._state_lock = threading.Lock()  # makes score's put and close atomic with each other
        self._closed = False
        self._queue: queue.Queue[_Work | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        if enabled:
            self._thread = threading.Thread(target=self._loop, name="afp-batcher", daemon=True)
            self._thread.start()

    def until(self, deadline: float | None) -> ContextScorer:
        """This batcher as one request sees it: every :meth:`score` call waits at most until
        ``deadline`` (``time.monotonic()`` seconds; None: no limit), and work still queued then is
        dropped (:class:`ScoringTimeout`)."""
        return self if deadline is None else _Until(self, deadline)

    # ------------------------------------------------------------------ ContextScorer
    def score(self, contexts: Tensor, lengths: Tensor, targets: Tensor, target_context: Tensor,
              timeout: float | None = None) -> Tensor:
        """:meth:`ContextScorer.score`, merged with concurrent calls.

        Args:
          timeout: the most seconds to wait (None: no limit). Raises :class:`ScoringTimeout` when
            it runs out; the work is then dropped unless the model is already scoring it.
        Raises:
          BatcherClosed: the batcher is closed (or closed before this work was scored).
        """
        if targets.shape[0] == 0:
            return torch.zeros(0)
        deadline = None if timeout is None else time.monotonic() + timeout
        work = _Work(contexts, lengths, targets, target_context, deadline)  # on the caller's device
        if not self.enabled:
            return self._score_serial(work)
        with self._state_lock:
            if self._closed or self._thread is None or not self._thread.is_alive():
                raise BatcherClosed("the scoring batcher is closed")
            self._queue.put(work)
        try:
            return work.future.result(None if deadline is None else max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            if not work.future.cancel() and work.future.done() and work.future.exception() is not None:
                raise work.future.exception() from None  # type: ignore[misc]  # its own failure
            raise ScoringTimeout(f"LM scoring did not finish within {timeout} s") from None

    def _score_serial(self, work: _Work) -> Tensor:
        """Batching off: take a turn on the model (waiting at most until ``work.deadline``)."""
        if self._closed:
            raise BatcherClosed("the scoring batcher is closed")
        wait = -1.0 if work.deadline is None else max(0.0, work.deadline - time.monotonic())
        if not self._model_lock.acquire(timeout=wait):
            raise ScoringTimeout("LM scoring did not start before the timeout")
        try:
            return self._score_alone(work)
        finally:
            self._model_lock.release()

    # ------------------------------------------------------------------ batching thread
    def close(self, timeout: float = 10.0) -> None:
        """Refuse new work, finish the queued work, then stop the batching thread.

        Work still queued after ``timeout`` seconds (the thread is stuck in a model call) fails
        with :class:`BatcherClosed`. Safe to call more than once.
        """
        with self._state_lock:
            first = not self._closed
            self._closed = True
            if first and self._thread is not None:
                self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self._fail_queued()
                self._queue.put(None)  # the thread still stops once its model call returns

    def _loop(self) -> None:
        try:
            carry: _Work | None = None  # collected but over the cap: first of the next batch
            while True:
                first = carry if carry is not None else self._queue.get()
                carry = None
                if first is None:
                    return
                batch, pairs, stop = [first], first.pairs, False
                deadline = time.monotonic() + self.max_wait
                while pairs < self.max_pairs:
                    remaining = deadline - time.monotonic()
                    try:
                        item = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is None:
                        stop = True
                        break
                    if pairs + item.pairs > self.max_pairs:
                        carry = item
                        break
                    batch.append(item)
                    pairs += item.pairs
                with self._model_lock:
                    self._run(batch)
                if stop:
                    return
        finally:  # however the thread ends, nothing queued is left waiting
            with self._state_lock:
                self._closed = True
            self._fail_queued()

    def _fail_queued(self) -> None:
        """Fail every item still in the queue with :class:`BatcherClosed`."""
        while True:
            try:
                work = self._queue.get_nowait()
            except queue.Empty:
                return
            if work is not None and work.future.set_running_or_notify_cancel():
                work.future.set_exception(BatcherClosed("the scoring batcher closed before this work was scored"))

    def _run(self, batch: list[_Work]) -> None:
        """Score a collected batch (holding the model lock) and settle every caller's future.

        Items whose caller gave up or whose deadline passed are dropped first. If the merged call
        raises, each item is scored alone so a failure reaches only its own caller.
        """
        now, live = time.monotonic(), []
        for work in batch:
            if not work.future.set_running_or_notify_cancel():
                continue  # the caller timed out and cancelled it
            if work.deadline is not None and now > work.deadline:
                work.future.set_exception(ScoringTimeout("LM scoring did not start before the timeout"))
            else:
                live.append(work)
        if len(live) > 1:
            try:
                results = self._call(live)
            except Exception as err:  # a bad item or out of memory: fall back to items alone
                if is_out_of_memory(err):
                    _free_cached_memory()
            else:
                for work, result in zip(live, results):
                    work.future.set_result(result)
                return
        for work in live:
            try:
                work.future.set_result(self._score_alone(work))
            except Exception as err:  # this caller's own failure; keep the thread alive
                if is_out_of_memory(err):
                    _free_cached_memory()
                work.future.set_exception(err)

    def _score_alone(self, work: _Work) -> Tensor:
        """One item's scores, in chunks of at most ``max_pairs`` targets (exact: each target's
        score depends only on its own context). The caller holds the model lock."""
        if work.pairs <= self.max_pairs:
            return self._call([work])[0]
        parts = []
        for start in range(0, work.pairs, self.max_pairs):
            stop = min(start + self.max_pairs, work.pairs)
            rows, owner = torch.unique(work.target_context[start:stop], return_inverse=True)
            part = _Work(work.contexts[rows], work.lengths[rows], work.targets[start:stop], owner)
            parts.append(self._call([part])[0])
        return torch.cat(parts)

    def _call(self, batch: list[_Work]) -> list[Tensor]:
        """One model call on the merged items; each item's scores, on the device its caller's
        tensors are on. The items are merged on the model's device (the inner scorer's
        ``device``, else the first item's): work that is already there is never copied to the
        host and back. The caller holds the model lock."""
        device = getattr(self.inner, "device", None) or batch[0].contexts.device
        width = max(int(w.contexts.shape[1]) for w in batch)
        contexts = torch.cat([F.pad(w.contexts.to(device), (width - w.contexts.shape[1], 0)) for w in batch])
        offsets = [0, *torch.tensor([int(w.contexts.shape[0]) for w in batch[:-1]]).cumsum(0).tolist()]
        target_context = torch.cat([w.target_context.to(device) + off for w, off in zip(batch, offsets)])
        lengths = torch.cat([w.lengths.to(device) for w in batch])
        targets = torch.cat([w.targets.to(device) for w in batch])
        merged = self.inner.score(contexts, lengths, targets, target_context)
        self._report(len(batch), int(targets.shape[0]))
        return [part.to(w.contexts.device) for w, part in zip(batch, torch.split(merged, [w.pairs for w in batch]))]

    def _report(self, requests: int, pairs: int) -> None:
        if self.on_batch is not None:
            self.on_batch(requests, pairs)


def _free_cached_memory() -> None:
    """Give cached GPU blocks back after running out of memory, before trying smaller calls."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class _Until(ForwardingScorer):
    """:meth:`BatchingScorer.until`: the batcher as a :class:`~lattices.scorer.ContextScorer`
    (every member forwarded), with a deadline on every score call."""

    inner: BatchingScorer

    def __init__(self, batcher: BatchingScorer, deadline: float) -> None:
        super().__init__(batcher)
        self._deadline = deadline

    def score(self, contexts: Tensor, lengths: Tensor, targets: Tensor, target_context: Tensor) -> Tensor:
        timeout = max(0.0, self._deadline - time.monotonic())
        return self.inner.score(contexts, lengths, targets, target_context, timeout=timeout)
