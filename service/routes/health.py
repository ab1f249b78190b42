"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from service.errors import APIError

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="The process is alive")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="The model is loaded and the server takes requests")
async def readyz(request: Request) -> dict[str, str]:
    if getattr(request.app.state, "runtime", None) is None:
        raise APIError(503, "not_ready", "the model is not loaded yet")
    return {"status": "ready"}


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
