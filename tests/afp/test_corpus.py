"""``afp rescore --out-dir``: a corpus job that resumes after a kill, splits like Kaldi's JOB arrays
and runs on a Ray cluster, with every lattice written exactly once and the same results as one
process (:mod:`afp.corpus`, :mod:`afp.corpus_ray`).

Jobs are stopped at a known place without timing: the inputs of a killed run are named pipes
(FIFOs), and the test feeds only the first few, so the job is blocked reading the next one when
it is killed.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from afp.compare import compare_answers
from afp.corpus import PARTIAL_DIR, CorpusError, plan_inputs
from lattices.formats import read_lattice_file, write_lattices
from service.cli import main
from tests.factories import random_lattice

REPO = Path(__file__).resolve().parents[2]
INPUTS = 24
PER_INPUT = 2
VOLATILE = {"seconds", "timing"}
BAD = "bad-utt\n0 1 the notanumber,3,\n1\n\n"


def archive_text(index: int) -> str:
    """Input ``index``'s Kaldi text archive: PER_INPUT random lattices with keys of their own."""
    lattices = [random_lattice(index * 100 + j, num_states=6, extra_arcs=5, key=f"in{index:02d}-utt{j}")
                for j in range(PER_INPUT)]
    return write_lattices(lattices, "kaldi").decode()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, model_dir):
    """The inputs as files and the one-process run's results (``afp rescore --out-dir``)."""
    root = tmp_path_factory.mktemp("corpus")
    files = root / "in"
    files.mkdir()
    texts = {f"lat.{i}.txt": archive_text(i) for i in range(1, INPUTS + 1)}
    for name, text in texts.items():
        (files / name).write_text(text)
    reference = root / "reference"
    assert main(["rescore", "--model", str(model_dir), "--out-dir", str(reference), "--quiet",
                 *[str(files / name) for name in texts]]) == 0
    return {"root": root, "texts": texts, "reference": reference, "model": model_dir,
            "inputs": [str(files / name) for name in texts]}


def results_of(out_dir: Path) -> dict[str, list[dict]]:
    """Every results file of ``out_dir`` by name, its JSON lines in order."""
    return {p.name: [json.loads(line) for line in p.read_text().splitlines()] for p in sorted(out_dir.glob("*.jsonl"))}


def assert_same_results(expected_dir: Path, got_dir: Path) -> None:
    """The same result files, each with the same keys and words and scores within the tolerance,
    every lattice exactly once, and no temporary file left."""
    expected, got = results_of(expected_dir), results_of(got_dir)
    assert sorted(got) == sorted(expected)
    for name in expected:
        found = compare_answers(expected[name], got[name], ignore=VOLATILE)
        assert found.same, (name, found.difference)
    keys = [line["key"] for lines in got.values() for line in lines]
    assert len(keys) == len(set(keys)) == INPUTS * PER_INPUT
    assert not (got_dir / PARTIAL_DIR).exists()
    assert not [p for p in got_dir.iterdir() if p.name.startswith(".")]


def afp_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "service.cli", *args]


def subprocess_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


class Feeder(threading.Thread):
    """Writes each named pipe's text once, when a reader has opened it, for the pipes let through
    (``allow``): the others keep their readers waiting."""

    def __init__(self, texts: dict[Path, str]) -> None:
        super().__init__(daemon=True)
        self.texts, self.allowed, self.fed = texts, set(), set()
        self.stopped = threading.Event()

    def allow(self, paths) -> None:
        self.allowed.update(paths)

    def run(self) -> None:
        while not self.stopped.is_set():
            for path in [p for p in self.texts if p in self.allowed and p not in self.fed]:
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                except OSError as err:
                    if err.errno == errno.ENXIO:  # no reader yet
                        continue
                    raise
                os.set_blocking(fd, True)
                with os.fdopen(fd, "wb") as pipe:
                    pipe.write(self.texts[path].encode())
                self.fed.add(path)
            self.stopped.wait(0.01)


def fifo_inputs(directory: Path, texts: dict[str, str]) -> dict[Path, str]:
    directory.mkdir()
    paths = {}
    for name, text in texts.items():
        os.mkfifo(directory / name)
        paths[directory / name] = text
    return paths


def wait_until(condition, what: str, limit: float = 180.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def make_regular(paths: dict[Path, str]) -> None:
    """The named pipes replaced by files of the same text (what a rerun reads)."""
    for path, text in paths.items():
        path.unlink()
        path.write_text(text)


def test_a_killed_run_is_finished_by_running_it_again(corpus, tmp_path):
    """The job and its worker processes (--workers 2) killed while an input is half done; the
    rerun does what is left, each input once, with the results of one process (the reference)."""
    fed_first, workers = 5, "2"
    pipes = fifo_inputs(tmp_path / "in", corpus["texts"])
    out = tmp_path / "out"
    feeder = Feeder(pipes)
    feeder.allow(list(pipes)[:fed_first])
    feeder.start()
    job = subprocess.Popen(afp_command("rescore", "--model", str(corpus["model"]), "--out-dir", str(out),
                                       "--workers", workers, *[str(p) for p in pipes]), cwd=REPO, env=subprocess_env(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # 5 results, and the 6th input being written aside (its staging folder made, its read blocked on
        # the pipe, which is not fed): between the two the job may be removing the empty .partial
        sixth = list(pipes)[fed_first].name
        wait_until(lambda: (len(list(out.glob("*.jsonl"))) == fed_first and any(out.glob(f"{PARTIAL_DIR}/{sixth}.*")))
                   or job.poll() is not None, "5 results and the 6th input's staging folder")
        assert job.poll() is None, job.stderr.read()
        job.send_signal(signal.SIGKILL)
        job.wait(timeout=60)
    finally:
        feeder.stopped.set()
        if job.poll() is None:
            job.kill()
        job.stderr.close()
    assert sorted(p.name for p in out.glob("*.jsonl")) == sorted(f"lat.{i}.txt.jsonl" for i in range(1, fed_first + 1))
    assert (out / PARTIAL_DIR).is_dir()  # the 6th input was being written aside when the job was killed
    make_regular(pipes)
    done = subprocess.run(afp_command("rescore", "--model", str(corpus["model"]), "--out-dir", str(out),
                                      "--workers", workers, *[str(p) for p in pipes]), cwd=REPO,
                          env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["skipped"], summary["done"], summary["failed"]) == (fed_first, INPUTS - fed_first, 0)
    assert summary["lattices"] == (INPUTS - fed_first) * PER_INPUT
    assert_same_results(corpus["reference"], out)


def test_out_dir_results_equal_plain_rescore_json_per_lattice(corpus, capsys):
    """Each input's --out-dir results file holds, line for line, what plain ``afp rescore --json`` prints
    for that input's lattices with the same model and options: the same keys, the same fields, the
    same words (best, n-best, first pass) and scores within the project's tolerance."""
    assert main(["rescore", "--model", str(corpus["model"]), "--json", *corpus["inputs"]]) == 0
    plain = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(plain) == INPUTS * PER_INPUT
    stored = results_of(corpus["reference"])
    assert sorted(stored) == sorted(f"{Path(spec).name}.jsonl" for spec in corpus["inputs"])
    for index, spec in enumerate(corpus["inputs"]):
        expected = plain[index * PER_INPUT:(index + 1) * PER_INPUT]  # --json prints the inputs in order
        got = stored[f"{Path(spec).name}.jsonl"]
        assert [line["key"] for line in got] == [line["key"] for line in expected] == [
            f"in{index + 1:02d}-utt{j}" for j in range(PER_INPUT)]
        for want, have in zip(expected, got):
            assert sorted(have) == sorted(want), (spec, want["key"])  # compare_answers skips fields one side lacks
            for part in ("best", "first_pass"):
                assert have[part]["words"] == want[part]["words"], (spec, want["key"], part)
            assert [h["words"] for h in have["nbest"]] == [h["words"] for h in want["nbest"]], (spec, want["key"])
        found = compare_answers(expected, got, ignore=VOLATILE)
        assert found.same, (spec, found.difference)


def test_kaldi_style_jobs_split_the_inputs_and_give_the_same_results(corpus, tmp_path, capsys):
    out = tmp_path / "out"
    taken = []
    for job in (1, 2, 3):
        assert main(["rescore", "--model", str(corpus["model"]), "--out-dir", str(out), "--quiet",
                     "--job", str(job), "--num-jobs", "3", *corpus["inputs"]]) == 0
        summary = json.loads((out / f"summary.{job}.json").read_text())
        assert summary["done"] == INPUTS // 3 and summary["failed"] == 0
        taken.append(set(results_of(out)) - {n for names in taken for n in names})
    capsys.readouterr()
    assert taken[0] == {f"lat.{i}.txt.jsonl" for i in range(1, INPUTS + 1, 3)}  # JOB=1 takes 1, 4, 7 ...
    assert_same_results(corpus["reference"], out)
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("*.jsonl")}
    assert main(["rescore", "--model", str(corpus["model"]), "--out-dir", str(out), "--quiet",
                 "--job", "2", "--num-jobs", "3", *corpus["inputs"]]) == 0
    assert json.loads(capsys.readouterr().out)["skipped"] == INPUTS // 3
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.jsonl")} == before


def test_a_malformed_lattice_is_recorded_with_its_reason_and_the_rest_written(corpus, tmp_path, capsys):
    good, broken = Path(corpus["inputs"][0]), tmp_path / "broken.txt"
    text = archive_text(1)
    first_end = text.index("\n\n") + 2
    broken.write_text(text[:first_end] + BAD + text[first_end:])
    missing = tmp_path / "missing.txt"
    out = tmp_path / "out"
    argv = ["rescore", "--model", str(corpus["model"]), "--out-dir", str(out), "--quiet", "--also", "text",
            str(good), str(broken), str(missing)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "bad-utt (" in captured.err and "missing.txt" in captured.err and "could not be read" in captured.err
    lines = [json.loads(line) for line in (out / "broken.txt.jsonl").read_text().splitlines()]
    assert [line["key"] for line in lines] == ["bad-utt", "in01-utt0", "in01-utt1"]
    bad_line = text[:first_end].count("\n") + 2  # the arc line after the key
    assert lines[0]["error"] == f"{broken}:{bad_line}: lattice 'bad-utt': field weight: 'notanumber' is not a number"
    expected = results_of(corpus["reference"])["lat.1.txt.jsonl"]
    assert compare_answers(expected, lines[1:], ignore=VOLATILE).same
    assert (out / "broken.txt.text").read_text().splitlines()[0].split()[0] == "in01-utt0"
    assert not (out / "missing.txt.jsonl").exists()  # unreadable: nothing written, tried again next run
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["done"], summary["failed"], summary["lattices_failed"]) == (2, 1, 1)
    assert {(f["input"], f["key"]) for f in summary["failures"]} == {(str(broken), "bad-utt"), (str(missing), None)}
    missing.write_text(archive_text(2))
    assert main(argv) == 2  # the malformed lattice is still recorded; the missing input is now done
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["done"], summary["skipped"], summary["failed"], summary["lattices_failed"]) == (1, 2, 0, 1)
    capsys.readouterr()


def test_the_input_names_and_the_job_split():
    assert [(i.spec, i.name) for i in plan_inputs(["a/lat.1.gz", "a/lat.2.gz", "b/x.slf"], 2, 2)] == [
        ("a/lat.2.gz", "lat.2")]
    named = plan_inputs(["d1/lat.1.gz", "d2/lat.1.gz"])
    assert [i.name for i in named] == ["d1__lat.1", "d2__lat.1"]
    for bad, words in ((["-"], "standard input"), (["ark:gunzip -c x.gz |"], "a command"),
                       (["x.gz", "./x.gz"], "given twice")):
        with pytest.raises(CorpusError, match=words):
            plan_inputs(bad)
    with pytest.raises(CorpusError, match="1 <= job <= num-jobs"):
        plan_inputs(["x"], 4, 3)


def test_corpus_flags_need_out_dir_and_out_dir_refuses_stream_outputs(corpus, capsys):
    assert main(["rescore", "--model", str(corpus["model"]), "--job", "1", "--num-jobs", "2", corpus["inputs"][0]]) == 2
    assert "--job, --num-jobs need --out-dir" in capsys.readouterr().err
    assert main(["rescore", "--model", str(corpus["model"]), "--out-dir", "x", "--json", corpus["inputs"][0]]) == 2
    assert "--json cannot be given with it" in capsys.readouterr().err


def test_ray_without_ray_installed_fails_at_once_naming_the_extra(corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    assert main(["rescore", "--model", str(corpus["model"]), "--out-dir", str(tmp_path / "o"), "--ray", "auto",
                 corpus["inputs"][0]]) == 2
    assert "--ray needs Ray, an optional extra: from a clone, .venv/bin/pip install -e '.[ray]'" in capsys.readouterr().err
    assert not (tmp_path / "o" / "lat.1.txt.jsonl").exists()


@pytest.mark.slow
def test_a_ray_worker_node_killed_mid_job_loses_nothing(corpus, tmp_path, monkeypatch, capsys):
    """A head and a worker node on 127.0.0.1, 1 CPU each, a worker on each; the worker node is
    killed while both workers hold an input, and a fresh node is added: every input is done once,
    the dead node's input is retried, and the results equal one process's."""
    pytest.importorskip("ray")  # the test extra installs it: make test runs this
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    from ray.cluster_utils import Cluster

    fed_first = 6
    pipes = fifo_inputs(tmp_path / "in", corpus["texts"])
    out = tmp_path / "out"
    # the head checks its nodes every 200 ms and calls one dead after 3 misses (Ray's default: every 3 s,
    # 5 misses): the test took 14 s instead of 18 s
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "_system_config": {
        "health_check_period_ms": 200, "health_check_failure_threshold": 3, "health_check_initial_delay_ms": 0}})
    feeder = Feeder(pipes)
    feeder.allow(list(pipes)[:fed_first])
    feeder.start()
    job = None
    try:
        worker = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        job = subprocess.Popen(afp_command("rescore", "--model", str(corpus["model"]), "--out-dir", str(out),
                                           "--ray", cluster.address, "--ray-workers", "2", *[str(p) for p in pipes]),
                               cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        said: list[str] = []
        reader = threading.Thread(target=lambda: said.extend(job.stderr), daemon=True)
        reader.start()
        wait_until(lambda: any("(2 ready)" in line for line in said) or job.poll() is not None, "2 Ray workers")
        wait_until(lambda: len(list(out.glob("*.jsonl"))) == fed_first or job.poll() is not None, "6 results")
        assert job.poll() is None, "".join(said)  # both workers wait on inputs that are not fed
        cluster.remove_node(worker, allow_graceful=False)
        cluster.add_node(num_cpus=1)
        feeder.allow(pipes)
        stdout, _ = job.communicate(timeout=300)
        reader.join(timeout=10)
        assert job.returncode == 0, "".join(said)
    finally:
        feeder.stopped.set()
        if job is not None and job.poll() is None:
            job.kill()
        cluster.shutdown()
    summary = json.loads(stdout)
    assert summary["engine"] == "ray" and summary["done"] == INPUTS and summary["failed"] == 0
    assert len(summary["retried"]) >= 1, "".join(said)  # the killed node's worker held an input
    assert_same_results(corpus["reference"], out)
    make_regular(pipes)
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("*.jsonl")}
    capsys.readouterr()
    # in this process, where no Ray cluster runs: none is needed, nothing is left to do
    assert main(["rescore", "--model", str(corpus["model"]), "--out-dir", str(out), "--ray", "auto",
                 *[str(p) for p in pipes]]) == 0
    again = capsys.readouterr()
    assert json.loads(again.out.splitlines()[-1])["skipped"] == INPUTS, again
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.jsonl")} == before


def test_outputs_the_options_cannot_write_fail_the_job_at_once(corpus, tmp_path, capsys):
    """--also ctm is written for one LM weight: with two, the job stops before any input, naming why."""
    out = tmp_path / "out"
    assert main(["rescore", "--model", str(corpus["model"]), "--out-dir", str(out), "--also", "ctm",
                 "--lm-weight", "0.5", "--lm-weight", "1", corpus["inputs"][0]]) == 2
    assert "--ctm is written for one LM weight, and 2 are given" in capsys.readouterr().err
    assert not out.exists() or not list(out.glob("*.jsonl"))
