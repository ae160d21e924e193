"""Tasks through the gateway: task-augmented `tools/call` and `tasks/get|result|list|cancel` (2025-11-25).

Theory of operation. A handshake-era client's `tools/call` carrying `task` runs the front's usual
call path (policy, pinned arguments, confirmation, audit) with the task in its scope, so the call
reaches its server task-augmented (`toolscore.downstream.tasks`); the server's `CreateTaskResult`
comes back inside a stand-in tool result, which a server middleware here swaps for the
`CreateTaskResult` itself (the SDK would refuse it from a `tools/call` handler). A tool that does
not support tasks simply answers the call.

The task id is the server's own, unchanged, unless another server already gave this client a
task of that id: that one is renamed `<server>:<id>` (in every result that names it). Each
client's task ids map to their servers (at most `MAX_TASKS_PER_CALLER`, the oldest forgotten
first, all of them when the client leaves); `tasks/*` with an id the client was not given is
an invalid-params error, so one client can neither see nor cancel another's tasks on a shared
server. `tasks/list` merges every server's list, keeping only the caller's tasks. `tasks/result`
goes through the engine as the pseudo-tool `tasks/result` of its server, so post-execution
policy (redaction, size limits) and the audit log apply to the result as to a call's.

The gateway's own `orchestrate` runs as a task of its own when asked (`toolscore.front.plan_tasks`):
its tasks sit in the same routes under the pseudo-server `GATEWAY`, so the same ownership holds.
For 2026-07-28 clients the same handlers speak the tasks extension instead
(`toolscore.front.task_extension`): the gateway's own tasks only.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import mcp_types
import structlog
from jsonschema.validators import validator_for
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from toolscore._engine import ToolExecutionEngine
from toolscore.downstream.backchannel import on_behalf_of
from toolscore.downstream.hub import DownstreamHub
from toolscore.downstream.registry import Route
from toolscore.downstream.tasks import CREATED_TASK_META_KEY, tool_result
from toolscore.errors import DownstreamProtocolError, Rejected, TaskStarted, ToolscoreError
from toolscore.front.callers import Callers
from toolscore.front.catalog import PeerFor
from toolscore.front.plan_tasks import GATEWAY, PlanTasks
from toolscore.front.relaying import front_call_of
from toolscore.front.task_extension import (
    TaskUpdateParams,
    create_task_result,
    declares_tasks,
    missing_extension,
    removed_method,
    task_call,
)
from toolscore.loop.tool import DELEGATE
from toolscore.plan.tool import ORCHESTRATE
from toolscore.scope import CallScope

__all__ = ["MAX_TASKS_PER_CALLER", "RESULT_TOOL", "TaskHandlers", "TaskRoutes", "tasks_capability"]

log = structlog.get_logger("toolscore.tasks")

MAX_TASKS_PER_CALLER = 1000
"""Task ids remembered per client; past that the oldest is forgotten (its tasks/* then fail)."""
RESULT_TOOL = "tasks/result"
"""The pseudo-tool a task's result is audited and checked by policy as, per server."""
_RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"taskId": {"type": "string"}},
    "required": ["taskId"],
}
_RESULT_VALIDATOR = validator_for(_RESULT_SCHEMA)(_RESULT_SCHEMA)
_LIST_PAGES_MAX = 100
_RELATED_TASK = "io.modelcontextprotocol/related-task"


def tasks_capability() -> mcp_types.ServerTasksCapability:
    """What the front declares while some server declares tasks: listing, cancelling, task-augmented calls."""
    return mcp_types.ServerTasksCapability(
        list=mcp_types.TasksListCapability(),
        cancel=mcp_types.TasksCancelCapability(),
        requests=mcp_types.ServerTasksRequestsCapability(
            tools=mcp_types.TasksToolsCapability(call=mcp_types.TasksCallCapability())
        ),
    )


class TaskRoutes:
    """Each client's task ids: the server that owns each, and the server's own id."""

    def __init__(self, limit: int = MAX_TASKS_PER_CALLER) -> None:
        self._limit = limit
        self._by_caller: dict[str, OrderedDict[str, tuple[str, str]]] = {}

    def add(self, caller: str, server: str, task_id: str, *, opaque: bool = False) -> str:
        """Remember a task `server` created for `caller`; the id the client sees: the server's own,
        or (`opaque`) one of the gateway's that nobody can guess, where clients that cannot be told
        apart (stateless and anonymous) may share a caller while a server's ids count up."""
        tasks = self._by_caller.setdefault(caller, OrderedDict())
        public = secrets.token_urlsafe(16) if opaque else task_id
        if (known := tasks.get(public)) is not None and known[0] != server:
            public = f"{server}:{task_id}"  # another server's task already has this id
        tasks[public] = (server, task_id)
        tasks.move_to_end(public)
        while len(tasks) > self._limit:
            tasks.popitem(last=False)
        return public

    def route(self, caller: str, public: str) -> tuple[str, str]:
        """The server and its own id for a task id the client gave.

        Raises:
            MCPError: invalid params, the client was given no task of that id.
        """
        tasks = self._by_caller.get(caller)
        found = tasks.get(public) if tasks is not None else None
        if found is None:
            raise MCPError(mcp_types.INVALID_PARAMS, f"Unknown task: {public}", data={"taskId": public})
        return found

    def owned(self, caller: str) -> dict[str, dict[str, str]]:
        """Per server, the caller's tasks: the server's own id -> the id the client sees."""
        out: dict[str, dict[str, str]] = {}
        for public, (server, task_id) in self._by_caller.get(caller, OrderedDict()).items():
            out.setdefault(server, {})[task_id] = public
        return out

    def forget(self, caller: str) -> None:
        """The client left: its tasks run on, but no one can reach them through the gateway."""
        self._by_caller.pop(caller, None)


def _renamed(raw: dict[str, Any], public: str) -> dict[str, Any]:
    """`raw` with its task id (top level, under `task`, in the related-task `_meta`) shown as `public`."""
    out = dict(raw)
    if "taskId" in out:
        out["taskId"] = public
    task = out.get("task")
    if isinstance(task, Mapping) and "taskId" in task:
        out["task"] = {**task, "taskId": public}
    meta = out.get("_meta")
    if isinstance(meta, Mapping) and isinstance(related := meta.get(_RELATED_TASK), Mapping):
        out["_meta"] = {**meta, _RELATED_TASK: {**related, "taskId": public}}
    return out


def _failure(exc: ToolscoreError) -> MCPError:
    """A JSON-RPC error for a gateway-side failure: the server's own error where it sent one."""
    if isinstance(exc, DownstreamProtocolError) and exc.error is not None:
        return MCPError.from_error_data(exc.error)
    if isinstance(exc, Rejected):
        return MCPError(mcp_types.INVALID_REQUEST, str(exc))
    return MCPError(mcp_types.INTERNAL_ERROR, str(exc))


def _result_route(hub: DownstreamHub, server: str) -> Route:
    tool = mcp_types.Tool(name=RESULT_TOOL, input_schema=_RESULT_SCHEMA)
    canonical = f"{server}{hub.config.settings.separator}{RESULT_TOOL}"
    return Route(RESULT_TOOL, server, RESULT_TOOL, tool, _RESULT_VALIDATOR, canonical=canonical, local_name=RESULT_TOOL)


class TaskHandlers:
    """Task-augmented calls and `tasks/*` through the gateway, and the gateway's own tasks."""

    def __init__(
        self,
        hub: DownstreamHub,
        engine: ToolExecutionEngine,
        callers: Callers,
        peer_for: PeerFor,
        *,
        plans: bool = False,
    ) -> None:
        """Args:
        hub: The downstreams that hold the tasks.
        engine: Runs `tasks/result` as the pseudo-tool of its server (policy, audit).
        callers: Who is calling; their tasks are forgotten when they leave.
        peer_for: The client of a request, for its server's requests and logs.
        plans: Whether `orchestrate` runs as a task when asked (policy does not forbid it).
        """
        self._hub = hub
        self._engine = engine
        self._callers = callers
        self._peer_for = peer_for
        self._routes = TaskRoutes()
        self.plans = PlanTasks(offered=plans)
        """The gateway's own tasks: `orchestrate` run in the background (by `running_plans`)."""

    def register(self, server: Server[Any]) -> None:
        """Serve task-augmented calls (a middleware) and `tasks/*` on `server`; a client's tasks go when it does."""
        self._callers.on_gone(self._routes.forget)
        self._callers.on_gone(self.plans.forget)
        server.middleware.append(self.task_calls)
        server.add_request_handler("tasks/get", mcp_types.GetTaskRequestParams, self.get_task)
        server.add_request_handler("tasks/result", mcp_types.GetTaskPayloadRequestParams, self.task_result)
        server.add_request_handler("tasks/cancel", mcp_types.CancelTaskRequestParams, self.cancel_task)
        server.add_request_handler("tasks/list", mcp_types.PaginatedRequestParams, self.list_tasks)
        server.add_request_handler("tasks/update", TaskUpdateParams, self.update_task)

    async def task_calls(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        """The middleware: a task-augmented `tools/call` answered with its task, under the id the client sees."""
        params = ctx.params
        if (
            ctx.method == "tools/call"
            and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
            and isinstance(params, Mapping)
            and params.get("name") in (ORCHESTRATE, DELEGATE)
            and self.plans.running
            and declares_tasks(ctx)
        ):
            # The tasks extension: the server decides, so a plan or a delegation is a task whatever
            # the request says of tasks; answered at once, run in the background.
            caller = self._callers.identify(ctx)
            begun = self.plans.begin(caller, task_call(ctx, call_next))
            return create_task_result({**begun, "taskId": self._routes.add(caller, GATEWAY, begun["taskId"])})
        if (
            ctx.method != "tools/call"
            or ctx.request_id is None
            or ctx.protocol_version in MODERN_PROTOCOL_VERSIONS  # the extension's tasks: above
            or not isinstance(params, Mapping)
            or not isinstance(task := params.get("task"), Mapping)
        ):
            return await call_next(ctx)
        name = str(params.get("name"))
        if name == ORCHESTRATE and self.plans.running:
            # The plan answers later, from the background: the front's own orchestrate path, unchanged.
            caller = self._callers.identify(ctx)
            started = self.plans.start(caller, task.get("ttl"), lambda: call_next(ctx))
            return _renamed(started, self._routes.add(caller, GATEWAY, started["task"]["taskId"]))
        if self._hub.registry.get(name) is None:
            # Only a downstream's own tool: a plan's steps must not turn into tasks.
            return await call_next(ctx)
        answer = await call_next(ctx)  # the handler puts the task in the call's scope
        meta = answer.get("_meta") if isinstance(answer, dict) else None
        created = meta.get(CREATED_TASK_META_KEY) if isinstance(meta, dict) else None
        if not isinstance(created, dict):
            return answer  # answered without a task: the tool does not support them, or an error
        public = self._routes.add(self._callers.identify(ctx), created["server"], created["result"]["task"]["taskId"])
        return _renamed(created["result"], public)

    async def _forward(self, ctx: ServerRequestContext[Any], method: str, task_id: str) -> dict[str, Any]:
        caller = self._callers.identify(ctx)
        name, own_id = self._routes.route(caller, task_id)
        if name == GATEWAY:
            if method == "tasks/cancel":
                return _renamed(await self.plans.cancel(caller, own_id), task_id)
            return _renamed(self.plans.get(caller, own_id), task_id)
        try:
            with on_behalf_of(caller, self._peer_for(ctx), ctx.protocol_version) as scope:
                what = f"{method} of task '{task_id}'"
                raw = await self._hub.request_raw(name, method, {"taskId": own_id}, what, scope=scope)
        except MCPError:
            raise  # the server's own error, unchanged
        except ToolscoreError as exc:
            raise _failure(exc) from None
        return _renamed(raw, task_id)

    def started(self, ctx: ServerRequestContext[Any], started: TaskStarted) -> dict[str, Any]:
        """The answer to a 2026-07-28 client's call that `started.server` runs as a task of the
        extension: its `CreateTaskResult`, under the id the client sees (remembered as that server's)."""
        caller = self._callers.identify(ctx)
        public = self._routes.add(caller, started.server, started.result["taskId"], opaque=True)
        return _renamed(started.result, public)

    def _extension_task(self, ctx: ServerRequestContext[Any], method: str, task_id: str) -> tuple[str, str, str]:
        """A 2026-07-28 request's task: its caller, the server that runs it (`GATEWAY` for the
        gateway's own) and that server's id for it.

        Raises:
            MCPError: -32021 without the extension; invalid params for an id the client was not given.
        """
        if not declares_tasks(ctx):
            raise missing_extension(method)
        caller = self._callers.identify(ctx)
        name, own_id = self._routes.route(caller, task_id)
        return caller, name, own_id

    async def _relayed(
        self, ctx: ServerRequestContext[Any], method: str, params: dict[str, Any], server: str, public: str
    ) -> dict[str, Any]:
        """A tasks-extension request about a server's task, relayed to it as the client's own (over
        the connection that runs the task); its answer with the id the client sees."""
        caller = self._callers.identify(ctx)
        front = front_call_of(ctx, None, None)
        try:
            with on_behalf_of(caller, self._peer_for(ctx), ctx.protocol_version, front=front) as scope:
                raw = await self._hub.request_raw(server, method, params, f"{method} of task '{public}'", scope=scope)
        except MCPError:
            raise  # the server's own error, unchanged
        except ToolscoreError as exc:
            raise _failure(exc) from None
        return _renamed(raw, public)

    async def get_task(self, ctx: ServerRequestContext[Any], params: mcp_types.GetTaskRequestParams) -> dict[str, Any]:
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            caller, name, own_id = self._extension_task(ctx, "tasks/get", params.task_id)
            if name != GATEWAY:
                return await self._relayed(ctx, "tasks/get", {"taskId": own_id}, name, params.task_id)
            return {**self.plans.detailed(caller, own_id), "taskId": params.task_id}
        return await self._forward(ctx, "tasks/get", params.task_id)

    async def cancel_task(
        self, ctx: ServerRequestContext[Any], params: mcp_types.CancelTaskRequestParams
    ) -> dict[str, Any]:
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            caller, name, own_id = self._extension_task(ctx, "tasks/cancel", params.task_id)
            if name != GATEWAY:
                return await self._relayed(ctx, "tasks/cancel", {"taskId": own_id}, name, params.task_id)
            await self.plans.end(caller, own_id)
            return {}  # the extension's ack: the status is for tasks/get to tell
        return await self._forward(ctx, "tasks/cancel", params.task_id)

    async def update_task(self, ctx: ServerRequestContext[Any], params: TaskUpdateParams) -> dict[str, Any]:
        """The extension's `tasks/update`: answers to the input requests of a task waiting on them."""
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            raise removed_method("tasks/update")  # the extension's method; 2025-11-25 has none
        caller, name, own_id = self._extension_task(ctx, "tasks/update", params.task_id)
        if name != GATEWAY:
            answers = {"taskId": own_id, "inputResponses": params.input_responses}
            return await self._relayed(ctx, "tasks/update", answers, name, params.task_id)
        self.plans.update(caller, own_id, params.input_responses)
        return {}

    async def task_result(
        self, ctx: ServerRequestContext[Any], params: mcp_types.GetTaskPayloadRequestParams
    ) -> dict[str, Any]:
        """The task's result from its server, through the engine as `tasks/result`."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            raise removed_method("tasks/result")  # the extension inlines the result in tasks/get
        caller = self._callers.identify(ctx)
        name, own_id = self._routes.route(caller, params.task_id)
        if name == GATEWAY:  # the plan's result went through the engine step by step already
            return _renamed(await self.plans.result(caller, own_id), params.task_id)
        what = f"the result of task '{params.task_id}'"
        hub = self._hub

        # An elicitation tied to the task comes while the server holds this request.
        with on_behalf_of(caller, self._peer_for(ctx), ctx.protocol_version) as scope:

            async def invoke() -> mcp_types.CallToolResult:
                try:
                    raw = await hub.request_raw(name, RESULT_TOOL, {"taskId": own_id}, what, scope=scope)
                except MCPError as exc:
                    raise DownstreamProtocolError.answered(name, what, exc.error) from None
                return tool_result(name, raw, what)

            outcome = await self._engine.execute(
                RESULT_TOOL,
                {"taskId": own_id},
                request_id=ctx.request_id,
                route=_result_route(hub, name),
                invoke=invoke,
                scope=scope,
            )
        if outcome.error is not None:
            raise _failure(outcome.error)
        dumped = outcome.result.model_dump(by_alias=True, mode="json", exclude_none=True)
        return _renamed(dumped, params.task_id)

    async def list_tasks(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> dict[str, Any]:
        """Every server's tasks of this caller's, merged (a server that fails is left out)."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            raise removed_method("tasks/list")  # the extension has no listing
        caller = self._callers.identify(ctx)
        merged: list[Any] = []
        for name, mine in self._routes.owned(caller).items():
            if name == GATEWAY:
                merged.extend(self.plans.listed(caller, mine))
                continue
            try:
                merged.extend(await self._listed(name, caller, mine))
            except (MCPError, ToolscoreError) as exc:  # one server's failure must not hide the others' tasks
                log.info("tasks/list failed", server=name, error=str(exc))
        return {"tasks": merged}

    async def _listed(self, name: str, caller: str, mine: dict[str, str]) -> list[Any]:
        found: list[Any] = []
        cursor: str | None = None
        for _ in range(_LIST_PAGES_MAX):
            page = await self._hub.request_raw(
                name, "tasks/list", {"cursor": cursor} if cursor else None, "tasks/list", scope=CallScope(caller)
            )
            for task in page.get("tasks") or ():
                if isinstance(task, Mapping) and (public := mine.get(str(task.get("taskId")))) is not None:
                    found.append({**task, "taskId": public})
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str):
                break
        return found
