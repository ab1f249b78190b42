"""The dynamic batcher's guarantees, with fake scorers (no model, no timing sleeps): failures
stay with their caller, close never strands a caller, expired work is not scored, and one model
call never goes past ``max_pairs``."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
import torch
from torch import Tensor

from afp.batching import BatcherClosed, BatchingScorer, ScoringTimeout, _Work

BAD = 999  # a target id the fake scorer refuses


class FakeScorer:
    """Scores ``target + contexts[row].sum() / 1000`` (so rows and offsets matter), records every
    call, raises on a :data:`BAD` target, and optionally runs out of memory above ``oom_above``
    pairs or blocks its first call until ``gate`` is set."""

    context_size, bos_id, eos_id, unk_id = 2, 1, 2, 3

    def __init__(self, oom: BaseException | None = None, oom_above: int = 0,
                 gate: threading.Event | None = None) -> None:
        self.oom, self.oom_above, self.gate = oom, oom_above, gate
        self.entered = threading.Event()
        self.seen: list[list[int]] = []

    def word_ids(self, words: Sequence[str]) -> Tensor:
        return torch.zeros(len(words), dtype=torch.int64)

    def known(self, words: Sequence[str]) -> Tensor:
        return torch.ones(len(words), dtype=torch.bool)

    def score(self, contexts: Tensor, lengths: Tensor, targets: Tensor, target_context: Tensor) -> Tensor:
        self.seen.append(targets.tolist())
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(10)
        if self.oom is not None and targets.shape[0] > self.oom_above:
            raise self.oom
        if (targets == BAD).any():
            raise ValueError("bad target")
        return targets.double() + contexts[target_context].sum(1).double() / 1000


def job(first: int, pairs: int = 2, width: int = 2) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Scoring work of ``pairs`` targets ``first, first+1, ...`` over two contexts."""
    contexts = torch.arange(10 * first, 10 * first + 2 * width).reshape(2, width)
    return contexts, torch.full((2,), width), torch.arange(first, first + pairs), torch.arange(pairs) % 2


def run_threads(batcher: BatchingScorer, jobs: list[tuple[Tensor, ...]], **kwargs: float) -> list[object]:
    """Call ``batcher.score`` on every job from its own thread; each result or exception."""
    outcomes: list[object] = [None] * len(jobs)

    def call(i: int) -> None:
        try:
            outcomes[i] = batcher.score(*jobs[i], **kwargs)
        except Exception as err:  # the test looks at it
            outcomes[i] = err

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    return outcomes


def test_one_failing_item_fails_only_its_caller():
    inner = FakeScorer()
    jobs = [job(3), job(BAD), job(7, width=1)]
    calls: list[tuple[int, int]] = []
    # max_pairs = all three jobs: the batch closes exactly when all three are in, whatever the order
    batcher = BatchingScorer(inner, max_wait=10.0, max_pairs=6, on_batch=lambda r, p: calls.append((r, p)))
    try:
        outcomes = run_threads(batcher, jobs)
    finally:
        batcher.close()
    assert sorted(len(s) for s in inner.seen) == [2, 2, 2, 6]  # one merged try, then each alone
    assert isinstance(outcomes[1], ValueError)
    for i in (0, 2):
        assert torch.equal(outcomes[i], FakeScorer().score(*jobs[i]))
    assert sorted(calls) == [(1, 2), (1, 2)]  # only the calls that succeeded are reported


@pytest.mark.parametrize("oom", [torch.cuda.OutOfMemoryError("CUDA out of memory"),
                                 RuntimeError("DefaultCPUAllocator: out of memory"), MemoryError()])
def test_out_of_memory_on_the_merged_call_falls_back_to_items_alone(oom):
    inner = FakeScorer(oom=oom, oom_above=2)
    jobs = [job(3), job(5), job(7)]
    batcher = BatchingScorer(inner, max_wait=10.0, max_pairs=6)
    try:
        outcomes = run_threads(batcher, jobs)
    finally:
        batcher.close()
    assert sorted(len(s) for s in inner.seen) == [2, 2, 2, 6]
    for j, out in zip(jobs, outcomes):
        assert torch.equal(out, FakeScorer().score(*j))


def test_an_item_alone_that_runs_out_of_memory_fails_only_its_caller():
    inner = FakeScorer(oom=MemoryError(), oom_above=2)
    jobs = [job(3), job(5, pairs=4)]
    batcher = BatchingScorer(inner, max_wait=10.0, max_pairs=6)
    try:
        outcomes = run_threads(batcher, jobs)
    finally:
        batcher.close()
    assert torch.equal(outcomes[0], FakeScorer().score(*jobs[0]))
    assert isinstance(outcomes[1], MemoryError)


@pytest.mark.parametrize("enabled", [True, False])
def test_score_after_close_raises_at_once(enabled):
    batcher = BatchingScorer(FakeScorer(), enabled=enabled)
    assert torch.equal(batcher.score(*job(3)), FakeScorer().score(*job(3)))
    batcher.close()
    batcher.close()  # twice is fine
    with pytest.raises(BatcherClosed):
        batcher.score(*job(3))


def test_close_racing_with_many_puts_never_strands_a_caller():
    """Whatever the interleaving, every caller gets its own scores or BatcherClosed, the model
    scores exactly the work of the callers that get scores (refused work is never scored, accepted
    work never refused), and at least ``head_start`` callers (those done before close) are scored;
    close before any call refuses all, close after all calls refuses none."""
    jobs = [job(i) for i in range(8)]
    expected = [FakeScorer().score(*j) for j in jobs]
    for attempt in range(300):
        inner = FakeScorer()
        batcher = BatchingScorer(inner, max_wait=0.0)
        start, lock, finished, early = threading.Barrier(9), threading.Lock(), [0], threading.Event()
        outcomes: list[object] = [None] * 8
        head_start = attempt % 8  # close once this many callers are done: the others race with it

        def call(i: int) -> None:
            start.wait()
            try:
                outcomes[i] = batcher.score(*jobs[i])
            except BatcherClosed as err:
                outcomes[i] = err
            with lock:
                finished[0] += 1
                if finished[0] >= head_start:
                    early.set()

        def close() -> None:
            start.wait()
            if head_start:
                assert early.wait(10)
            batcher.close()

        threads = [threading.Thread(target=call, args=(i,)) for i in range(8)] + [threading.Thread(target=close)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads)
        scored = [i for i, out in enumerate(outcomes) if not isinstance(out, BatcherClosed)]
        assert len(scored) >= head_start
        for i in scored:
            assert isinstance(outcomes[i], Tensor) and torch.equal(outcomes[i], expected[i])
        assert sorted(t for call in inner.seen for t in call) == sorted(t for i in scored for t in jobs[i][2].tolist())
        with pytest.raises(BatcherClosed):  # and after close, at once
            batcher.score(*jobs[0])
    for close_first in (True, False):  # the two ends, in order by construction
        inner = FakeScorer()
        batcher = BatchingScorer(inner, max_wait=0.0)
        if close_first:
            batcher.close()
        outcomes = run_threads(batcher, jobs)
        batcher.close()
        if close_first:
            assert all(isinstance(out, BatcherClosed) for out in outcomes) and inner.seen == []
        else:
            assert all(torch.equal(out, e) for out, e in zip(outcomes, expected))
            assert sorted(t for call in inner.seen for t in call) == sorted(t for j in jobs for t in j[2].tolist())


def test_a_caller_whose_timeout_runs_out_is_not_scored():
    gate = threading.Event()
    inner = FakeScorer(gate=gate)
    batcher = BatchingScorer(inner, max_wait=0.0)
    try:
        first: list[object] = []
        holder = threading.Thread(target=lambda: first.append(batcher.score(*job(3))))
        holder.start()
        assert inner.entered.wait(10)  # the model is busy with the first job
        with pytest.raises(ScoringTimeout):
            batcher.score(*job(50), timeout=0.0)
        late = run_threads(batcher, [job(60), job(70)], timeout=0.001)  # they give up while the model is busy
        assert all(isinstance(out, ScoringTimeout) for out in late)
        gate.set()
        holder.join(10)
        assert not holder.is_alive() and torch.equal(first[0], FakeScorer().score(*job(3)))
        assert torch.equal(batcher.score(*job(5)), FakeScorer().score(*job(5)))
    finally:
        gate.set()
        batcher.close()
    assert inner.seen == [[3, 4], [5, 6]]


def test_work_past_its_deadline_is_dropped_before_the_model_call():
    inner = FakeScorer()
    batcher = BatchingScorer(inner, enabled=False)
    expired, live = _Work(*job(50), deadline=time.monotonic() - 1), _Work(*job(3))
    batcher._run([expired, live])
    assert inner.seen == [[3, 4]]
    assert isinstance(expired.future.exception(), ScoringTimeout)
    assert torch.equal(live.future.result(), FakeScorer().score(*job(3)))


@pytest.mark.parametrize("enabled", [True, False])
def test_an_item_over_max_pairs_is_scored_alone_in_exact_chunks(enabled):
    inner = FakeScorer()
    calls: list[tuple[int, int]] = []
    batcher = BatchingScorer(inner, enabled=enabled, max_wait=0.0, max_pairs=4,
                             on_batch=lambda r, p: calls.append((r, p)))
    contexts = torch.tensor([[0, 5], [6, 7], [0, 9]])
    targets = torch.arange(100, 110)
    owner = torch.tensor([2, 0, 1, 1, 2, 0, 0, 2, 1, 2])
    try:
        out = batcher.score(contexts, torch.tensor([1, 2, 1]), targets, owner)
    finally:
        batcher.close()
    assert torch.equal(out, FakeScorer().score(contexts, torch.tensor([1, 2, 1]), targets, owner))
    assert calls == [(1, 4), (1, 4), (1, 2)]
    assert all(len(s) <= 4 for s in inner.seen)


def test_a_merged_batch_never_goes_past_max_pairs():
    gate = threading.Event()
    inner = FakeScorer(gate=gate)
    batcher = BatchingScorer(inner, max_wait=0.0, max_pairs=4)
    try:
        holder = threading.Thread(target=batcher.score, args=job(1, pairs=1))
        holder.start()
        assert inner.entered.wait(10)  # the model is busy: the next two jobs queue up
        waiting = threading.Thread(target=run_threads, args=(batcher, [job(3, pairs=3), job(5, pairs=3)]))
        waiting.start()
        give_up = time.monotonic() + 10
        while batcher._queue.qsize() < 2 and time.monotonic() < give_up:
            time.sleep(0.001)  # not timing: waits until both jobs are queued
        gate.set()
        holder.join(10)
        waiting.join(10)
        assert not holder.is_alive() and not waiting.is_alive()
    finally:
        gate.set()
        batcher.close()
    assert [len(s) for s in inner.seen] == [1, 3, 3]  # 3 + 3 would pass the cap of 4


def test_a_request_view_scores_until_its_deadline():
    gate = threading.Event()
    inner = FakeScorer(gate=gate)
    batcher = BatchingScorer(inner, max_wait=0.0)
    try:
        assert batcher.until(None) is batcher
        view = batcher.until(time.monotonic() + 3600)
        assert view.context_size == 2 and torch.equal(view.word_ids(["a"]), inner.word_ids(["a"]))
        first: list[object] = []
        holder = threading.Thread(target=lambda: first.append(view.score(*job(3))))
        holder.start()
        assert inner.entered.wait(10)  # the model is busy with the first request's work
        with pytest.raises(ScoringTimeout):  # a request whose deadline has passed waits for nothing
            batcher.until(time.monotonic() - 1).score(*job(50))
        gate.set()
        holder.join(10)
        assert not holder.is_alive() and torch.equal(first[0], FakeScorer().score(*job(3)))
    finally:
        gate.set()
        batcher.close()
    assert inner.seen == [[3, 4]]
