"""POST /v1/perplexity: perplexity and per-sentence log-probabilities of independent sentences."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from service.deps import RuntimeDep, in_worker
from service.engine import perplexity_request
from service.schemas import ErrorResponse, PerplexityRequest, PerplexityResponse

router = APIRouter(tags=["perplexity"])


@router.post("/v1/perplexity", response_model=PerplexityResponse, responses={422: {"model": ErrorResponse}},
             summary="Perplexity of sentences")
async def perplexity(body: PerplexityRequest, request: Request, runtime: RuntimeDep) -> dict[str, Any]:
    """Each sentence is scored on its own (``<s>`` ... ``</s>``); ``tokens`` counts the words plus
    one ``</s>`` per sentence; out-of-vocabulary words are scored as ``<unk>`` and counted."""
    return await in_worker(runtime, request.app.state.limiter, perplexity_request, body.sentences, runtime)
