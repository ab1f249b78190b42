"""POST /v1/rescore: a lattice (or an archive of them) in, rescored hypotheses out."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from service.bodies import json_response, parse_json, validate
from service.deps import RuntimeDep, in_worker
from service.engine import Runtime, rescore_request
from service.errors import APIError, empty_body_error
from service.schemas import KALDI_EXAMPLE, ErrorResponse, RescoreOptionsModel, RescoreRequest, RescoreResponse

router = APIRouter(tags=["rescoring"])

_BODY = {
    "required": True,
    "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/RescoreRequest"}},
        "text/plain": {"schema": {"type": "string"}, "example": KALDI_EXAMPLE},
    },
}


def _from_query(query: list[tuple[str, str]], text: str) -> RescoreRequest:
    """The request of a raw text body: ``text`` with the options of the query string."""
    params: dict[str, Any] = {}
    for name, value in query:
        if name == "lm_weight":
            params.setdefault("lm_weight", []).append(value)
        else:
            params[name] = value
    if len(params.get("lm_weight", [])) == 1:
        params["lm_weight"] = params["lm_weight"][0]
    unknown = sorted(set(params) - set(RescoreOptionsModel.model_fields) - {"format"})
    if unknown:
        raise APIError(422, "invalid_request", f"unknown query parameter(s) {', '.join(unknown)}", field=unknown[0])
    return validate(RescoreRequest, {**params, "lattice": text})


def parse_body(body: bytes, content_type: str, query: list[tuple[str, str]]) -> RescoreRequest:
    """The :class:`RescoreRequest` of a body: JSON (``application/json``), else lattice text with
    the options in ``query``. Runs in a worker thread: parsing a large body takes a while."""
    if content_type == "application/json":
        return validate(RescoreRequest, parse_json(body))
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise APIError(422, "invalid_request", f"body is not UTF-8 text (byte {err.start})") from None
    return _from_query(query, text)


def rescore_body(body: bytes, content_type: str, query: list[tuple[str, str]], runtime: Runtime,
                 deadline: float | None = None) -> Response:
    """Parse a request body, rescore its lattices and encode the answer (in a worker thread,
    under the deadline)."""
    results = rescore_request(parse_body(body, content_type, query), runtime, deadline)
    return json_response(RescoreResponse, {"results": results}, deadline)


@router.post("/v1/rescore", response_model=RescoreResponse, openapi_extra={"requestBody": _BODY},
             responses={413: {"model": ErrorResponse}, 415: {"model": ErrorResponse}, 422: {"model": ErrorResponse},
                        503: {"model": ErrorResponse}},
             summary="Rescore lattices exactly with the AFP model")
async def rescore(request: Request, runtime: RuntimeDep) -> Response:
    """Send a JSON :class:`RescoreRequest`, or a raw ``text/plain`` body (a Kaldi text archive or an
    HTK SLF file) with the options as query parameters, e.g.
    ``lattice-copy ark:lat.1 ark,t:- | curl --data-binary @- -H 'Content-Type: text/plain'
    'http://host:8000/v1/rescore?nbest=5'``. A Kaldi archive of several lattices gives several
    results (one per lattice and LM weight). Either body may be sent gzip-compressed
    (``Content-Encoding: gzip``)."""
    body = await request.body()
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if not body.strip():
        raise empty_body_error("a lattice archive as text/plain, or a JSON RescoreRequest")
    query = request.query_params.multi_items()
    return await in_worker(runtime, request.app.state.limiter, rescore_body, body, content_type, query, runtime)
