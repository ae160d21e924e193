"""The gateway's own plans as tasks: a task-augmented `orchestrate` answered at once, run in the background.

Theory of operation. A handshake-era client's `tools/call orchestrate` carrying `task` gets a
`CreateTaskResult` at once (status `working`, a random id), and the call itself runs in this
object's task group, which lives as long as the gateway and is cancelled when it stops. The call
takes the front's whole `orchestrate` path (episodes, tracing, the error boundary), so
`tasks/result` answers exactly what a plain call would have answered; it holds until the plan
ends. A result with `isError` ends the task `failed`. `tasks/cancel` cancels the running plan: its
in-flight steps are cancelled downstream and audited as cancelled. Once the `CreateTaskResult` has
gone, the plan's request has no back-channel: a downstream's elicitation or sampling during a step
gets an error, as on a connection that cannot ask.

Each task belongs to the client that created it: the front keeps a client's task ids in its
`TaskRoutes` under the reserved server name `GATEWAY` (no configured server has an empty name), and
this store checks the owner again. A task is kept for its `ttl` from creation (the client's
request, capped at `MAX_TTL_MS`), then forgotten, cancelled first if it still runs; a client has at
most `MAX_PER_CALLER` (the oldest finished ones make room); all of a client's tasks are cancelled
and forgotten when it leaves, since no one could reach them any more.

The same tasks serve the tasks extension of 2026-07-28 clients (`toolscore.front.task_extension`):
`begin` starts one, `detailed` is its `tasks/get` (the result or error inlined), `update` its
`tasks/update`, `end` its `tasks/cancel`. There a plan whose answer is an input-required result
(the gateway's own question, say a plan's approval) parks the task `input_required` with those
requests; once `tasks/update` has answered every one, the plan runs again with the answers and the
request state, as the client's own retry would.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio
import mcp_types
import structlog
from anyio.abc import TaskGroup
from mcp import MCPError
from pydantic import ValidationError

__all__ = [
    "DEFAULT_TTL_MS",
    "GATEWAY",
    "MAX_PER_CALLER",
    "MAX_TTL_MS",
    "POLL_INTERVAL_MS",
    "PlanTasks",
    "running_plans",
]

log = structlog.get_logger("toolscore.tasks")

GATEWAY = ""
"""The pseudo-server that owns the gateway's own tasks in `TaskRoutes`."""
DEFAULT_TTL_MS = 3_600_000
"""How long a task is kept when its client asks for no `ttl`."""
MAX_TTL_MS = 86_400_000
"""The longest a task is kept, whatever its client asks."""
POLL_INTERVAL_MS = 500
"""The `pollInterval` suggested to clients."""
MAX_PER_CALLER = 100
"""Plan tasks a client may hold at once; past that the oldest finished one is forgotten."""
_CANCEL_WAIT_SECONDS = 5.0
"""How long `tasks/cancel` waits for the plan's steps to wind down before it answers."""
_RELATED_TASK = "io.modelcontextprotocol/related-task"

RunPlan = Callable[[], Awaitable[Any]]
"""The plan's `tools/call` on the front's usual path; its wire result (a dict)."""
RunRound = Callable[[dict[str, Any] | None, str | None], Awaitable[Any]]
"""The same call with the client's input responses and the request state of an earlier round."""


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat()


@dataclass(eq=False)
class _PlanTask:
    task_id: str
    caller: str
    ttl: int
    created: float = field(default_factory=time.time)
    expires: float = 0.0
    updated: float = field(default_factory=time.time)
    status: mcp_types.TaskStatus = "working"
    message: str | None = "The plan is running."
    answer: dict[str, Any] | None = None
    error: MCPError | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)
    rerun: RunRound | None = None
    """Set for an extension task: how its call runs again once its input requests are answered."""
    requests: dict[str, Any] = field(default_factory=dict)
    """The input requests still unanswered while the task is `input_required`."""
    responses: dict[str, Any] = field(default_factory=dict)
    state: str | None = None

    def __post_init__(self) -> None:
        self.expires = time.monotonic() + self.ttl / 1000

    def finish(self, status: mcp_types.TaskStatus, message: str | None) -> None:
        if self.status == "working":  # the first end wins: a plan cancelled as it finished stays cancelled
            self.status, self.message, self.updated = status, message, time.time()

    def extension_status(self) -> str:
        """The status the tasks extension reports: a result with `isError` is `completed`, not `failed`."""
        if self.answer is not None and self.status == "failed":
            return "completed"
        return self.status

    def extension_wire(self) -> dict[str, Any]:
        """The task as the tasks extension spells it (`ttlMs`, `pollIntervalMs`)."""
        task: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.extension_status(),
            "createdAt": _iso(self.created),
            "lastUpdatedAt": _iso(self.updated),
            "ttlMs": self.ttl,
            "pollIntervalMs": POLL_INTERVAL_MS,
        }
        if self.message is not None:
            task["statusMessage"] = self.message
        return task

    def wire(self) -> dict[str, Any]:
        task: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": _iso(self.created),
            "lastUpdatedAt": _iso(self.updated),
            "ttl": self.ttl,
            "pollInterval": POLL_INTERVAL_MS,
        }
        if self.message is not None:
            task["statusMessage"] = self.message
        return task


def _asks(answer: object) -> bool:
    """Whether a call's wire result is an input-required result (2026-07-28) with requests in it."""
    return (
        isinstance(answer, dict)
        and answer.get("resultType") == "input_required"
        and isinstance(answer.get("inputRequests"), dict)
        and bool(answer["inputRequests"])
    )


def _unknown(task_id: str) -> MCPError:
    return MCPError(mcp_types.INVALID_PARAMS, f"Unknown task: {task_id}", data={"taskId": task_id})


class PlanTasks:
    """The gateway's own tasks (plans run in the background), per client, while `running_plans` is open."""

    def __init__(self, *, offered: bool, limit: int = MAX_PER_CALLER) -> None:
        """Args:
        offered: Whether `orchestrate` may run as a task at all (policy does not forbid the tool).
        """
        self.offered = offered
        self._limit = limit
        self._tasks: dict[str, _PlanTask] = {}
        self._group: TaskGroup | None = None

    @property
    def running(self) -> bool:
        """Whether a task made now would run (the gateway is open)."""
        return self.offered and self._group is not None

    def start(self, caller: str, ttl: object, run: RunPlan) -> dict[str, Any]:
        """Run `run` in the background as a task of `caller`'s; the `CreateTaskResult`.

        Raises:
            MCPError: the caller already has `limit` plans running.
        """
        return {"task": self._begin(caller, ttl, run).wire()}

    def begin(self, caller: str, run: RunRound) -> dict[str, Any]:
        """An extension task: `run(None, None)` in the background; the task, as the extension spells it.

        Raises:
            MCPError: the caller already has `limit` plans running.
        """
        task = self._begin(caller, None, lambda: run(None, None))
        task.rerun = run
        return task.extension_wire()

    def _begin(self, caller: str, ttl: object, run: RunPlan) -> _PlanTask:
        if self._group is None:
            raise MCPError(mcp_types.INTERNAL_ERROR, "The gateway is not running plans as tasks.")
        self._prune()
        mine = [t for t in self._tasks.values() if t.caller == caller]
        if len(mine) >= self._limit:
            finished = [t for t in mine if t.done.is_set()]
            if not finished:
                raise MCPError(
                    mcp_types.INVALID_REQUEST,
                    f"Too many plans running as tasks ({self._limit}): wait for one to end, or cancel one.",
                )
            del self._tasks[finished[0].task_id]  # the oldest: the dict keeps creation order
        asked = ttl if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0 else DEFAULT_TTL_MS
        kept = min(asked, MAX_TTL_MS)
        task = _PlanTask(secrets.token_urlsafe(16), caller, kept)
        self._tasks[task.task_id] = task
        self._group.start_soon(self._run, task, run, name=f"plan-task:{task.task_id}")
        return task

    async def _run(self, task: _PlanTask, run: RunPlan) -> None:
        try:
            with task.scope:
                try:
                    answer = await run()
                except MCPError as exc:  # what a plain call would have answered as a JSON-RPC error
                    task.error = exc
                    task.finish("failed", exc.error.message)
                except ValidationError:
                    task.error = MCPError(mcp_types.INVALID_PARAMS, "Invalid request parameters")
                    task.finish("failed", task.error.error.message)
                except Exception:  # the task group's boundary: one plan's bug must not stop the gateway
                    log.exception("plan task failed", task=task.task_id)
                    task.error = MCPError(mcp_types.INTERNAL_ERROR, "Internal gateway error (see the gateway log).")
                    task.finish("failed", task.error.error.message)
                else:
                    if _asks(answer) and task.rerun is not None:
                        task.requests = dict(answer["inputRequests"])
                        state = answer.get("requestState")
                        task.state = state if isinstance(state, str) else None
                        task.responses = {}
                        task.status, task.message = "input_required", "The plan waits for the client's answers."
                        task.updated = time.time()
                        return
                    task.answer = answer if isinstance(answer, dict) else {}
                    if task.answer.get("isError") is True:
                        task.finish("failed", "The plan's result is an error.")
                    else:
                        task.finish("completed", None)
        finally:
            # Cancelled: by tasks/cancel, its client leaving, its ttl, or the gateway stopping.
            task.finish("cancelled", "The plan was cancelled.")
            task.done.set()

    def _prune(self) -> None:
        now = time.monotonic()
        for task in [t for t in self._tasks.values() if t.expires <= now]:
            task.scope.cancel()
            del self._tasks[task.task_id]

    def _find(self, caller: str, task_id: str) -> _PlanTask:
        self._prune()
        task = self._tasks.get(task_id)
        if task is None or task.caller != caller:
            raise _unknown(task_id)
        return task

    def get(self, caller: str, task_id: str) -> dict[str, Any]:
        """`tasks/get`: the task's status.

        Raises:
            MCPError: invalid params, `caller` has no such task (or it was forgotten).
        """
        return self._find(caller, task_id).wire()

    async def result(self, caller: str, task_id: str) -> dict[str, Any]:
        """`tasks/result`: the plan's tool result, once it has ended.

        Raises:
            MCPError: no such task; the plan was cancelled; or the error a plain call would have raised.
        """
        task = self._find(caller, task_id)
        await task.done.wait()
        if task.status == "cancelled" or task.answer is None:
            if task.error is not None:
                raise task.error
            raise MCPError(mcp_types.INVALID_REQUEST, f"Task '{task_id}' was cancelled: it has no result.")
        meta = {**(task.answer.get("_meta") or {}), _RELATED_TASK: {"taskId": task_id}}
        return {**task.answer, "_meta": meta}

    async def cancel(self, caller: str, task_id: str) -> dict[str, Any]:
        """`tasks/cancel`: cancel the running plan; answers once its steps have wound down (or a few seconds).

        Raises:
            MCPError: invalid params, no such task, or it has already ended.
        """
        task = self._find(caller, task_id)
        if task.status != "working":
            raise MCPError(
                mcp_types.INVALID_PARAMS,
                f"Cannot cancel task '{task_id}': it has already ended ({task.status}).",
                data={"taskId": task_id},
            )
        task.finish("cancelled", "Cancelled by the client.")
        task.scope.cancel()
        with anyio.move_on_after(_CANCEL_WAIT_SECONDS):
            await task.done.wait()
        return task.wire()

    def detailed(self, caller: str, task_id: str) -> dict[str, Any]:
        """The extension's `tasks/get`: the task, with its result, error or input requests inlined.

        Raises:
            MCPError: invalid params, `caller` has no such task (or it was forgotten).
        """
        task = self._find(caller, task_id)
        out = task.extension_wire()
        status = out["status"]
        if status == "completed" and task.answer is not None:
            out["result"] = task.answer
        elif status == "failed" and task.error is not None:
            out["error"] = task.error.error.model_dump(by_alias=True, mode="json", exclude_none=True)
        elif status == "input_required":
            out["inputRequests"] = dict(task.requests)
        return out

    def update(self, caller: str, task_id: str, responses: dict[str, Any]) -> None:
        """The extension's `tasks/update`: answers to the task's pending input requests.

        Answers to requests the task is not waiting on are ignored; once none is left unanswered,
        the call runs again with every answer and the request state.

        Raises:
            MCPError: invalid params, `caller` has no such task (or it was forgotten).
        """
        task = self._find(caller, task_id)
        if task.status != "input_required" or task.rerun is None or self._group is None:
            return
        for key, answer in responses.items():
            if key in task.requests:
                del task.requests[key]
                task.responses[key] = answer
        task.updated = time.time()
        if task.requests:
            return
        rerun, answers, state = task.rerun, task.responses, task.state
        task.status, task.message = "working", "The plan is running."
        task.responses, task.state = {}, None
        task.scope, task.done = anyio.CancelScope(), anyio.Event()
        self._group.start_soon(self._run, task, lambda: rerun(answers, state), name=f"plan-task:{task.task_id}")

    async def end(self, caller: str, task_id: str) -> None:
        """The extension's `tasks/cancel`: cancel the task if it has not ended (an ended one is left
        as it is); returns once its steps have wound down (or a few seconds).

        Raises:
            MCPError: invalid params, `caller` has no such task (or it was forgotten).
        """
        task = self._find(caller, task_id)
        if task.status not in ("working", "input_required"):
            return
        task.status, task.message, task.updated = "cancelled", "Cancelled by the client.", time.time()
        task.scope.cancel()
        with anyio.move_on_after(_CANCEL_WAIT_SECONDS):
            await task.done.wait()

    def listed(self, caller: str, ids: dict[str, str]) -> list[dict[str, Any]]:
        """`tasks/list`: `caller`'s tasks among `ids` (own id -> the id the client sees)."""
        self._prune()
        return [
            {**t.wire(), "taskId": ids[t.task_id]}
            for t in self._tasks.values()
            if t.caller == caller and t.task_id in ids
        ]

    def forget(self, caller: str) -> None:
        """The client left: no one can reach its tasks, so they stop."""
        for task in [t for t in self._tasks.values() if t.caller == caller]:
            task.scope.cancel()
            del self._tasks[task.task_id]


@asynccontextmanager
async def running_plans(plans: PlanTasks | None) -> AsyncIterator[None]:
    """Run `plans`' tasks while open; on exit every plan still running is cancelled."""
    if plans is None:
        yield
        return
    async with anyio.create_task_group() as group:
        plans._group = group
        try:
            yield
        finally:
            plans._group = None
            group.cancel_scope.cancel()
