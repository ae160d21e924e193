"""Capability calls in memory: real SDK servers behind the real front, every edge of the strategies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client

from tests.conftest import memory_gateway, text, wait_for
from toolscore.testing import FakeDownstream, running_gateway

pytestmark = pytest.mark.anyio

SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}


def engine(name: str, delay: float = 0.0, *, fails: bool = False, answer: Any = None) -> FakeDownstream:
    fake = FakeDownstream(name)

    @fake.tool("find", schema=SCHEMA, description="Search for pages.")
    async def find(query: str) -> Any:
        await anyio.sleep(delay)
        if fails:
            return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=f"{name} broke")], is_error=True)
        return answer if answer is not None else f"{name}: {query}"

    return fake


def sections(strategy: str = "first_success", **capability: Any) -> dict[str, Any]:
    return {
        "toolscore": {"toolhub": {"capabilities": {"search": {"strategy": strategy, **capability}}}},
    }


async def call(client: Client, **arguments: Any) -> mcp_types.CallToolResult:
    return await client.call_tool("call_capability", {"capability": "search", **arguments})


def statuses(result: mcp_types.CallToolResult) -> list[tuple[str, str]]:
    meta = (result.meta or {})["toolscore/capability"]
    return [(c["tool"], c["status"]) for c in meta["candidates"]]


async def test_first_success_waits_past_a_fast_failure_for_a_slower_success() -> None:
    fakes = {"a": engine("a", fails=True), "b": engine("b", 0.05)}
    async with running_gateway(fakes, **sections()) as (gw, _), Client(gw.server) as client:
        result = await call(client, arguments={"query": "x"})
        assert text(result) == "b: x"
        assert statuses(result) == [("a__find", "failed"), ("b__find", "ok")]
        assert "a__find failed (a broke)" in result.content[-1].text  # type: ignore[union-attr]


async def test_the_first_to_succeed_wins_even_when_listed_later() -> None:
    fakes = {"a": engine("a", 0.3), "b": engine("b", 0.0)}
    async with running_gateway(fakes, **sections()) as (gw, _), Client(gw.server) as client:
        result = await call(client, arguments={"query": "x"})
        assert text(result) == "b: x" and statuses(result) == [("a__find", "cancelled"), ("b__find", "ok")]


async def test_when_every_candidate_fails_the_answer_is_an_error_naming_each() -> None:
    fakes = {"a": engine("a", fails=True), "b": engine("b", fails=True)}
    async with running_gateway(fakes, **sections("all")) as (gw, _), Client(gw.server) as client:
        result = await call(client, arguments={"query": "x"})
        assert result.is_error and "No candidate for capability 'search' succeeded" in text(result)
        assert "a__find failed (a broke)" in text(result) and "b__find failed (b broke)" in text(result)
        nothing = await call(client, arguments={"topic": "x"})  # nobody can take it
        assert nothing.is_error and statuses(nothing) == [("a__find", "skipped"), ("b__find", "skipped")]


async def test_fan_out_bounds_the_calls_and_says_who_was_not_reached() -> None:
    fakes = {n: engine(n) for n in "abcd"}
    async with running_gateway(fakes, **sections("all")) as (gw, audit), Client(gw.server) as client:
        result = await call(client, arguments={"query": "x"})
        assert statuses(result)[-1] == ("d__find", "not_reached") and len(audit.records) == 3
    async with running_gateway(fakes, **sections("all", fan_out=1)) as (gw, audit), Client(gw.server) as client:
        await call(client, arguments={"query": "x"})
        assert len(audit.records) == 1


async def test_a_capability_timeout_is_each_candidates_deadline() -> None:
    fakes = {"a": engine("a", 600.0), "b": engine("b", 600.0)}  # only the timeout can end them
    async with running_gateway(fakes, **sections("fallback", timeout=0.1)) as (gw, audit), Client(gw.server) as c:
        with anyio.fail_after(60):  # a hang detector
            result = await call(c, arguments={"query": "x"})
        assert result.is_error and "did not answer within 0.1 s" in text(result)
        assert [r.error_kind for r in audit.records] == ["timeout", "timeout"]


async def test_policy_governs_every_candidate() -> None:
    fakes = {"a": engine("a"), "b": engine("b", 0.05)}
    constraints = {"enabled": True, "tools": {"deny": ["a__*"]}}
    async with (
        running_gateway(fakes, constraints=constraints, **sections()) as (gw, audit),
        Client(gw.server) as client,
    ):
        result = await call(client, arguments={"query": "x"})
        assert text(result) == "b: x"
        # A tool the policy always refuses is no candidate at all: never tried, never audited.
        assert [name for name, _ in statuses(result)] == ["b__find"]
        assert {r.tool: r.error_kind for r in audit.records} == {"b__find": None}


async def test_the_strategy_can_be_chosen_per_call_and_all_keeps_other_blocks() -> None:
    image = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(text="chart of x"),
            mcp_types.ImageContent(data="aGk=", mime_type="image/png"),
        ]
    )
    fakes = {"a": engine("a", answer=image), "b": engine("b")}
    async with running_gateway(fakes, **sections()) as (gw, _), Client(gw.server) as client:
        result = await call(client, arguments={"query": "x"}, strategy="all")
        assert [type(b).__name__ for b in result.content] == ["TextContent", "ImageContent", "TextContent"]
        assert "chart of x\n   from: a__find" in text(result) and "b: x\n   from: b__find" in text(result)
        assert result.structured_content is not None and len(result.structured_content["items"]) == 2


async def test_call_tool_forwards_progress_to_the_client(tmp_path: Path) -> None:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with (
        memory_gateway(tmp_path, toolscore={"catalog": "search"}) as (gw, _),
        Client(gw.server, mode="legacy") as client,
    ):
        result = await client.call_tool(
            "call_tool", {"name": "fx__progress", "arguments": {"steps": 3}}, progress_callback=on_progress
        )
        assert text(result) == "did 3 steps"
        await wait_for(lambda: len(seen) == 3)


def model(reply: str | None, seen: list[mcp_types.CreateMessageRequestParams], delay: float = 0.0) -> Any:
    async def answer(context: Any, params: mcp_types.CreateMessageRequestParams) -> mcp_types.CreateMessageResult:
        seen.append(params)
        await anyio.sleep(delay)
        content: Any = (
            mcp_types.TextContent(text=reply)
            if reply is not None
            else mcp_types.ImageContent(data="aGk=", mime_type="image/png")
        )
        return mcp_types.CreateMessageResult(role="assistant", content=content, model="client-model")

    return answer


async def test_sampling_synthesis_answers_with_the_clients_model_citing_the_merged_items() -> None:
    fakes = {"a": engine("a"), "b": engine("b")}
    seen: list[mcp_types.CreateMessageRequestParams] = []
    settings = sections("all", synthesis="sampling")
    async with (
        running_gateway(fakes, **settings) as (gw, _),
        Client(gw.server, mode="legacy", sampling_callback=model("Both agree [1][2].", seen)) as client,
    ):
        result = await call(client, arguments={"query": "mcp"})
    assert text(result) == "Both agree [1][2]."
    assert result.content[1].text.startswith("Sources:\n1. a: mcp")  # type: ignore[union-attr]
    assert "synthesized by client-model" in result.content[-1].text  # type: ignore[union-attr]
    assert result.structured_content is not None and result.structured_content["synthesis"] == "Both agree [1][2]."
    prompt = seen[0].messages[0].content
    assert isinstance(prompt, mcp_types.TextContent)
    assert '"query": "mcp"' in prompt.text and "[1] " in prompt.text and "(from b__find)" in prompt.text
    assert seen[0].max_tokens == 1024 and seen[0].include_context == "none"


@pytest.mark.parametrize(
    ("reply", "delay", "why"),
    [
        ("late", 600.0, "no answer from the client's model within 0.2 s"),  # only the timeout ends it
        (None, 0.0, "the model's answer had no text"),
    ],
)
async def test_the_plain_merge_answers_when_synthesis_fails(reply: str | None, delay: float, why: str) -> None:
    fakes = {"a": engine("a"), "b": engine("b")}
    seen: list[mcp_types.CreateMessageRequestParams] = []
    settings = sections("all", synthesis="sampling", synthesis_timeout=0.2)
    async with (
        running_gateway(fakes, **settings) as (gw, _),
        Client(gw.server, mode="legacy", sampling_callback=model(reply, seen, delay)) as client,
    ):
        with anyio.fail_after(60):  # a hang detector
            result = await call(client, arguments={"query": "mcp"})
    assert not result.is_error and text(result).startswith("1. a: mcp")
    assert why in result.content[-1].text  # type: ignore[union-attr]


async def test_a_client_without_sampling_gets_the_plain_merge() -> None:
    fakes = {"a": engine("a"), "b": engine("b")}
    async with running_gateway(fakes, **sections("all", synthesis="sampling")) as (gw, _), Client(gw.server) as c:
        result = await call(c, arguments={"query": "mcp"})
    assert text(result).startswith("1. a: mcp") and "this client offers no sampling" in result.content[-1].text  # type: ignore[union-attr]


async def test_a_refused_sampling_request_leaves_the_plain_merge() -> None:
    async def refuse(context: Any, params: mcp_types.CreateMessageRequestParams) -> mcp_types.ErrorData:
        return mcp_types.ErrorData(code=-1, message="user declined")

    fakes = {"a": engine("a"), "b": engine("b")}
    async with (
        running_gateway(fakes, **sections("all", synthesis="sampling")) as (gw, _),
        Client(gw.server, mode="legacy", sampling_callback=refuse) as client,
    ):
        result = await call(client, arguments={"query": "mcp"})
    assert text(result).startswith("1. a: mcp") and "user declined" in result.content[-1].text  # type: ignore[union-attr]
