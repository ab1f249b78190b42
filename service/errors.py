"""API errors: every failure a client can cause becomes a 4xx JSON body ``{"error": {...}}``."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from lattices.expand import ExpansionTooLarge
from lattices.lattice import LatticeFormatError, describe
from lattices.scored import WeightError
from lattices.ops import DeadlineExceeded


class APIError(Exception):
    """An error with an HTTP status and a kind (the ``kind`` field of the body)."""

    def __init__(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None,
                 **details: Any) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.details = status, kind, message, details
        self.headers = dict(headers or {})  # response headers (a 405's Allow)

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


#: what pydantic's type errors ask for, in words
_WANTED = {"string_type": "a string", "dict_type": "an object", "list_type": "a list", "float_type": "a number",
           "float_parsing": "a number", "int_type": "an integer", "int_parsing": "an integer", "bool_type": "a boolean",
           "bool_parsing": "a boolean", "none_required": "null"}


def _is_type_tag(part: Any) -> bool:
    """Whether a pydantic error location part names a member of a union (``str``,
    ``list[constrained-float]``) rather than a field or an index."""
    return isinstance(part, str) and (part in ("str", "int", "float", "bool") or not part.isidentifier())


def validation_error(errors: list[Any]) -> APIError:
    """The 422 for pydantic's ``errors`` of a body: the first bad field, named by its path without
    union member tags (``lattice``, not ``lattice.str``); for a value that fits no member of a
    union, what the field takes and what it got (``lattice: must be a string, an object or a
    list, got 5``); otherwise the most specific member's complaint."""
    def path(error: Any) -> list[Any]:
        return [p for p in error.get("loc", ()) if not _is_type_tag(p)]

    first = errors[0]
    top = path(first)
    # the errors of the same field, members of a union included (a list member's item: lm_weight.1)
    related = [e for e in errors if path(e)[: len(top)] == top]
    specific = next((e for e in related if e["type"] not in _WANTED), None)
    if specific is not None:  # what the closest member of a union says (a list item below zero)
        where = ".".join(str(p) for p in path(specific))
        message = str(specific["msg"]).removeprefix("Value error, ")
    else:
        where = ".".join(str(p) for p in top)
        wanted = list(dict.fromkeys(_WANTED[e["type"]] for e in related if path(e) == top))
        shown = f"{', '.join(wanted[:-1])} or {wanted[-1]}" if len(wanted) > 1 else wanted[0]
        message = f"must be {shown}, got {describe(first.get('input'))}"
    return APIError(422, "invalid_request", f"{where}: {message}" if where else message, field=where or None)


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
    headers = dict(err.headers)
    if err.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(err.body(), status_code=err.status, headers=headers or None)


async def handle_api_error(request: Request, err: Exception) -> JSONResponse:
    api = from_exception(err)
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        metrics.errors.labels(api.kind).inc()
    return error_response(api)


async def handle_validation_error(request: Request, err: Exception) -> JSONResponse:
    assert isinstance(err, RequestValidationError)
    errors = [{**e, "loc": tuple(p for p in e.get("loc", ()) if p != "body")} for e in err.errors()] or [
        {"loc": (), "msg": "invalid request", "type": "invalid"}]
    api = json_body_error(err.__cause__)  # FastAPI raises it from the JSONDecodeError of the body
    first = err.errors()[0] if err.errors() else {}
    if api is None and tuple(first.get("loc", ())) == ("body",) and first.get("type") == "missing":
        api = empty_body_error("a JSON object")
    if api is None:
        api = validation_error(errors)
    return await handle_api_error(request, api)


async def handle_http_exception(request: Request, err: Exception) -> JSONResponse:
    """Framework HTTP errors in the API's error shape; an unparseable body is a 422 like ours."""
    from starlette.exceptions import HTTPException

    assert isinstance(err, HTTPException)
    if err.status_code == 400:  # FastAPI's body parsing: the cause says what was wrong with the body
        api = json_body_error(err.__cause__) or APIError(422, "invalid_request",
                                                         f"the request body cannot be parsed: {err.detail}")
    else:  # its headers go along: a 405's Allow (RFC 9110 section 15.5.6)
        api = APIError(err.status_code, "http_error", str(err.detail), headers=dict(err.headers or {}))
    return await handle_api_error(request, api)
