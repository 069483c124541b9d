"""FastAPI dependencies of the runtime server, as ``Annotated`` aliases."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

from fastapi import Depends, Header, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from gpu_runtime.client import protocol as p
from gpu_runtime.errors import EngineError
from gpu_runtime.runtime import InjectionRuntime
from gpu_runtime.server.errors import NotReadyError, UnauthorizedError
from gpu_runtime.server.state import ServerState


async def get_state(request: Request) -> ServerState:
    state: ServerState = request.app.state.server
    return state


StateDep = Annotated[ServerState, Depends(get_state)]


async def require_service_token(
    state: StateDep, authorization: Annotated[str | None, Header()] = None
) -> None:
    scheme, _, token = (authorization or "").partition(" ")
    expected = state.settings.service_token
    if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip(), expected):
        raise UnauthorizedError("this API needs 'Authorization: Bearer <service token>'")


ServiceTokenDep = Depends(require_service_token)


async def get_runtime(state: StateDep) -> InjectionRuntime:
    runtime = state.runtime
    if runtime is None:
        if state.failure:
            raise EngineError(state.failure)
        raise NotReadyError("the engine is starting")
    if runtime.dead:
        raise EngineError("the engine has stopped; the runtime is restarting")
    return runtime


RuntimeDep = Annotated[InjectionRuntime, Depends(get_runtime)]


Body = TypeVar("Body", bound=BaseModel)


def json_body(model: type[Body]) -> Callable[[Request], Awaitable[Body]]:
    """The body parsed and validated in one pass by pydantic-core (``model_validate_json``).
    FastAPI's own body handling runs ``json.loads`` and then validates the Python objects: for
    a k=50 generate request (~1,700 token ids, 51 spans) that was 0.5 ms against 0.23 here on
    the CPU box, and the runtime's event loop parses every chat's body. Errors stay 422s."""

    async def parse(request: Request) -> Body:
        try:
            return model.model_validate_json(await request.body())
        except ValidationError as exc:
            raise RequestValidationError(exc.errors(include_url=False)) from None

    return parse


GenerateBody = Annotated[p.GenerateRequest, Depends(json_body(p.GenerateRequest))]
KeysBody = Annotated[p.KeysRequest, Depends(json_body(p.KeysRequest))]
EmbedBody = Annotated[p.EmbedRequest, Depends(json_body(p.EmbedRequest))]
