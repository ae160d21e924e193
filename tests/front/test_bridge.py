"""Era bridging: a 2026-07-28 client served by a stdio server on its one handshake-era connection.

A real 2026-07-28 client against the real front; the downstream is the conformance fixture run as
a stdio subprocess with no `era` key, so it has one process and one connection, in the handshake
era. What the server asks by back-channel during a call (sampling, elicitation, roots) reaches the
client as input-required rounds, and the client's answers go back to the server's pending
requests, round after round.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client, MCPError

from tests.conftest import FIXTURES, make_config, running_gateway
from toolscore import Gateway, MemoryAuditSink
from toolscore.downstream.bridge import WAITING_PER_CALLER

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

CONFORMANCE = str(FIXTURES / "conformance_server.py")
BACKCHANNEL = str(FIXTURES / "backchannel_server.py")


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def _entry(**extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [CONFORMANCE], **extra}


@pytest.fixture(scope="module")
async def gateway(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    config = make_config(
        {
            "c": _entry(),
            "deny": _entry(sampling="deny"),
            "ask": _entry(sampling="confirm"),
            "quick": _entry(timeout=1),
            "r": _entry(),
            "cap": _entry(),
            "b": {"command": sys.executable, "args": [BACKCHANNEL]},
        }
    )
    async with running_gateway(config, tmp_path_factory.mktemp("bridge")) as running:
        yield running


def text(result: mcp_types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    return block.text


def named(name: str) -> Any:
    async def elicit(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        return mcp_types.ElicitResult(action="accept", content={"name": name, "confirm": True})

    return elicit


async def sample(context: Any, params: mcp_types.CreateMessageRequestParams) -> mcp_types.CreateMessageResult:
    return mcp_types.CreateMessageResult(role="assistant", content=mcp_types.TextContent(text="Paris"), model="m")


async def roots(context: Any) -> mcp_types.ListRootsResult:
    return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri="file:///work/project")])


async def until_open(gw: Gateway, server: str, count: int) -> None:
    """Wait until `count` bridged calls are in progress on `server` (the gateway's own tasks end them)."""
    with anyio.fail_after(20):
        await gw.hub.downstreams[server].bridge.until_open(count)


async def test_an_elicitation_becomes_an_input_required_round_on_the_one_connection(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, _ = gateway
    tool = "c__test_input_required_result_elicitation"
    async with Client(gw.server, elicitation_callback=named("Bob")) as client:
        first = await client.session.call_tool(tool, {}, allow_input_required=True)
        assert isinstance(first, mcp_types.InputRequiredResult) and first.input_requests and first.request_state
        # The server's own question, under the key it named for it (`io.toolscore/inputKey`).
        assert list(first.input_requests) == ["user_name"]
        question = first.input_requests["user_name"]
        assert isinstance(question, mcp_types.ElicitRequest) and question.params.message == "What is your name?"
        key = "user_name"
        answer = {key: mcp_types.ElicitResult(action="accept", content={"name": "Ada"})}
        done = await client.session.call_tool(
            tool, {}, input_responses=answer, request_state=first.request_state, allow_input_required=True
        )
        assert isinstance(done, mcp_types.CallToolResult) and text(done) == "Hello, Ada!"
        # The SDK's client answers the rounds itself, from its callbacks.
        assert text(await client.call_tool(tool)) == "Hello, Bob!"
    c = gw.hub.downstreams["c"]
    assert c.modern_version is None and c.era_for("2026-07-28") == "2025-11-25"  # no second process


async def test_sampling_and_roots_are_asked_the_same_way(gateway: tuple[Gateway, MemoryAuditSink]) -> None:
    gw, _ = gateway
    async with Client(gw.server, sampling_callback=sample, list_roots_callback=roots) as client:
        assert text(await client.call_tool("c__test_input_required_result_sampling")) == "LLM answered: Paris"
        assert text(await client.call_tool("c__test_input_required_result_list_roots")) == (
            "Roots: file:///work/project"
        )


async def test_requests_sent_together_make_one_round(gateway: tuple[Gateway, MemoryAuditSink]) -> None:
    gw, _ = gateway
    tool = "c__test_input_required_result_multiple_inputs"
    async with Client(
        gw.server, elicitation_callback=named("Ada"), sampling_callback=sample, list_roots_callback=roots
    ) as client:
        first = await client.session.call_tool(tool, {}, allow_input_required=True)
        assert isinstance(first, mcp_types.InputRequiredResult) and first.input_requests
        methods = sorted(request.method for request in first.input_requests.values())
        assert methods == ["elicitation/create", "roots/list", "sampling/createMessage"]
        # That call stays parked on its round; a second one is asked all the same (attribution).
        done = await client.call_tool(tool)
    assert "user_name: action=accept" in text(done) and "greeting: Paris" in text(done)


async def test_several_rounds_each_with_its_own_state_and_no_replay(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, sink = gateway
    tool = "c__test_input_required_result_multi_round"
    async with Client(gw.server, elicitation_callback=named("unused")) as client:
        first = await client.session.call_tool(tool, {}, allow_input_required=True)
        assert isinstance(first, mcp_types.InputRequiredResult) and first.input_requests
        (key1,) = first.input_requests
        name = {key1: mcp_types.ElicitResult(action="accept", content={"name": "Ada"})}
        second = await client.session.call_tool(
            tool, {}, input_responses=name, request_state=first.request_state, allow_input_required=True
        )
        assert isinstance(second, mcp_types.InputRequiredResult) and second.input_requests
        (key2,) = second.input_requests
        assert key2 != key1 and second.request_state != first.request_state
        with pytest.raises(MCPError) as replayed:  # the first round's state, again
            await client.session.call_tool(tool, {}, input_responses=name, request_state=first.request_state)
        assert replayed.value.code == mcp_types.INVALID_PARAMS and "answered already" in replayed.value.message
        color = {key2: mcp_types.ElicitResult(action="accept", content={"color": "green"})}
        done = await client.session.call_tool(
            tool, {}, input_responses=color, request_state=second.request_state, allow_input_required=True
        )
    assert isinstance(done, mcp_types.CallToolResult) and text(done) == "Ada likes green"
    kinds = [r.error_kind for r in sink.records if r.tool == tool]
    assert kinds[-4:] == ["input_required", "input_required", "protocol", None]


async def test_a_forged_or_altered_request_state_or_one_for_other_arguments_is_refused(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, _ = gateway
    tool = "c__test_input_required_result_tampered_state"
    async with Client(gw.server, elicitation_callback=named("x")) as client:
        first = await client.session.call_tool(tool, {}, allow_input_required=True)
        assert isinstance(first, mcp_types.InputRequiredResult) and first.input_requests and first.request_state
        (key,) = first.input_requests
        yes = {key: mcp_types.ElicitResult(action="accept", content={"ok": True})}
        for state, why in [
            (first.request_state + "-TAMPERED", "not one toolscore issued"),
            ("forged.state", "not one toolscore issued"),
        ]:
            with pytest.raises(MCPError) as refused:
                await client.session.call_tool(tool, {}, input_responses=yes, request_state=state)
            assert refused.value.code == mcp_types.INVALID_PARAMS and why in refused.value.message
        with pytest.raises(MCPError) as other_args:
            await client.session.call_tool(tool, {"x": 1}, input_responses=yes, request_state=first.request_state)
        assert "belongs to another call" in other_args.value.message
        with pytest.raises(MCPError) as unanswered:
            await client.session.call_tool(tool, {}, input_responses={}, request_state=first.request_state)
        assert f"inputResponses lacks '{key}'" in unanswered.value.message
        done = await client.session.call_tool(tool, {}, input_responses=yes, request_state=first.request_state)
    assert isinstance(done, mcp_types.CallToolResult) and text(done) == "state verified"


async def test_a_prompt_asks_its_question_in_rounds_too(gateway: tuple[Gateway, MemoryAuditSink]) -> None:
    gw, _ = gateway

    async def context(ctx: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        return mcp_types.ElicitResult(action="accept", content={"context": "ctx"})

    async with Client(gw.server, elicitation_callback=context) as client:
        got = await client.get_prompt("c__test_input_required_result_prompt")
    first = got.messages[0].content
    assert isinstance(first, mcp_types.TextContent) and first.text == "Use this context: ctx"


async def test_a_capability_the_client_did_not_declare_is_a_json_rpc_error(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, _ = gateway
    async with Client(gw.server) as without:
        with pytest.raises(MCPError) as refused:
            await without.call_tool("c__test_missing_capability")
    assert refused.value.code == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert (refused.value.error.data or {}).get("requiredCapabilities") == {"sampling": {}}
    async with Client(gw.server, sampling_callback=sample) as with_sampling:
        assert text(await with_sampling.call_tool("c__test_missing_capability")) == "The client declared sampling."


async def test_the_sampling_option_applies_denied_or_confirmed_first(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, _ = gateway
    tool = "test_input_required_result_sampling"
    async with Client(gw.server, sampling_callback=sample, elicitation_callback=named("x")) as client:
        denied = await client.call_tool(f"deny__{tool}")
        assert denied.is_error and "denied by the gateway's configuration" in text(denied)
        first = await client.session.call_tool(f"ask__{tool}", {}, allow_input_required=True)
        assert isinstance(first, mcp_types.InputRequiredResult) and first.input_requests
        (question,) = first.input_requests.values()  # the user is asked first, then the model
        assert isinstance(question, mcp_types.ElicitRequest) and "asks to use your model" in question.params.message
        assert text(await client.call_tool(f"ask__{tool}")) == "LLM answered: Paris"


async def test_a_client_that_never_retries_ends_the_exchange_after_the_bound(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, _ = gateway
    quick = gw.hub.downstreams["quick"]
    tool = "quick__test_input_required_result_elicitation"
    async with Client(gw.server, elicitation_callback=named("x")) as client:
        first = await client.session.call_tool(tool, {}, allow_input_required=True)
        assert isinstance(first, mcp_types.InputRequiredResult) and first.input_requests
        assert quick.bridge.open == 1
        await until_open(gw, "quick", 0)  # `timeout: 1`: the server's call is cancelled
        (key,) = first.input_requests
        late = {key: mcp_types.ElicitResult(action="accept", content={"name": "Ada"})}
        with pytest.raises(MCPError) as refused:
            await client.session.call_tool(tool, {}, input_responses=late, request_state=first.request_state)
        assert "is over" in refused.value.message or "expired" in refused.value.message
        assert text(await client.call_tool(tool)) == "Hello, x!"  # and the server serves the next call


async def test_a_caller_that_leaves_rounds_unanswered_loses_its_oldest_past_the_cap(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, _ = gateway
    tool = "cap__test_input_required_result_elicitation"
    async with Client(gw.server, elicitation_callback=named("x")) as client:
        rounds = [
            await client.session.call_tool(tool, {}, allow_input_required=True) for _ in range(WAITING_PER_CALLER + 1)
        ]
        assert all(isinstance(r, mcp_types.InputRequiredResult) for r in rounds)
        await until_open(gw, "cap", WAITING_PER_CALLER)  # the oldest call was cancelled at the server
        answer = {"user_name": mcp_types.ElicitResult(action="accept", content={"name": "Ada"})}
        oldest, newest = rounds[0], rounds[-1]
        assert isinstance(oldest, mcp_types.InputRequiredResult) and isinstance(newest, mcp_types.InputRequiredResult)
        with pytest.raises(MCPError) as refused:
            await client.session.call_tool(tool, {}, input_responses=answer, request_state=oldest.request_state)
        assert "is over" in refused.value.message
        done = await client.session.call_tool(tool, {}, input_responses=answer, request_state=newest.request_state)
        assert isinstance(done, mcp_types.CallToolResult) and text(done) == "Hello, Ada!"


async def test_a_client_that_abandons_its_waiting_request_ends_the_exchange(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, sink = gateway
    async with Client(gw.server, elicitation_callback=named("x")) as client:
        with anyio.CancelScope() as scope:  # the server holds the call until released
            async with anyio.create_task_group() as group:
                group.start_soon(client.call_tool, "b__ask", {"what": "elicitation", "text": "ok?"})
                await until_open(gw, "b", 1)
                scope.cancel()
        await until_open(gw, "b", 0)  # the exchange ended with the request: the server's call is cancelled
        assert [r.error_kind for r in sink.records if r.tool == "b__ask"] == ["cancelled"]
        released = await client.call_tool("b__release", {"count": 0})
        assert not released.is_error  # the server serves the next call


async def test_answers_sent_with_the_first_request_answer_the_questions_they_name(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, _ = gateway
    given = {
        "user_name": mcp_types.ElicitResult(action="accept", content={"name": "Eve"}),
        "not_asked": mcp_types.ElicitResult(action="accept", content={"x": 1}),
    }
    async with Client(gw.server, elicitation_callback=named("unused")) as client:
        done = await client.session.call_tool(
            "c__test_input_required_result_elicitation", {}, input_responses=given, allow_input_required=True
        )
    assert isinstance(done, mcp_types.CallToolResult) and text(done) == "Hello, Eve!"


async def test_a_retry_after_the_server_went_away_gets_that_and_the_next_call_is_served(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, _ = gateway
    r = gw.hub.downstreams["r"]
    tool = "r__test_input_required_result_elicitation"
    async with Client(gw.server, elicitation_callback=named("x")) as client:
        first = await client.session.call_tool(tool, {}, allow_input_required=True)
        assert isinstance(first, mcp_types.InputRequiredResult) and first.request_state
        r.restart("stopped by the test while a round is out")
        answer = {"user_name": mcp_types.ElicitResult(action="accept", content={"name": "Ada"})}
        ended = await client.session.call_tool(tool, {}, input_responses=answer, request_state=first.request_state)
        assert ended.is_error and "Server 'r'" in text(ended) and "clos" in text(ended)
        assert text(await client.call_tool(tool)) == "Hello, x!"  # on the server started again
    assert r.connects == 2


async def test_a_parked_call_does_not_keep_a_handshake_client_from_being_asked(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, _ = gateway
    tool = "c__test_input_required_result_elicitation"
    async with (
        Client(gw.server, elicitation_callback=named("unused")) as modern,
        Client(gw.server, mode="legacy", elicitation_callback=named("Leg")) as legacy,
    ):
        first = await modern.session.call_tool(tool, {}, allow_input_required=True)
        assert isinstance(first, mcp_types.InputRequiredResult) and first.request_state
        # The 2026-07-28 call waits on its client; the server's next question is the other call's.
        assert text(await legacy.call_tool(tool)) == "Hello, Leg!"
        answer = {"user_name": mcp_types.ElicitResult(action="accept", content={"name": "Ada"})}
        done = await modern.session.call_tool(tool, {}, input_responses=answer, request_state=first.request_state)
    assert isinstance(done, mcp_types.CallToolResult) and text(done) == "Hello, Ada!"
