"""Bodies far over ``AFP_MAX_BODY_BYTES``, sent to a real ``afp serve`` (uvicorn) process by
clients that write the whole body before they read (``urllib``, ``requests``): each gets the 413
with its JSON error, whatever the size and framing, because the server answers with
``Connection: close`` and then drains the rest of the body for a bounded time
(``AFP_BODY_DRAIN_S``, ``AFP_BODY_DRAIN_IDLE_S``; :class:`service.app.BodyLimit`).

The timing checks are one-sided or generous: a bound the server cannot break however slow the
machine is (it cannot close before the drain time it was given), or tens of seconds."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import requests  # installed with the test extras (schemathesis depends on it)

from tests.factories import saved_model
from tests.service.test_server_process import start_server

LIMIT = 1_000_000
TOO_LARGE = {"error": {"kind": "too_large", "message": f"request body is over the limit of {LIMIT} bytes"}}
BLOCK = b"x" * (1 << 20)


class Body:
    """``size`` bytes of body made on the fly, a block at a time (the test process never holds a
    256 MB body): a file-like object with a length, for Content-Length framing."""

    def __init__(self, size: int) -> None:
        self.size, self.left = size, size

    def __len__(self) -> int:
        return self.size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left, len(BLOCK))
        self.left -= n
        return BLOCK[:n]

    def __iter__(self):
        while self.left:
            yield self.read(len(BLOCK))


def blocks(size: int):
    """The same bytes as a generator without a length: the clients send it chunked."""
    yield from Body(size)


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory (VmHWM), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return saved_model(tmp_path_factory.mktemp("served") / "model", cell="gru", mode="afp", rho=2)


@pytest.fixture(scope="module")
def server(model):
    """A 1 MB limit; a drain long enough for 256 MB on a slow machine, an idle limit of 3 s."""
    process, url = start_server(model, "--processes", "1", "--no-access-log", env={
        "AFP_MAX_BODY_BYTES": str(LIMIT), "AFP_BODY_DRAIN_S": "120", "AFP_BODY_DRAIN_IDLE_S": "3"})
    yield process, url
    process.terminate()
    process.wait(30)


def via_urllib(url: str, size: int, chunked: bool, headers: dict[str, str] | None = None):
    """(status, headers, JSON body) of a POST of ``size`` bytes with ``urllib``."""
    headers = {"Content-Type": "text/plain", **(headers or {})}
    if not chunked:
        headers["Content-Length"] = str(size)
    request = urllib.request.Request(f"{url}/v1/rescore", data=blocks(size) if chunked else Body(size),
                                     headers=headers)
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=120)
    return err.value.code, err.value.headers, json.loads(err.value.read())


def via_requests(url: str, size: int, chunked: bool, headers: dict[str, str] | None = None):
    """(status, headers, JSON body) of a POST of ``size`` bytes with ``requests``."""
    reply = requests.post(f"{url}/v1/rescore", data=blocks(size) if chunked else Body(size), timeout=120,
                          headers={"Content-Type": "text/plain", **(headers or {})})
    return reply.status_code, reply.headers, reply.json()


@pytest.mark.slow
@pytest.mark.parametrize("client", [via_urllib, via_requests])
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("times", [64, 256])
def test_a_body_far_over_the_limit_gets_the_413(server, client, chunked, times):
    process, url = server
    before = peak_rss_mib(process.pid)
    status, headers, body = client(url, times * LIMIT, chunked)
    assert (status, body) == (413, TOO_LARGE)
    assert headers["Connection"].lower() == "close"
    # nothing of the drained body is kept: the server's peak memory grew by far less than the body
    assert peak_rss_mib(process.pid) - before < 32, (before, peak_rss_mib(process.pid))


def test_the_clients_frame_the_bodies_as_the_tests_say():
    """The two framings really are what their names say: a bare socket server, standing in for
    the service, sees the headers each client sends."""
    seen = {}

    def serve_once(listener: socket.socket) -> None:
        connection, _ = listener.accept()
        with connection:
            data = b""
            while not (data.endswith(b"0\r\n\r\n") or len(data.partition(b"\r\n\r\n")[2]) >= 3000):
                data += connection.recv(65536)
            seen["head"] = data.partition(b"\r\n\r\n")[0].lower()
            connection.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        for chunked, framing in ((False, b"content-length: 3000"), (True, b"transfer-encoding: chunked")):
            for client in (via_urllib, via_requests):
                worker = threading.Thread(target=serve_once, args=(listener,))
                worker.start()
                assert client(url, 3000, chunked)[0] == 413
                worker.join(30)
                assert framing in seen.pop("head").split(b"\r\n"), (client.__name__, chunked)


def test_another_refusal_before_the_body_is_read_reaches_the_client_too(server):
    """A 415 (an encoding the server does not read) is also made before the body: drained as well."""
    status, headers, body = via_urllib(server[1], 64 * LIMIT, chunked=False, headers={"Content-Encoding": "br"})
    assert status == 415 and body["error"]["kind"] == "unsupported_encoding"
    assert headers["Connection"].lower() == "close"


def test_a_small_body_over_the_limit_keeps_the_connection(server):
    """A body read to its end before the refusal (it is only a little over the limit and came in
    one piece) needs no drain: an ordinary 413 on a connection that stays open."""
    with requests.Session() as session:
        reply = session.post(f"{server[1]}/v1/rescore", data=b"x" * (LIMIT + 1), headers={"Content-Type": "text/plain"})
        assert reply.status_code == 413 and reply.json() == TOO_LARGE
        assert session.get(f"{server[1]}/healthz").status_code == 200


def raw_request(url: str, head: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=60)
    sock.sendall(head.encode() + b"\r\n\r\n")
    return sock


def read_answer(sock: socket.socket) -> bytes:
    """Bytes until the headers and the Content-Length of the answer have arrived."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:"))
    while len(rest) < length:
        rest += sock.recv(65536)
    return head + b"\r\n\r\n" + rest


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


def test_expect_100_continue_gets_the_413_without_sending_the_body(server):
    """The client waits for "100 Continue" before its body; it gets the final 413 instead, and
    the connection is closed at once (there is no body coming to drain)."""
    url = server[1]
    sock = raw_request(url, f"POST /v1/rescore HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
                            f"Content-Length: {64 * LIMIT}\r\nExpect: 100-continue")
    with sock:
        started = time.monotonic()
        answer = read_answer(sock)
        assert answer.startswith(b"HTTP/1.1 413 "), answer[:100]
        assert b"100 continue" not in answer.lower()
        assert json.loads(answer.partition(b"\r\n\r\n")[2]) == TOO_LARGE
        assert closed_by_server(sock)
        assert time.monotonic() - started < 3  # no idle drain (AFP_BODY_DRAIN_IDLE_S=3) was waited for


def test_a_client_that_stops_sending_is_cut_off_after_the_idle_limit(server):
    url = server[1]
    with raw_request(url, f"POST /v1/rescore HTTP/1.1\r\nHost: x\r\nContent-Length: {64 * LIMIT}") as sock:
        sock.sendall(b"x" * 100_000)
        started = time.monotonic()
        assert read_answer(sock).startswith(b"HTTP/1.1 413 ")
        assert closed_by_server(sock)  # well before the 120 s drain limit (the socket's timeout is 60 s)
        assert time.monotonic() - started < 60


@pytest.fixture(scope="module")
def short_drain_server(model):
    """A drain of 2 s in all; the idle limit (default 5 s) is never reached by a client that
    sends every 50 ms."""
    process, url = start_server(model, "--processes", "1", "--no-access-log", env={"AFP_MAX_BODY_BYTES": str(LIMIT),
                                                               "AFP_BODY_DRAIN_S": "2"})
    yield url
    process.terminate()
    process.wait(30)


@pytest.mark.slow
def test_a_trickling_client_is_cut_off_at_the_drain_limit(short_drain_server):
    """A client that keeps sending a little at a time, never idle for long, would hold the
    connection for ever: the server closes it once the drain time is spent."""
    started = time.monotonic()
    with raw_request(short_drain_server, f"POST /v1/rescore HTTP/1.1\r\nHost: x\r\n"
                                         f"Content-Length: {64 * LIMIT}") as sock:
        assert read_answer(sock).startswith(b"HTTP/1.1 413 ")
        sock.setblocking(False)
        cut_off = None
        while time.monotonic() - started < 60:
            try:
                sock.send(b"x" * 1000)
                if sock.recv(1) == b"":
                    cut_off = time.monotonic() - started
                    break
            except BlockingIOError:
                pass  # nothing to read yet (or the send buffer is full): the connection is open
            except (ConnectionResetError, BrokenPipeError):
                cut_off = time.monotonic() - started
                break
            time.sleep(0.05)
        assert cut_off is not None, "the server never closed the connection"
        assert cut_off >= 2  # not before AFP_BODY_DRAIN_S, although data kept coming
