"""Per-principal rules (`constraints.principals`): which tools a principal or role may call, through
a direct call, a plan (checked whole, before any step) and the console-style engine call; and its
quotas (calls a minute, at once, a day; result bytes a day), each refusal naming the quota."""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types
import pytest

from tests.conftest import text
from toolscore.loop.models import MODEL_TURN
from toolscore.policy.principals import principal_of
from toolscore.scope import CallScope
from toolscore.testing import FakeDownstream, running_gateway

pytestmark = pytest.mark.anyio

HANG = 30  # seconds: a hang detector, never a speed check
ALICE, BOB, CARL = "principal:alice", "principal:bob/c3", "principal:carl"


def _fake() -> FakeDownstream:
    fake = FakeDownstream("fx")

    @fake.tool("read")
    def read(text: str = "") -> str:
        return text or "read"

    @fake.tool("write")
    def write(text: str = "") -> str:
        return f"wrote {text}"

    return fake


def _constraints(principals: dict[str, Any]) -> dict[str, Any]:
    return {"enabled": True, "principals": principals}


def test_the_principal_of_a_caller() -> None:
    assert principal_of("principal:alice") == "alice"
    assert principal_of("principal:alice/c7") == "alice"  # a session alice opened
    assert principal_of("c7") is None and principal_of(None) is None and principal_of("console") is None


async def test_a_principal_sees_its_own_rules_and_others_only_the_global_ones() -> None:
    rules = {"alice": {"tools": {"allow": ["fx__read"]}}, "role:readonly": {"tools": {"deny": ["*__write"]}}}
    async with running_gateway({"fx": _fake()}, constraints=_constraints(rules)) as (gw, _):
        assert gw.roles is not None
        gw.roles.note("bob", ["readonly"])
        alice_write = await gw.engine.execute("fx__write", {"text": "x"}, scope=CallScope(ALICE))
        assert alice_write.context.error is not None, text(alice_write.result)
        assert "not among those allowed to alice" in text(alice_write.result)
        assert (await gw.engine.execute("fx__read", {"text": "ok"}, scope=CallScope(ALICE))).result.is_error is False
        bob_write = await gw.engine.execute("fx__write", {}, scope=CallScope(BOB))  # a session bob opened
        assert "denied to role:readonly" in text(bob_write.result)
        carl = await gw.engine.execute("fx__write", {"text": "y"}, scope=CallScope(CARL))  # no section: global rules
        assert text(carl.result) == "wrote y"
        stdio = await gw.engine.execute("fx__write", {"text": "z"}, scope=CallScope("c1"))  # no principal at all
        assert text(stdio.result) == "wrote z"


async def test_a_plan_is_checked_against_the_principals_rules_before_any_step_runs() -> None:
    fake = _fake()
    rules = {"alice": {"tools": {"deny": ["fx__write"]}}}
    async with running_gateway({"fx": fake}, constraints=_constraints(rules)) as (gw, _):
        plan = '<fx><read>{"text": "first"}</read><write>{"text": "second"}</write></fx>'
        refused = await gw.orchestrator({"plan": plan}, scope=CallScope(ALICE))
        assert refused.is_error and "denied to alice" in text(refused), text(refused)
        assert fake.calls == [], "no step ran"
        allowed = await gw.orchestrator({"plan": plan}, scope=CallScope(CARL))
        assert not allowed.is_error, text(allowed)
        assert [name for name, _ in fake.calls] == ["read", "write"]


async def test_calls_a_minute_and_a_day_are_counted_per_principal_and_the_refusal_says_which() -> None:
    rules = {"alice": {"quota": {"calls_per_minute": 2}}, "role:trial": {"quota": {"calls_per_day": 1}}}
    async with running_gateway({"fx": _fake()}, constraints=_constraints(rules)) as (gw, _):
        assert gw.roles is not None
        for _ in range(2):
            assert not (await gw.engine.execute("fx__read", {}, scope=CallScope(ALICE))).result.is_error
        third = await gw.engine.execute("fx__read", {}, scope=CallScope(ALICE))
        assert "alice's quota of 2 calls a minute is used; try again in" in text(third.result)
        other = await gw.engine.execute("fx__read", {}, scope=CallScope(CARL))  # carl has his own count (none here)
        assert not other.result.is_error
        gw.roles.note("dora", ["trial"])
        assert not (await gw.engine.execute("fx__read", {}, scope=CallScope("principal:dora"))).result.is_error
        again = await gw.engine.execute("fx__read", {}, scope=CallScope("principal:dora/c9"))
        assert "role:trial's quota of 1 calls a day is used; resets at 00:00 UTC" in text(again.result)


async def test_result_bytes_a_day_refuse_the_call_after_the_one_that_crossed_the_line() -> None:
    rules = {"alice": {"quota": {"result_bytes_per_day": 100}}}
    async with running_gateway({"fx": _fake()}, constraints=_constraints(rules)) as (gw, _):
        big = await gw.engine.execute("fx__read", {"text": "x" * 200}, scope=CallScope(ALICE))
        assert text(big.result) == "x" * 200, "the call that crosses the line is answered"
        after = await gw.engine.execute("fx__read", {"text": "small"}, scope=CallScope(ALICE))
        assert "alice's quota of 100 result bytes a day is used" in text(after.result)


async def test_concurrent_calls_over_the_quota_are_refused_at_once() -> None:
    fake = _fake()
    started, release = anyio.Event(), anyio.Event()

    @fake.tool("hold")
    async def hold() -> str:
        started.set()
        await release.wait()
        return "held"

    rules = {"alice": {"quota": {"concurrent": 1}}}
    async with running_gateway({"fx": fake}, constraints=_constraints(rules)) as (gw, _):
        results: list[str] = []
        async with anyio.create_task_group() as tg:

            async def first() -> None:
                results.append(text((await gw.engine.execute("fx__hold", {}, scope=CallScope(ALICE))).result))

            tg.start_soon(first)
            with anyio.fail_after(HANG):
                await started.wait()
            second = await gw.engine.execute("fx__read", {}, scope=CallScope(ALICE))
            assert "alice already has 1 calls running, its quota" in text(second.result)
            release.set()
        assert results == ["held"]
        assert not (await gw.engine.execute("fx__read", {}, scope=CallScope(ALICE))).result.is_error


async def test_delegate_tasks_an_hour_are_counted_per_principal_and_a_resumed_task_is_not_a_new_one() -> None:
    rules = {"alice": {"quota": {"delegate_tasks_per_hour": 1}}}
    async with running_gateway({"fx": _fake()}, constraints=_constraints(rules)) as (gw, _):
        assert gw.delegator is not None
        # A 2026-07-28 client's model answers through input-required results: the task pauses at
        # once, asking for the model's first turn, which is all a started task needs here.
        first = await gw.delegator({"task": "read"}, scope=CallScope(ALICE), input_sampling=True)
        assert isinstance(first, mcp_types.InputRequiredResult), first
        second = await gw.delegator({"task": "read again"}, scope=CallScope(ALICE), input_sampling=True)
        assert isinstance(second, mcp_types.CallToolResult) and second.is_error
        assert "alice's quota of 1 delegate tasks an hour is used; try again in" in text(second)
        resumed = await gw.delegator(
            {"task": "read"},
            scope=CallScope(ALICE),
            input_sampling=True,
            request_state=first.request_state,
            input_responses={
                MODEL_TURN: mcp_types.CreateMessageResult(
                    role="assistant", content=mcp_types.TextContent(text="<answer>ok</answer>"), model="m"
                )
            },
        )
        assert "quota" not in str(resumed), "a resumed task is not a new one"
        assert isinstance(resumed, mcp_types.CallToolResult) and not resumed.is_error, resumed
        other = await gw.delegator({"task": "read"}, scope=CallScope(CARL), input_sampling=True)
        assert isinstance(other, mcp_types.InputRequiredResult), "carl has no such quota"


async def test_search_and_capability_calls_never_offer_a_principal_what_its_rules_refuse() -> None:
    other = FakeDownstream("fy")

    @other.tool("read")
    def read_other(text: str = "") -> str:
        return f"fy read {text}"

    rules = {"alice": {"tools": {"deny": ["fx__*"]}}}
    async with running_gateway({"fx": _fake(), "fy": other}, constraints=_constraints(rules)) as (gw, _):
        assert gw.toolhub is not None
        # The two `read` tools are one capability: search shows the group once, by a tool the caller may call.
        shown = {}
        for caller in (ALICE, CARL):
            found = await gw.toolhub.answer("search_tools", {"query": "read", "k": 5}, scope=CallScope(caller))
            shown[caller] = {entry["name"] for entry in json.loads(text(found))}
        assert "fy__read" in shown[ALICE] and not any(n.startswith("fx__") for n in shown[ALICE]), shown
        assert shown[CARL] == {"fx__read"}, shown  # the group, by its first tool
        picked = await gw.toolhub.call_capability("read", {"text": "x"}, scope=CallScope(ALICE))
        assert not picked.is_error and "fy read x" in text(picked), text(picked)
        denied = await gw.toolhub.call_capability("write", {"text": "x"}, scope=CallScope(ALICE))
        assert denied.is_error and "every tool offering capability 'write' is refused" in text(denied)


async def test_call_tool_is_judged_by_the_callers_own_rules() -> None:
    rules = {"alice": {"tools": {"deny": ["fx__write"]}}}
    async with running_gateway({"fx": _fake()}, constraints=_constraints(rules)) as (gw, _):
        assert gw.toolhub is not None
        call = {"name": "fx__write", "arguments": {"text": "x"}}
        refused = await gw.toolhub.answer("call_tool", call, scope=CallScope(ALICE))
        assert refused.is_error and "denied to alice" in text(refused), text(refused)
        allowed = await gw.toolhub.answer("call_tool", call, scope=CallScope(CARL))
        assert text(allowed) == "wrote x"
