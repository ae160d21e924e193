"""The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) for 2026-07-28 clients: the gateway's own tasks.

Theory of operation. The front declares the extension (`capabilities.extensions`) to 2026-07-28
clients while `orchestrate` may run as a task. A 2026-07-28 client's `tools/call` of `orchestrate`
or `delegate` whose request declares the extension (`_meta` client capabilities) is answered at
once with a `CreateTaskResult` (`resultType: "task"`, flat: `taskId`, `status`, `createdAt`,
`lastUpdatedAt`, `ttlMs`, `pollIntervalMs`), and the call runs in the background on the front's
usual path (`toolscore.front.plan_tasks`): the server decides, so a legacy `task` param neither
asks nor hinders. `tasks/get` inlines the result once the task has completed (a result with
`isError` is `completed`, as the extension has it; `failed` is for a JSON-RPC error, inlined as
`error`), and the input requests while it is `input_required`; `tasks/update` answers them;
`tasks/cancel` answers an empty result, for an ended task too. Ids the client was not given are
-32602. A request that does not declare the extension gets -32021 from `tasks/get`,
`tasks/update` and `tasks/cancel`, and `orchestrate` answered whole. `tasks/result` and
`tasks/list` do not exist in that revision (-32601).

A downstream's own extension tasks are relayed: where a 2026-07-28 client's call, sent down as
its own (its capabilities declaring the extension), is answered with the server's
`CreateTaskResult`, the front answers with it (`TaskStarted`, `TaskHandlers.started`) under a task
id of its own that cannot be guessed, remembered as that server's for that client, and the
client's `tasks/get`, `tasks/update` and `tasks/cancel` of it go to that server over the same
connection, as the client's own. Not carried: `notifications/tasks` on the listen stream (optional).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import mcp_types
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.server.context import CallNext
from pydantic import Field

from toolscore.downstream.tasks import TASKS_EXTENSION

__all__ = [
    "TASKS_EXTENSION",
    "TaskUpdateParams",
    "create_task_result",
    "declares_tasks",
    "missing_extension",
    "removed_method",
    "task_call",
]


class TaskUpdateParams(mcp_types.RequestParams):
    """`tasks/update`'s params: the task, and answers keyed by the ids of its input requests."""

    task_id: str
    input_responses: dict[str, Any] = Field(default_factory=dict)


def declares_tasks(ctx: ServerRequestContext[Any]) -> bool:
    """Whether this request's client declares the tasks extension (2026-07-28: per request)."""
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and TASKS_EXTENSION in (capabilities.extensions or {})


def missing_extension(method: str) -> MCPError:
    """-32021 for a `tasks/*` request whose client did not declare the extension."""
    data: dict[str, Any] = {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
    return MCPError(
        mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"{method} needs the '{TASKS_EXTENSION}' extension in the request's client capabilities",
        data=data,
    )


def removed_method(method: str) -> MCPError:
    """-32601 for a 2025-11-25 `tasks/*` method the extension removed."""
    return MCPError(mcp_types.METHOD_NOT_FOUND, "Method not found", data=method)


def create_task_result(task: Mapping[str, Any]) -> dict[str, Any]:
    """The `CreateTaskResult` of a task the extension spells as `task`."""
    return {"resultType": "task", **task}


def task_call(ctx: ServerRequestContext[Any], call_next: CallNext) -> Any:
    """The call a task runs (again): `ctx`'s `tools/call`, with a later round's answers and state."""

    async def run(responses: dict[str, Any] | None, state: str | None) -> Any:
        if responses is None:
            return await call_next(ctx)
        params = dict(ctx.params) if isinstance(ctx.params, Mapping) else {}
        params["inputResponses"] = responses
        params.pop("requestState", None)
        if state is not None:
            params["requestState"] = state
        return await call_next(replace(ctx, params=params))

    return run
