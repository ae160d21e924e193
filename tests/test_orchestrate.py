"""`orchestrate` end to end: a real client, the real front, plans run over fixture subprocesses."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client

from tests.conftest import fixture_entry, make_config, running_gateway, text, wait_for
from toolscore import Gateway, MemoryAuditSink

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

SAY = {"tag": "say", "tool": "echo", "primary": "text"}


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    cfg = make_config({"fx": fixture_entry(tmp_path, shorthand=SAY)})
    async with running_gateway(cfg, tmp_path) as pair:
        yield pair


async def run(gateway: Gateway, plan: str, **extra: Any) -> mcp_types.CallToolResult:
    async with Client(gateway.server, mode="legacy") as client:
        return await client.call_tool("orchestrate", {"plan": plan, **extra})


def statuses(result: mcp_types.CallToolResult) -> dict[int, str]:
    assert result.structured_content is not None, text(result)
    return {s["step"]: s["status"] for s in result.structured_content["steps"]}


def step(result: mcp_types.CallToolResult, n: int) -> dict[str, Any]:
    assert result.structured_content is not None
    return next(s for s in result.structured_content["steps"] if s["step"] == n)


async def test_orchestrate_is_listed_with_its_contract(gw: tuple[Gateway, MemoryAuditSink]) -> None:
    async with Client(gw[0].server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    description = tools["orchestrate"].description or ""
    assert "<say> (fx.echo)" in description and "Servers: fx." in description
    assert tools["orchestrate"].input_schema["required"] == ["plan"]


async def test_a_plan_runs_and_answers_one_result_per_step_in_order(gw: tuple[Gateway, MemoryAuditSink]) -> None:
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


async def test_a_bad_plan_runs_nothing_and_names_every_problem(
    gw: tuple[Gateway, MemoryAuditSink], tmp_path: Path
) -> None:
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


async def test_dry_run_describes_the_checked_plan_without_running_it(
    gw: tuple[Gateway, MemoryAuditSink], tmp_path: Path
) -> None:
    result = await run(gw[0], '<fx><counter id="c">{"key": "dry"}</counter></fx><say>${c.text}</say>', dry_run=True)
    assert not result.is_error
    assert "step 2: fx.echo depends on c" in text(result)
    assert result.structured_content is not None
    assert result.structured_content["plan"]["children"][0]["exposed_as"] == "fx__counter"
    assert not (tmp_path / "count-dry").exists()


async def test_parallel_steps_overlap(gw: tuple[Gateway, MemoryAuditSink]) -> None:
    # Three 1 s sleeps fit a 2.5 s block only if they run at the same time.
    result = await run(
        gw[0],
        '<parallel timeout="2.5s">'
        + "".join(f'<fx><sleep>{{"seconds": 1, "tag": "p{i}"}}</sleep></fx>' for i in range(3))
        + "</parallel>",
    )
    assert statuses(result) == {1: "ok", 2: "ok", 3: "ok"}


async def test_a_call_timeout_cancels_the_downstream_call(gw: tuple[Gateway, MemoryAuditSink], tmp_path: Path) -> None:
    result = await run(gw[0], '<fx><sleep timeout="200ms">{"seconds": 30, "tag": "t"}</sleep></fx><say>after</say>')
    assert statuses(result) == {1: "timeout", 2: "skipped"}
    await wait_for((tmp_path / "cancelled-t").exists)


async def test_race_keeps_the_first_success_and_cancels_the_rest(
    gw: tuple[Gateway, MemoryAuditSink], tmp_path: Path
) -> None:
    result = await run(
        gw[0],
        '<race id="r"><fx><sleep>{"seconds": 30, "tag": "loser"}</sleep></fx><say>fast</say></race>'
        "<say>winner was ${r.text}</say>",
    )
    assert statuses(result) == {1: "cancelled", 2: "ok", 3: "ok"}
    assert step(result, 3)["result"] == "winner was fast"
    await wait_for((tmp_path / "cancelled-loser").exists)


async def test_fallback_tries_alternatives_in_order(gw: tuple[Gateway, MemoryAuditSink]) -> None:
    result = await run(
        gw[0], '<fallback><fx><fail>{"message": "no"}</fail></fx><say>second</say><say>third</say></fallback>'
    )
    assert statuses(result) == {1: "error", 2: "ok", 3: "skipped"}


async def test_fail_fast_cancels_running_siblings(gw: tuple[Gateway, MemoryAuditSink], tmp_path: Path) -> None:
    result = await run(
        gw[0],
        '<parallel policy="fail_fast"><fx><sleep>{"seconds": 30, "tag": "ff"}</sleep></fx>'
        '<fx><fail>{"message": "broken"}</fail></fx></parallel>',
    )
    assert statuses(result) == {1: "cancelled", 2: "error"}
    assert '<result block="parallel" status="error">' in text(result)


async def test_failures_skip_dependents_unless_the_source_says_continue(gw: tuple[Gateway, MemoryAuditSink]) -> None:
    result = await run(
        gw[0],
        '<sequential stop_on_error="false">'
        '<fx><fail id="f">{"message": "bad input"}</fail></fx><say>uses ${f.text}</say>'
        '<fx><fail id="g" on_error="continue">{"message": "also bad"}</fail></fx><say>saw: ${g.error}</say>'
        "</sequential>",
    )
    assert statuses(result) == {1: "error", 2: "skipped", 3: "error", 4: "ok"}
    assert step(result, 4)["result"] == "saw: also bad"


async def test_a_step_runs_once_however_many_steps_use_it(gw: tuple[Gateway, MemoryAuditSink], tmp_path: Path) -> None:
    result = await run(
        gw[0],
        '<fx><counter id="c">{"key": "once"}</counter></fx>'
        "<parallel><say>${c.text}</say><say>n=${c.json}</say><say>s=$result_of_step_1</say></parallel>",
    )
    assert statuses(result) == {1: "ok", 2: "ok", 3: "ok", 4: "ok"}
    assert (tmp_path / "count-once").read_text() == "1"


async def test_a_sequence_stops_at_the_first_failure(gw: tuple[Gateway, MemoryAuditSink]) -> None:
    result = await run(gw[0], "<fx><fail>{}</fail></fx><say>never</say><say>nor this</say>")
    assert statuses(result) == {1: "error", 2: "skipped", 3: "skipped"}


async def test_retries_rerun_a_flaky_idempotent_tool(gw: tuple[Gateway, MemoryAuditSink]) -> None:
    result = await run(gw[0], '<fx><flaky retries="3">{"key": "k", "failures": 2}</flaky></fx>')
    assert statuses(result) == {1: "ok"}
    assert step(result, 1)["attempts"] == 3
    refused = await run(gw[0], '<fx><counter retries="1">{"key": "r"}</counter></fx>')
    assert refused.is_error and 'code="unsafe_retries"' in text(refused)


async def test_a_missing_key_is_a_ref_error_and_optional_is_null(gw: tuple[Gateway, MemoryAuditSink]) -> None:
    result = await run(
        gw[0],
        '<fx><add id="s">{"a": 1, "b": 1}</add></fx><parallel><say>${s.nope}</say><say>[${s.nope?}]</say></parallel>',
    )
    assert statuses(result) == {1: "ok", 2: "ref_error", 3: "ok"}
    assert step(result, 3)["result"] == [None]  # the echoed text "[null]" parses as JSON


async def test_large_results_flow_by_reference_and_the_model_sees_a_capped_view(
    gw: tuple[Gateway, MemoryAuditSink],
) -> None:
    size = 64 * 1024
    result = await run(gw[0], f'<fx><large id="big">{{"size": {size}}}</large></fx><say>${{big.text}}</say>')
    assert statuses(result) == {1: "ok", 2: "ok"}
    assert step(result, 2)["bytes"] == size  # the echo received all of it
    assert step(result, 1)["truncated"] and step(result, 2)["truncated"]
    assert len(text(result).encode()) < 0.2 * 2 * size


async def test_episodes_continue_step_numbers_and_references(gw: tuple[Gateway, MemoryAuditSink]) -> None:
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


async def test_the_plan_budget_keeps_finished_results(tmp_path: Path) -> None:
    cfg = make_config({"fx": fixture_entry(tmp_path, shorthand=SAY)}, toolscore={"plan": {"budget_seconds": 0.5}})
    async with running_gateway(cfg, tmp_path) as (gateway, _):
        result = await run(gateway, '<say>quick</say><fx><sleep>{"seconds": 30}</sleep></fx><say>late</say>')
    assert statuses(result) == {1: "ok", 2: "timeout", 3: "skipped"}
    assert result.structured_content is not None and result.structured_content["completed"] is False
    assert "time budget ran out" in text(result)


async def test_progress_is_reported_per_finished_step(gw: tuple[Gateway, MemoryAuditSink]) -> None:
    messages: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append((progress, total, message))

    async with Client(gw[0].server, mode="legacy") as client:
        await client.call_tool("orchestrate", {"plan": "<say>a</say><say>b</say>"}, progress_callback=on_progress)
        await wait_for(lambda: len(messages) == 2)
    assert [(p, t) for p, t, _ in messages] == [(1, 2), (2, 2)]
    assert messages[0][2] is not None and re.match(r"step 1 fx\.echo ok \d+ ms", messages[0][2])


async def test_every_step_is_an_audited_engine_call_sharing_the_plan_id(gw: tuple[Gateway, MemoryAuditSink]) -> None:
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


async def test_a_plan_cannot_reach_a_tool_the_config_hides(tmp_path: Path) -> None:
    cfg = make_config({"fx": fixture_entry(tmp_path, tools={"deny": ["counter"]})})
    async with running_gateway(cfg, tmp_path) as (gateway, _):
        result = await run(gateway, '<fx><counter>{"key": "hidden"}</counter></fx>')
    assert result.is_error and 'code="unknown_tool"' in text(result)
    assert not (tmp_path / "count-hidden").exists()


async def test_an_empty_turn_is_a_plan_error(gw: tuple[Gateway, MemoryAuditSink]) -> None:
    result = await run(gw[0], "I am not sure what to do.")
    assert result.is_error and 'code="empty_plan"' in text(result)
