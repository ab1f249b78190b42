"""The FastAPI application: ``create_app()`` wires settings, model, batcher, routers and errors.

The model is loaded once, in the app's lifespan; request work runs in a bounded pool of worker
threads; LM scoring from all requests meets in one dynamic batcher. Client mistakes become 4xx
JSON errors ``{"error": {"kind", "message", ...}}``; oversized bodies are cut off at the limit.

Run it with ``afp serve`` (or ``uvicorn --factory service.app:create_app``).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import numpy
from fastapi import Depends, FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from lattices.expand import ExpansionTooLarge
from lattices.lattice import LatticeFormatError
from lattices.ops import DeadlineExceeded
from service.deps import require_token
from lattices.scored import WeightError
from service.bodies import document_request_bodies, is_json_type
from service.encoding import body_decoder
from service.errors import APIError, handle_api_error, handle_http_exception, handle_validation_error
from service.metrics import Metrics
from service.settings import Settings, get_settings

log = logging.getLogger("afp.service")
GZIP_MAGIC = b"\x1f\x8b"


_ESCAPE = re.compile(rb"\\.", re.S)
_NOT_MARKS = bytes(set(range(256)) - set(b'[]{}"'))
_STEP = numpy.zeros(256, dtype=numpy.int8)
_STEP[list(b"[{")] = 1
_STEP[list(b"]}")] = -1


def json_depth(data: bytes) -> int:
    """How deeply ``[`` and ``{`` nest in JSON text ``data`` (0 without any); brackets inside
    strings do not count. Linear and vectorized (about 0.1 s for a 20 MB body, a tenth of
    ``json.loads``), so a body can be refused before any recursive parser sees it."""
    if b"\\" in data:
        data = _ESCAPE.sub(b"", data)  # escape sequences, \" among them, are inside strings
    marks = numpy.frombuffer(data.translate(None, _NOT_MARKS), dtype=numpy.uint8)
    quote = marks == ord('"')
    outside = (numpy.cumsum(quote, dtype=numpy.int64) & 1) == 0
    steps = numpy.where(outside & ~quote, _STEP[marks], 0)
    return int(numpy.cumsum(steps, dtype=numpy.int64).max(initial=0))


def _is_json(scope: dict) -> bool:
    """A JSON body, or one without a content type (checked as well: it may be JSON all the same)."""
    value = dict(scope.get("headers") or []).get(b"content-type", b"")
    return not value.strip() or is_json_type(value)


class BodyLimit:
    """ASGI middleware: read the body up to ``limit`` bytes before the app runs; answer 413 above
    it (by Content-Length at once, or as soon as a streamed body passes the limit), and 422 for a
    JSON body nested deeper than ``max_json_depth`` (a deep ``[[[...`` would exhaust a
    recursive parser: Python's ``json`` raises RecursionError, a 500).

    A ``Content-Encoding: gzip`` body is decompressed as it arrives (:mod:`service.encoding`) and
    the app sees the plain body, without the header: the limit holds for the compressed and the
    decompressed size (413), a damaged gzip body is a 422, another encoding a 415.

    A refusal made before the whole body has arrived (413, 415, a damaged gzip stream) is sent in
    full, with ``Connection: close``, and then the rest of the body is *drained*: read as it
    arrives and thrown away, for at most ``drain_s`` seconds in all and ``drain_idle_s`` seconds
    without data (nginx's ``lingering_time`` and ``lingering_timeout``); then the connection is
    closed. A client that writes its whole body before it reads (Python's ``urllib``,
    ``http.client``) would otherwise find the connection reset under it instead of the answer: a
    socket closed with unread data sends a TCP reset, and the reset can throw away the answer
    before the client reads it. The response is held open while draining (its last, empty body
    message comes after the drain), because uvicorn stops delivering the body once a response is
    complete and closes a ``Connection: close`` connection at once. Draining keeps nothing, so
    memory stays flat whatever the size; the time bound stops a client that keeps trickling.
    A client that sent ``Expect: 100-continue`` and was not yet told to go on sends no body, so
    there is nothing to drain."""

    def __init__(self, app: Any, limit: int, max_json_depth: int, drain_s: float = 30.0,
                 drain_idle_s: float = 5.0) -> None:
        self.app, self.limit, self.max_json_depth = app, limit, max_json_depth
        self.drain_s, self.drain_idle_s = drain_s, drain_idle_s

    @staticmethod
    async def _answer(error: APIError, scope: dict, receive: Any, send: Any) -> None:
        await JSONResponse(error.body(), status_code=error.status)(scope, receive, send)

    async def _refuse(self, error: APIError, receive: Any, send: Any, expect_continue: bool) -> None:
        """Answer ``error`` before the body has been read to its end: the whole answer with
        ``Connection: close``, then the rest of the body drained (see the class), then the end of
        the response, which makes the server close the connection. With ``expect_continue`` (the
        client waits for ``100 Continue`` and has been sent none) nothing is drained."""
        response = JSONResponse(error.body(), status_code=error.status, headers={"Connection": "close"})
        await send({"type": "http.response.start", "status": response.status_code, "headers": response.raw_headers})
        await send({"type": "http.response.body", "body": response.body, "more_body": True})
        if not expect_continue:
            await self._drain(receive)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _drain(self, receive: Any) -> None:
        """Read and drop the rest of the body until it ends, the client goes away, ``drain_idle_s``
        pass without data or ``drain_s`` pass in all."""
        more = True
        with anyio.move_on_after(self.drain_s):
            while more:
                more = False  # unless a message comes within the idle limit and says so
                with anyio.move_on_after(self.drain_idle_s):
                    message = await receive()
                    more = message["type"] == "http.request" and message.get("more_body", False)

    def _too_large(self) -> APIError:
        return APIError(413, "too_large", f"request body is over the limit of {self.limit} bytes")

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        expect_continue = b"100-continue" in headers.get(b"expect", b"").lower()
        declared = headers.get(b"content-length")
        try:
            decoder = body_decoder(headers.get(b"content-encoding"), self.limit)
            if declared is not None and not declared.isdigit():
                raise APIError(400, "invalid_request", "the Content-Length header is not a number")
            if declared is not None and int(declared) > self.limit:
                raise self._too_large()
        except APIError as error:
            await self._refuse(error, receive, send, expect_continue)
            return
        chunks, size = [], 0
        try:
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away
                more = message.get("more_body", False)
                data = message.get("body", b"")
                size += len(data)
                try:
                    if size > self.limit:
                        raise self._too_large()
                    chunks.append(decoder.feed(data) if decoder is not None else data)
                    if not more and decoder is not None:
                        decoder.finish()
                except APIError as error:
                    if not more:
                        raise
                    await self._refuse(error, receive, send, expect_continue=False)
                    return
                if not more:
                    break
        except APIError as error:  # the whole body has been read: an ordinary answer
            await self._answer(error, scope, receive, send)
            return
        body = b"".join(chunks)
        if decoder is None and body[:2] == GZIP_MAGIC:
            error = APIError(422, "invalid_request", "the body is gzip-compressed (it starts with gzip's magic bytes) "
                                                     "but has no Content-Encoding: send it with Content-Encoding: gzip")
            await self._answer(error, scope, receive, send)
            return
        if decoder is not None:  # the app sees the plain body
            kept = [(k, v) for k, v in scope.get("headers") or [] if k not in (b"content-encoding", b"content-length")]
            scope = {**scope, "headers": [*kept, (b"content-length", str(len(body)).encode())]}
        if _is_json(scope) and json_depth(body) > self.max_json_depth:
            error = APIError(422, "invalid_request", f"the JSON body nests [ and {{ more than {self.max_json_depth} "
                                                     f"levels deep (AFP_MAX_JSON_DEPTH)")
            await self._answer(error, scope, receive, send)
            return
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class Observe:
    """ASGI middleware: count requests by route and status, time them, and gauge those in
    progress (from the headers on, body reading included; a scrape of ``/metrics`` counts itself)."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), 500
        self.metrics.in_progress.inc()

        async def watch(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            self.metrics.in_progress.dec()
            path = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.requests.labels(path, str(status)).inc()
            self.metrics.latency.labels(path).observe(time.perf_counter() - started)


def load_runtime(settings: Settings, metrics: Metrics):
    """The model, its batching scorer, the weights, old LM and features of ``settings``: what a
    server process (the app's, or each worker of :mod:`service.pool`) holds, loaded by the one
    loading path of every door (:class:`afp.rescore_job.LoadedSetup`: the same refusals, an
    exact RNN among them, and the same old LMs, an ARPA file or an n-gram model directory)."""
    from afp.batching import BatchingScorer
    from afp.rescore_job import LoadedSetup, RescoreSetup
    from afp.scoring import ModelSpec
    from service.engine import Runtime

    setup = RescoreSetup(model=ModelSpec(model=str(settings.model_dir), device=settings.device,
                                         score_precision=settings.score_precision),
                         old_lm=str(settings.old_lm) if settings.old_lm is not None else None,
                         features=tuple((settings.features or "").split(",")),
                         weights=str(settings.weights) if settings.weights is not None else None)
    ready = LoadedSetup(setup)
    scorer = BatchingScorer(ready.scorer, enabled=settings.batching_on(ready.device),
                            max_wait=settings.batch_max_wait_ms / 1000, max_pairs=settings.batch_max_pairs,
                            on_batch=metrics.on_batch)
    return Runtime(settings=settings, loaded=ready.loaded, scorer=scorer, metrics=metrics, old_lm=ready.old_lm,
                   weights=ready.weights, features=ready.features)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The application; ``settings`` default to the environment (``AFP_*``)."""
    settings = settings or get_settings()
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from lattices.compiled import compile_kernels

        await anyio.to_thread.run_sync(compile_kernels)  # compiled (or cached) before any request, and any worker
        runtime = await anyio.to_thread.run_sync(load_runtime, settings, metrics)
        processes = settings.process_count(runtime.device.type)
        if processes > 1:
            from service.pool import RequestPool

            runtime.pool = RequestPool(settings, processes)
        app.state.limiter = anyio.CapacityLimiter(max(settings.workers, processes))
        app.state.runtime = runtime
        log.info("serving %s on %s (%d process%s)", runtime.info()["name"], runtime.device, processes,
                 "es" if processes > 1 else "")
        try:
            yield
        finally:
            app.state.runtime = None
            if runtime.pool is not None:
                await anyio.to_thread.run_sync(runtime.pool.close)
            runtime.close()

    app = FastAPI(
        title="afp-rescore", version="0.1.0", lifespan=lifespan,
        description="Exact lattice rescoring with approximate fixed-point (AFP-rho) recurrent language models.")
    app.state.settings, app.state.metrics, app.state.runtime = settings, metrics, None

    from service.routes import health, models, perplexity, rescore
    from service.schemas import PerplexityRequest, RescoreRequest

    secured = [Depends(require_token)]
    app.include_router(rescore.router, dependencies=secured)
    document_request_bodies(app, {"RescoreRequest": RescoreRequest, "PerplexityRequest": PerplexityRequest},
                            limits=settings.limits())
    app.include_router(perplexity.router, dependencies=secured)
    app.include_router(models.router, dependencies=secured)
    app.include_router(health.router)
    for client_error in (APIError, LatticeFormatError, ExpansionTooLarge, DeadlineExceeded, WeightError):
        app.add_exception_handler(client_error, handle_api_error)
    app.add_exception_handler(RequestValidationError, handle_validation_error)
    app.add_exception_handler(StarletteHTTPException, handle_http_exception)

    if settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type", "Content-Encoding"])
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes, max_json_depth=settings.max_json_depth,
                       drain_s=settings.body_drain_s, drain_idle_s=settings.body_drain_idle_s)
    app.add_middleware(Observe, metrics=metrics)  # outermost: counts a request from its headers on
    return app
