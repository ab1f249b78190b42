"""Dynamic batching of LM scoring work across concurrent requests (Triton-style).

Request handlers run in worker threads and call :meth:`BatchingScorer.score` as if they had the
model to themselves. With batching on, each call is queued; one batching thread takes the first
waiting call, then keeps collecting calls for up to ``max_wait`` seconds or until ``max_pairs``
(context, word) pairs are gathered, runs the model once on all of them, and hands every caller
its own slice of the result. With batching off, calls take turns on the model one at a time.
Either way the event loop never waits on the model.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from lattices.scorer import ContextScorer


@dataclass
class _Work:
    contexts: Tensor
    lengths: Tensor
    targets: Tensor
    target_context: Tensor
    future: Future = field(default_factory=Future)


class BatcherClosed(RuntimeError):
    """The batcher was shut down while work was waiting."""


class BatchingScorer:
    """A :class:`~lattices.scorer.ContextScorer` that merges concurrent calls into one model call.

    Args:
      inner: the scorer that owns the model.
      enabled: merge calls (True) or serialize them (False).
      max_wait: seconds to wait for more work after the first call of a batch.
      max_pairs: stop collecting once this many pairs are in the batch.
      on_batch: called with ``(requests, pairs)`` of every model call (for metrics).
    """

    def __init__(self, inner: ContextScorer, enabled: bool = True, max_wait: float = 0.002,
                 max_pairs: int = 262_144, on_batch: Callable[[int, int], None] | None = None) -> None:
        self.inner = inner
        self.context_size, self.bos_id, self.eos_id = inner.context_size, inner.bos_id, inner.eos_id
        self.enabled, self.max_wait, self.max_pairs = enabled, max_wait, max_pairs
        self.on_batch = on_batch
        self._model_lock = threading.Lock()
        self._queue: queue.Queue[_Work | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        if enabled:
            self._thread = threading.Thread(target=self._loop, name="afp-batcher", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ ContextScorer
    def word_ids(self, words: Sequence[str]) -> Tensor:
        return self.inner.word_ids(words)

    def known(self, words: Sequence[str]) -> Tensor:
        return self.inner.known(words)

    def score(self, contexts: Tensor, lengths: Tensor, targets: Tensor, target_context: Tensor) -> Tensor:
        if targets.shape[0] == 0:
            return torch.zeros(0)
        if not self.enabled:
            with self._model_lock:
                result = self.inner.score(contexts, lengths, targets, target_context)
            self._report(1, int(targets.shape[0]))
            return result
        work = _Work(contexts.cpu(), lengths.cpu(), targets.cpu(), target_context.cpu())
        if self._thread is None or not self._thread.is_alive():
            raise BatcherClosed("the scoring batcher is not running")
        self._queue.put(work)
        return work.future.result()

    # ------------------------------------------------------------------ batching thread
    def close(self, timeout: float = 10.0) -> None:
        """Finish the queued work, then stop the batching thread."""
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, pairs = [first], int(first.targets.shape[0])
            deadline = time.monotonic() + self.max_wait
            stop = False
            while pairs < self.max_pairs:
                remaining = deadline - time.monotonic()
                try:
                    item = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
                pairs += int(item.targets.shape[0])
            self._run(batch)
            if stop:
                self._drain()
                return

    def _drain(self) -> None:
        leftover = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                leftover.append(item)
        if leftover:
            self._run(leftover)

    def _run(self, batch: list[_Work]) -> None:
        try:
            results = self._score_merged(batch)
        except Exception as err:  # hand the failure to every waiting caller, keep the thread alive
            for work in batch:
                work.future.set_exception(err)
            return
        for work, result in zip(batch, results):
            work.future.set_result(result)

    def _score_merged(self, batch: list[_Work]) -> list[Tensor]:
        width = max(int(w.contexts.shape[1]) for w in batch)
        contexts = torch.cat([F.pad(w.contexts, (width - w.contexts.shape[1], 0)) for w in batch])
        offsets = torch.tensor([0] + [int(w.contexts.shape[0]) for w in batch[:-1]]).cumsum(0)
        target_context = torch.cat([w.target_context + int(off) for w, off in zip(batch, offsets)])
        lengths = torch.cat([w.lengths for w in batch])
        targets = torch.cat([w.targets for w in batch])
        with self._model_lock:
            merged = self.inner.score(contexts, lengths, targets, target_context).cpu()
        self._report(len(batch), int(targets.shape[0]))
        return list(torch.split(merged, [int(w.targets.shape[0]) for w in batch]))

    def _report(self, requests: int, pairs: int) -> None:
        if self.on_batch is not None:
            self.on_batch(requests, pairs)
