"""OpenAI's ``GET /v1/models``: the served model and the names the chat API answers to."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from backend.api import openai_compat
from backend.api.deps import ResourcesDep, TenantDep
from backend.api.schemas.common import AUTHED, error_responses
from backend.errors import ModelNotFoundError

router = APIRouter(prefix="/v1/models", tags=["chat"], responses=error_responses(*AUTHED))


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "inferscale"}


@router.get("")
def list_models(_: TenantDep, resources: ResourcesDep) -> dict[str, Any]:
    names = openai_compat.model_ids(resources.engine, resources.settings)
    return {"object": "list", "data": [_model(name) for name in names]}


@router.get("/{model_id:path}", responses=error_responses(404))
def get_model(model_id: str, _: TenantDep, resources: ResourcesDep) -> dict[str, Any]:
    if model_id not in openai_compat.model_ids(resources.engine, resources.settings):
        raise ModelNotFoundError(f"The model '{model_id}' does not exist")
    return _model(model_id)
