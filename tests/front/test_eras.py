"""Downstreams speak their best era: a 2026-07-28 client's input-required rounds pass through.

A real client against the real front; the downstream is the conformance fixture run as a stdio
subprocess. A handshake-era client is asked by back-channel requests, as before; a 2026-07-28
client's calls go to the server in that era with the client's own capabilities, and the server's
input-required results, JSON-RPC errors and request states go through unchanged.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client, MCPError

from tests.conftest import FIXTURES, fixture_entry, make_config, running_gateway
from toolscore import Gateway, MemoryAuditSink

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

CONFORMANCE = str(FIXTURES / "conformance_server.py")
MODERN = "2026-07-28"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def gateway(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    config = make_config(
        {
            "a": {"command": sys.executable, "args": [CONFORMANCE], "era": "auto"},
            "h": {"command": sys.executable, "args": [CONFORMANCE], "era": "handshake"},
        }
    )
    async with running_gateway(config, tmp_path_factory.mktemp("eras")) as running:
        yield running


def named(name: str) -> Any:
    async def elicit(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        return mcp_types.ElicitResult(action="accept", content={"name": name, "color": "blue", "context": "ctx"})

    return elicit


def text(result: mcp_types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    return block.text


async def test_both_eras_reach_the_same_answer_each_its_own_way(gateway: tuple[Gateway, MemoryAuditSink]) -> None:
    gw, _ = gateway
    downstream = gw.hub.downstreams["a"]
    async with Client(gw.server, mode="legacy", elicitation_callback=named("Ada")) as legacy:
        assert text(await legacy.call_tool("a__test_input_required_result_elicitation")) == "Hello, Ada!"
    assert downstream.era_for("2025-11-25") == "2025-11-25"  # by back-channel, on the main connection

    async with Client(gw.server, elicitation_callback=named("Bob")) as modern:
        first = await modern.session.call_tool(
            "a__test_input_required_result_elicitation", {}, allow_input_required=True
        )
        # The server's own question, as it asked it.
        assert isinstance(first, mcp_types.InputRequiredResult) and first.input_requests is not None
        assert list(first.input_requests) == ["user_name"]
        question = first.input_requests["user_name"]
        assert isinstance(question, mcp_types.ElicitRequest) and question.params.message == "What is your name?"
        assert text(await modern.call_tool("a__test_input_required_result_elicitation")) == "Hello, Bob!"
    assert downstream.era_for(MODERN) == MODERN and downstream.era_for("2025-11-25") == "2025-11-25"


async def test_a_multi_round_exchange_passes_each_round_through(gateway: tuple[Gateway, MemoryAuditSink]) -> None:
    gw, sink = gateway
    async with Client(gw.server, elicitation_callback=named("unused")) as client:  # declares elicitation
        tool = "a__test_input_required_result_multi_round"
        first = await client.session.call_tool(tool, {}, allow_input_required=True)
        assert isinstance(first, mcp_types.InputRequiredResult) and first.input_requests is not None
        assert list(first.input_requests) == ["step1"]
        name = {"step1": mcp_types.ElicitResult(action="accept", content={"name": "Ada"})}
        second = await client.session.call_tool(
            tool, {}, input_responses=name, request_state=first.request_state, allow_input_required=True
        )
        assert isinstance(second, mcp_types.InputRequiredResult) and second.input_requests is not None
        assert list(second.input_requests) == ["step2"] and second.request_state != first.request_state
        color = {"step2": mcp_types.ElicitResult(action="accept", content={"color": "green"})}
        done = await client.session.call_tool(
            tool, {}, input_responses=color, request_state=second.request_state, allow_input_required=True
        )
    assert isinstance(done, mcp_types.CallToolResult) and text(done) == "Ada likes green"
    assert [r.error_kind for r in sink.records[-3:]] == ["input_required", "input_required", None]


async def test_a_tampered_request_state_is_refused_by_the_server_as_a_json_rpc_error(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, _ = gateway
    async with Client(gw.server, elicitation_callback=named("unused")) as client:
        tool = "a__test_input_required_result_tampered_state"
        first = await client.session.call_tool(tool, {}, allow_input_required=True)
        assert isinstance(first, mcp_types.InputRequiredResult) and first.request_state
        yes = {"confirm": mcp_types.ElicitResult(action="accept", content={"ok": True})}
        with pytest.raises(MCPError) as refused:
            await client.session.call_tool(
                tool, {}, input_responses=yes, request_state=first.request_state + "-TAMPERED"
            )
        assert refused.value.code == mcp_types.INVALID_PARAMS  # the server's own verdict, not a tool error
        done = await client.session.call_tool(tool, {}, input_responses=yes, request_state=first.request_state)
    assert isinstance(done, mcp_types.CallToolResult) and text(done) == "state verified"


async def test_the_clients_own_capabilities_reach_the_server(gateway: tuple[Gateway, MemoryAuditSink]) -> None:
    gw, _ = gateway

    async def sample(context: Any, params: mcp_types.CreateMessageRequestParams) -> mcp_types.CreateMessageResult:
        return mcp_types.CreateMessageResult(role="assistant", content=mcp_types.TextContent(text="x"), model="m")

    async with Client(gw.server) as without:
        with pytest.raises(MCPError) as refused:
            await without.call_tool("a__test_missing_capability")
    assert refused.value.code == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert (refused.value.error.data or {}).get("requiredCapabilities") == {"sampling": {}}
    async with Client(gw.server, sampling_callback=sample) as with_sampling:
        assert text(await with_sampling.call_tool("a__test_missing_capability")) == "The client declared sampling."


async def test_a_prompt_asks_its_question_through_the_gateway(gateway: tuple[Gateway, MemoryAuditSink]) -> None:
    gw, _ = gateway
    async with Client(gw.server, elicitation_callback=named("x")) as client:
        got = await client.get_prompt("a__test_input_required_result_prompt")
    first = got.messages[0].content
    assert isinstance(first, mcp_types.TextContent) and first.text == "Use this context: ctx"


async def test_a_server_kept_to_the_handshake_era_serves_2026_clients_on_its_one_connection(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, _ = gateway
    async with Client(gw.server) as client:
        assert text(await client.call_tool("h__test_simple_text")) == "This is a simple text response for testing."
    downstream = gw.hub.downstreams["h"]
    assert downstream.modern_version is None and downstream.era_for(MODERN) == "2025-11-25"


async def test_a_crash_of_the_2026_process_is_reported_and_the_next_call_opens_a_new_one(tmp_path: Path) -> None:
    async with (
        running_gateway(make_config({"fx": fixture_entry(tmp_path, era="auto")}), tmp_path) as (gw, _),
        Client(gw.server) as client,
    ):
        fx = gw.hub.downstreams["fx"]
        assert text(await client.call_tool("fx__echo", {"text": "one"})) == "one"
        crashed = await client.call_tool("fx__crash", {})
        assert crashed.is_error and "closed its 2026-07-28 connection" in text(crashed)
        assert text(await client.call_tool("fx__echo", {"text": "two"})) == "two"
        assert fx.connects == 1 and fx.era_for(MODERN) == MODERN  # the main connection never went down


async def test_a_stdio_server_gets_no_second_process_unless_its_entry_asks(tmp_path: Path) -> None:
    # Two processes would hold two states: the default for stdio is the one handshake-era connection.
    async with (
        running_gateway(make_config({"fx": fixture_entry(tmp_path)}), tmp_path) as (gw, _),
        Client(gw.server) as client,
    ):
        assert text(await client.call_tool("fx__echo", {"text": "one"})) == "one"
        fx = gw.hub.downstreams["fx"]
        assert fx.modern_version is None and fx.era_for(MODERN) == "2025-11-25"
