"""Running checked plans over real MCP traffic to servers in this process: how blocks, failures,
references and deadlines play out."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from tests.conftest import memory_gateway, text, wait_for
from tests.plan.conftest import SAY, run, statuses, step
from toolscore import Gateway, MemoryAuditSink
from toolscore.testing import FakeDownstream, memory_config, running_gateway

pytestmark = pytest.mark.anyio

GW = tuple[Gateway, MemoryAuditSink]


async def test_parallel_steps_run_at_once() -> None:
    fake = FakeDownstream()
    arrived: list[str] = []
    everyone = anyio.Event()

    @fake.tool()
    async def meet(name: str) -> str:
        arrived.append(name)
        if len(arrived) == 3:
            everyone.set()
        await everyone.wait()  # in sequence, the first would wait here forever
        return name

    plan = "<parallel>" + "".join(f'<fx><meet>{{"name": "{n}"}}</meet></fx>' for n in "abc") + "</parallel>"
    async with running_gateway({"fx": fake}) as (gateway, _):
        with anyio.fail_after(60):
            result = await gateway.orchestrator({"plan": plan})
    assert statuses(result) == {1: "ok", 2: "ok", 3: "ok"}
    assert sorted(arrived) == ["a", "b", "c"]


async def test_a_call_timeout_cancels_the_downstream_call(gw: GW, tmp_path: Path) -> None:
    result = await run(gw[0], '<fx><sleep timeout="200ms">{"seconds": 30, "tag": "t"}</sleep></fx><say>after</say>')
    assert statuses(result) == {1: "timeout", 2: "skipped"}
    # The step's own timeout: no block set one, so no block "ran past its timeout".
    assert "<result block=" not in text(result)
    await wait_for((tmp_path / "cancelled-t").exists)


async def test_only_the_block_whose_own_timeout_expired_reports_it(gw: GW, tmp_path: Path) -> None:
    result = await run(
        gw[0],
        '<sequential id="outer"><sequential id="inner" timeout="200ms">'
        '<fx><sleep>{"seconds": 30, "tag": "inner"}</sleep></fx></sequential><say>after</say></sequential>',
    )
    assert statuses(result) == {1: "timeout", 2: "skipped"}
    assert text(result).count("<result block=") == 1
    assert (
        '<result block="sequential" id="inner" status="timeout">&lt;sequential&gt; ran past its timeout; '
        "unfinished steps were cancelled</result>"
    ) in text(result)
    await wait_for((tmp_path / "cancelled-inner").exists)


async def test_a_block_timeout_cancels_what_is_still_running(gw: GW, tmp_path: Path) -> None:
    result = await run(
        gw[0],
        '<parallel timeout="200ms"><fx><sleep>{"seconds": 30, "tag": "slow"}</sleep></fx><say>quick</say></parallel>'
        "<say>after</say>",
    )
    assert statuses(result) == {1: "timeout", 2: "ok", 3: "skipped"}
    assert (
        '<result block="parallel" status="timeout">&lt;parallel&gt; ran past its timeout; '
        "unfinished steps were cancelled</result>"
    ) in text(result)
    await wait_for((tmp_path / "cancelled-slow").exists)


async def test_race_keeps_the_first_success_and_cancels_the_rest(gw: GW, tmp_path: Path) -> None:
    result = await run(
        gw[0],
        '<race id="r"><fx><sleep>{"seconds": 30, "tag": "loser"}</sleep></fx><say>fast</say></race>'
        "<say>winner was ${r.text}</say>",
    )
    assert statuses(result) == {1: "cancelled", 2: "ok", 3: "ok"}
    assert step(result, 3)["result"] == "winner was fast"
    await wait_for((tmp_path / "cancelled-loser").exists)


async def test_fallback_tries_alternatives_in_order(gw: GW) -> None:
    result = await run(
        gw[0], '<fallback><fx><fail>{"message": "no"}</fail></fx><say>second</say><say>third</say></fallback>'
    )
    assert statuses(result) == {1: "error", 2: "ok", 3: "skipped"}


async def test_a_skipped_step_names_the_failure_that_stopped_the_plan_not_a_rescued_one(gw: GW) -> None:
    result = await run(
        gw[0],
        '<fallback><fx><fail>{"message": "rescued"}</fail></fx><say>second</say></fallback>'
        '<fx><fail>{"message": "fatal"}</fail></fx><say>after</say>',
    )
    assert statuses(result) == {1: "error", 2: "ok", 3: "error", 4: "skipped"}
    assert step(result, 4)["error"].startswith("not run: the <sequential> stopped after step 3 ended error: ")
    assert "fatal" in step(result, 4)["error"]


async def test_a_block_whose_alternatives_all_fail_says_so(gw: GW) -> None:
    result = await run(gw[0], '<fallback id="f"><fx><fail>{"message": "a"}</fail></fx><fx><explode/></fx></fallback>')
    assert statuses(result) == {1: "error", 2: "error"}
    assert (
        '<result block="fallback" id="f" status="error">&lt;fallback&gt;: every alternative failed '
        "(step 1: error; step 2: error)</result>"
    ) in text(result)


async def test_fail_fast_cancels_running_siblings(gw: GW) -> None:
    result = await run(
        gw[0],
        '<parallel policy="fail_fast"><fx><sleep>{"seconds": 30, "tag": "ff"}</sleep></fx>'
        '<fx><fail>{"message": "broken"}</fail></fx></parallel>',
    )
    assert statuses(result) == {1: "cancelled", 2: "error"}
    assert '<result block="parallel" status="error">' in text(result)


async def test_failures_skip_dependents_unless_the_source_says_continue(gw: GW) -> None:
    result = await run(
        gw[0],
        '<sequential stop_on_error="false">'
        '<fx><fail id="f">{"message": "bad input"}</fail></fx><say>uses ${f.text}</say>'
        '<fx><fail id="g" on_error="continue">{"message": "also bad"}</fail></fx><say>saw: ${g.error}</say>'
        "</sequential>",
    )
    assert statuses(result) == {1: "error", 2: "skipped", 3: "error", 4: "ok"}
    assert step(result, 4)["result"] == "saw: also bad"


async def test_a_step_runs_once_however_many_steps_use_it(gw: GW, tmp_path: Path) -> None:
    result = await run(
        gw[0],
        '<fx><counter id="c">{"key": "once"}</counter></fx>'
        "<parallel><say>${c.text}</say><say>n=${c.json}</say><say>s=$result_of_step_1</say></parallel>",
    )
    assert statuses(result) == {1: "ok", 2: "ok", 3: "ok", 4: "ok"}
    assert (tmp_path / "count-once").read_text() == "1"


async def test_a_sequence_stops_at_the_first_failure(gw: GW) -> None:
    result = await run(gw[0], "<fx><fail>{}</fail></fx><say>never</say><say>nor this</say>")
    assert statuses(result) == {1: "error", 2: "skipped", 3: "skipped"}


async def test_retries_rerun_a_flaky_idempotent_tool(gw: GW) -> None:
    result = await run(gw[0], '<fx><flaky retries="3">{"key": "k", "failures": 2}</flaky></fx>')
    assert statuses(result) == {1: "ok"}
    assert step(result, 1)["attempts"] == 3
    refused = await run(gw[0], '<fx><counter retries="1">{"key": "r"}</counter></fx>')
    assert refused.is_error and 'code="unsafe_retries"' in text(refused)


async def test_a_tool_error_is_not_retried(gw: GW) -> None:
    result = await run(gw[0], '<fx><fail retries="2" idempotent="true">{"message": "no"}</fail></fx>')
    assert statuses(result) == {1: "error"}
    assert step(result, 1)["attempts"] == 1


async def test_a_missing_key_is_a_ref_error_and_optional_is_null(gw: GW) -> None:
    result = await run(
        gw[0],
        '<fx><add id="s">{"a": 1, "b": 1}</add></fx><parallel><say>${s.nope}</say><say>[${s.nope?}]</say></parallel>',
    )
    assert statuses(result) == {1: "ok", 2: "ref_error", 3: "ok"}
    assert step(result, 3)["result"] == [None]  # the echoed text "[null]" parses as JSON


async def test_blocks_are_worth_what_the_table_says(gw: GW) -> None:
    result = await run(
        gw[0],
        '<parallel id="p"><say id="a">1</say><say id="b">2</say></parallel>'
        '<parallel id="q"><say id="c">3</say><race><say>4</say></race></parallel>'
        '<race id="r"><say>won</say></race>'
        '<sequential id="s"><say>x</say><say>last</say></sequential>'
        "<say>${p.a} ${p.b} ${q[1]} ${r.text} ${s.text} ${p.status}</say>",
    )
    assert step(result, 8)["result"] == "1 2 4 won last ok"


async def test_resolved_arguments_are_no_larger_than_a_client_may_send(tmp_path: Path) -> None:
    servers = {"fx": {"shorthand": SAY}}
    async with memory_gateway(tmp_path, servers, toolscore={"max_request_bytes": 2048}) as (gateway, _):
        result = await run(gateway, '<fx><large id="big">{"size": 4096}</large></fx><say>${big.text}</say>')
    assert statuses(result) == {1: "ok", 2: "ref_error"}
    assert "would exceed 2048 bytes" in step(result, 2)["error"]


async def test_large_results_flow_by_reference_and_the_model_sees_a_capped_view(gw: GW) -> None:
    size = 64 * 1024
    result = await run(gw[0], f'<fx><large id="big">{{"size": {size}}}</large></fx><say>${{big.text}}</say>')
    assert statuses(result) == {1: "ok", 2: "ok"}
    assert step(result, 2)["bytes"] == size  # the echo received all of it
    assert step(result, 1)["truncated"] and step(result, 2)["truncated"]
    assert len(text(result).encode()) < 0.2 * 2 * size


async def test_the_plan_budget_keeps_finished_results(tmp_path: Path) -> None:
    servers = {"fx": {"shorthand": SAY}}
    async with memory_gateway(tmp_path, servers, toolscore={"plan": {"budget_seconds": 0.3}}) as (gateway, _):
        result = await run(gateway, '<say>quick</say><fx><sleep>{"seconds": 30}</sleep></fx><say>late</say>')
    assert statuses(result) == {1: "ok", 2: "timeout", 3: "skipped"}
    assert result.structured_content is not None and result.structured_content["completed"] is False
    assert "time budget ran out" in text(result)


async def test_steps_of_one_server_share_its_plan_concurrency() -> None:
    fake = FakeDownstream()
    running: list[int] = []
    most = 0

    @fake.tool()
    async def work(n: int) -> str:
        nonlocal most
        running.append(n)
        most = max(most, len(running))
        await anyio.lowlevel.checkpoint()  # let the other steps start if they may
        running.remove(n)
        return str(n)

    config = memory_config(["fx"], toolscore={"plan": {"server_concurrency": 1}})
    plan = "<parallel>" + "".join(f'<fx><work>{{"n": {n}}}</work></fx>' for n in range(4)) + "</parallel>"
    async with running_gateway({"fx": fake}, config=config) as (gateway, _):
        result = await gateway.orchestrator({"plan": plan})
    assert statuses(result) == {1: "ok", 2: "ok", 3: "ok", 4: "ok"}
    assert most == 1
