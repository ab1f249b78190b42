"""Worker processes (afp.workers): the same results as one process, in order, each lattice once,
a worker's death costing only its lattice, and ``--workers`` values checked."""

from __future__ import annotations

import json
import os

import pytest

from afp.compare import compare_answers
from afp.jobs import Failure
from afp.rescore_job import LoadedSetup, RescoreSetup
from afp.scoring import ModelSpec
from afp.workers import FAULT_ENV, available_cores, parse_workers
from service.cli import main
from tests.factories import random_lattice, saved_model

VOLATILE = {"seconds", "timing"}
KEYS = [f"lat{i:02d}" for i in range(10)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return saved_model(tmp_path_factory.mktemp("w") / "model", cell="gru", mode="afp", rho=2)


def lattices():
    return [random_lattice(i, num_states=7, extra_arcs=6, key=key) for i, key in enumerate(KEYS)]


def answers(outcomes) -> list:
    return [o.to_json() if isinstance(o, Failure) else [r.to_json() for r in o] for o in outcomes]


def run(model_dir, workers: int) -> list:
    setup = RescoreSetup(model=ModelSpec(model=str(model_dir), device="cpu"), options={"nbest": 3})
    with LoadedSetup(setup, workers=workers, processes_from=0) as ready:
        assert ready.uses_processes == (workers > 1)
        return answers(ready.outcomes(lattices()))


@pytest.fixture(scope="module")
def one_process(model_dir):
    return run(model_dir, 1)


def test_processes_give_one_process_results_bit_for_bit_in_order(model_dir, one_process):
    got = run(model_dir, 3)
    found = compare_answers(one_process, got, ignore=VOLATILE)
    assert found.same and found.largest == 0.0, found.difference
    assert [o[0]["key"] for o in got] == KEYS


def test_a_worker_killed_once_has_its_lattice_retried(model_dir, one_process, tmp_path, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, f"lat04@{tmp_path / 'killed-once'}")
    got = run(model_dir, 2)
    assert (tmp_path / "killed-once").exists()  # the worker that took lat04 did kill itself
    found = compare_answers(one_process, got, ignore=VOLATILE)
    assert found.same and found.largest == 0.0, found.difference


def test_a_lattice_whose_worker_dies_twice_is_a_failure_and_nothing_else_is_lost(model_dir, one_process, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "lat07")
    got = run(model_dir, 2)
    assert got[7] == {"key": "lat07", "error": "the worker process rescoring it died (signal SIGKILL), 2 times"}
    rest = [o for i, o in enumerate(got) if i != 7]
    expected = [o for i, o in enumerate(one_process) if i != 7]
    found = compare_answers(expected, rest, ignore=VOLATILE)
    assert found.same and found.largest == 0.0, found.difference


def test_the_command_reports_the_lost_lattice_and_writes_the_rest_once(model_dir, tmp_path, capsys, monkeypatch):
    from lattices.formats import write_lattices

    archive = tmp_path / "lats.txt"
    archive.write_bytes(write_lattices(lattices(), "kaldi"))
    monkeypatch.setenv(FAULT_ENV, "lat02")
    assert main(["rescore", "--model", str(model_dir), "--workers", "2", "--json", str(archive)]) == 2
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert [line["key"] for line in lines] == KEYS and "error" in lines[2]
    assert "lat02" not in [line["key"] for line in lines if "error" not in line]
    assert "1 of 10 lattice(s) could not be rescored" in captured.err and "signal SIGKILL" in captured.err


def test_tune_scores_its_dev_set_in_workers_with_the_same_report(model_dir, tmp_path, capsys):
    from lattices.formats import write_lattices

    archive = tmp_path / "dev.txt"
    archive.write_bytes(write_lattices(lattices(), "kaldi"))
    refs = tmp_path / "refs.txt"
    refs.write_text("".join(f"{key} the cat sat\n" for key in KEYS))
    reports = []
    for workers in ("1", "2"):
        assert main(["tune", "--model", str(model_dir), "--refs", str(refs), "--folds", "2", "--restarts", "1",
                     "--workers", workers, "--json", str(archive)]) == 0
        reports.append(json.loads(capsys.readouterr().out))
    found = compare_answers(reports[0], reports[1], ignore=VOLATILE | {"evaluations_per_second"})
    assert found.same and found.largest == 0.0, found.difference


def test_a_small_job_is_done_in_this_process_and_the_workers_start_once_its_inputs_bring_more(model_dir,
                                                                                                one_process):
    """Starting workers costs a model load: the first processes_from lattices of a job never do,
    counted over its inputs (a corpus job's small files), and the workers start for the input that
    brings more."""
    setup = RescoreSetup(model=ModelSpec(model=str(model_dir), device="cpu"), options={"nbest": 3})
    with LoadedSetup(setup, workers=2) as ready:
        assert ready.processes_from == 8
        got = answers(ready.outcomes(lattices()[:5])) + answers(ready.outcomes(lattices()[5:8]))
        assert ready._pool is None
        got += answers(ready.outcomes(lattices()[8:10]))  # 10 > 8: this input goes to the workers
        assert ready._pool is not None
        found = compare_answers(one_process[:10], got, ignore=VOLATILE)
        assert found.same and found.largest == 0.0, found.difference


def test_workers_values():
    assert parse_workers("auto") == available_cores() == len(os.sched_getaffinity(0))
    assert parse_workers("3") == parse_workers(3) == 3
    for bad in ("0", "-1", "two", "", 0, True):
        with pytest.raises(ValueError, match="expected a positive integer or 'auto'"):
            parse_workers(bad)
