"""GET /v1/models: the served model."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from service.deps import RuntimeDep
from service.schemas import ModelsResponse

router = APIRouter(tags=["models"])


@router.get("/v1/models", response_model=ModelsResponse, summary="The served model")
async def models(runtime: RuntimeDep) -> dict[str, Any]:
    return {"models": [runtime.info()]}
