"""The FastAPI application: ``create_app()`` wires settings, model, batcher, routers and errors.

The model is loaded once, in the app's lifespan; request work runs in a bounded pool of worker
threads; LM scoring from all requests meets in one dynamic batcher. Client mistakes become 4xx
JSON errors ``{"error": {"kind", "message", ...}}``; oversized bodies are cut off at the limit.

Run it with ``afp serve`` (or ``uvicorn --factory service.app:create_app``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from lattices.expand import ExpansionTooLarge
from lattices.lattice import LatticeFormatError
from service.deps import require_token
from service.errors import APIError, handle_api_error, handle_validation_error
from service.metrics import Metrics
from service.settings import Settings, get_settings

log = logging.getLogger("afp.service")


class BodyTooLarge(APIError):
    def __init__(self, limit: int) -> None:
        super().__init__(413, "too_large", f"request body is over the limit of {limit} bytes")


class BodyLimit:
    """ASGI middleware: refuse bodies over ``limit`` bytes, by Content-Length or while streaming."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            response = JSONResponse(BodyTooLarge(self.limit).body(), status_code=413)
            await response(scope, receive, send)
            return
        received = 0

        async def limited() -> dict:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        await self.app(scope, limited, send)


def _load_runtime(settings: Settings, metrics: Metrics):
    from lm.checkpoint import load_checkpoint
    from lm.scorer import LMScorer
    from lm.train import resolve_device
    from service.batcher import BatchingScorer
    from service.engine import Runtime

    loaded = load_checkpoint(settings.model_dir, device=resolve_device(settings.device))
    if loaded.config.context_size is None:
        raise ValueError(f"{settings.model_dir}: an exact (unbounded) RNN cannot rescore lattices exactly; "
                         f"serve an AFP-rho or n-gram model")
    scorer = BatchingScorer(LMScorer(loaded), enabled=settings.batching, max_wait=settings.batch_max_wait_ms / 1000,
                            max_pairs=settings.batch_max_pairs, on_batch=metrics.on_batch)
    return Runtime(settings=settings, loaded=loaded, scorer=scorer, metrics=metrics)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The application; ``settings`` default to the environment (``AFP_*``)."""
    settings = settings or get_settings()
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.limiter = anyio.CapacityLimiter(settings.workers)
        runtime = await anyio.to_thread.run_sync(_load_runtime, settings, metrics)
        app.state.runtime = runtime
        log.info("serving %s on %s", runtime.info()["name"], runtime.device)
        try:
            yield
        finally:
            app.state.runtime = None
            runtime.close()

    app = FastAPI(
        title="afp-rescore", version="0.1.0", lifespan=lifespan,
        description="Exact lattice rescoring with approximate fixed-point (AFP-rho) recurrent language models.")
    app.state.settings, app.state.metrics, app.state.runtime = settings, metrics, None

    from service.routes import health, models, perplexity, rescore

    secured = [Depends(require_token)]
    app.include_router(rescore.router, dependencies=secured)
    app.include_router(perplexity.router, dependencies=secured)
    app.include_router(models.router, dependencies=secured)
    app.include_router(health.router)
    for client_error in (APIError, LatticeFormatError, ExpansionTooLarge):
        app.add_exception_handler(client_error, handle_api_error)
    app.add_exception_handler(RequestValidationError, handle_validation_error)

    @app.middleware("http")
    async def observe(request: Request, call_next: Any) -> Any:
        started = time.perf_counter()
        status = 500
        try:
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            route = request.scope.get("route")
            path = getattr(route, "path", "unmatched")
            metrics.requests.labels(path, str(status)).inc()
            metrics.latency.labels(path).observe(time.perf_counter() - started)

    if settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    return app
