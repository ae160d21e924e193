"""The start-up grace, in memory: a server still starting when it ends is named in a warning that
says what is true (`check` serves nothing, so the warning may not say "serving"), and joins later."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.server import Server, ServerRequestContext

from tests.conftest import text
from tests.fixtures.fixture_server import build_server
from toolscore import MemoryAuditSink, open_gateway
from toolscore.testing import captured_logs, memory_config

pytestmark = pytest.mark.anyio


def _slow_server(up: anyio.Event) -> Server[Any]:
    """A server whose start (and so its `initialize`) waits for `up`."""

    @asynccontextmanager
    async def starting(server: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        await up.wait()
        yield {}

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=[mcp_types.Tool(name="hello", input_schema={"type": "object"})])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(text="up at last")])

    return Server("slow", lifespan=starting, on_list_tools=list_tools, on_call_tool=call_tool)


async def test_a_server_still_starting_after_the_grace_is_named_without_a_claim_of_serving(tmp_path: Path) -> None:
    up = anyio.Event()
    config = memory_config(["fx", "slow"], toolscore={"startup_grace_seconds": 0.2})
    servers = {"fx": build_server(tmp_path), "slow": _slow_server(up)}
    with captured_logs() as logs:
        async with open_gateway(config, audit=MemoryAuditSink(), memory_servers=servers) as gw:
            # The gateway is open although `slow` is not up: the grace ended, with one warning.
            (warning,) = [e for e in logs if e["log_level"] == "warning" and "not up yet" in e["event"]]
            assert warning["event"] == "these servers are not up yet; they join when they are"
            assert "slow" in warning["servers"]  # `fx` too, if the machine is slow enough
            assert not [e for e in logs if "serving" in str(e["event"])]
            up.set()
            with anyio.fail_after(60):  # a hang detector
                await gw.hub.wait_started()
            async with Client(gw.server, mode="legacy") as client:
                assert "slow__hello" in [t.name for t in (await client.list_tools()).tools]
                assert text(await client.call_tool("slow__hello", {})) == "up at last"
