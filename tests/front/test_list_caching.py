"""`ttlMs` and `cacheScope` of the front's lists (2026-07-28): the least fresh, the narrowest, of
every server's; and a server's list held no longer than its `ttlMs` (docs/conformance.md)."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from tests.conftest import wait_for
from tests.fixtures.json_server import JsonServer
from toolscore import testing
from toolscore.downstream.caching import ListHint, combined

pytestmark = pytest.mark.anyio

_SCHEMA = {"type": "object"}


def _listing(names: list[str], ttl_ms: int | None, scope: str | None) -> JsonServer:
    """A server listing `names` as tools and prompts with the hints given (None: left out)."""
    hints: dict[str, Any] = {}
    if ttl_ms is not None:
        hints["ttlMs"] = ttl_ms
    if scope is not None:
        hints["cacheScope"] = scope

    def tools(params: dict[str, Any]) -> dict[str, Any]:
        return {"tools": [{"name": n, "inputSchema": _SCHEMA} for n in names], **hints}

    def prompts(params: dict[str, Any]) -> dict[str, Any]:
        return {"prompts": [{"name": n} for n in names], **hints}

    return JsonServer({"tools/list": tools, "prompts/list": prompts}, {"tools": {}, "prompts": {}})


async def _front_hints(servers: dict[str, JsonServer], **sections: Any) -> list[tuple[int, str]]:
    """What a 2026-07-28 client is told of `tools/list` and `prompts/list`."""
    async with (
        testing.running_gateway(servers, **sections) as (gateway, _),
        Client(gateway.server, cache=None) as client,
    ):
        tools = await client.list_tools()
        prompts = await client.list_prompts()
    return [(tools.ttl_ms, tools.cache_scope), (prompts.ttl_ms, prompts.cache_scope)]


async def test_the_least_ttl_and_public_only_when_every_server_says_so() -> None:
    hints = await _front_hints({"a": _listing(["x"], 600_000, "public"), "b": _listing(["y"], 300_000, "public")})
    for ttl, scope in hints:
        assert 0 < ttl <= 300_000  # b's, less the time the gateway has held it
        assert ttl > 250_000
        assert scope == "public"


async def test_one_private_server_makes_the_list_private() -> None:
    hints = await _front_hints({"a": _listing(["x"], 600_000, "public"), "b": _listing(["y"], 600_000, "private")})
    assert [scope for _, scope in hints] == ["private", "private"]
    assert all(ttl > 0 for ttl, _ in hints)


async def test_a_server_that_gives_no_hint_makes_the_list_stale_at_once() -> None:
    hints = await _front_hints({"a": _listing(["x"], 600_000, "public"), "b": _listing(["y"], None, None)})
    assert hints == [(0, "private"), (0, "private")]


async def test_a_list_that_differs_per_caller_is_private() -> None:
    servers = {"a": _listing(["x"], 600_000, "public")}
    # A caller with rules of its own sees its own tools/list (constraints.principals).
    constraints = {"enabled": True, "principals": {"alice": {"tools": {"deny": ["a__x"]}}}}
    hints = await _front_hints(servers, constraints=constraints)
    assert hints[0][1] == "private"
    assert hints[1][1] == "public"  # prompts are the same for everyone


async def test_a_list_past_its_ttl_is_read_again_when_asked_for() -> None:
    names = ["x"]
    server = _listing(names, 1, "public")  # fresh for 1 ms
    async with testing.running_gateway({"a": server}) as (gateway, _):
        names.append("y")  # the server's list changes, and it says nothing (a 2026-07-28 server may not)
        listed = len([m for m, _ in server.requests if m == "tools/list"])
        async with Client(gateway.server, mode="legacy") as client:
            await client.list_tools()  # the held list is stale: the server is asked again
            await wait_for(lambda: gateway.hub.registry.get("a__y") is not None)
            assert len([m for m, _ in server.requests if m == "tools/list"]) > listed
            assert "a__y" in [t.name for t in (await client.list_tools()).tools]


def test_the_freshness_left_is_counted_from_when_the_list_was_received() -> None:
    held = ListHint(10_000, "public", received=100.0)
    assert combined([held], now=104.0) == (6_000, "public")
    assert combined([held], now=111.0) == (0, "public")
    assert held.stale(111.0) and not held.stale(104.0)
    assert not ListHint(0, "public", received=100.0).stale(1e9)  # 0 promises nothing: no re-reading on a timer
    assert combined([held, None], now=100.0) == (0, "private")
    assert combined([], now=100.0) == (0, "private")
    assert combined([held], now=100.0, per_caller=True) == (10_000, "private")
