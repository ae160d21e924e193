"""A call that arrives while a server that was up restarts waits for it, within its own deadline,
rather than failing though it was never sent. The server runs in this process."""

from __future__ import annotations

from typing import Any

import mcp_types
import pytest
from mcp import Client
from mcp.server import Server, ServerRequestContext

from tests.conftest import text, wait_for
from toolscore.downstream.connection import ServerState
from toolscore.testing import running_gateway

pytestmark = pytest.mark.anyio


def echo_server() -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
        return mcp_types.ListToolsResult(tools=[mcp_types.Tool(name="echo", input_schema=schema)])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=str((params.arguments or {})["text"]))])

    return Server("docs", on_list_tools=list_tools, on_call_tool=call_tool)


async def test_a_call_right_after_a_restart_waits_for_the_server_and_is_answered() -> None:
    async with running_gateway({"docs": echo_server()}) as (gw, _), Client(gw.server, mode="legacy") as client:
        docs = gw.hub.downstreams["docs"]
        assert text(await client.call_tool("docs__echo", {"text": "a"})) == "a"
        docs.restart("a test restarts it")  # the connection is lost; it is not down yet
        assert gw.hub.unavailable_reason("docs") is None  # a call is let through, to wait
        result = await client.call_tool("docs__echo", {"text": "b"})
        assert not result.is_error and text(result) == "b", text(result)
        assert docs.connects == 2


async def test_a_call_while_the_server_is_down_between_attempts_waits_for_the_next() -> None:
    async with running_gateway({"docs": echo_server()}) as (gw, sink), Client(gw.server, mode="legacy") as client:
        docs = gw.hub.downstreams["docs"]
        assert text(await client.call_tool("docs__echo", {"text": "a"})) == "a"
        docs.restart("a test restarts it")
        await wait_for(lambda: docs.state is ServerState.DOWN)  # waiting out the backoff (as after a crash)
        result = await client.call_tool("docs__echo", {"text": "b"})
        assert not result.is_error and text(result) == "b", text(result)
        assert docs.connects == 2
        assert all(r.success for r in sink.records if r.tool == "docs__echo")
