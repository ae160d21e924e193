"""`orchestrate` at the front: a real client, the real front server, fixture servers in process."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import memory_gateway, text, wait_for
from tests.plan.conftest import SAY, run, statuses, step
from toolscore import Gateway, MemoryAuditSink
from toolscore.errors import PlanProblem
from toolscore.plan.nodes import CheckedPlan
from toolscore.plan.tool import EpisodeStore, Orchestrator

pytestmark = pytest.mark.anyio

GW = tuple[Gateway, MemoryAuditSink]


async def test_orchestrate_is_listed_with_its_contract(gw: GW) -> None:
    async with Client(gw[0].server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    description = tools["orchestrate"].description or ""
    assert "<say> (fx.echo)" in description and "Servers: fx." in description
    # The block line comes from the block table.
    assert '- Blocks: <parallel>, <sequential stop_on_error="true">, <race> (first success wins), <fallback>' in (
        description
    )
    assert tools["orchestrate"].input_schema["required"] == ["plan"]


async def test_a_plan_runs_and_answers_one_result_per_step_in_order(gw: GW) -> None:
    result = await run(
        gw[0],
        """<think>Add in parallel, then combine.</think>
<parallel>
  <fx><add id="a">{"a": 2, "b": 3}</add></fx>
  <say id="b">x < y & z</say>
</parallel>
<fx><add id="c">{"a": "${a.sum}", "b": 10}</add></fx>
<call server="fx" tool="echo">{"text": "sum ${c.sum}; said ${b.text}; status ${a.status}"}</call>
<execute_tools />""",
    )
    assert not result.is_error
    assert statuses(result) == {1: "ok", 2: "ok", 3: "ok", 4: "ok"}
    assert step(result, 3)["result"] == {"sum": 15}  # ${a.sum} went in as the integer 5
    assert step(result, 4)["result"] == "sum 15; said x < y & z; status ok"
    blocks = re.findall(r'<result step="(\d)" (?:id="(\w)" )?server="fx" tool="(\w+)" status="ok"', text(result))
    assert [b[0] for b in blocks] == ["1", "2", "3", "4"]
    assert "x &lt; y &amp; z" in text(result)  # output is escaped: it cannot forge or close a <result>


async def test_a_bad_plan_runs_nothing_and_names_every_problem(gw: GW, tmp_path: Path) -> None:
    result = await run(
        gw[0],
        '<fx><counter>{"key": "never"}</counter></fx>'
        '<fx><echo>{"text": "${later.text}"}</echo></fx>'
        '<say id="later">x</say>'
        '<fx><add>{"a": "two", "b": 1}</add></fx>'
        "<fx><nope/></fx><execute_tools />",
    )
    assert result.is_error
    found = re.findall(r'<plan_error code="(\w+)" step="(\d)"', text(result))
    assert found == [("forward_reference", "2"), ("invalid_arguments", "4"), ("unknown_tool", "5")]
    assert "Nothing was run" in text(result)
    assert not (tmp_path / "count-never").exists()


async def test_dry_run_describes_the_checked_plan_without_running_it(gw: GW, tmp_path: Path) -> None:
    result = await run(
        gw[0],
        '<fx><counter id="c">{"key": "dry"}</counter></fx><race id="r"><say>${c.text}</say></race>',
        dry_run=True,
    )
    assert not result.is_error
    assert "step 1 (c): fx.counter depends on -" in text(result)
    assert "step 2: fx.echo depends on c" in text(result)
    assert result.structured_content is not None
    children = result.structured_content["plan"]["children"]
    assert children[0]["exposed_as"] == "fx__counter"
    assert (children[1]["block"], children[1]["id"], children[1]["children"][0]["depends_on"]) == ("race", "r", ["c"])
    assert not (tmp_path / "count-dry").exists()


async def test_a_dry_run_without_execute_tools_does_not_say_it_ran(gw: GW, tmp_path: Path) -> None:
    plan = '<fx><counter>{"key": "dry"}</counter></fx><answer>done</answer>'  # no <execute_tools />
    result = await gw[0].orchestrator({"plan": plan, "dry_run": True})
    assert not result.is_error and 'dry_run="true"' in text(result)
    assert "<warning>the plan does not end with <execute_tools />" in text(result)
    assert "run anyway" not in text(result)
    assert "the plan ran" not in text(result)
    assert not (tmp_path / "count-dry").exists()


async def test_episodes_continue_step_numbers_and_references(gw: GW) -> None:
    async with Client(gw[0].server, mode="legacy") as client:
        first = await client.call_tool("orchestrate", {"plan": '<say id="a">from turn one</say>'})
        assert first.structured_content is not None
        episode = first.structured_content["episode"]
        plan = "<say>${a.text} and $result_of_step_1</say>"
        second = await client.call_tool("orchestrate", {"plan": plan, "episode": episode})
        assert statuses(second) == {2: "ok"}
        assert step(second, 2)["result"] == "from turn one and from turn one"
        ended = await client.call_tool("orchestrate", {"plan": "Final Answer: done", "episode": episode})
        assert not ended.is_error and 'ended="true"' in text(ended)
        again = await client.call_tool("orchestrate", {"plan": "<say>${a}</say>", "episode": episode})
        assert again.is_error and "unknown or has expired" in text(again)


async def test_a_block_id_of_an_earlier_turn_is_a_value_for_later_turns(gw: GW) -> None:
    first = await gw[0].orchestrator({"plan": '<parallel id="p"><say id="a">1</say></parallel>'})
    assert first.structured_content is not None
    episode = first.structured_content["episode"]
    second = await gw[0].orchestrator({"plan": "<say>got ${p.a}</say>", "episode": episode})
    assert step(second, 2)["result"] == "got 1"


async def test_progress_is_reported_per_finished_step(gw: GW) -> None:
    messages: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append((progress, total, message))

    async with Client(gw[0].server, mode="legacy") as client:
        await client.call_tool("orchestrate", {"plan": "<say>a</say><say>b</say>"}, progress_callback=on_progress)
        await wait_for(lambda: len(messages) == 2)
    assert [(p, t) for p, t, _ in messages] == [(1, 2), (2, 2)]
    assert messages[0][2] is not None and re.match(r"step 1 fx\.echo ok \d+ ms", messages[0][2])


async def test_every_step_is_an_audited_engine_call_sharing_the_plan_id(gw: GW) -> None:
    gateway, sink = gw
    result = await run(gateway, '<say>a</say><fx><add>{"a": 1, "b": "x"}</add></fx>')
    assert result.is_error  # invalid literal arguments: a plan error, nothing called
    result = await run(gateway, '<say id="s">1</say><fx><add>{"a": "${s.json}", "b": 2}</add></fx>')
    assert statuses(result) == {1: "ok", 2: "ok"}
    plan_records = [r for r in sink.records if r.tool == "orchestrate"]
    assert [(r.success, r.outcome) for r in plan_records] == [(False, {"plan_error": 1}), (True, {"ok": 2})]
    plan_id = plan_records[1].plan_id
    steps = [r for r in sink.records if r.plan_id == plan_id and r.tool != "orchestrate"]
    assert [(r.tool, r.success) for r in steps] == [("fx__echo", True), ("fx__add", True)]
    assert plan_records[1].plan_hash and plan_records[1].steps == 2


async def test_a_failed_step_makes_the_plans_audit_record_a_failure(gw: GW) -> None:
    await run(gw[0], "<fx><fail>{}</fail></fx>")
    (record,) = [r for r in gw[1].records if r.tool == "orchestrate"]
    assert (record.success, record.error_kind, record.outcome) == (False, "step_failed", {"error": 1})


async def test_a_plan_a_fallback_rescued_is_audited_as_a_success(gw: GW) -> None:
    result = await run(gw[0], '<fallback><fx><fail>{"message": "no"}</fail></fx><say>second</say></fallback>')
    assert statuses(result) == {1: "error", 2: "ok"}
    (record,) = [r for r in gw[1].records if r.tool == "orchestrate"]
    assert (record.success, record.error_kind, record.outcome) == (True, None, {"error": 1, "ok": 1})


async def test_a_plan_cannot_reach_a_tool_the_config_hides(tmp_path: Path) -> None:
    async with memory_gateway(tmp_path, {"fx": {"tools": {"deny": ["counter"]}}}) as (gateway, _):
        result = await run(gateway, '<fx><counter>{"key": "hidden"}</counter></fx>')
    assert result.is_error and 'code="unknown_tool"' in text(result)
    assert not (tmp_path / "count-hidden").exists()


async def test_an_empty_turn_is_a_plan_error(gw: GW) -> None:
    result = await run(gw[0], "I am not sure what to do.")
    assert result.is_error and 'code="empty_plan"' in text(result)


@pytest.mark.parametrize(
    "arguments", [{}, {"plan": 1}, {"plan": "<say>x</say>", "episode": 3}, {"plan": "x", "dry_run": "yes"}]
)
async def test_malformed_arguments_are_refused(gw: GW, arguments: dict[str, Any]) -> None:
    result = await gw[0].orchestrator(arguments)
    assert result.is_error and "orchestrate takes {'plan': string" in text(result)


async def test_the_configured_depth_limit_holds(tmp_path: Path) -> None:
    servers = {"fx": {"shorthand": SAY}}
    async with memory_gateway(tmp_path, servers, toolscore={"plan": {"max_depth": 1}}) as (gateway, _):
        ok = await gateway.orchestrator({"plan": "<parallel><say>x</say></parallel>"})
        deep = await gateway.orchestrator({"plan": "<parallel><race><say>x</say></race></parallel>"})
    assert not ok.is_error
    assert deep.is_error
    assert '<plan_error code="too_deep" tag="race" line="1">blocks nest deeper than 1 levels</plan_error>' in text(deep)


async def test_a_configured_depth_above_the_default_is_honoured(tmp_path: Path) -> None:
    servers = {"fx": {"shorthand": SAY}}
    nested = "<sequential>" * 12 + "<say>deep</say>" + "</sequential>" * 12
    async with memory_gateway(tmp_path, servers, toolscore={"plan": {"max_depth": 12}}) as (gateway, _):
        ok = await gateway.orchestrator({"plan": nested})
        deep = await gateway.orchestrator({"plan": f"<parallel>{nested}</parallel>"})
    assert not ok.is_error and statuses(ok) == {1: "ok"}
    assert deep.is_error and "blocks nest deeper than 12 levels" in text(deep)


async def test_a_large_plan_is_parsed_off_the_event_loop_all_the_same(gw: GW) -> None:
    plan = "<think>" + "long thoughts " * 400 + "</think><say>done</say>"
    assert len(plan) > 4096
    result = await gw[0].orchestrator({"plan": plan})
    assert statuses(result) == {1: "ok"}
    bad = await gw[0].orchestrator({"plan": plan + "<nosuch/>"})
    assert bad.is_error and 'code="unknown_tag"' in text(bad)


async def test_policy_may_refuse_a_plan_or_orchestrate_itself(gw: GW) -> None:
    gateway, sink = gw

    def no_echo(plan: CheckedPlan, caller: str | None) -> list[PlanProblem]:
        return [PlanProblem("policy", "no echo", step=c.step) for c in plan.calls if c.route.remote_name == "echo"]

    def orchestrator(**kw: Any) -> Orchestrator:
        return Orchestrator(tools=gateway.hub, engine=gateway.engine, config=gateway.config, audit=sink, **kw)

    refused = await orchestrator(policy=no_echo)({"plan": "<say>x</say>"})
    assert refused.is_error and '<plan_error code="policy" step="1">no echo</plan_error>' in text(refused)
    forbidden = await orchestrator(refusal="not for you")({"plan": "<say>x</say>"})
    assert forbidden.is_error and text(forbidden) == "Call rejected by policy 'tools': not for you"
    assert sink.records[-1].violations == ("tools: not for you",)


# -- episodes ------------------------------------------------------------------------------------


def test_each_caller_sees_only_its_own_episodes() -> None:
    store = EpisodeStore(per_caller=2, max_callers=2)
    mine = store.new("me")
    assert store.get("me", mine.id) is mine
    assert store.get("you", mine.id) is None
    assert store.get("me", "guess") is None
    store.end("me", mine.id)
    assert store.get("me", mine.id) is None
    store.end("nobody", "x")  # nothing to forget: no error


def test_a_caller_keeps_its_most_recently_used_episodes() -> None:
    store = EpisodeStore(per_caller=2, max_callers=8)
    first, second = store.new("me"), store.new("me")
    store.get("me", first.id)  # used again: now the most recent
    store.new("me")
    assert store.get("me", first.id) is first
    assert store.get("me", second.id) is None


def test_the_least_recently_active_caller_goes_first() -> None:
    store = EpisodeStore(per_caller=4, max_callers=2)
    a, b = store.new("a"), store.new("b")
    store.get("a", a.id)
    store.new("c")
    assert store.get("a", a.id) is a
    assert store.get("b", b.id) is None
    store.forget("a")
    assert store.get("a", a.id) is None
