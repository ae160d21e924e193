"""`Mcp-Method` and `Mcp-Name` (2026-07-28, SEP-2243) on the gateway's requests to a server.

The SDK's client session puts them on every request of a 2026-07-28 connection, in the headers it
hands the transport with each message (the streamable HTTP transport sends them on the POST). In
memory the same per-message headers reach the server with the message, so they are read here
without a socket. A handshake-era request carries none: the 2025-11-25 revision defines neither.
"""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from tests.conftest import wait_for
from tests.fixtures.json_server import JsonServer
from toolscore import testing

pytestmark = pytest.mark.anyio

_MODERN = "2026-07-28"
_COMPLETE = {"resultType": "complete"}
_CACHEABLE = {**_COMPLETE, "ttlMs": 0, "cacheScope": "private"}


def _both_eras() -> JsonServer:
    """A server of one tool `echo` that speaks both eras (it answers `server/discover`)."""
    caps = {"tools": {}}
    return JsonServer(
        {
            "server/discover": lambda p: {"supportedVersions": [_MODERN], "capabilities": caps, **_CACHEABLE},
            "tools/list": lambda p: {
                "tools": [{"name": "echo", "inputSchema": {"type": "object"}}],
                **_CACHEABLE,
            },
            "tools/call": lambda p: {"content": [{"type": "text", "text": "ok"}], **_COMPLETE},
        },
        caps,
    )


async def test_a_2026_request_carries_mcp_method_and_mcp_name() -> None:
    server = _both_eras()
    async with testing.running_gateway({"s": server}) as (gateway, _), Client(gateway.server, cache=None) as client:
        result = await client.call_tool("s__echo", {})
        assert not result.is_error
        await wait_for(lambda: any(m == "tools/call" for m, _ in server.headers))
    calls = [(h, p) for (m, h), (_, p) in zip(server.headers, server.requests, strict=True) if m == "tools/call"]
    modern = [h for h, p in calls if (p.get("_meta") or {}).get("io.modelcontextprotocol/protocolVersion") == _MODERN]
    assert modern, "the call went down in the 2026-07-28 era"
    assert modern[0]["mcp-method"] == "tools/call"
    assert modern[0]["mcp-name"] == "echo"  # the server's own name for it
    assert modern[0]["mcp-protocol-version"] == _MODERN
    listed = [h for m, h in server.headers if m == "tools/list" and "mcp-method" in h]
    assert all(h["mcp-method"] == "tools/list" and "mcp-name" not in h for h in listed)


async def test_a_handshake_era_request_carries_neither() -> None:
    server = JsonServer(
        {
            "tools/list": lambda p: {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]},
            "tools/call": lambda p: {"content": [{"type": "text", "text": "ok"}]},
        },
        {"tools": {}},
    )
    async with (
        testing.running_gateway({"s": server}) as (gateway, _),
        Client(gateway.server, mode="legacy") as client,
    ):
        assert not (await client.call_tool("s__echo", {})).is_error
    sent: list[dict[str, Any]] = [h for m, h in server.headers if m == "tools/call"]
    assert sent and all("mcp-method" not in h and "mcp-name" not in h for h in sent)
