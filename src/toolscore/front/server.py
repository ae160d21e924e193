"""The front MCP server: every routed tool as a passthrough, over both protocol eras.

This module is toolscore's one error boundary toward clients. Anticipated failures are already
tool error results when the engine returns; anything else (a bug) is logged with its traceback
and answered with a generic tool error, never a JSON-RPC error or a traceback.
"""

from __future__ import annotations

from typing import Any

import mcp_types
import structlog
from mcp import MCPError
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.message import ServerMessageMetadata

from toolscore._engine import ConfirmFn, ToolExecutionEngine, error_result
from toolscore._json import scrub_unpaired_surrogates
from toolscore._sdk import connection_of
from toolscore._version import __version__
from toolscore.downstream.hub import DownstreamHub
from toolscore.errors import Rejected
from toolscore.front.callers import Callers
from toolscore.plan.tool import ORCHESTRATE, Orchestrator
from toolscore.types import ProgressFn

__all__ = ["FrontServer", "build_server", "exposed_tools"]

log = structlog.get_logger("toolscore.server")

INSTRUCTIONS = (
    "toolscore is a gateway: each tool here belongs to a downstream MCP server and is named "
    "'<server><separator><tool>'. Calls are validated, checked against policy, timed and audited."
)


class FrontServer(Server[Any]):
    """A lowlevel Server that always advertises `tools.listChanged`.

    The HTTP and in-memory runners call `create_initialization_options()` with no arguments,
    which would advertise `listChanged: false`.
    """

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


_CONFIRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "title": "Allow this call"}},
    "required": ["confirm"],
}


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


def exposed_tools(hub: DownstreamHub, orchestrator: Orchestrator) -> list[mcp_types.Tool]:
    """What `tools/list` answers: `orchestrate` (unless policy forbids it), then every routed tool."""
    own = [orchestrator.tool()] if orchestrator.refusal is None else []
    return [*own, *hub.registry.tools()]


def build_server(
    hub: DownstreamHub, engine: ToolExecutionEngine, orchestrator: Orchestrator, callers: Callers
) -> FrontServer:
    """The front server over `hub`'s tools, calling through `engine`, plus `orchestrate`."""
    sessions: dict[int, ServerSession] = {}
    bus = InMemorySubscriptionBus()

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=exposed_tools(hub, orchestrator))

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        progress: ProgressFn | None = None
        if ctx.meta is not None and ctx.meta.get("progress_token") is not None:
            # Only when asked: a progress callback makes every downstream request carry a
            # token and a handler. (The SDK's in-process 2026 client passes its callback out of
            # band, invisible here; over stdio and HTTP the token is always in `_meta`.)
            session = ctx.session

            async def forward_progress(progress: float, total: float | None, message: str | None) -> None:
                await session.report_progress(progress, total, message)

            progress = forward_progress
        caller = callers.identify(ctx)
        try:
            if params.name == ORCHESTRATE:
                answer = await orchestrator(
                    params.arguments, progress=progress, request_id=ctx.request_id, caller=caller
                )
                # Plan text is the model's: whatever it smuggled in must not break the reply.
                return scrub_unpaired_surrogates(answer)
            run = await engine.execute(
                params.name,
                params.arguments,
                request_id=ctx.request_id,
                progress=progress,
                session_id=caller,
                confirm=_confirmer(ctx),
            )
        except Exception:
            log.exception("internal error", tool=params.name)
            return error_result(f"Error executing tool {params.name}: internal gateway error (see the gateway log).")
        return run.result

    def input_schema(name: str) -> dict[str, Any] | None:
        if name == ORCHESTRATE and orchestrator.refusal is None:
            return orchestrator.tool().input_schema
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
        connection.exit_stack.callback(sessions.pop, id(connection), None)

    server.add_notification_handler("notifications/initialized", mcp_types.NotificationParams, on_initialized)

    async def tools_changed() -> None:
        for session in list(sessions.values()):
            try:
                await session.send_tool_list_changed()
            except Exception as exc:  # a peer that went away must not stop the others
                log.debug("list_changed not delivered", error=str(exc))
        await bus.publish(ToolsListChanged())

    hub.add_listener(tools_changed)
    return server
