"""POST /v1/perplexity: perplexity and per-sentence log-probabilities of independent sentences."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from service.bodies import is_json_type, json_response, parse_json, validate
from service.deps import RuntimeDep, in_worker
from service.engine import Runtime, perplexity_request
from service.errors import APIError, empty_body_error
from service.schemas import ErrorResponse, PerplexityRequest, PerplexityResponse

router = APIRouter(tags=["perplexity"])

_BODY = {"required": True,
         "content": {"application/json": {"schema": {"$ref": "#/components/schemas/PerplexityRequest"}}}}


def perplexity_body(body: bytes, content_type: str | None, runtime: Runtime,
                    deadline: float | None = None) -> Response:
    """Parse a JSON :class:`PerplexityRequest` body and score it (in a worker thread: a body of
    millions of short sentences takes a while to parse and validate)."""
    if not is_json_type(content_type):  # as FastAPI's strict content type for its own bodies
        shown = (content_type or "").split(";")[0].strip()[:60] or "no Content-Type"
        raise APIError(422, "invalid_request", f"send a JSON object (Content-Type: application/json), not {shown}")
    request = validate(PerplexityRequest, parse_json(body))
    return json_response(PerplexityResponse, perplexity_request(request.sentences, runtime, deadline), deadline)


@router.post("/v1/perplexity", response_model=PerplexityResponse, openapi_extra={"requestBody": _BODY},
             responses={413: {"model": ErrorResponse}, 415: {"model": ErrorResponse}, 422: {"model": ErrorResponse}},
             summary="Perplexity of sentences")
async def perplexity(request: Request, runtime: RuntimeDep) -> Response:
    """Each sentence is scored on its own (``<s>`` ... ``</s>``); ``tokens`` counts the words plus
    one ``</s>`` per sentence; out-of-vocabulary words are scored as ``<unk>`` and counted. The
    body may be sent gzip-compressed (``Content-Encoding: gzip``)."""
    body = await request.body()
    if not body:
        raise empty_body_error("a JSON object")
    return await in_worker(runtime, request.app.state.limiter, perplexity_body, body,
                           request.headers.get("content-type"), runtime)
