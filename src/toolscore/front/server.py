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
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.message import ServerMessageMetadata

from toolscore._engine import CallOutcome, ConfirmFn, ToolExecutionEngine, error_result
from toolscore._json import scrub_unpaired_surrogates
from toolscore._sdk import connection_of
from toolscore._version import __version__
from toolscore.downstream.backchannel import on_behalf_of
from toolscore.downstream.hub import DownstreamHub
from toolscore.errors import DownstreamProtocolError, InputRequired, Rejected
from toolscore.front.callers import Callers
from toolscore.front.catalog import CatalogHandlers
from toolscore.front.confirm import Sealer, confirmer
from toolscore.front.express import ExpressLane
from toolscore.front.fast import FastCalls
from toolscore.front.forward import FrontPeers, LoggingHandlers, LogLevels, RootsHandlers
from toolscore.front.lanes import Lanes
from toolscore.front.plan_tasks import PlanTasks
from toolscore.front.relaying import front_call_of
from toolscore.front.tasks import TaskHandlers, tasks_capability
from toolscore.loop.tool import DELEGATE, Delegator
from toolscore.plan.tool import ORCHESTRATE, Orchestrator
from toolscore.scope import CallScope
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

__all__ = ["FrontServer", "build_server", "exposed_tools"]

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

    available: Callable[[str], bool] | None = None
    """Whether some connected downstream declared a capability (`DownstreamHub.capable`)."""
    fast: FastCalls | None = None
    """The hot path for passthrough `tools/call`, taken by the stdio transport (`front.fast`)."""
    http_calls: HttpCalls | None = None
    """The same on the streamable HTTP front, set by `front.serve.http_app` (`front.http_fast`)."""
    plan_tasks: PlanTasks | None = None
    """`orchestrate` run as a task (`front.plan_tasks`); the gateway runs them while open."""

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
        if has is None:
            return caps
        update: dict[str, Any] = {
            kind: None for kind in ("resources", "prompts", "completions", "logging") if not has(kind)
        }
        if caps.resources is not None and "resources" not in update and not has("subscribe"):
            update["resources"] = caps.resources.model_copy(update={"subscribe": False})
        # Relayed to the servers that run them, or the gateway's own plans (toolscore.front.tasks).
        if has("tasks") or (self.plan_tasks is not None and self.plan_tasks.offered):
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


def build_server(
    hub: DownstreamHub,
    engine: ToolExecutionEngine,
    orchestrator: Orchestrator,
    callers: Callers,
    *,
    toolhub: ToolHub | None = None,
    delegator: Delegator | None = None,
) -> FrontServer:
    """The front server over `hub`'s tools, calling through `engine`, plus `orchestrate` (and the ToolHub's tools)."""
    sessions: dict[int, ServerSession] = {}
    bus = InMemorySubscriptionBus()
    peers = FrontPeers(hub, LogLevels())
    peer_for = peers.peer
    sealer = Sealer()

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        tools = exposed_tools(hub, orchestrator, toolhub)
        # Search mode lists three tools; `delegate` is found with search_tools like the rest.
        if (
            delegator is not None
            and delegator.refusal is None
            and (toolhub is None or toolhub.mode != "search")
            # Only where it can run: a model is configured, or this client can lend its own.
            and (delegator.has_model or _sampler(ctx) is not None or _samples_by_input(ctx))
        ):
            tools.append(delegator.tool())
        return mcp_types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        progress = _progress_of(ctx)
        caller = callers.identify(ctx)
        # A plan or a delegation is one of its client's calls in flight (its steps are its own):
        # refused at once over the cap, as a passthrough call is in the engine.
        held = params.name in (ORCHESTRATE, DELEGATE)
        if held and not engine.take_slot(caller):
            return error_result(engine.over_cap_text())
        try:
            # The downstream's requests and logs go back to this client while the call lasts.
            with on_behalf_of(caller, peer_for(ctx), ctx.protocol_version) as scope:
                answer = await own_or_passthrough(ctx, params, progress, scope)
        except InputRequired as asked:  # 2026-07-28: the question goes back as the call's result
            return asked.answer()
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
        return answer.result

    async def own_or_passthrough(
        ctx: ServerRequestContext[Any],
        params: mcp_types.CallToolRequestParams,
        progress: ProgressFn | None,
        scope: CallScope,
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult | CallOutcome:
        """One of the gateway's own tools (its answer), or a passthrough call (the engine's outcome)."""
        caller = scope.caller or ""
        if params.name == ORCHESTRATE:
            durable = delegator.durable if delegator is not None else None
            if durable is not None:  # episodes survive a restart (docs/agent-loop.md)
                try:
                    await durable.restore(caller, params.arguments)
                except Exception:  # the store is away (a Redis blip): the plan runs on what memory holds
                    log.warning("episode store unreachable: the plan runs without restoring", exc_info=True)
            with tracing.plan_span() as span:
                answer = await orchestrator(
                    params.arguments, progress=progress, request_id=ctx.request_id, caller=caller, scope=scope
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
                caller=caller,
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
                caller=caller,
                scope=scope,
                confirm=_confirmer(ctx),
                progress=progress,
                sample=_sampler(ctx),
            )
        # A 2026-07-28 client's call goes down as its own: capabilities, answers, state; a
        # task-augmented call of a handshake-era client (2025-11-25) goes as a task where it can.
        front = front_call_of(ctx, params.input_responses, params.request_state)
        task = params.task if front is None and ctx.request_id is not None else None
        if front is not None or task is not None:
            dumped = None if task is None else task.model_dump(by_alias=True, mode="json", exclude_none=True)
            scope = replace(scope, front=front, task=dumped)
        return await passthrough(ctx, params, progress, scope)

    async def passthrough(
        ctx: ServerRequestContext[Any],
        params: mcp_types.CallToolRequestParams,
        progress: ProgressFn | None,
        scope: CallScope,
        keep_bytes: bool = False,
    ) -> CallOutcome:
        """A downstream tool's call through the engine (`keep_bytes`: the hot path's, `front.fast`)."""
        return await engine.execute(
            params.name,
            params.arguments,
            request_id=ctx.request_id,
            progress=progress,
            session_id=scope.caller,
            confirm=confirmer(ctx, params, scope.caller or "", sealer),
            keep_bytes=keep_bytes,
            scope=scope,
        )

    def deferred() -> list[mcp_types.Tool]:
        # The gateway's own tools in full, for search_tools to return by name.
        own = [orchestrator.tool()] if orchestrator.refusal is None else []
        if delegator is not None and delegator.refusal is None:
            own.append(delegator.tool())
        if toolhub is not None:
            own.append(call_capability_tool(toolhub.capabilities))
        return own

    if toolhub is not None:
        toolhub.gateway_tools = deferred
        orchestrator.capabilities = toolhub  # `<call capability="...">` steps go through the hub

    def input_schema(name: str) -> dict[str, Any] | None:
        if delegator is not None and name == DELEGATE and delegator.refusal is None:
            return delegator.tool().input_schema
        if name == ORCHESTRATE and orchestrator.refusal is None:
            return orchestrator.tool().input_schema
        if toolhub is not None and toolhub.handles(name):
            return None  # the hub checks its own arguments, with messages a model can act on
        route = hub.registry.get(name)
        return route.tool.input_schema if route else None

    server = FrontServer(
        "toolscore",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=ListenHandler(bus),
        get_tool_input_schema=input_schema,
    )

    async def on_initialized(ctx: ServerRequestContext[Any], params: mcp_types.NotificationParams) -> None:
        # Once per handshake-era connection: remember it to push tools/list_changed later.
        connection = connection_of(ctx.session)
        sessions[id(connection)] = ctx.session
        if server.fast is not None:
            server.fast.attach(ctx)
        if server.http_calls is not None:
            server.http_calls.attach(ctx)
        connection.exit_stack.callback(sessions.pop, id(connection), None)

    async def hot_call(
        ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams, version: str
    ) -> CallOutcome | mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        if params.name == ORCHESTRATE:
            return await call_tool(ctx, params)  # a plan: the SDK path's own handler, in the same context
        # The hot path's passthrough call: the SDK path's, with the result kept as bytes.
        with on_behalf_of(callers.identify(ctx), peer_for(ctx), version) as scope:
            return await passthrough(ctx, params, _progress_of(ctx), scope, keep_bytes=True)

    lanes = Lanes(
        hub,
        engine,
        plans=lambda: orchestrator.refusal is None,
        own=lambda name: (
            (delegator is not None and name == DELEGATE) or (toolhub is not None and toolhub.handles(name))
        ),
    )

    def lane_for(ctx: ServerRequestContext[Any]) -> ExpressLane | None:
        if not lanes.express_open:
            return None
        return ExpressLane(
            engine, lanes.express, version=ctx.protocol_version, session_id=callers.identify(ctx), peer=peer_for(ctx)
        )

    server.fast = FastCalls(hot_call, serves=lambda name: lanes.hot(name, plan=name == ORCHESTRATE), lane_for=lane_for)
    server.add_notification_handler("notifications/initialized", mcp_types.NotificationParams, on_initialized)
    server.available = hub.capable
    LoggingHandlers(hub, peers.levels).register(server)
    CatalogHandlers(hub, engine, callers, sessions, bus, peer_for).register(server)
    tasks = TaskHandlers(hub, engine, callers, peer_for, plans=orchestrator.refusal is None)
    tasks.register(server)
    server.plan_tasks = tasks.plans
    RootsHandlers(hub, callers.identify, peer_for).register(server)

    async def tools_changed() -> None:
        for session in list(sessions.values()):
            try:
                await session.send_tool_list_changed()
            except Exception as exc:  # a peer that went away must not stop the others
                log.debug("list_changed not delivered", error=str(exc))
        await bus.publish(ToolsListChanged())

    hub.add_listener(tools_changed)
    return server
