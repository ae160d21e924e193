"""The catalog modes through the real front: search mode lists three tools however many are
behind them, and a client finds and calls a tool it was never listed."""

from __future__ import annotations

import json
from typing import Any

import mcp_types
import pytest
from mcp import Client

from tests.conftest import text
from toolscore.testing import FakeDownstream, memory_config, running_gateway
from toolscore.toolhub.catalog import listing_bytes

pytestmark = pytest.mark.anyio

TOPICS = ["weather", "stock", "calendar", "email", "invoice", "ticket", "recipe", "flight", "hotel", "lyrics"]
VERBS = ["get", "list", "create", "update", "delete", "search", "export", "import", "archive", "summarize"]


def catalog(servers: int = 10, per_server: int = 20) -> dict[str, FakeDownstream]:
    """`servers` x `per_server` tools with realistic names, descriptions and schemas."""
    fakes: dict[str, FakeDownstream] = {}
    for s in range(servers):
        topic = TOPICS[s % len(TOPICS)]
        fake = FakeDownstream(f"{topic}{s}")
        for t in range(per_server):
            verb = VERBS[t % len(VERBS)]
            name = f"{verb}_{topic}_{t}"
            schema = {
                "type": "object",
                "properties": {"id": {"type": "string", "description": f"The {topic} id."}, "note": {"type": "string"}},
                "required": ["id"],
            }

            def answer(id: str, note: str = "", _name: str = name) -> str:
                return f"{_name}({id})"

            fake.tool(name, schema=schema, description=f"{verb.title()} a {topic} record by its id; {topic} service.")(
                answer
            )
        fakes[f"{topic}{s}"] = fake
    return fakes


async def test_search_mode_lists_three_tools_in_under_2_kb_for_200_tools() -> None:
    fakes = catalog()
    async with running_gateway(fakes, toolscore={"catalog": "search"}) as (gw, _), Client(gw.server) as client:
        listed = (await client.list_tools()).tools
        assert [t.name for t in listed] == ["orchestrate", "search_tools", "call_tool"]
        assert len(gw.hub.registry.tools()) == 200
        size = listing_bytes(listed)
        assert size < 2048, size
        full = listing_bytes(gw.hub.registry.tools())
        assert full > 10 * size
        # orchestrate names servers and capabilities, never a routed tool; its contract is deferred.
        description = listed[0].description or ""
        assert "weather0" in description and "weather (20)" in description and "call_capability" in description
        assert not any(t.name in description for t in gw.hub.registry.tools())
        found = json.loads(text(await client.call_tool("search_tools", {"query": "orchestrate"})))
        assert found[0]["name"] == "orchestrate" and "<execute_tools />" in found[0]["description"]


async def test_a_client_finds_and_calls_a_tool_it_was_never_listed() -> None:
    async with (
        running_gateway(catalog(), toolscore={"catalog": "search"}) as (gw, audit),
        Client(gw.server) as client,
    ):
        listed = {t.name for t in (await client.list_tools()).tools}
        found = json.loads(text(await client.call_tool("search_tools", {"query": "export flight records", "k": 3})))
        best = found[0]
        assert best["name"].startswith("flight") and "export_flight" in best["name"]
        assert best["name"] not in listed
        assert best["inputSchema"]["required"] == ["id"]  # the full schema, to call it right
        result = await client.call_tool("call_tool", {"name": best["name"], "arguments": {"id": "LH400"}})
        assert text(result).endswith("(LH400)")
        # Through the same engine: validated, audited under the tool's own name.
        bad = await client.call_tool("call_tool", {"name": best["name"], "arguments": {}})
        assert bad.is_error and "Invalid arguments" in text(bad)
        assert [r.tool for r in audit.records] == [best["name"]] * 2
        # and by name in a plan
        plan = f'<call tool="{best["name"]}">{{"id": "X1"}}</call><execute_tools />'
        answer = await client.call_tool("orchestrate", {"plan": plan})
        assert not answer.is_error and "(X1)" in text(answer)


async def test_search_answers_score_and_matched_words_and_narrows_by_server_or_capability() -> None:
    fakes = catalog()
    entries: dict[str, dict[str, Any]] = {name: {} for name in fakes}
    entries["weather0"] = {"capabilities": {"export_weather_6": ["reports"]}}
    config = memory_config(entries, toolscore={"catalog": "search"})
    async with (
        running_gateway(fakes, config=config) as (gw, _),
        Client(gw.server) as client,
    ):

        async def search(**args: Any) -> list[dict[str, Any]]:
            result = await client.call_tool("search_tools", args)
            assert not result.is_error, text(result)
            found: list[dict[str, Any]] = json.loads(text(result))
            return found

        found = await search(query="removing a ticket", k=3)
        # `removing` finds `delete` (stemmed, then by synonym); equal scores go by name
        assert [f["name"] for f in found[:2]] == ["ticket5__delete_ticket_14", "ticket5__delete_ticket_4"]
        assert found[0]["matched"] == ["removing", "ticket"] and found[0]["score"] >= found[1]["score"]
        narrowed = await search(query="export records", k=20, server="hotel8")
        assert narrowed and {f["name"].split("__")[0] for f in narrowed} == {"hotel8"}
        tagged = await search(query="export records", k=20, capability="reports")
        assert [f["name"] for f in tagged] == ["weather0__export_weather_6"]
        none = await client.call_tool("search_tools", {"query": "export", "server": "nope"})
        assert none.is_error and "on server 'nope'" in text(none)


async def test_auto_switches_to_search_above_the_thresholds() -> None:
    fakes = catalog(servers=2, per_server=5)
    async with running_gateway(fakes, toolscore={"catalog": "auto"}) as (gw, _), Client(gw.server) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"weather0__get_weather_0", "orchestrate"} <= names and "search_tools" not in names
    by_count = {"catalog": "auto", "toolhub": {"search_above_tools": 9}}
    async with running_gateway(fakes, toolscore=by_count) as (gw, _), Client(gw.server) as client:
        assert len((await client.list_tools()).tools) == 3
    by_bytes = {"catalog": "auto", "toolhub": {"search_above_bytes": 1024}}
    async with running_gateway(fakes, toolscore=by_bytes) as (gw, _), Client(gw.server) as client:
        assert len((await client.list_tools()).tools) == 3


async def test_full_mode_is_unchanged_unless_capabilities_are_declared() -> None:
    fakes = catalog(servers=2, per_server=2)
    async with running_gateway(fakes) as (gw, _), Client(gw.server) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert "call_capability" not in names and "search_tools" not in names
        assert len([n for n in names if "__" in n]) == 4
        # The hub's tools answer whether listed or not.
        found = json.loads(text(await client.call_tool("search_tools", {"query": "weather"})))
        assert found


async def test_bad_calls_to_the_hub_tools_are_tool_errors_a_model_can_fix() -> None:
    async with running_gateway(catalog(2, 2), toolscore={"catalog": "search"}) as (gw, _), Client(gw.server) as c:
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("search_tools", {"query": 3}, "search_tools takes"),
            ("search_tools", {"query": "x", "k": 0}, "search_tools takes"),
            ("search_tools", {"query": "x", "server": 3}, "search_tools takes"),
            ("search_tools", {"query": "zzzz qqqq"}, "No tool matches"),
            ("call_tool", {"name": ["x"]}, "call_tool takes"),
            ("call_tool", {"name": "orchestrate", "arguments": {}}, "call 'orchestrate' directly"),
            ("call_tool", {"name": "call_tool", "arguments": {}}, "call 'call_tool' directly"),
            ("call_tool", {"name": "nope__nothing"}, "Unknown tool"),
            ("call_capability", {"capability": "search", "strategy": "best"}, "call_capability takes"),
            ("call_capability", {"capability": "x" * 5000}, "No tool offers capability"),
        ]
        for name, args, expected in cases:
            result = await c.call_tool(name, args)
            assert result.is_error and expected in text(result), (name, args, text(result))
            assert len(text(result)) < 1000


async def test_policy_can_forbid_the_hub_tools_and_still_governs_the_calls_they_make() -> None:
    constraints = {"enabled": True, "tools": {"deny": ["search_tools", "*delete*"]}}
    async with (
        running_gateway(catalog(1, 10), toolscore={"catalog": "search"}, constraints=constraints) as (gw, audit),
        Client(gw.server) as client,
    ):
        refused = await client.call_tool("search_tools", {"query": "weather"})
        assert refused.is_error and "not allowed" in text(refused)
        denied = await client.call_tool("call_tool", {"name": "weather0__delete_weather_4", "arguments": {"id": "1"}})
        assert denied.is_error and "rejected by policy" in text(denied)
        assert audit.records[-1].error_kind == "rejected"


async def test_search_results_are_bounded_whatever_the_query() -> None:
    async with running_gateway(catalog(2, 10), toolscore={"catalog": "search"}) as (gw, _), Client(gw.server) as c:
        for query in ["weather " * 10_000, "\ud800\udfff weather", "WeAtHeR", "é" * 999]:
            result = await c.call_tool("search_tools", {"query": query, "k": 20})
            if not result.is_error:
                assert len(json.loads(text(result))) <= 20


async def test_capability_results_keep_non_text_blocks_and_structured_content() -> None:
    fake = FakeDownstream("img")

    @fake.tool(description="Render a chart image.", schema={"type": "object", "properties": {"q": {"type": "string"}}})
    def chart(q: str = "") -> mcp_types.CallToolResult:
        return mcp_types.CallToolResult(
            content=[mcp_types.ImageContent(data="aGk=", mime_type="image/png")], structured_content={"n": 1}
        )

    config_sections = {"toolscore": {"toolhub": {"capabilities": {"image": {"fan_out": 1}}}}}
    async with running_gateway({"img": fake}, **config_sections) as (gw, _), Client(gw.server) as client:
        result = await client.call_tool("call_capability", {"capability": "image", "arguments": {"q": "x"}})
        assert isinstance(result.content[0], mcp_types.ImageContent)
        assert result.structured_content == {"n": 1}
        assert "img__chart ok" in text(result.model_copy(update={"content": result.content[1:]}))


DENIALS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # how: (weather0's entry, the constraints section)
    "server tools filter": ({"tools": {"deny": ["delete_*"]}}, {}),
    "global policy": ({}, {"enabled": True, "tools": {"deny": ["weather0__delete*"]}}),
    "per-server policy": (
        {"constraints": {"tools": {"deny": ["delete_*"]}}},
        {"enabled": True, "tools": {"deny": []}},
    ),
}


@pytest.mark.parametrize("how", list(DENIALS))
async def test_search_never_shows_nor_counts_a_denied_tool(how: str) -> None:
    """`search_tools` answered the full definition of a tool every call of which is refused."""
    entry, constraints = DENIALS[how]
    config = memory_config({"weather0": entry, "stock1": {}}, toolscore={"catalog": "search"}, constraints=constraints)
    async with running_gateway(catalog(2, 10), config=config) as (gw, _), Client(gw.server) as client:
        listed = (await client.list_tools()).tools
        found = await client.call_tool("search_tools", {"query": "delete weather stock record", "k": 20})
    names = [tool["name"] for tool in json.loads(text(found))]
    assert "weather0__delete_weather_4" not in names and "weather0__delete_weather_4" not in text(found)
    assert "stock1__delete_stock_4" in names  # the same tool of another server is not denied
    # orchestrate's description counts the tools per capability: the denied one is not counted.
    assert "weather (9)" in (listed[0].description or "")
