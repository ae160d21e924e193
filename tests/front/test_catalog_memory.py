"""Resources and client input through the gateway, in memory: policy on reads, the 2026-07-28 era."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types
import pytest
from mcp import Client, MCPError

from tests.conftest import wait_for
from tests.fixtures.conformance_server import build_server
from toolscore import Gateway, MemoryAuditSink, testing

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def gateway(**sections: Any) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    config = testing.memory_config({"c": {}}, **sections)
    async with testing.running_gateway({"c": build_server()}, config=config) as pair:
        yield pair


async def test_policy_applies_to_reads_as_the_pseudo_tool_resources_read() -> None:
    constraints = {"enabled": True, "tools": {"deny": ["c__resources/read"]}}
    async with gateway(constraints=constraints) as (gw, sink), Client(gw.server, mode="legacy") as client:
        assert (await client.list_resources()).resources  # listing is not a read
        with pytest.raises(MCPError, match="rejected by policy") as refused:
            await client.read_resource("toolscore://c/test://static-text")
    assert refused.value.code == mcp_types.INVALID_REQUEST
    assert sink.records[-1].error_kind == "rejected" and sink.records[-1].tool == "resources/read"


async def test_a_2026_client_is_asked_by_an_input_required_result_not_a_back_channel() -> None:
    asked: list[mcp_types.CreateMessageRequestParams] = []

    async def sample(context: Any, params: mcp_types.CreateMessageRequestParams) -> mcp_types.CreateMessageResult:
        asked.append(params)
        return mcp_types.CreateMessageResult(role="assistant", content=mcp_types.TextContent(text="hello"), model="m")

    async with gateway() as (gw, sink), Client(gw.server, sampling_callback=sample) as client:
        result = await client.call_tool("c__test_sampling", {"prompt": "hi"})
    assert not result.is_error and len(asked) == 1
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent) and block.text == "LLM response: hello"
    assert [r.error_kind for r in sink.records] == ["input_required", None]  # two rounds, both audited


async def test_a_client_without_elicitation_gives_the_server_a_clear_error() -> None:
    async with gateway() as (gw, _), Client(gw.server, mode="legacy") as client:
        with pytest.raises(MCPError, match="did not declare the 'elicitation' capability") as refused:
            await client.call_tool("c__test_elicitation", {"message": "name?"})
    assert refused.value.code == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY


async def test_2026_logs_reach_only_requests_that_opt_in() -> None:
    logs: list[mcp_types.LoggingMessageNotificationParams] = []

    async def on_log(params: mcp_types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async with gateway() as (gw, _):
        async with Client(gw.server, logging_callback=on_log) as client:
            await client.call_tool("c__test_tool_with_logging", {})
        assert logs == []
        async with Client(gw.server, logging_callback=on_log, log_level="info") as client:
            await client.call_tool("c__test_tool_with_logging", {})
        assert [log.logger for log in logs][:1] == ["c/toolscore-conformance-fixture"]


async def test_a_server_log_outside_any_request_stays_in_the_gateway_log() -> None:
    async with gateway() as (gw, _):
        downstream = gw.hub.downstreams["c"]
        params = mcp_types.LoggingMessageNotificationParams(level="info", data="between requests")
        await downstream._on_log(params)
        assert (
            await downstream._on_sampling(None, mcp_types.CreateMessageRequestParams(messages=[], max_tokens=1))
        ).code == mcp_types.INVALID_REQUEST


def answer(text: str) -> Any:
    async def sample(context: Any, params: mcp_types.CreateMessageRequestParams) -> mcp_types.CreateMessageResult:
        return mcp_types.CreateMessageResult(role="assistant", content=mcp_types.TextContent(text=text), model="m")

    return sample


def decide(confirm: bool, asked: list[str]) -> Any:
    async def elicit(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"confirm": confirm})

    return elicit


async def test_sampling_denied_by_the_server_s_config() -> None:
    config = testing.memory_config({"c": {"sampling": "deny"}})
    async with (
        testing.running_gateway({"c": build_server()}, config=config) as (gw, _),
        Client(gw.server, mode="legacy", sampling_callback=answer("no")) as client,
    ):
        result = await client.call_tool("c__test_sampling", {"prompt": "hi"})
    assert result.is_error  # the server's tool failed, and says why
    assert "sampling by server 'c' is denied by the gateway's configuration" in str(result.content[0])


@pytest.mark.parametrize("agree", [True, False])
async def test_sampling_confirmed_by_the_user_first(agree: bool) -> None:
    config = testing.memory_config({"c": {"sampling": "confirm"}})
    asked: list[str] = []
    async with (
        testing.running_gateway({"c": build_server()}, config=config) as (gw, _),
        Client(
            gw.server, mode="legacy", sampling_callback=answer("yes"), elicitation_callback=decide(agree, asked)
        ) as client,
    ):
        if agree:
            result = await client.call_tool("c__test_sampling", {"prompt": "the secret plan"})
            assert "yes" in str(result.content[0])
        else:
            refused = await client.call_tool("c__test_sampling", {"prompt": "the secret plan"})
            assert refused.is_error
            assert "the user did not allow the sampling request of server 'c'" in str(refused.content[0])
    assert len(asked) == 1 and "Server 'c' asks to use your model" in asked[0] and "the secret plan" in asked[0]


async def test_a_client_holds_a_bounded_number_of_subscriptions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("toolscore.front.catalog.MAX_SUBSCRIPTIONS", 2)
    uris = [f"toolscore://c/test://{name}" for name in ("static-text", "static-binary", "watched-resource")]
    async with gateway() as (gw, _), Client(gw.server, mode="legacy") as client:
        await client.subscribe_resource(uris[0])
        await client.subscribe_resource(uris[0])  # again: still one
        await client.subscribe_resource(uris[1])
        with pytest.raises(MCPError, match="at most 2 resource subscriptions per client"):
            await client.subscribe_resource(uris[2])
        await client.unsubscribe_resource(uris[0])
        await client.subscribe_resource(uris[2])  # room again
        assert gw.hub.downstreams["c"].subscriptions == {"test://static-binary", "test://watched-resource"}
    # The client left: its subscriptions went with it, downstream too.
    await wait_for(lambda: not gw.hub.downstreams["c"].subscriptions)


async def test_a_prompt_collision_is_warned_of_once() -> None:
    """Every rebuild (one per server coming up) logged it again: three times for three servers."""
    names = ("a", "b", "c")
    config = testing.memory_config({name: {"prefix": ""} for name in names})
    with testing.captured_logs() as logs:
        async with testing.running_gateway({name: build_server() for name in names}, config=config) as (gw, _):
            await gw.hub.wait_started()
            async with Client(gw.server, mode="legacy") as client:
                assert (await client.list_prompts()).prompts
    warned = [e["problem"] for e in logs if e["event"] == "resource or prompt not exposed as listed"]
    prompts = [p for p in warned if p.startswith("prompt 'test_simple_prompt'")]
    assert prompts and len(prompts) == len(set(prompts)), warned
    assert len(warned) == len(set(warned)), warned
