"""POST /v1/rescore: a lattice (or an archive of them) in, rescored hypotheses out."""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from afp.options import OptionsError, parse_score_weights
from lattices.options import OPTIONS, option_spec
from service.bodies import is_json_type, json_response, parse_json, validate
from service.deps import RuntimeDep, in_worker
from service.engine import Runtime, rescore_request
from service.errors import APIError, empty_body_error, excerpt
from service.schemas import KALDI_EXAMPLE, ErrorResponse, RescoreOptionsModel, RescoreRequest, RescoreResponse

router = APIRouter(tags=["rescoring"])

_BODY = {
    "required": True,
    "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/RescoreRequest"}},
        "text/plain": {"schema": {"type": "string"}, "example": KALDI_EXAMPLE},
    },
}


#: the options a raw-body request takes as query parameters (a weights object goes in a JSON body)
QUERY_OPTIONS = tuple(name for name in RescoreOptionsModel.model_fields if name != "weights")
#: the whole-number options, whose query text is read as an integer
_COUNTS = frozenset(spec.name for spec in OPTIONS if spec.http and spec.kind == "count")
_WHOLE = re.compile(r"[+-]?[0-9]{1,18}")  # longer: left as text, refused by the schema


def _query_parameters() -> list[dict[str, Any]]:
    """The OpenAPI ``parameters`` of a raw-body request: one optional query parameter per
    option of :class:`RescoreOptionsModel` (and ``format``), as :func:`_from_query` reads them."""
    schema = RescoreRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    out = []
    for name in ("format", *QUERY_OPTIONS):
        field = schema["properties"][name]
        if name == "lm_weight":
            prop: dict[str, Any] = {"type": "array", "items": {"type": "number", "minimum": 0},
                                    "maxItems": option_spec(name).maximum}
            text = "new-LM weight; repeat it (lm_weight=0.3&lm_weight=0.5) for several in one pass"
        elif name == "score_weights":
            # empty (no named weights) or NAME=W,NAME=W: what afp.options.parse_score_weights takes
            prop = {"type": "string",
                    "pattern": r"^\s*$|^\s*[^=,\s]+\s*=\s*[-+0-9.eE]+\s*(,\s*[^=,\s]+\s*=\s*[-+0-9.eE]+\s*)*$"}
            text = "weights of named first-pass scores as NAME=W,NAME=W (decoder=0.6,ctc=0.4)"
        else:
            prop = {k: v for k, v in field.items() if k not in ("title", "description", "default")}
            text = field.get("description", "")
        out.append({"name": name, "in": "query", "required": False, "schema": prop,
                    "description": f"with a raw text body: {text}", "explode": name == "lm_weight"})
    return out


def _score_weights(text: str) -> dict[str, float]:
    """``decoder=0.6,ctc=0.4`` -> ``{"decoder": 0.6, "ctc": 0.4}`` (:func:`afp.options.parse_score_weights`)."""
    try:
        return parse_score_weights(text)
    except OptionsError as err:
        raise APIError(422, "invalid_request", f"{err}", field="score_weights") from None


def _from_query(query: list[tuple[str, str]], text: str) -> RescoreRequest:
    """The request of a raw text body: ``text`` with the options of the query string (``lm_weight``
    may repeat; ``score_weights`` is ``NAME=W,NAME=W``)."""
    params: dict[str, Any] = {}
    for name, value in query:
        if name == "lm_weight":
            params.setdefault("lm_weight", []).append(value)
        elif name == "score_weights":
            params[name] = _score_weights(value)
        elif name in _COUNTS and _WHOLE.fullmatch(value.strip()):
            params[name] = int(value)  # a JSON body's count is an integer (strict); a query's is its text
        else:
            params[name] = value
    if len(params.get("lm_weight", [])) == 1:
        params["lm_weight"] = params["lm_weight"][0]
    unknown = sorted(set(params) - set(QUERY_OPTIONS) - {"format"})
    if unknown:
        raise APIError(422, "invalid_request", f"unknown query parameter(s) {', '.join(unknown)}", field=unknown[0])
    return validate(RescoreRequest, {**params, "lattice": text})


def parse_body(body: bytes, content_type: str, query: list[tuple[str, str]]) -> RescoreRequest:
    """The :class:`RescoreRequest` of a body: JSON (``application/json``), else lattice text with
    the options in ``query``. Runs in a worker thread: parsing a large body takes a while."""
    if is_json_type(content_type):
        if query:
            raise APIError(422, "invalid_request", "a JSON body carries its options itself: query parameters are "
                                                   "read with a raw text body only", field=query[0][0])
        return validate(RescoreRequest, parse_json(body))
    head = body.lstrip()[:1]
    if head == b"{" and b'"lattice"' in body and _is_request_object(body):
        raise APIError(422, "invalid_request", f"this body is a JSON RescoreRequest: send it with Content-Type: "
                                               f"application/json (it came as {content_type or 'no Content-Type'})")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise APIError(422, "invalid_request", f"the body is not UTF-8 text (byte {err.start}): send lattice text as "
                                               f"UTF-8, or a JSON RescoreRequest as application/json") from None
    return _from_query(query, text)


def _is_request_object(body: bytes) -> bool:
    """Whether ``body`` is a JSON object with a ``lattice`` field (a request sent as text)."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and "lattice" in data


def rescore_body(body: bytes, content_type: str, query: list[tuple[str, str]], runtime: Runtime,
                 deadline: float | None = None) -> Response:
    """Parse a request body, rescore its lattices and encode the answer (in a worker thread,
    under the deadline)."""
    results, warnings = rescore_request(parse_body(body, content_type, query), runtime, deadline)
    return json_response(RescoreResponse, {"results": results, "warnings": warnings}, deadline)


@router.post("/v1/rescore", response_model=RescoreResponse,
             openapi_extra={"requestBody": _BODY, "parameters": _query_parameters()},
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
