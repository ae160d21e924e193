"""The front MCP server: every routed tool as a passthrough, over both protocol eras.

This module is toolscore's one error boundary toward clients. Anticipated failures are already
tool error results when the engine returns; anything else (a bug) is logged with its traceback
and answered with a generic tool error, never a JSON-RPC error or a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import mcp_types
import structlog
from mcp import MCPError
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ToolsListChanged
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from toolscore._engine import CallOutcome, ConfirmFn, ToolExecutionEngine, error_result
from toolscore._json import scrub_unpaired_surrogates
from toolscore._sdk import connection_of
from toolscore._version import __version__
from toolscore.downstream.backchannel import on_behalf_of
from toolscore.downstream.hub import DownstreamHub
from toolscore.downstream.registry import Route
from toolscore.downstream.skills import SKILLS_EXTENSION
from toolscore.errors import DownstreamProtocolError, InputRequired, Rejected, TaskStarted
from toolscore.front.callers import Callers
from toolscore.front.catalog import CatalogHandlers
from toolscore.front.confirm import Sealer, confirmer, plan_approver
from toolscore.front.express import ExpressLane
from toolscore.front.fast import FastCalls
from toolscore.front.forward import FrontPeer, FrontPeers, LoggingHandlers, LogLevels, RootsHandlers
from toolscore.front.lanes import Lanes
from toolscore.front.listen import ListenHandlers
from toolscore.front.plan_tasks import PlanTasks
from toolscore.front.relaying import front_call_of
from toolscore.front.skills import SkillHandlers
from toolscore.front.task_extension import TASKS_EXTENSION
from toolscore.front.tasks import TaskHandlers, tasks_capability
from toolscore.loop.tool import DELEGATE, Delegator
from toolscore.plan.tool import ORCHESTRATE, Orchestrator
from toolscore.scope import CallScope
from toolscore.spill import ResultStore
from toolscore.telemetry import tracing
from toolscore.toolhub import ToolHub
from toolscore.toolhub.catalog import (
    call_capability_tool,
    call_tool_tool,
    search_mode_orchestrate,
    search_tools_tool,
)
from toolscore.types import ProgressFn

if TYPE_CHECKING:
    from toolscore.front.http_fast import HttpCalls
    from toolscore.loop.models import SendRequest

__all__ = ["FrontServer", "ToolHandlers", "build_server", "exposed_tools"]

log = structlog.get_logger("toolscore.server")

INSTRUCTIONS = (
    "toolscore is a gateway: each tool here belongs to a downstream MCP server and is named "
    "'<server><separator><tool>'. Calls are validated, checked against policy, timed and audited."
)


class FrontServer(Server[Any]):
    """A lowlevel Server that always advertises `tools.listChanged`, and the rest only when some
    downstream has it.

    The HTTP and in-memory runners call `create_initialization_options()` with no arguments,
    which would advertise `listChanged: false`.
    """

    def __init__(self, tools: ToolHandlers, *, available: Callable[[str], bool], plan_tasks: PlanTasks) -> None:
        """Args:
        tools: The `tools/*` handlers (`ToolHandlers.register`): the hot path and the input schemas are theirs.
        available: Whether some connected downstream declared a capability (`DownstreamHub.capable`).
        plan_tasks: `orchestrate` run as a task (`front.plan_tasks`); the gateway runs them while open.
        """
        super().__init__(
            "toolscore", version=__version__, instructions=INSTRUCTIONS, get_tool_input_schema=tools.input_schema
        )
        self.tool_handlers = tools
        self.available = available
        self.plan_tasks = plan_tasks

    @property
    def fast(self) -> FastCalls:
        """The hot path for passthrough `tools/call`, taken by the stdio transport (`front.fast`)."""
        return self.tool_handlers.fast

    @property
    def http_calls(self) -> HttpCalls | None:
        """The same on the streamable HTTP front, set by `front.serve.http_app` (`front.http_fast`)."""
        return self.tool_handlers.http_calls

    @http_calls.setter
    def http_calls(self, calls: HttpCalls | None) -> None:
        self.tool_handlers.http_calls = calls

    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> mcp_types.ServerCapabilities:
        caps = super().get_capabilities(
            notification_options
            or NotificationOptions(tools_changed=True, resources_changed=True, prompts_changed=True),
            experimental_capabilities,
            extensions,
            protocol_version=protocol_version,
        )
        has = self.available
        update: dict[str, Any] = {
            kind: None for kind in ("resources", "prompts", "completions", "logging") if not has(kind)
        }
        if caps.resources is not None and "resources" not in update and not has("subscribe"):
            update["resources"] = caps.resources.model_copy(update={"subscribe": False})
        extensions = dict(caps.extensions or {})
        if has("skills"):  # the skills extension (SEP-2640) of some server, carried (front/skills.py)
            extensions[SKILLS_EXTENSION] = {}
        if protocol_version in MODERN_PROTOCOL_VERSIONS and (self.plan_tasks.offered or has("tasks-extension")):
            # The gateway's own plans as tasks, and a server's relayed (front/task_extension.py).
            extensions[TASKS_EXTENSION] = {}
        if extensions:
            update["extensions"] = extensions
        # Relayed to the servers that run them, or the gateway's own plans (toolscore.front.tasks).
        if has("tasks") or self.plan_tasks.offered:
            update["tasks"] = tasks_capability()
        return caps.model_copy(update=update)

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options
            or NotificationOptions(tools_changed=True, resources_changed=True, prompts_changed=True),
            experimental_capabilities,
            extensions,
        )


WHOLE_RESULT_META_KEY = "io.toolscore/whole-result"
"""A `tools/call`'s `_meta` key: true asks for the whole result, never a kept one's preview."""

_CONFIRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "title": "Allow this call"}},
    "required": ["confirm"],
}


def _sampler(ctx: ServerRequestContext[Any]) -> SendRequest | None:
    """`sampling/createMessage` to this client, if it can answer one here (handshake era only)."""
    session = ctx.session
    if str(ctx.protocol_version or "") >= "2026-07-28":  # no server-to-client requests in that era
        return None
    if not session.check_client_capability(mcp_types.ClientCapabilities(sampling=mcp_types.SamplingCapability())):
        return None

    async def send(request: mcp_types.CreateMessageRequest) -> mcp_types.CreateMessageResult:
        return await session.send_request(
            request, mcp_types.CreateMessageResult, metadata=ServerMessageMetadata(related_request_id=ctx.request_id)
        )

    return send


def _samples_by_input(ctx: ServerRequestContext[Any]) -> bool:
    """Whether this 2026-07-28 client can answer sampling requests inside input-required results."""
    return str(ctx.protocol_version or "") >= "2026-07-28" and ctx.session.check_client_capability(
        mcp_types.ClientCapabilities(sampling=mcp_types.SamplingCapability())
    )


def _confirmer(ctx: ServerRequestContext[Any]) -> ConfirmFn | None:
    """A yes/no question to the user through elicitation, if this client supports it."""
    session = ctx.session
    if not session.check_client_capability(mcp_types.ClientCapabilities(elicitation=mcp_types.ElicitationCapability())):
        return None

    async def confirm(question: str) -> bool:
        request = mcp_types.ElicitRequest(
            params=mcp_types.ElicitRequestFormParams(message=question, requested_schema=_CONFIRM_SCHEMA)
        )
        try:
            answer = await session.send_request(
                request, mcp_types.ElicitResult, metadata=ServerMessageMetadata(related_request_id=ctx.request_id)
            )
        except MCPError as exc:  # no back-channel on this connection (2026-07-28), or the client failed
            raise Rejected(f"could not ask the user for confirmation: {exc.message}", hook="destructive") from None
        return answer.action == "accept" and bool((answer.content or {}).get("confirm"))

    return confirm


def _progress_of(ctx: ServerRequestContext[Any]) -> ProgressFn | None:
    """Forwards a downstream's progress to the client, when this request asked for progress.

    Only then: a progress callback makes every downstream request carry a token and a handler.
    (The SDK's in-process 2026 client passes its callback out of band, invisible here; over
    stdio and HTTP the token is always in `_meta`.)
    """
    if ctx.meta is None or ctx.meta.get("progress_token") is None:
        return None
    session = ctx.session

    async def forward_progress(progress: float, total: float | None, message: str | None) -> None:
        await session.report_progress(progress, total, message)

    return forward_progress


HiddenFor = Callable[[str], Callable[[Route], bool] | None]
"""For a caller, which routed tools its own rules refuse (None: none are)."""


def exposed_tools(
    hub: DownstreamHub, orchestrator: Orchestrator, toolhub: ToolHub | None = None
) -> list[mcp_types.Tool]:
    """What `tools/list` answers: `orchestrate` (unless policy forbids it), then every routed tool.

    In the `search` catalog mode (docs/toolhub.md): `orchestrate`, `search_tools` and `call_tool`
    only; in full mode `call_capability` follows `orchestrate` when the config declares capabilities.
    """
    own = [orchestrator.tool()] if orchestrator.refusal is None else []
    if toolhub is None:
        return [*own, *hub.registry.tools()]
    if toolhub.mode == "search":
        capabilities = toolhub.capabilities
        servers = hub.registry.servers
        return [
            *(search_mode_orchestrate(t, servers, capabilities) for t in own),
            search_tools_tool(),
            call_tool_tool(),
        ]
    if toolhub.offers_capabilities:
        own.append(call_capability_tool(toolhub.capabilities))
    return [*own, *hub.registry.tools()]


class ToolHandlers:
    """The front's `tools/list` and `tools/call`: the gateway's own tools and every routed tool, on
    the SDK path, the hot path and the express lane (`front.lanes` says which takes a call)."""

    def __init__(
        self,
        hub: DownstreamHub,
        engine: ToolExecutionEngine,
        orchestrator: Orchestrator,
        callers: Callers,
        peer_for: Callable[[ServerRequestContext[Any]], FrontPeer],
        *,
        sessions: dict[int, ServerSession],
        bus: InMemorySubscriptionBus,
        task_started: Callable[[ServerRequestContext[Any], TaskStarted], dict[str, Any]],
        toolhub: ToolHub | None = None,
        delegator: Delegator | None = None,
        hidden_for: HiddenFor | None = None,
        sealer: Sealer | None = None,
    ) -> None:
        """Args:
        hub: The routed tools and their servers.
        engine: Runs every passthrough call (four phases, one audit record).
        orchestrator: The `orchestrate` tool.
        callers: Who is calling.
        peer_for: The client of a request, for its servers' requests and logs.
        sessions: The handshake-era front connections (filled here), told when the lists change.
        bus: The 2026-07-28 listeners' subscription bus.
        task_started: Answers a call a server runs as a task of the tasks extension
            (`TaskHandlers.started`).
        toolhub: The ToolHub's tools, if configured.
        delegator: The `delegate` tool, if configured.
        hidden_for: The routed tools a caller's own rules refuse (`constraints.principals`), left
            out of its `tools/list`; None where no caller has rules of its own.
        sealer: Signs the request states of 2026-07-28 confirmations and plan approvals (None: a
            key of this process's own; replicas share one, `toolscore._seal`).
        """
        self._hidden_for = hidden_for
        self._hub = hub
        self._engine = engine
        self._orchestrator = orchestrator
        self._toolhub = toolhub
        self._delegator = delegator
        self._lanes = Lanes(hub, engine, plans=self._plans_allowed, own=self._kept_off_hot_path)
        self._callers = callers
        self._peer_for = peer_for
        self._sealer = sealer or Sealer()
        self._sessions = sessions
        self._bus = bus
        self._task_started = task_started
        self.fast = FastCalls(self.hot_call, serves=self._hot, lane_for=self.lane_for)
        """The hot path for passthrough `tools/call`, taken by the stdio transport (`front.fast`)."""
        self.http_calls: HttpCalls | None = None
        """The same on the streamable HTTP front, set by `front.serve.http_app` (`front.http_fast`)."""

    def register(self, server: Server[Any]) -> None:
        """Serve `tools/*` on `server`; tell its clients when the tools change."""
        server.add_request_handler("tools/list", mcp_types.PaginatedRequestParams, self.list_tools)
        server.add_request_handler("tools/call", mcp_types.CallToolRequestParams, self.call_tool)
        server.add_notification_handler("notifications/initialized", mcp_types.NotificationParams, self.on_initialized)
        self._hub.add_listener(self.tools_changed)

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        """`exposed_tools`, and `delegate` where this client can run it."""
        delegator, toolhub = self._delegator, self._toolhub
        tools = exposed_tools(self._hub, self._orchestrator, toolhub)
        # Search mode lists three tools; `delegate` is found with search_tools like the rest.
        if (
            delegator is not None
            and delegator.refusal is None
            and (toolhub is None or toolhub.mode != "search")
            # Only where it can run: a model is configured, or this client can lend its own.
            and (delegator.has_model or _sampler(ctx) is not None or _samples_by_input(ctx))
        ):
            tools.append(delegator.tool())
        hidden = self._hidden_for(self._callers.identify(ctx)) if self._hidden_for is not None else None
        if hidden is not None:  # each principal is shown what it may call
            registry = self._hub.registry
            tools = [t for t in tools if (route := registry.get(t.name)) is None or not hidden(route)]
        # 2026-07-28: no fresher and no more shareable than every server's list (downstream/caching.py);
        # private where principals have rules of their own: one's list may differ from another's.
        constraints = self._hub.config.constraints
        per_caller = constraints.enabled and bool(constraints.principals)
        ttl_ms, scope = self._hub.list_hints("tools", per_caller=per_caller)
        return mcp_types.ListToolsResult(tools=tools, ttl_ms=ttl_ms, cache_scope=scope)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult | dict[str, Any]:
        """The SDK path's `tools/call`, and the error boundary (see the module docstring); a call
        the server runs as a task is answered with that task (JSON, its id the one the client sees)."""
        answer = await self.call_outcome(ctx, params)
        return answer.result if isinstance(answer, CallOutcome) else answer

    async def call_outcome(
        self, ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams, *, keep_bytes: bool = False
    ) -> CallOutcome | mcp_types.CallToolResult | mcp_types.InputRequiredResult | dict[str, Any]:
        """`call_tool`, with a passthrough call's engine outcome (`keep_bytes`: its result kept as
        the server's bytes where they can be, for the 2026-07-28 hot path, `front.http_modern`).

        Raises:
            MCPError: the client, not the model, must act on the downstream's error.
        """
        engine = self._engine
        progress = _progress_of(ctx)
        caller = self._callers.identify(ctx)
        # A plan or a delegation is one of its client's calls in flight (its steps are its own):
        # refused at once over the cap, as a passthrough call is in the engine.
        held = params.name in (ORCHESTRATE, DELEGATE)
        if held and not engine.take_slot(caller):
            return error_result(engine.over_cap_text())
        try:
            # The downstream's requests and logs go back to this client while the call lasts.
            with on_behalf_of(caller, self._peer_for(ctx), ctx.protocol_version) as scope:
                answer = await self.own_or_passthrough(ctx, params, progress, scope, keep_bytes=keep_bytes)
        except InputRequired as asked:  # 2026-07-28: the question goes back as the call's result
            return asked.answer()
        except TaskStarted as started:  # 2026-07-28, the tasks extension: the client polls the task
            return self._task_started(ctx, started)
        except Exception:
            log.exception("internal error", tool=params.name)
            return error_result(f"Error executing tool {params.name}: internal gateway error (see the gateway log).")
        finally:
            if held:
                engine.give_slot(caller)
        if not isinstance(answer, CallOutcome):
            return answer
        error = answer.error
        if isinstance(error, DownstreamProtocolError) and (for_client := error.for_the_client) is not None:
            # The client, not the model, must act on this: it stays a JSON-RPC error (relayed in the
            # 2026-07-28 era: every one, a rejected request state say, as the server sent it).
            raise MCPError.from_error_data(for_client)
        return answer

    async def own_or_passthrough(
        self,
        ctx: ServerRequestContext[Any],
        params: mcp_types.CallToolRequestParams,
        progress: ProgressFn | None,
        scope: CallScope,
        *,
        keep_bytes: bool = False,
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult | CallOutcome:
        """One of the gateway's own tools (its answer), or a passthrough call (the engine's outcome;
        `keep_bytes`: as `passthrough`'s)."""
        delegator, toolhub = self._delegator, self._toolhub
        caller = scope.caller or ""
        if params.name == ORCHESTRATE:
            durable = delegator.durable if delegator is not None else None
            if durable is not None:  # episodes survive a restart (docs/agent-loop.md)
                try:
                    await durable.restore(caller, params.arguments)
                except Exception:  # the store is away (a Redis blip): the plan runs on what memory holds
                    log.warning("episode store unreachable: the plan runs without restoring", exc_info=True)
            with tracing.plan_span() as span:
                answer = await self._orchestrator(
                    params.arguments,
                    progress=progress,
                    request_id=ctx.request_id,
                    scope=scope,
                    approve=plan_approver(ctx, params, caller, self._sealer),
                )
                if span is not None:
                    tracing.plan_attributes(span, answer)
            if durable is not None:
                try:
                    await durable.save(caller, answer)
                except Exception:
                    # The steps ran: their answer must not become an error (a retry would run
                    # them again). The episode lives on in memory; only a restart would lose it.
                    log.warning("episode not saved: the store is unreachable", exc_info=True)
                    note = "<warning>the episode could not be saved; it is kept in memory only</warning>"
                    answer = answer.model_copy(update={"content": [*answer.content, mcp_types.TextContent(text=note)]})
            # Plan text is the model's: whatever it smuggled in must not break the reply.
            return scrub_unpaired_surrogates(answer)
        if delegator is not None and params.name == DELEGATE:
            done = await delegator(
                params.arguments,
                progress=progress,
                scope=scope,
                sampler=_sampler(ctx),
                input_sampling=_samples_by_input(ctx),
                input_responses=params.input_responses,
                request_state=params.request_state,
            )
            return scrub_unpaired_surrogates(done)
        if toolhub is not None and toolhub.handles(params.name):
            return await toolhub.answer(
                params.name,
                params.arguments,
                request_id=ctx.request_id,
                scope=scope,
                confirm=_confirmer(ctx),
                progress=progress,
                sample=_sampler(ctx),
                gateway_tools=self.gateway_tools,
            )
        # A 2026-07-28 client's call goes down as its own: capabilities, answers, state; a
        # task-augmented call of a handshake-era client (2025-11-25) goes as a task where it can.
        front = front_call_of(ctx, params.input_responses, params.request_state)
        task = params.task if front is None and ctx.request_id is not None else None
        if front is not None or task is not None:
            dumped = None if task is None else task.model_dump(by_alias=True, mode="json", exclude_none=True)
            scope = replace(scope, front=front, task=dumped)
        return await self.passthrough(ctx, params, progress, scope, keep_bytes=keep_bytes)

    async def passthrough(
        self,
        ctx: ServerRequestContext[Any],
        params: mcp_types.CallToolRequestParams,
        progress: ProgressFn | None,
        scope: CallScope,
        keep_bytes: bool = False,
    ) -> CallOutcome:
        """A downstream tool's call through the engine (`keep_bytes`: the hot path's, `front.fast`).

        A large result is kept and previewed (`toolscore.spill`) unless the call asks for it whole
        (`_meta` `WHOLE_RESULT_META_KEY`: true)."""
        meta = params.meta
        return await self._engine.execute(
            params.name,
            params.arguments,
            request_id=ctx.request_id,
            progress=progress,
            confirm=confirmer(ctx, params, scope.caller or "", self._sealer),
            keep_bytes=keep_bytes,
            scope=scope,
            spill=meta is None or meta.get(WHOLE_RESULT_META_KEY) is not True,
        )

    async def hot_call(
        self, ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams, version: str
    ) -> CallOutcome | mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        """The hot path's call (`front.fast.HotCall`)."""
        if params.name == ORCHESTRATE:  # a plan: the SDK path's own handler, in the same context
            answer = await self.call_tool(ctx, params)
            if isinstance(answer, dict):  # only a server's task is answered as JSON, never a plan
                raise AssertionError("a plan answered as a server's task")
            return answer
        # The hot path's passthrough call: the SDK path's, with the result kept as bytes.
        with on_behalf_of(self._callers.identify(ctx), self._peer_for(ctx), version) as scope:
            return await self.passthrough(ctx, params, _progress_of(ctx), scope, keep_bytes=True)

    def _hot(self, name: str) -> bool:
        """Whether the hot path takes a call of `name` (`FastCalls.serves`)."""
        return self._lanes.hot(name, plan=name == ORCHESTRATE)

    def _plans_allowed(self) -> bool:
        return self._orchestrator.refusal is None

    def _kept_off_hot_path(self, name: str) -> bool:
        """Whether `name` is `delegate` or one of the ToolHub's tools (`Lanes`' `own`)."""
        delegator, toolhub = self._delegator, self._toolhub
        return (delegator is not None and name == DELEGATE) or (toolhub is not None and toolhub.handles(name))

    def lane_for(self, ctx: ServerRequestContext[Any]) -> ExpressLane | None:
        """The express lane of the client whose handshake ends with `ctx`, unless calls may not take it."""
        lanes = self._lanes
        if not lanes.express_open:
            return None
        return ExpressLane(
            self._engine,
            lanes.express,
            version=ctx.protocol_version,
            caller=self._callers.identify(ctx),
            peer=self._peer_for(ctx),
        )

    def input_schema(self, name: str) -> dict[str, Any] | None:
        """A tool's input schema by name (`Server.get_tool_input_schema`), None where nothing is to be checked."""
        delegator, orchestrator, toolhub = self._delegator, self._orchestrator, self._toolhub
        if delegator is not None and name == DELEGATE and delegator.refusal is None:
            return delegator.tool().input_schema
        if name == ORCHESTRATE and orchestrator.refusal is None:
            return orchestrator.tool().input_schema
        if toolhub is not None and toolhub.handles(name):
            return None  # the hub checks its own arguments, with messages a model can act on
        route = self._hub.registry.get(name)
        return route.tool.input_schema if route else None

    def gateway_tools(self) -> list[mcp_types.Tool]:
        """The gateway's own tools in full, for search_tools to return by name (`ToolHub.answer`)."""
        own = [self._orchestrator.tool()] if self._orchestrator.refusal is None else []
        if self._delegator is not None and self._delegator.refusal is None:
            own.append(self._delegator.tool())
        if self._toolhub is not None:
            own.append(call_capability_tool(self._toolhub.capabilities))
        return own

    async def on_initialized(self, ctx: ServerRequestContext[Any], params: mcp_types.NotificationParams) -> None:
        """Once per handshake-era connection: remember it to push tools/list_changed later."""
        connection = connection_of(ctx.session)
        self._sessions[id(connection)] = ctx.session
        self.fast.attach(ctx)
        if self.http_calls is not None:
            self.http_calls.attach(ctx)
        connection.exit_stack.callback(self._sessions.pop, id(connection), None)

    async def tools_changed(self) -> None:
        """`tools/list_changed` to every handshake-era connection and every listener."""
        for session in list(self._sessions.values()):
            try:
                await session.send_tool_list_changed()
            except Exception as exc:  # a peer that went away must not stop the others
                log.debug("list_changed not delivered", error=str(exc))
        await self._bus.publish(ToolsListChanged())


def build_server(
    hub: DownstreamHub,
    engine: ToolExecutionEngine,
    orchestrator: Orchestrator,
    callers: Callers,
    *,
    toolhub: ToolHub | None = None,
    delegator: Delegator | None = None,
    hidden_for: HiddenFor | None = None,
    results: ResultStore | None = None,
    sealer: Sealer | None = None,
) -> FrontServer:
    """The front server over `hub`'s tools, calling through `engine`, plus `orchestrate` (and the
    ToolHub's tools); `hidden_for`: the tools a caller's own rules refuse, left out of its list;
    `results`: the results kept by reference, which `resources/read` returns (`toolscore.spill`);
    `sealer`: signs the front's request states (replicas share its key)."""
    sessions: dict[int, ServerSession] = {}
    bus = InMemorySubscriptionBus()
    peers = FrontPeers(hub, LogLevels())
    tasks = TaskHandlers(hub, engine, callers, peers.peer, plans=orchestrator.refusal is None)
    tools = ToolHandlers(
        hub,
        engine,
        orchestrator,
        callers,
        peers.peer,
        sessions=sessions,
        bus=bus,
        task_started=tasks.started,
        toolhub=toolhub,
        delegator=delegator,
        hidden_for=hidden_for,
        sealer=sealer,
    )
    server = FrontServer(tools, available=hub.capable, plan_tasks=tasks.plans)
    tools.register(server)
    LoggingHandlers(hub, peers.levels).register(server)
    skills = SkillHandlers(hub, callers, peers.peer)
    skills.register(server)
    catalog = CatalogHandlers(hub, engine, callers, sessions, bus, peers.peer, results=results)
    catalog.register(server)
    ListenHandlers(bus, catalog).register(server)
    tasks.register(server)
    RootsHandlers(hub, callers.identify, peers.peer).register(server)
    return server
