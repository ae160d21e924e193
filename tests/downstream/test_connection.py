"""A downstream connection over real MCP traffic: results verbatim, errors, deadlines, cancellation,
progress, list changes, pagination, audit. The fixture server runs in this process (the transport is
not the subject here: tests/downstream/test_child.py and test_transports.py cover the real ones)."""

from __future__ import annotations

import re
import warnings
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.server import Server, ServerRequestContext

from tests.conftest import memory_gateway, text, wait_for
from tests.fixtures.fixture_server import build_server
from toolscore import Gateway
from toolscore.testing import running_gateway

pytestmark = pytest.mark.anyio

ERAS = ["legacy", "auto"]  # 2025-11-25 handshake clients, and 2026-07-28 (the Python SDK's default)


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    # A call timeout past every wait here: a cancelled call the tests see was the client's doing.
    async with memory_gateway(tmp_path, {"fx": {"timeout": 120}}) as (gw, _):
        yield gw


@pytest.mark.parametrize("mode", ERAS)
async def test_results_pass_through_verbatim(gateway: Gateway, mode: str) -> None:
    async with Client(gateway.server, mode=mode) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert listed["fx__add"].output_schema == {
            "type": "object",
            "properties": {"sum": {"type": "integer"}},
            "required": ["sum"],
            "additionalProperties": False,
        }
        assert listed["fx__echo"].title == "Echo"
        assert listed["fx__echo"].meta == {"fixture/kind": "echo"}
        assert listed["fx__echo"].annotations == mcp_types.ToolAnnotations(read_only_hint=True)

        added = await client.call_tool("fx__add", {"a": 2, "b": 3})
        assert added.structured_content == {"sum": 5}
        assert text(added) == '{"sum": 5}'
        assert not added.is_error

        failed = await client.call_tool("fx__fail", {"message": "nope"})
        assert failed.is_error
        assert text(failed) == "nope"

        image = await client.call_tool("fx__image", {})
        assert image.content[0] == mcp_types.ImageContent(data="aGVsbG8=", mime_type="image/png")
        assert image.meta is not None
        assert image.meta["fixture/trace"] == "abc"


async def test_a_downstream_json_rpc_error_becomes_a_tool_error(gateway: Gateway) -> None:
    async with Client(gateway.server, mode="legacy") as client:
        result = await client.call_tool("fx__explode", {})
    assert result.is_error
    assert "Server 'fx' answered the call to 'explode' with an error" in text(result)


async def test_invalid_arguments_never_reach_the_downstream(gateway: Gateway, tmp_path: Path) -> None:
    async with Client(gateway.server, mode="legacy") as client:
        bad = await client.call_tool("fx__counter", {"key": 5})
        assert bad.is_error
        assert "key: 5 is not of type 'string'" in text(bad)
        bad = await client.call_tool("fx__counter", {"key": "k", "extra": 1})
        assert bad.is_error
        assert "Additional properties are not allowed" in text(bad)
        assert not (tmp_path / "count-k").exists()
        assert text(await client.call_tool("fx__counter", {"key": "k"})) == "1"


async def test_unknown_tools_are_tool_errors_naming_the_servers(gateway: Gateway) -> None:
    async with Client(gateway.server, mode="legacy") as client:
        result = await client.call_tool("fx__nope", {})
    assert result.is_error
    assert "Unknown tool 'fx__nope'. Servers: fx." in text(result)


async def test_a_timeout_cancels_the_downstream_call(tmp_path: Path) -> None:
    async with (
        memory_gateway(tmp_path, {"fx": {"timeout": 0.3}}) as (gw, sink),
        Client(gw.server, mode="legacy") as client,
    ):
        result = await client.call_tool("fx__sleep", {"seconds": 30, "tag": "t"})
        assert result.is_error
        assert "did not answer within 0.3 s" in text(result)
        await wait_for((tmp_path / "cancelled-t").exists)
        # The connection is still usable after the cancellation.
        assert text(await client.call_tool("fx__echo", {"text": "still here"})) == "still here"
    assert sink.records[0].error_kind == "timeout"


@pytest.mark.parametrize("mode", ERAS)
async def test_a_client_cancellation_cancels_the_downstream_call(gateway: Gateway, tmp_path: Path, mode: str) -> None:
    async with Client(gateway.server, mode=mode) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(client.call_tool, "fx__sleep", {"seconds": 600, "tag": mode}))
            await wait_for((tmp_path / f"sleeping-{mode}").exists)  # in flight at the server
            tg.cancel_scope.cancel()
        await wait_for((tmp_path / f"cancelled-{mode}").exists)


async def test_progress_notifications_reach_the_client(gateway: Gateway) -> None:
    mode = "legacy"  # the 2026 era is covered over HTTP in test_cli: in-process it has no token
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with Client(gateway.server, mode=mode) as client:
        result = await client.call_tool("fx__progress", {"steps": 3}, progress_callback=on_progress)
        assert text(result) == "did 3 steps"
        await wait_for(lambda: len(seen) == 3)
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


async def test_a_downstream_list_change_reaches_the_client(gateway: Gateway) -> None:
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            changed.set()

    async with Client(gateway.server, mode="legacy", message_handler=on_message) as client:
        assert client.server_capabilities.tools is not None
        assert client.server_capabilities.tools.list_changed
        await client.call_tool("fx__add_tool", {"name": "fresh"})
        with anyio.fail_after(60):
            await changed.wait()
        names = [t.name for t in (await client.list_tools()).tools]
        assert "fx__fresh" in names
        assert text(await client.call_tool("fx__fresh", {"text": "new"})) == "new"


async def test_a_list_change_the_server_announces_is_passed_on_even_when_the_list_reads_the_same() -> None:
    tools = [mcp_types.Tool(name="flip", input_schema={"type": "object"})]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=list(tools))

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        # A tool added and removed again: the lists the gateway reads before and after are equal.
        tools.append(mcp_types.Tool(name="brief", input_schema={"type": "object"}))
        await ctx.session.send_tool_list_changed()
        tools.pop()
        await ctx.session.send_tool_list_changed()
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(text="flipped")])

    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            changed.set()

    server = Server("flip", on_list_tools=list_tools, on_call_tool=call_tool)
    async with (
        running_gateway({"fx": server}) as (gw, _),
        Client(gw.server, mode="legacy", message_handler=on_message) as client,
    ):
        assert text(await client.call_tool("fx__flip", {})) == "flipped"
        with anyio.fail_after(60):  # a hang detector: the notice never came
            await changed.wait()
        assert [t.name for t in (await client.list_tools()).tools if t.name.startswith("fx__")] == ["fx__flip"]


async def test_paginated_tool_lists_are_read_to_the_end(tmp_path: Path) -> None:
    async with memory_gateway(tmp_path, {"fx": {"page_size": 5}}) as (gw, _):
        assert len(gw.hub.registry.routes) == 18


async def test_audit_records_are_complete(tmp_path: Path) -> None:
    async with (
        memory_gateway(tmp_path, toolscore={"audit": {"include_arguments": True}}) as (gw, sink),
        Client(gw.server, mode="legacy") as client,
    ):
        await client.call_tool("fx__echo", {"text": "hello"})
        await client.call_tool("fx__fail", {})
    ok, failed = sink.records
    assert (ok.tool, ok.server, ok.remote_tool, ok.success, ok.phase) == (
        "fx__echo",
        "fx",
        "echo",
        True,
        "post_execution",
    )
    assert ok.arguments == {"text": "hello"}
    assert ok.argument_names == ("text",)
    assert ok.request_id is not None
    assert ok.duration_ms > 0
    assert ok.actual_tokens
    assert ok.estimated_tokens
    assert (failed.success, failed.error_kind) == (False, "tool_error")


async def test_a_restarting_servers_tools_say_so_and_when_to_retry(tmp_path: Path) -> None:
    listing = True

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        if not listing:
            raise RuntimeError("cannot list tools now")  # every reconnection fails: it stays down
        schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
        return mcp_types.ListToolsResult(tools=[mcp_types.Tool(name="read", input_schema=schema)])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=str((params.arguments or {})["text"]))])

    docs = Server("docs", on_list_tools=list_tools, on_call_tool=call_tool)
    async with (
        running_gateway({"docs": docs, "fx": build_server(tmp_path)}) as (gw, sink),
        Client(gw.server, mode="legacy") as client,
    ):
        assert text(await client.call_tool("docs__read", {"text": "a"})) == "a"
        listing = False
        gw.hub.downstreams["docs"].restart("a test restarts it")
        await wait_for(lambda: gw.hub.unavailable_reason("docs") is not None)

        down = await client.call_tool("docs__read", {"text": "b"})
        assert down.is_error
        assert "Unknown tool" not in text(down)
        assert text(down).startswith("Server 'docs' is not available (down: ")
        # A call waits for the first reconnection after the drop; once that failed, the next comes
        # 1 s later: the wait left is at most that.
        retry = re.search(r"restarting, retry in (\d+\.\d) s\); tool 'docs__read' was not called\.$", text(down))
        assert retry is not None and 0 <= float(retry.group(1)) <= 1.0, text(down)
        record = sink.records[-1]
        assert (record.tool, record.server, record.error_kind) == ("docs__read", "docs", "unavailable")
        # Not listed while down; a tool that never existed is still unknown.
        assert [t.name for t in (await client.list_tools()).tools if t.name.startswith("docs")] == []
        assert "Unknown tool 'docs__nope'" in text(await client.call_tool("docs__nope", {}))

        listing = True
        await wait_for(lambda: gw.hub.unavailable_reason("docs") is None)
        assert text(await client.call_tool("docs__read", {"text": "back"})) == "back"


async def test_the_health_check_pings_without_a_deprecation_warning(gateway: Gateway) -> None:
    # Client.send_ping warns that 2026-07-28 removed ping, on the stderr of every gateway that
    # checks a server's health; the session's ping is the same request without it.
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert await gateway.hub.downstreams["fx"].ping() is None
    assert [str(w.message) for w in seen] == []
