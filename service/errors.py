"""API errors: every failure a client can cause becomes a 4xx JSON body ``{"error": {...}}``."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from lattices.expand import ExpansionTooLarge
from lattices.lattice import LatticeFormatError
from lattices.scored import WeightError
from lattices.ops import DeadlineExceeded


class APIError(Exception):
    """An error with an HTTP status and a kind (the ``kind`` field of the body)."""

    def __init__(self, status: int, kind: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.details = status, kind, message, details

    def body(self) -> dict[str, Any]:
        return {"error": {"kind": self.kind, "message": self.message,
                          **{k: v for k, v in self.details.items() if v is not None}}}


def from_exception(err: Exception) -> APIError:
    """Map the engine's input errors to API errors (anything else is a bug: re-raised)."""
    if isinstance(err, APIError):
        return err
    if isinstance(err, LatticeFormatError):
        return APIError(422, "lattice_format", str(err), key=err.key, line=err.line, field=err.field)
    if isinstance(err, ExpansionTooLarge):
        return APIError(422, "expansion_budget", str(err), key=err.key, budget=err.budget)
    if isinstance(err, WeightError):
        return APIError(422, "invalid_request", str(err), field=err.field)
    if isinstance(err, DeadlineExceeded):
        return APIError(503, "timeout", "the request ran out of time")
    raise err


def json_body_error(err: BaseException | None) -> APIError | None:
    """The 422 for a request body that cannot be read as JSON: not UTF-8, malformed, or nested too
    deeply for the parser (``None`` when ``err`` is none of these)."""
    if isinstance(err, UnicodeDecodeError):
        return APIError(422, "invalid_request", f"the body is not UTF-8 text (byte {err.start}): JSON is sent as UTF-8")
    if isinstance(err, json.JSONDecodeError):
        return APIError(422, "invalid_request", f"the body is not valid JSON: {err.msg} (line {err.lineno}, column "
                                                f"{err.colno})")
    if isinstance(err, RecursionError):
        return APIError(422, "invalid_request", "the JSON body is nested too deeply")
    if isinstance(err, ValueError):  # Python's own limits, a key given twice (service.bodies)
        text = str(err)
        if "integer string conversion" in text:
            text = "it holds an integer of more than 4300 digits"
        return APIError(422, "invalid_request", f"the body is not usable JSON: {excerpt(text, 200)}")
    return None


def excerpt(text: str, limit: int = 120) -> str:
    """``text`` cut to at most ``limit`` characters (error bodies stay small, whatever the input)."""
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def empty_body_error(expected: str) -> APIError:
    """The 422 for an empty (or blank) request body; ``expected`` says what to send."""
    return APIError(422, "invalid_request", f"the request body is empty: send {expected}")


def error_response(err: APIError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


async def handle_api_error(request: Request, err: Exception) -> JSONResponse:
    api = from_exception(err)
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        metrics.errors.labels(api.kind).inc()
    return error_response(api)


async def handle_validation_error(request: Request, err: Exception) -> JSONResponse:
    assert isinstance(err, RequestValidationError)
    first = err.errors()[0] if err.errors() else {"loc": (), "msg": "invalid request"}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    api = json_body_error(err.__cause__)  # FastAPI raises it from the JSONDecodeError of the body
    if api is None and tuple(first.get("loc", ())) == ("body",) and first.get("type") == "missing":
        api = empty_body_error("a JSON object")
    if api is None:
        api = APIError(422, "invalid_request", f"{where}: {first.get('msg')}" if where else str(first.get("msg")),
                       field=where or None)
    return await handle_api_error(request, api)


async def handle_http_exception(request: Request, err: Exception) -> JSONResponse:
    """Framework HTTP errors in the API's error shape; an unparseable body is a 422 like ours."""
    from starlette.exceptions import HTTPException

    assert isinstance(err, HTTPException)
    if err.status_code == 400:  # FastAPI's body parsing: the cause says what was wrong with the body
        api = json_body_error(err.__cause__) or APIError(422, "invalid_request",
                                                         f"the request body cannot be parsed: {err.detail}")
    else:
        api = APIError(err.status_code, "http_error", str(err.detail))
    return await handle_api_error(request, api)
