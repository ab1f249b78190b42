"""The process pool (afp.processes): results and errors come back, and a worker's death, idle or
busy, costs at most the task it held."""

from __future__ import annotations

import os
import signal
import time

import pytest

from afp.processes import ProcessPool, StartFailed, WorkerDied
from lattices.expand import ExpansionTooLarge

STARTED: list[int] = []


def square(x: int) -> int:
    return x * x


def too_large(key: str) -> None:
    raise ExpansionTooLarge(key, budget=10, reached=20, rho=3)  # a constructor unlike its args


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def sleep(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def refuse(text: str) -> None:
    raise ValueError(text)


@pytest.fixture(scope="module")
def pool():
    with_pool = ProcessPool(2)
    yield with_pool
    with_pool.close()


def test_results_and_errors_come_back(pool):
    assert [f.result(60) for f in [pool.submit(square, i) for i in range(20)]] == [i * i for i in range(20)]
    with pytest.raises(ExpansionTooLarge) as caught:
        pool.submit(too_large, "utt7").result(60)
    assert (caught.value.key, caught.value.budget, caught.value.reached) == ("utt7", 10, 20)
    assert "lattice 'utt7': expansion to order 4 exceeds the budget of 10 arcs" in str(caught.value)


def test_a_task_that_kills_its_worker_fails_alone(pool):
    futures = [pool.submit(square, 3), pool.submit(die), pool.submit(square, 4)]
    with pytest.raises(WorkerDied, match="signal SIGKILL") as caught:
        futures[1].result(60)
    assert caught.value.exitcode == -signal.SIGKILL
    assert futures[0].result(60) == 9 and futures[2].result(60) == 16
    assert pool.submit(square, 5).result(60) == 25


def test_an_idle_worker_killed_is_replaced(pool):
    pids = {pool.submit(sleep, 0.3).result(60) for _ in range(2)} | {pool.submit(os.getpid).result(60)}
    victim = next(iter(pids))
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:  # the pool finds the death when it next looks at its workers
        got = [pool.submit(os.getpid) for _ in range(4)]
        if all(f.result(60) != victim for f in got) or time.monotonic() > deadline:
            break
    assert all(f.result(60) != victim for f in got)
    assert [f.result(60) for f in [pool.submit(square, i) for i in range(6)]] == [i * i for i in range(6)]


def test_a_task_past_its_time_has_its_worker_replaced(pool):
    with pytest.raises(TimeoutError):
        pool.submit(sleep, 30, timeout=0.5).result(60)
    assert pool.submit(square, 6).result(60) == 36


def test_a_failing_initializer_fails_every_task_with_its_error():
    broken = ProcessPool(2, refuse, ("no model here",))
    try:
        with pytest.raises(StartFailed, match="ValueError: no model here"):
            broken.submit(square, 2).result(60)
    finally:
        broken.close()


def test_workers_that_die_while_starting_fail_the_tasks_instead_of_restarting_without_end():
    broken = ProcessPool(1, die)
    try:
        with pytest.raises(StartFailed, match="3 worker processes in a row died while starting .*signal SIGKILL"):
            broken.submit(square, 2).result(60)
    finally:
        broken.close()
