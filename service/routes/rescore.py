"""POST /v1/rescore: a lattice (or an archive of them) in, rescored hypotheses out."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from pydantic import ValidationError

from service.deps import RuntimeDep, in_worker
from service.engine import rescore_request
from service.errors import APIError, empty_body_error, json_body_error
from service.schemas import KALDI_EXAMPLE, ErrorResponse, RescoreOptionsModel, RescoreRequest, RescoreResponse

router = APIRouter(tags=["rescoring"])

_BODY = {
    "required": True,
    "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/RescoreRequest"}},
        "text/plain": {"schema": {"type": "string"}, "example": KALDI_EXAMPLE},
    },
}


def _validation_message(err: ValidationError) -> tuple[str, str | None]:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    return (f"{where}: {first['msg']}" if where else first["msg"]), (where or None)


def _from_query(request: Request, text: str) -> RescoreRequest:
    params: dict[str, Any] = {}
    for name, value in request.query_params.multi_items():
        if name == "lm_weight":
            params.setdefault("lm_weight", []).append(value)
        else:
            params[name] = value
    if len(params.get("lm_weight", [])) == 1:
        params["lm_weight"] = params["lm_weight"][0]
    unknown = sorted(set(params) - set(RescoreOptionsModel.model_fields) - {"format"})
    if unknown:
        raise APIError(422, "invalid_request", f"unknown query parameter(s) {', '.join(unknown)}", field=unknown[0])
    return RescoreRequest.model_validate({**params, "lattice": text})


@router.post("/v1/rescore", response_model=RescoreResponse, openapi_extra={"requestBody": _BODY},
             responses={413: {"model": ErrorResponse}, 422: {"model": ErrorResponse}, 503: {"model": ErrorResponse}},
             summary="Rescore lattices exactly with the AFP model")
async def rescore(request: Request, runtime: RuntimeDep) -> dict[str, Any]:
    """Send a JSON :class:`RescoreRequest`, or a raw ``text/plain`` body (a Kaldi text archive or an
    HTK SLF file) with the options as query parameters, e.g.
    ``lattice-copy ark:lat.1 ark,t:- | curl --data-binary @- -H 'Content-Type: text/plain'
    'http://host:8000/v1/rescore?nbest=5'``. A Kaldi archive of several lattices gives several
    results (one per lattice and LM weight)."""
    body = await request.body()
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if not body.strip():
        raise empty_body_error("a lattice archive as text/plain, or a JSON RescoreRequest")
    try:
        if content_type == "application/json":
            try:
                data = json.loads(body)
            except (ValueError, RecursionError) as err:
                raise (json_body_error(err) or err) from None
            parsed = RescoreRequest.model_validate(data)
        else:
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError as err:
                raise APIError(422, "invalid_request", f"body is not UTF-8 text (byte {err.start})") from None
            parsed = _from_query(request, text)
    except ValidationError as err:
        message, field = _validation_message(err)
        raise APIError(422, "invalid_request", message, field=field) from None
    results = await in_worker(runtime, request.app.state.limiter, rescore_request, parsed, runtime)
    return {"results": results}


def document_request_schema(app: Any) -> None:
    """Put :class:`RescoreRequest` into the app's OpenAPI components (the route reads the raw body
    to accept text/plain too, so FastAPI does not register the schema by itself)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            extra = RescoreRequest.model_json_schema(ref_template="#/components/schemas/{model}")
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(extra.pop("$defs", {}))
            components["RescoreRequest"] = extra
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
