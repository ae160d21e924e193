"""`subscriptions/listen` fanned in from several downstreams, each stream filtered by its request.

A real 2026-07-28 client listens through the real front to two copies of the conformance fixture
run as stdio subprocesses (handshake-era connections): `a` with the default prefix, `b` with
none, so one server-side URI is `toolscore://a/test://watched-resource` on one and
`test://watched-resource` on the other. The fixture's `test_touch_resource` sends
`resources/updated` only for a URI it was subscribed to, and says which it did.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.client.subscriptions import Subscription
from mcp.shared.subscriptions import PromptsListChanged, ResourceUpdated, ServerEvent, ToolsListChanged

from tests.conftest import FIXTURES, make_config, running_gateway, wait_for
from toolscore import Gateway, MemoryAuditSink

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

CONFORMANCE = str(FIXTURES / "conformance_server.py")
WATCHED = "test://watched-resource"
A_WATCHED = f"toolscore://a/{WATCHED}"


def entry(**extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [CONFORMANCE, "--extras"], **extra}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def pair(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    config = make_config({"a": entry(), "b": entry(prefix="")})
    async with running_gateway(config, tmp_path_factory.mktemp("listen")) as running:
        yield running


def said(result: mcp_types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent), result
    return block.text


async def collect(subscription: Subscription, into: list[ServerEvent]) -> None:
    async for event in subscription:
        into.append(event)


async def test_streams_fan_in_every_server_and_get_only_what_they_asked_for(
    pair: tuple[Gateway, MemoryAuditSink],
) -> None:
    gateway, _ = pair
    tools: list[ServerEvent] = []
    watch_a: list[ServerEvent] = []
    watch_b: list[ServerEvent] = []
    prompts: list[ServerEvent] = []
    async with Client(gateway.server) as client, anyio.create_task_group() as group, AsyncExitStack() as streams:
        assert client.protocol_version == "2026-07-28"
        for events, kwargs in (
            (tools, {"tools_list_changed": True}),
            (watch_a, {"resource_subscriptions": [A_WATCHED]}),
            (watch_b, {"resource_subscriptions": [WATCHED]}),
            (prompts, {"prompts_list_changed": True}),
        ):
            subscription = await streams.enter_async_context(client.listen(**kwargs))
            group.start_soon(collect, subscription, events)

        # Each stream's URI was subscribed at its own server, under the server's own URI.
        assert said(await client.call_tool("a__test_touch_resource", {"uri": WATCHED})) == f"updated {WATCHED}"
        await wait_for(lambda: len(watch_a) == 1)
        assert said(await client.call_tool("test_touch_resource", {"uri": WATCHED})) == f"updated {WATCHED}"
        await wait_for(lambda: len(watch_b) == 1)
        # The URIs as the client sees them: `a`'s rewritten with its prefix, `b`'s as they are.
        assert watch_a == [ResourceUpdated(uri=A_WATCHED)]
        assert watch_b == [ResourceUpdated(uri=WATCHED)]

        # Both servers' tool changes reach the tools stream; events are delivered in the order the
        # bus published them, so a resource update wrongly let through would have come first.
        assert "added" in said(await client.call_tool("a__test_trigger_tool_change", {}))
        await wait_for(lambda: len(tools) == 1)
        assert "added" in said(await client.call_tool("test_trigger_tool_change", {}))
        await wait_for(lambda: len(tools) == 2)
        assert tools == [ToolsListChanged(), ToolsListChanged()]
        listed = {tool.name for tool in (await client.list_tools()).tools}
        assert {"a__test_dynamic_tool", "test_dynamic_tool"} <= listed

        assert "added" in said(await client.call_tool("test_trigger_prompt_change", {}))
        await wait_for(lambda: len(prompts) == 1)
        # Nothing of any other kind reached any stream meanwhile.
        assert prompts == [PromptsListChanged()]
        assert tools == [ToolsListChanged(), ToolsListChanged()]
        assert watch_a == [ResourceUpdated(uri=A_WATCHED)] and watch_b == [ResourceUpdated(uri=WATCHED)]
        await streams.aclose()
        group.cancel_scope.cancel()

    # Put the servers back as they were for the next test.
    async with Client(gateway.server) as client:
        await client.call_tool("a__test_trigger_tool_change", {})
        await client.call_tool("test_trigger_tool_change", {})
        await client.call_tool("test_trigger_prompt_change", {})


async def test_a_closed_stream_unsubscribes_its_servers(pair: tuple[Gateway, MemoryAuditSink]) -> None:
    gateway, _ = pair
    async with Client(gateway.server) as client:
        async with client.listen(resource_subscriptions=[A_WATCHED, WATCHED]) as subscription:
            assert subscription.honored.resource_subscriptions == [A_WATCHED, WATCHED]
            assert said(await client.call_tool("a__test_touch_resource", {"uri": WATCHED})) == f"updated {WATCHED}"
            assert said(await client.call_tool("test_touch_resource", {"uri": WATCHED})) == f"updated {WATCHED}"
        # The gateway unsubscribes as the stream ends (the client's cancellation reaches it first).
        for tool in ("a__test_touch_resource", "test_touch_resource"):
            await wait_for_text(client, tool, f"not subscribed: {WATCHED}")


async def test_a_listen_and_a_handshake_subscription_share_one_downstream_subscription(
    pair: tuple[Gateway, MemoryAuditSink],
) -> None:
    gateway, _ = pair
    updates: list[str] = []
    events: list[ServerEvent] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            updates.append(str(message.params.uri))

    async with (
        Client(gateway.server, mode="legacy", message_handler=on_message) as legacy,
        Client(gateway.server) as modern,
    ):
        async with (
            modern.listen(resource_subscriptions=[A_WATCHED]) as subscription,
            anyio.create_task_group() as group,
        ):
            group.start_soon(collect, subscription, events)
            await legacy.subscribe_resource(A_WATCHED)
            assert said(await modern.call_tool("a__test_touch_resource", {"uri": WATCHED})) == f"updated {WATCHED}"
            await wait_for(lambda: updates == [A_WATCHED] and events == [ResourceUpdated(uri=A_WATCHED)])
            # The handshake-era client leaves; the stream still holds the server's subscription.
            await legacy.unsubscribe_resource(A_WATCHED)
            assert said(await modern.call_tool("a__test_touch_resource", {"uri": WATCHED})) == f"updated {WATCHED}"
            await wait_for(lambda: len(events) == 2)
            assert updates == [A_WATCHED]
            group.cancel_scope.cancel()
        await wait_for_text(modern, "a__test_touch_resource", f"not subscribed: {WATCHED}")


async def test_a_uri_no_server_owns_is_acknowledged_and_never_fires(pair: tuple[Gateway, MemoryAuditSink]) -> None:
    gateway, _ = pair
    async with Client(gateway.server) as client, client.listen(resource_subscriptions=["nowhere://x"]) as subscription:
        assert subscription.honored.resource_subscriptions == ["nowhere://x"]


async def wait_for_text(client: Client, tool: str, text: str) -> None:
    """Call `tool` until it answers `text` (the unsubscription is made as the stream winds down)."""
    answers: list[str] = []

    async def answered() -> bool:
        answers.append(said(await client.call_tool(tool, {"uri": WATCHED})))
        return answers[-1] == text

    with anyio.fail_after(60):
        while not await answered():  # noqa: ASYNC110 - the unsubscription is made in another process
            await anyio.sleep(0.05)


async def test_a_uri_of_a_server_added_later_is_subscribed_once_it_is_listed(tmp_path: Path) -> None:
    # The stream names `c`'s URI before any server `c` exists; a reload adds `c`, and the stream's
    # URI is subscribed there, so its updates reach the stream.
    late = f"toolscore://c/{WATCHED}"
    events: list[ServerEvent] = []
    async with (
        running_gateway(make_config({"a": entry()}), tmp_path) as (gateway, _),
        Client(gateway.server) as client,
        anyio.create_task_group() as group,
    ):
        async with client.listen(resource_subscriptions=[late]) as subscription:
            group.start_soon(collect, subscription, events)
            await gateway.hub.apply(make_config({"a": entry(), "c": entry()}), hide=None)
            await gateway.hub.wait_started()
            await wait_for_text(client, "c__test_touch_resource", f"updated {WATCHED}")
            await wait_for(lambda: len(events) >= 1)
            assert set(events) == {ResourceUpdated(uri=late)}
        group.cancel_scope.cancel()
        # The stream is closed: `c` is unsubscribed as it winds down.
        await wait_for_text(client, "c__test_touch_resource", f"not subscribed: {WATCHED}")
