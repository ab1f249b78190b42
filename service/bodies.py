"""Reading JSON request bodies in worker threads, and documenting the bodies the routes read.

``json.loads`` of a large body and pydantic's validation of it take a while (about 0.3 s for a
20 MB body of small values) and would stall every other request if they ran on the event loop,
so the routes read the raw body and call :func:`parse_json` / :func:`validate` from their worker
(:func:`service.deps.in_worker`). Both raise :class:`APIError` 422s in the API's error shape.
The answer is encoded there too (:func:`json_response`): a rescored lattice can be megabytes of JSON.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from lattices.ops import check_deadline
from service.errors import APIError, excerpt, json_body_error, validation_error

M = TypeVar("M", bound=BaseModel)


def is_json_type(content_type: str | bytes | None) -> bool:
    """Whether a Content-Type header value names JSON (``application/json``, ``...+json``)."""
    value = content_type.decode("latin-1") if isinstance(content_type, bytes) else content_type or ""
    kind = value.split(";")[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


def parse_json(body: bytes) -> Any:
    """``json.loads(body)``; a 422 for a body that is not UTF-8, not JSON, nested too deeply,
    beyond Python's number limits (an integer of thousands of digits), holding an object with a
    key twice, or a string with a lone UTF-16 surrogate escape (``"\\ud800"``: not text, and
    not encodable in an answer)."""
    try:
        data = json.loads(body, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as err:
        raise (json_body_error(err) or err) from None
    surrogate = lone_surrogate(body)
    if surrogate is not None:
        raise APIError(422, "invalid_request", f"the JSON body holds a lone UTF-16 surrogate escape "
                                               f"{surrogate}: strings must be Unicode text")
    return data


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s object hook: a dict, refusing a key given twice (JSON parsers disagree on
    which value wins, so the request is ambiguous)."""
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise _DuplicateKey(f"the key {excerpt(twice, 60)!r} appears twice in one object")
    return data


_SURROGATE = re.compile(rb"(\\+)u([dD][89a-fA-F][0-9a-fA-F]{2})")


def lone_surrogate(body: bytes) -> str | None:
    """The first UTF-16 surrogate escape of JSON text ``body`` that is not half of a pair
    (``\\ud83d\\ude00`` is one character; ``\\ud800`` alone is none), or None. Only surrogate
    escapes are looked at (an escape is one behind an odd number of backslashes)."""
    if b"\\u" not in body:
        return None
    escapes = [(m.start(2) - 1, m.end(), int(m.group(2), 16)) for m in _SURROGATE.finditer(body)
               if len(m.group(1)) % 2 == 1]
    i = 0
    while i < len(escapes):
        _, end, unit = escapes[i]
        if 0xD800 <= unit < 0xDC00 and i + 1 < len(escapes) and escapes[i + 1][0] == end + 1 \
                and escapes[i + 1][2] >= 0xDC00:
            i += 2  # a high surrogate followed at once by a low one: a pair
            continue
        return f"\\u{unit:04x}"
    return None


def validate(model: type[M], data: Any) -> M:
    """``model.model_validate(data)``; a 422 naming the first bad field (see :func:`validation_error`)."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise validation_error(err.errors()) from None


def json_response(model: type[BaseModel], content: dict[str, Any], deadline: float | None = None) -> Response:
    """``content`` checked against the route's response ``model`` and encoded as JSON, in the
    worker thread (the route returns it as it is: FastAPI's own encoding would run on the event
    loop). Past ``deadline`` nothing is encoded (:class:`~lattices.ops.DeadlineExceeded`)."""
    check_deadline(deadline)
    body = model.model_validate(content).model_dump_json(by_alias=True)
    check_deadline(deadline)
    return Response(body, media_type="application/json")


def document_request_bodies(app: Any, models: dict[str, type[BaseModel]],
                            limits: dict[str, float] | None = None) -> None:
    """Put ``models`` (component name -> model) into the app's OpenAPI components: routes that read
    the raw body refer to them from ``openapi_extra``, and FastAPI does not register them itself.
    ``limits``: the server's own (:meth:`service.settings.Settings.limits`), published whole as
    ``info["x-afp-limits"]``, ``max_nbest`` also as the ``maximum`` of every ``nbest`` request
    field and query parameter, and ``max_sentences`` as the ``maxItems`` of a perplexity
    request's ``sentences``."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for name, model in models.items():
                extra = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(extra.pop("$defs", {}))
                components[name] = extra
            if limits is not None:
                schema.setdefault("info", {})["x-afp-limits"] = dict(limits)
                _publish_nbest_limit(schema, int(limits["max_nbest"]))
                sentences = components.get("PerplexityRequest", {}).get("properties", {}).get("sentences")
                if sentences is not None:
                    sentences["maxItems"] = int(limits["max_sentences"])
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi


def _publish_nbest_limit(schema: dict[str, Any], limit: int) -> None:
    """The ``nbest`` of request bodies and query strings gets ``maximum: limit``."""
    for name in models_with_nbest(schema):
        schema["components"]["schemas"][name]["properties"]["nbest"]["maximum"] = limit
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []) if isinstance(operation, dict) else ():
                if parameter.get("name") == "nbest" and parameter.get("in") == "query":
                    parameter["schema"]["maximum"] = limit


def models_with_nbest(schema: dict[str, Any]) -> list[str]:
    """The request components with an integer ``nbest`` field (a response's ``nbest`` is a list)."""
    return [name for name, component in schema.get("components", {}).get("schemas", {}).items()
            if component.get("properties", {}).get("nbest", {}).get("type") == "integer"]
