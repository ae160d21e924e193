"""The private parts of the mcp SDK that `toolscore._sdk` reaches are still where it expects them.

If one of these fails after an SDK upgrade, fix `src/toolscore/_sdk.py` (and only it); the HTTP front's hot
path then hands every request to the SDK until it is fixed.
"""

from __future__ import annotations

import importlib
from typing import Any

import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.server import Server, ServerRequestContext
from mcp.server.connection import Connection

from toolscore._sdk import connection_of, http_session, send_as_client, send_raw_request, session_closed
from toolscore._sdk_packages import LAZY_PACKAGES, name_table

pytestmark = pytest.mark.anyio


async def test_a_front_session_leads_to_its_connection_and_a_client_sends_raw_requests() -> None:
    seen: list[Connection] = []

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        seen.append(connection_of(ctx.session))
        return mcp_types.ListToolsResult(tools=[mcp_types.Tool(name="ok", input_schema={"type": "object"})])

    server = Server("adapter", on_list_tools=list_tools)
    async with Client(server, mode="legacy") as client:
        raw = await send_raw_request(client, "tools/list", None)
    assert raw["tools"][0]["name"] == "ok"
    assert isinstance(seen[0], Connection) and seen[0].has_standalone_channel


async def test_a_client_session_tells_when_its_transport_has_ended() -> None:
    server = Server("adapter")
    async with Client(server, mode="legacy") as client:
        session = client.session
        assert not session_closed(session)
    assert session_closed(session)


async def test_a_2026_request_can_carry_another_clients_capabilities() -> None:
    seen: list[tuple[bool, str | None]] = []

    async def call_tool(ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams) -> Any:
        sampling = mcp_types.ClientCapabilities(sampling=mcp_types.SamplingCapability())
        seen.append((ctx.session.check_client_capability(sampling), (ctx.meta or {}).get(mcp_types.LOG_LEVEL_META_KEY)))
        return mcp_types.InputRequiredResult(request_state="again")

    server = Server("adapter", on_call_tool=call_tool)
    async with Client(server, mode="2026-07-28") as client:
        raw = await send_as_client(
            client, "tools/call", {"name": "t", "arguments": {}}, capabilities={"sampling": {}}, log_level="info"
        )
        await send_as_client(client, "tools/call", {"name": "t"}, capabilities={}, log_level=None)
    assert raw["resultType"] == "input_required" and raw["requestState"] == "again"  # the raw result, unparsed
    assert seen == [(True, "info"), (False, None)]


async def test_a_live_http_session_is_reached_by_its_id() -> None:
    server = Server("adapter")
    app = server.streamable_http_app(host="127.0.0.1")
    manager = server.session_manager
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    async with (
        manager.run(),
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url="http://127.0.0.1:8000") as http,
    ):
        init = await http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
            headers={"Accept": "application/json, text/event-stream"},
        )
        session = http_session(manager, init.headers["mcp-session-id"])
        assert session is not None and http_session(manager, "unknown") is None
        streams = session.open("7")
        assert streams is not None and session.open("7") is None  # one stream per request id
        priming = await session.priming_event("7", "2025-11-25")
        assert priming is None  # no event store here
        with session.busy():
            pass
        session.close("7", streams)
        assert session.open("7") is not None


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_the_sdk_package_inits_still_only_import_names_and_the_lazy_ones_give_the_same_objects(package: str) -> None:
    """If this fails, `toolscore serve` loads the whole package again (`toolscore._sdk_packages`)."""
    found = name_table(package)
    assert found is not None, f"{package}'s __init__ does more than import names"
    table, exported = found
    real = importlib.import_module(package)
    for name, (module, attribute) in table.items():
        value = importlib.import_module(module)
        assert (value if attribute is None else getattr(value, attribute)) is getattr(real, name), name
    assert exported is not None and set(exported) <= set(table)
