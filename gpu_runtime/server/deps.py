"""FastAPI dependencies of the runtime server, as ``Annotated`` aliases."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Header, Request

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
