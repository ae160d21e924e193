"""`delegate` with the client's own model: a real SDK client answers `sampling/createMessage`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client

from tests.conftest import text
from tests.fixtures.scripted_model import scripted_model
from tests.loop.conftest import loop_gateway
from toolscore.loop.trajectory import read_trajectories, replay

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


def sampler(turns: list[str], seen: list[mcp_types.CreateMessageRequestParams]) -> Any:
    async def answer(context: Any, params: mcp_types.CreateMessageRequestParams) -> mcp_types.CreateMessageResult:
        seen.append(params)
        return mcp_types.CreateMessageResult(
            role="assistant", content=mcp_types.TextContent(text=turns[len(seen) - 1]), model="client-model"
        )

    return answer


async def test_handshake_era_client_model_runs_the_task(tmp_path: Path) -> None:
    turns = ['<fx><echo>{"text": "sampled"}</echo></fx><execute_tools />', "<answer>sampled</answer>"]
    seen: list[mcp_types.CreateMessageRequestParams] = []
    async with (
        loop_gateway(tmp_path, None) as (gw, _sink),
        Client(gw.server, mode="legacy", sampling_callback=sampler(turns, seen)) as client,
    ):
        result = await client.call_tool("delegate", {"task": "echo sampled"})
    assert not result.is_error, text(result)
    assert result.structured_content is not None and result.structured_content["answer"] == "sampled"
    assert len(seen) == 2
    first = seen[0]
    assert first.stop_sequences is not None and "<execute_tools />" in first.stop_sequences
    assert first.system_prompt is not None and "fx.echo" in first.system_prompt
    assert [m.role for m in seen[1].messages] == ["user", "assistant", "user"]
    last = seen[1].messages[-1].content
    assert isinstance(last, mcp_types.TextContent) and "sampled" in last.text and "<result" in last.text


async def test_sampling_preferred_over_the_configured_model(tmp_path: Path) -> None:
    seen: list[mcp_types.CreateMessageRequestParams] = []
    with scripted_model(["<answer>from endpoint</answer>"]) as model:
        async with (
            loop_gateway(tmp_path, model.url) as (gw, _sink),
            Client(gw.server, mode="legacy", sampling_callback=sampler(["<answer>from client</answer>"], seen)) as c,
        ):
            result = await c.call_tool("delegate", {"task": "t"})
    assert result.structured_content is not None and result.structured_content["answer"] == "from client"
    assert model.requests == []


async def test_2026_era_client_model_answers_through_input_required_results(tmp_path: Path) -> None:
    """No server-to-client requests on 2026-07-28: each turn is an input-required round trip."""
    turns = [
        '<think>one</think><fx><echo id="e">{"text": "first"}</echo></fx><execute_tools />',
        '<fx><echo>{"text": "${e.text} second"}</echo></fx><execute_tools />',
        "<answer>first second</answer>",
    ]
    seen: list[mcp_types.CreateMessageRequestParams] = []
    with scripted_model(["<answer>from endpoint</answer>"]) as model:
        async with (
            loop_gateway(tmp_path, model.url) as (gw, _sink),
            Client(gw.server, sampling_callback=sampler(turns, seen)) as client,
        ):
            result = await client.call_tool("delegate", {"task": "t"})
    assert not result.is_error, text(result)
    assert result.structured_content is not None and result.structured_content["answer"] == "first second"
    assert result.structured_content["turns"] == 3
    assert model.requests == []  # the client's own model is preferred
    assert len(seen) == 3
    last = seen[2].messages[-1].content
    assert isinstance(last, mcp_types.TextContent) and "first second" in last.text  # the reference resolved
    rows = list(read_trajectories(tmp_path / "trajectories.jsonl"))
    assert [r["type"] for r in rows] == ["start", "turn", "turn", "turn", "end"]
    (episode,) = replay(rows)
    assert episode.mismatches == []


async def test_2026_era_client_without_sampling_gets_the_configured_model(tmp_path: Path) -> None:
    with scripted_model(["<answer>from endpoint</answer>"]) as model:
        async with loop_gateway(tmp_path, model.url) as (gw, _sink), Client(gw.server) as client:
            result = await client.call_tool("delegate", {"task": "t"})
    assert result.structured_content is not None and result.structured_content["answer"] == "from endpoint"


async def test_a_forged_or_replayed_request_state_is_refused(tmp_path: Path) -> None:
    """The state is a one-shot id into the gateway's store: a forged one, another task's, or one
    already used gets an error, never someone else's loop."""
    unused: list[mcp_types.CreateMessageRequestParams] = []
    async with (
        loop_gateway(tmp_path, None) as (gw, _sink),
        Client(gw.server, sampling_callback=sampler([], unused)) as client,
    ):
        first = await client.session.call_tool("delegate", {"task": "t"}, allow_input_required=True)
        assert isinstance(first, mcp_types.InputRequiredResult) and first.request_state is not None
        answer = mcp_types.CreateMessageResult(
            role="assistant", content=mcp_types.TextContent(text="<answer>a</answer>"), model="m"
        )
        forged = await client.session.call_tool(
            "delegate",
            {"task": "t"},
            input_responses={"turn": answer},
            request_state="0" * 32,
            allow_input_required=True,
        )
        other_task = await client.session.call_tool(
            "delegate",
            {"task": "another"},
            input_responses={"turn": answer},
            request_state=first.request_state,
            allow_input_required=True,
        )
        done = await client.session.call_tool(
            "delegate",
            {"task": "t"},
            input_responses={"turn": answer},
            request_state=first.request_state,
            allow_input_required=True,
        )
        replayed = await client.session.call_tool(
            "delegate",
            {"task": "t"},
            input_responses={"turn": answer},
            request_state=first.request_state,
            allow_input_required=True,
        )
    assert isinstance(forged, mcp_types.CallToolResult) and forged.is_error and "unknown" in text(forged)
    assert isinstance(other_task, mcp_types.CallToolResult) and other_task.is_error
    assert isinstance(done, mcp_types.CallToolResult) and not done.is_error
    assert done.structured_content is not None and done.structured_content["answer"] == "a"
    assert isinstance(replayed, mcp_types.CallToolResult) and replayed.is_error


async def test_client_model_error_is_a_stop_reason(tmp_path: Path) -> None:
    async def refuse(context: Any, params: mcp_types.CreateMessageRequestParams) -> mcp_types.ErrorData:
        return mcp_types.ErrorData(code=-1, message="user declined")

    async with (
        loop_gateway(tmp_path, None) as (gw, _sink),
        Client(gw.server, mode="legacy", sampling_callback=refuse) as client,
    ):
        result = await client.call_tool("delegate", {"task": "t"})
    assert result.is_error
    assert result.structured_content is not None and result.structured_content["stop_reason"] == "model_error"
    assert "user declined" in text(result)
