"""Tools that must run as tasks (`execution.taskSupport: "required"`), called for clients that cannot.

Tasks (2025-11-25) let a server answer `tools/call` at once with a task id, and the result later
(`tasks/result`). A tool that requires them refuses a plain call. A client's task-augmented call
(the front puts its `task` in the call's scope) goes to the server as one, and its
`CreateTaskResult` comes back inside a stand-in tool result, so the call takes the engine's usual
path (policy, pinned arguments, audit) on its way; for every other call (a 2026-07-28
client, which has no tasks in its revision, or a client that ignores `taskSupport`) the gateway
runs the task itself: it sends the task-augmented call, then `tasks/result`, which the server
holds until the task ends, and answers the plain call with that result. Requests the server sends
meanwhile (an elicitation tied to the task) reach the client like those of any call. If the call
is cancelled or runs past its deadline, the task is cancelled on the server (`tasks/cancel`).
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import mcp_types
from mcp import MCPError
from pydantic import ValidationError

from toolscore.downstream.connection import Downstream
from toolscore.errors import DownstreamProtocolError
from toolscore.scope import CallScope
from toolscore.types import Arguments

__all__ = ["CREATED_TASK_META_KEY", "TASKS_EXTENSION", "call_as_task", "runs_as_task", "tool_result"]

_CANCEL_SECONDS = 5.0

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
"""The tasks extension's identifier (SEP-2663), under `capabilities.extensions` on both sides."""
CREATED_TASK_META_KEY = "toolscore/created-task"
"""Where the stand-in tool result of a relayed task-augmented call holds the server's `CreateTaskResult`."""


def _task_support(downstream: Downstream, tool: str) -> str:
    for found in downstream.tools:
        if found.name == tool:
            return (found.execution.task_support if found.execution is not None else None) or "forbidden"
    return "forbidden"


def runs_as_task(downstream: Downstream, tool: str, scope: CallScope) -> bool:
    """Whether a call of `tool` (the server's own name) goes as a task: the tool requires it, or
    the client asked for one (`scope.task`) and the tool supports it."""
    support = _task_support(downstream, tool)
    return support == "required" or (support == "optional" and scope.task is not None)


def tool_result(server: str, raw: dict[str, Any], what: str) -> mcp_types.CallToolResult:
    """A raw `tasks/result` (or `tools/call`) payload as a tool result, without the server's identity stamp."""
    try:
        result = mcp_types.CallToolResult.model_validate(raw, by_name=False)
    except ValidationError:
        raise DownstreamProtocolError(f"Server '{server}' sent a malformed result for {what}.", server=server) from None
    if result.meta and mcp_types.SERVER_INFO_META_KEY in result.meta:
        meta = {k: v for k, v in result.meta.items() if k != mcp_types.SERVER_INFO_META_KEY}
        result = result.model_copy(update={"meta": meta or None})
    return result


async def call_as_task(
    downstream: Downstream, tool: str, arguments: Arguments, *, scope: CallScope
) -> mcp_types.CallToolResult:
    """`Downstream.call` for a call that goes as a task (`runs_as_task`): created, then its result
    awaited, unless the client asked for the task itself (it then polls for the result).

    Raises:
        toolscore.errors.DownstreamUnavailable: not connected, or the connection broke.
        DownstreamProtocolError: the server answered with an error or something malformed.
    """
    what = f"the call to '{tool}'"
    asked = scope.task
    params = {"name": tool, "arguments": arguments, "task": dict(asked or {})}
    created = await _ask(downstream, "tools/call", params, what, scope)
    task = created.get("task")
    task_id = task.get("taskId") if isinstance(task, dict) else None
    if not isinstance(task_id, str):  # the server ran it at once after all: that is the result
        return tool_result(downstream.name, created, what)
    if asked is not None:  # the client polls for the result itself: the front answers with the task
        text = f"Task '{task_id}' created on server '{downstream.name}'."
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(type="text", text=text)],
            _meta={CREATED_TASK_META_KEY: {"server": downstream.name, "result": created}},
        )
    try:
        raw = await _ask(downstream, "tasks/result", {"taskId": task_id}, f"the result of task '{task_id}'", scope)
    except BaseException:
        # Best effort: the task's TTL ends it anyway.
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_SECONDS), contextlib.suppress(Exception):
            what = f"cancelling task '{task_id}'"
            await downstream.request_raw("tasks/cancel", {"taskId": task_id}, what, scope=scope)
        raise
    return tool_result(downstream.name, raw, what)


async def _ask(
    downstream: Downstream, method: str, params: dict[str, Any], what: str, scope: CallScope
) -> dict[str, Any]:
    try:
        return await downstream.request_raw(method, params, what, scope=scope)
    except MCPError as exc:
        raise DownstreamProtocolError.answered(downstream.name, what, exc.error) from None
