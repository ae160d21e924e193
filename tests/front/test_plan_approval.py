"""One approval per plan: a plan with `destructive: "confirm"` steps is shown to the user once,
before anything runs, in both eras (elicitation; input-required with a sealed state)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import TOOLSCORE, fixture_entry, memory_gateway, text, write_config
from toolscore.front.confirm import CONFIRM_KEY, Sealer

pytestmark = pytest.mark.anyio

CONFIRM: dict[str, Any] = {"constraints": {"enabled": True, "destructive": "confirm"}}

PLAN = """<fx>
<echo id="name">{"text": "b"}</echo>
<delete>{"key": "a"}</delete>
<delete>{"key": "${name.text}"}</delete>
<delete>{"key": "x-${name.text}"}</delete>
</fx>
<execute_tools />"""
DELETED = ("deleted-a", "deleted-b", "deleted-x-b")
YES: dict[str, Any] = {CONFIRM_KEY: mcp_types.ElicitResult(action="accept", content={"confirm": True})}


def answering(confirm: bool, asked: list[str]) -> Any:
    async def elicit(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"confirm": confirm})

    return elicit


def deleted(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.glob("deleted-*"))


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # handshake era (elicitation); 2026-07-28 (input-required)
@pytest.mark.parametrize("agree", [True, False])
async def test_a_plan_asks_once_before_anything_runs(tmp_path: Path, mode: str, agree: bool) -> None:
    asked: list[str] = []
    async with (
        memory_gateway(tmp_path, **CONFIRM) as (gw, sink),
        Client(gw.server, mode=mode, elicitation_callback=answering(agree, asked)) as client,
    ):
        result = await client.call_tool("orchestrate", {"plan": PLAN})
    assert len(asked) == 1  # three confirm steps, one question
    assert result.is_error is not agree
    if agree:
        assert deleted(tmp_path) == sorted(DELETED)
        assert text(result).count('status="ok"') == 4
    else:
        assert deleted(tmp_path) == []
        assert "declined the plan: nothing was run" in text(result)
        # not even the step that needs no confirmation ran
        assert [r.tool for r in sink.records if r.phase != "plan"] == []


async def test_the_question_shows_each_step_its_literal_arguments_and_their_sources(tmp_path: Path) -> None:
    asked: list[str] = []
    async with (
        memory_gateway(tmp_path, **CONFIRM) as (gw, _),
        Client(gw.server, mode="legacy", elicitation_callback=answering(False, asked)) as client,
    ):
        await client.call_tool("orchestrate", {"plan": PLAN})
    lines = asked[0].splitlines()
    assert '  step 1 "name": fx__echo {"text": "b"}' in lines
    assert '* step 2: fx__delete {"key": "a"}' in lines
    assert '* step 3: fx__delete {"key": "${name.text}"}' in lines
    assert '      key: from step 1 "name" (${name.text})' in lines
    assert '* step 4: fx__delete {"key": "x-${name.text}"}' in lines
    assert "(2, 3, 4)" in lines[0]


async def test_a_client_that_cannot_be_asked_gets_the_plan_refused(tmp_path: Path) -> None:
    async with memory_gateway(tmp_path, **CONFIRM) as (gw, _), Client(gw.server) as client:  # no elicitation
        result = await client.call_tool("orchestrate", {"plan": PLAN})
    assert result.is_error and 'code="needs_approval"' in text(result)
    assert "needs a client that can ask (elicitation)" in text(result)
    assert deleted(tmp_path) == [] and not (tmp_path / "count-name").exists()


async def test_a_2026_approval_runs_its_plan_once_and_no_other(tmp_path: Path) -> None:
    async with (
        memory_gateway(tmp_path, **CONFIRM) as (gw, _),
        Client(gw.server, elicitation_callback=answering(True, [])) as client,
    ):
        session = client.session
        first = await session.call_tool("orchestrate", {"plan": PLAN}, allow_input_required=True)
        assert isinstance(first, mcp_types.InputRequiredResult) and first.input_requests is not None
        assert set(first.input_requests) == {CONFIRM_KEY} and first.request_state
        question = first.input_requests[CONFIRM_KEY]
        assert isinstance(question, mcp_types.ElicitRequest) and "fx__delete" in question.params.message
        state = first.request_state

        async def retry(plan: str, request_state: str) -> mcp_types.CallToolResult:
            answer = await session.call_tool(
                "orchestrate",
                {"plan": plan},
                input_responses=YES,
                request_state=request_state,
                allow_input_required=True,
            )
            assert isinstance(answer, mcp_types.CallToolResult)
            return answer

        # Another plan (a literal argument changed) with this plan's approval.
        other = await retry(PLAN.replace('"key": "a"', '"key": "z"'), state)
        assert other.is_error and "does not belong to this plan" in text(other)
        forged = Sealer().seal({"tool": "orchestrate", "exp": time.time() + 60})  # another key
        tampered = state[:-2] + ("AA" if not state.endswith("AA") else "BB")
        for bad in (forged, tampered, "", "x" * 10_000):
            refused = await retry(PLAN, bad)
            assert refused.is_error and "does not belong to this plan" in text(refused), bad[:20]
        assert deleted(tmp_path) == []

        done = await retry(PLAN, state)
        assert not done.is_error and deleted(tmp_path) == sorted(DELETED)
        replayed = await retry(PLAN, state)  # the same yes, sent again
        assert replayed.is_error and "used already" in text(replayed)
    assert all((tmp_path / name).read_text() == "1" for name in DELETED)  # each ran once


async def test_steps_in_a_parallel_block_of_a_later_turn_run_on_the_one_approval(tmp_path: Path) -> None:
    asked: list[str] = []
    async with (
        memory_gateway(tmp_path, **CONFIRM) as (gw, _),
        Client(gw.server, mode="legacy", elicitation_callback=answering(True, asked)) as client,
    ):
        first = await client.call_tool("orchestrate", {"plan": '<fx><echo id="first">{"text": "e"}</echo></fx>'})
        assert asked == [] and first.structured_content is not None  # nothing to approve
        episode = first.structured_content["episode"]
        plan = '<parallel><fx><delete>{"key": "${first.text}"}</delete><delete>{"key": "p"}</delete></fx></parallel>'
        result = await client.call_tool("orchestrate", {"plan": plan, "episode": episode})
    assert not result.is_error and deleted(tmp_path) == ["deleted-e", "deleted-p"]
    assert len(asked) == 1
    assert '      key: from "first" of an earlier plan in this episode (${first.text})' in asked[0].splitlines()


@pytest.mark.e2e
async def test_a_stdio_gateway_asks_once_for_a_plan_on_its_hot_path(tmp_path: Path) -> None:
    constraints = {"enabled": True, "destructive": "confirm"}
    config = write_config(tmp_path, {"fx": fixture_entry(tmp_path)}, constraints=constraints)
    asked: list[str] = []
    params = StdioServerParameters(command=TOOLSCORE, args=["serve", "--config", str(config)])
    async with Client(params, mode="legacy", elicitation_callback=answering(True, asked)) as client:
        result = await client.call_tool("orchestrate", {"plan": PLAN})
    assert not result.is_error and len(asked) == 1
    assert deleted(tmp_path) == sorted(DELETED)


async def test_a_dry_run_asks_nothing_and_says_which_steps_need_the_approval(tmp_path: Path) -> None:
    asked: list[str] = []
    async with (
        memory_gateway(tmp_path, **CONFIRM) as (gw, _),
        Client(gw.server, mode="legacy", elicitation_callback=answering(True, asked)) as client,
    ):
        result = await client.call_tool("orchestrate", {"plan": PLAN, "dry_run": True})
    assert not result.is_error and asked == [] and deleted(tmp_path) == []
    assert "steps 2, 3, 4 need the user's approval" in text(result)
