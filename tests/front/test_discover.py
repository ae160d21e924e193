"""`server/discover` (2026-07-28) answers with the aggregate of the connected servers' capabilities."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from tests.fixtures.json_server import JsonServer
from toolscore import testing
from toolscore._sdk import send_raw_request

pytestmark = pytest.mark.anyio

_ENVELOPE = {
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
}


def _server(capabilities: dict[str, Any]) -> JsonServer:
    return JsonServer(
        {
            "tools/list": lambda p: {"tools": []},
            "prompts/list": lambda p: {"prompts": []},
            "resources/list": lambda p: {"resources": []},
            "resources/templates/list": lambda p: {"resourceTemplates": []},
        },
        capabilities,
    )


async def _discovered(servers: dict[str, JsonServer]) -> dict[str, Any]:
    async with testing.running_gateway(servers) as (gateway, _), Client(gateway.server, cache=None) as client:
        return await send_raw_request(client, "server/discover", _ENVELOPE)


async def test_a_tools_only_catalog_claims_nothing_else() -> None:
    found = await _discovered({"a": _server({"tools": {}})})
    assert set(found["capabilities"]) == {"tools", "extensions"}
    # The tasks extension, for the gateway's own plans (front/task_extension.py); nothing of a server's.
    assert found["capabilities"]["extensions"] == {"io.modelcontextprotocol/tasks": {}}
    assert found["supportedVersions"] == ["2026-07-28"]
    assert found["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "toolscore"
    # Capabilities change as servers come and go: never to be cached.
    assert (found["ttlMs"], found["cacheScope"]) == (0, "private")


async def test_what_one_server_declares_the_gateway_declares() -> None:
    found = await _discovered(
        {
            "a": _server({"tools": {}}),
            "b": _server({"tools": {}, "prompts": {}, "resources": {"subscribe": False}, "logging": {}}),
        }
    )
    caps = found["capabilities"]
    assert set(caps) == {"tools", "prompts", "resources", "logging", "extensions"}
    assert caps["resources"].get("subscribe") in (None, False)  # no server takes subscriptions
