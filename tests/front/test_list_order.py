"""`tools/list`, `prompts/list` and `resources/list` answer in one order, whichever server came up first."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.server import Server

from tests.conftest import wait_for
from toolscore import testing
from toolscore._gateway import open_gateway
from toolscore.audit.sinks import MemoryAuditSink

pytestmark = pytest.mark.anyio

# Not in alphabetical order: a server's own order is kept, not re-sorted.
_NAMES = ("zeta", "alpha", "mid")


def _gated(gate: anyio.Event) -> Server[Any]:
    """A server that lists no tools until `gate` is set: up, as the gateway sees it, only then."""

    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        await gate.wait()
        return mcp_types.ListToolsResult(
            tools=[mcp_types.Tool(name=n, input_schema={"type": "object"}) for n in _NAMES]
        )

    async def list_prompts(ctx: Any, params: Any) -> mcp_types.ListPromptsResult:
        return mcp_types.ListPromptsResult(prompts=[mcp_types.Prompt(name=n) for n in _NAMES])

    async def list_resources(ctx: Any, params: Any) -> mcp_types.ListResourcesResult:
        return mcp_types.ListResourcesResult(resources=[mcp_types.Resource(uri=f"mem://{n}", name=n) for n in _NAMES])

    return Server(
        "gated",
        on_list_tools=list_tools,
        on_list_prompts=list_prompts,
        on_list_resources=list_resources,
    )


async def _lists_when_up_in(order: tuple[str, str]) -> tuple[list[str], list[str], list[str]]:
    """Start `first` and `second` (config order), bring them up in `order`, and list every kind."""
    gates = {"first": anyio.Event(), "second": anyio.Event()}
    servers = {name: _gated(gate) for name, gate in gates.items()}
    config = testing.memory_config({"first": {}, "second": {}}, toolscore={"startup_grace_seconds": 0})
    # Not `testing.running_gateway`, which waits for every server to start.
    async with open_gateway(config, audit=MemoryAuditSink(), memory_servers=servers) as gateway:
        hub = gateway.hub
        for up, name in enumerate(order, start=1):
            gates[name].set()
            await wait_for(lambda n=up: len(hub.registry.servers) == n)  # type: ignore[misc]
            assert name in hub.registry.servers
        await wait_for(lambda: len(hub.catalog.listed_prompts()) == 2 * len(_NAMES))
        async with Client(gateway.server, mode="legacy") as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            prompts = [p.name for p in (await client.list_prompts()).prompts]
            resources = [str(r.uri) for r in (await client.list_resources()).resources]
    return tools, prompts, resources


async def test_lists_follow_the_config_whichever_server_answered_first() -> None:
    second_first = await _lists_when_up_in(("second", "first"))
    first_first = await _lists_when_up_in(("first", "second"))
    assert second_first == first_first
    tools, prompts, _ = first_first
    # orchestrate first, then the servers in config order, each in its own order.
    expected = [f"{server}__{name}" for server in ("first", "second") for name in _NAMES]
    assert [t for t in tools if t != "orchestrate"] == expected
    assert prompts == expected
