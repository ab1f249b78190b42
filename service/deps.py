"""FastAPI dependencies: the runtime, the bearer-token check, running work off the event loop."""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import anyio
from fastapi import Depends, Request

from service.engine import Runtime
from service.errors import APIError

T = TypeVar("T")


def get_runtime(request: Request) -> Runtime:
    runtime = getattr(request.app.state, "runtime", None)
    if runtime is None:
        raise APIError(503, "not_ready", "the model is not loaded yet")
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def require_token(request: Request) -> None:
    """With ``AFP_AUTH_TOKEN`` set, the request needs ``Authorization: Bearer <token>``."""
    token = request.app.state.settings.auth_token
    if not token:
        return
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), token.encode()):
        raise APIError(401, "unauthorized", "missing or wrong bearer token")


async def in_worker(runtime: Runtime, limiter: anyio.CapacityLimiter, fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args, deadline=...)`` in a worker thread under the request timeout.

    ``fn`` gets the deadline (``time.monotonic()`` seconds) so that it stops by itself; the
    request is answered 503 when the time runs out either way."""
    timeout = runtime.settings.request_timeout_s
    work = functools.partial(runtime.tracked, fn, *args, deadline=time.monotonic() + timeout)
    with anyio.move_on_after(timeout) as scope:
        return await anyio.to_thread.run_sync(work, limiter=limiter, abandon_on_cancel=True)
    assert scope.cancelled_caught
    raise APIError(503, "timeout", f"the request took longer than {timeout} s")
