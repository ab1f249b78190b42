"""A real ``afp serve`` (uvicorn) process on loopback, driven by httpx."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.factories import WORDS, saved_model
from tests.service.test_rescore_cli import ARCHIVE

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--model", str(model), "--port", str(port), *extra],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"server exited early: {process.stdout.read()}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise AssertionError("server did not become ready")


def sausage(slots: int, width: int) -> dict:
    """A long confusion-network lattice: enough expansion work to take a moment."""
    arcs = [[s, s + 1, WORDS[(s * 7 + k) % len(WORDS)], -1.0 * k, -0.5] for s in range(slots) for k in range(width)]
    return {"key": "sausage", "start": 0, "arcs": arcs, "finals": [[slots, 0.0, 0.0]]}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return saved_model(tmp_path_factory.mktemp("served") / "model", cell="gru", mode="afp", rho=2)


@pytest.fixture(scope="module")
def served(model):
    """A server whose request work goes to 2 worker processes: (its process, the url)."""
    process, url = start_server(model, "--processes", "2", "--workers", "4", "--no-access-log")
    yield process, url
    process.terminate()
    process.wait(30)


@pytest.fixture(scope="module")
def server(served):
    return served[1]


def test_rescore_over_http(server):
    json_reply = httpx.post(f"{server}/v1/rescore", json={"format": "kaldi", "lattice": ARCHIVE, "nbest": 2},
                            timeout=60)
    assert json_reply.status_code == 200
    raw = httpx.post(f"{server}/v1/rescore?nbest=2", content=ARCHIVE, headers={"Content-Type": "text/plain"},
                     timeout=60)
    assert raw.status_code == 200 and raw.json() == {
        "results": [{**r, "seconds": raw.json()["results"][i]["seconds"], "timing": raw.json()["results"][i]["timing"]}
                    for i, r in enumerate(json_reply.json()["results"])], "warnings": json_reply.json()["warnings"]}
    assert len(raw.json()["warnings"]) == 1 and "untuned" in raw.json()["warnings"][0]
    bad = httpx.post(f"{server}/v1/rescore", content="utt\n0 1 a b c d e\n", headers={"Content-Type": "text/plain"})
    assert bad.status_code == 422 and bad.json()["error"]["line"] == 2


def test_concurrent_requests_get_their_own_answers(server):
    bodies = [{"sentences": [" ".join(WORDS[i:i + 3 + i % 4])]} for i in range(12)]
    alone = [httpx.post(f"{server}/v1/perplexity", json=b, timeout=60).json() for b in bodies]
    with ThreadPoolExecutor(12) as pool:
        together = list(pool.map(lambda b: httpx.post(f"{server}/v1/perplexity", json=b, timeout=60).json(), bodies))
    for a, b in zip(alone, together):
        assert b["ppl"] == pytest.approx(a["ppl"], rel=1e-9)
    metrics = httpx.get(f"{server}/metrics").text
    assert 'afp_requests_total{route="/v1/perplexity",status="200"} 24.0' in metrics


@pytest.mark.parametrize("processes", ["1", "2"])
def test_graceful_shutdown_finishes_requests_in_flight(model, processes):
    """Deterministic order, no sleeps: the request is in the server (its headers read, its body
    held back by the client) when SIGTERM arrives; the body follows once the server has stopped
    listening, and the request is still answered (by the server's thread or its worker process)
    before the process exits."""
    process, url = start_server(model, "--processes", processes, "--workers", "2", "--no-access-log")
    body = json.dumps({"format": "json", "lattice": sausage(20, 3), "nbest": 5}).encode()
    release, reply = threading.Event(), {}

    def held_back():  # the body in two parts, the second only after the server began shutting down
        yield body[:10]
        release.wait(60)
        yield body[10:]

    def request():
        reply["response"] = httpx.post(f"{url}/v1/rescore", content=held_back(), timeout=60,
                                       headers={"Content-Type": "application/json"})

    worker = threading.Thread(target=request)
    worker.start()
    # the scrape counts itself: 2 in progress means the held-back request is in the server
    until(lambda: "afp_requests_in_progress 2.0" in httpx.get(f"{url}/metrics", timeout=5).text)
    process.send_signal(signal.SIGTERM)
    until(lambda: not serving(url))  # the listening socket is closed: shutdown has begun
    release.set()
    worker.join(60)
    # uvicorn finishes in-flight requests, then re-raises SIGTERM so the exit status says why it stopped
    assert process.wait(60) in (0, -signal.SIGTERM)
    assert "Finished server process" in process.stdout.read()
    assert reply["response"].status_code == 200
    assert reply["response"].json()["results"][0]["best"]["words"]


def children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def test_server_processes_share_the_socket_and_answer_as_the_command_line(served, server, model, tmp_path):
    """Each of many concurrent requests is answered once, with the words and scores of
    ``afp rescore --json`` on the same lattice, whichever worker process takes it; the metrics
    count every request once and every worker's lattices."""
    from afp.compare import compare_answers

    archive = tmp_path / "lats.txt"
    archive.write_text(ARCHIVE)
    done = subprocess.run([sys.executable, "-m", "service.cli", "rescore", "--model", str(model), "--json",
                           "--nbest", "2", str(archive)], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    cli = [json.loads(line) for line in done.stdout.splitlines()]
    before = counted(server, 'afp_requests_total{route="/v1/rescore",status="200"}'), counted(server, "afp_lattices_total")
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda _: httpx.post(f"{server}/v1/rescore?nbest=2", content=ARCHIVE, timeout=60,
                                                     headers={"Content-Type": "text/plain"}), range(16)))
    for reply in replies:
        assert reply.status_code == 200
        found = compare_answers(cli, reply.json()["results"], ignore={"seconds", "timing"})
        assert found.same and found.largest == 0.0, found.difference
    after = counted(server, 'afp_requests_total{route="/v1/rescore",status="200"}'), counted(server, "afp_lattices_total")
    assert after == (before[0] + 16, before[1] + 16 * len(cli))  # the lattices are counted in the workers
    (forkserver,) = [pid for pid in children(served[0].pid) if b"forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(children(forkserver)) == 2  # the two worker processes


def counted(url: str, series: str) -> float:
    """The value of a series of the server's metrics (0 when it is not there yet)."""
    for line in httpx.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


def serving(url: str) -> bool:
    try:
        httpx.get(f"{url}/healthz", timeout=2)
        return True
    except httpx.HTTPError:
        return False


def until(condition, limit: float = 60.0) -> None:
    """Poll ``condition`` until it holds (an assertion error after ``limit`` seconds)."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)



def test_a_killed_worker_process_is_replaced_and_the_server_answers_on(served, server):
    assert httpx.post(f"{server}/v1/rescore", content=ARCHIVE, headers={"Content-Type": "text/plain"},
                      timeout=60).status_code == 200  # the workers are started
    until(lambda: any(b"forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in children(served[0].pid)))
    (forkserver,) = [pid for pid in children(served[0].pid) if b"forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    victim = children(forkserver)[0]
    os.kill(victim, signal.SIGKILL)
    until(lambda: victim not in children(forkserver))
    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda _: httpx.post(f"{server}/v1/rescore?nbest=2", content=ARCHIVE, timeout=60,
                                                     headers={"Content-Type": "text/plain"}), range(8)))
    assert [reply.status_code for reply in replies] == [200] * 8
    until(lambda: len(children(forkserver)) == 2)  # a fresh worker took the dead one's place
    assert served[0].poll() is None
