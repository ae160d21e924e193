"""The agent loop end to end: a real MCP client calls `delegate` on the real front; the model is a
scripted OpenAI-compatible server on loopback, streaming token by token."""

from __future__ import annotations

import json
import re
from pathlib import Path
from time import perf_counter
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import text, wait_for
from tests.fixtures.scripted_model import HANG, scripted_model
from tests.loop.conftest import loop_gateway
from toolscore.loop.trajectory import read_trajectories, replay

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

ECHO = '<fx><echo>{{"text": "{}"}}</echo></fx>'


def records(tmp_path: Path) -> list[dict[str, Any]]:
    return list(read_trajectories(tmp_path / "trajectories.jsonl"))


async def test_three_turn_task_reaches_an_answer_and_replays(tmp_path: Path) -> None:
    turns = [
        "<think>first, echo</think>" + ECHO.format("one") + "<execute_tools />",
        '<think>now add</think><fx><add>{"a": 2, "b": 3}</add></fx><execute_tools />',
        "<think>done</think><answer>one and 5</answer>",
    ]
    with scripted_model(turns) as model:
        async with loop_gateway(tmp_path, model.url) as (gw, sink), Client(gw.server) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert "delegate" in tools
            result = await client.call_tool("delegate", {"task": "echo one, then add 2 and 3"})
    assert not result.is_error, text(result)
    assert result.structured_content is not None
    assert result.structured_content["answer"] == "one and 5"
    assert result.structured_content["stop_reason"] == "answer"
    assert result.structured_content["turns"] == 3
    # The model saw the system prompt with the live catalog and the results of each turn.
    sent = model.requests
    assert sent[0]["messages"][0]["role"] == "system" and "fx.echo" in sent[0]["messages"][0]["content"]
    assert "<execute_tools />" in sent[0]["stop"]
    assert '<result step="1"' in sent[1]["messages"][-1]["content"] and "one" in sent[1]["messages"][-1]["content"]
    assert '<result step="2"' in sent[2]["messages"][-1]["content"] and "5" in sent[2]["messages"][-1]["content"]
    # Every call went through the engine (audited).
    assert [r.tool for r in sink.records if r.phase != "plan"][-2:] == ["fx__echo", "fx__add"]
    # The trajectory: one record per turn, <think> kept, and it replays to what the model was sent.
    rows = records(tmp_path)
    assert [r["type"] for r in rows] == ["start", "turn", "turn", "turn", "end"]
    assert rows[1]["A"].startswith("<think>first, echo</think>")
    assert rows[-1]["stop_reason"] == "answer" and rows[-1]["answer"] == "one and 5"
    (episode,) = replay(rows)
    assert episode.mismatches == []
    rebuilt = [{"role": "system", "content": episode.system}] + [
        {"role": m.role, "content": m.content} for m in episode.messages[:-1]
    ]
    assert rebuilt == sent[2]["messages"]


async def test_calls_start_before_the_model_turn_ends(tmp_path: Path) -> None:
    """The first call's closing tag streams in early; the call starts before the last token is sent."""
    # About 2 s of tokens after the call's closing tag: room for a busy machine to start the call.
    long_tail = "<think>" + "still thinking " * 100 + "</think>"
    turns = [ECHO.format("early") + long_tail + "<execute_tools />", "<answer>ok</answer>"]
    events: list[tuple[str, float]] = []
    with scripted_model(turns, token_seconds=0.005) as model:
        async with loop_gateway(tmp_path, model.url) as (gw, _sink):
            # The handler itself, to observe its events (the model and the tools are still real traffic).
            assert gw.delegator is not None
            result = await gw.delegator({"task": "t"}, on_event=lambda kind, _: events.append((kind, perf_counter())))
    assert not result.is_error
    starts = [t for kind, t in events if kind == "call_start"]
    model_end = next(t for kind, t in events if kind == "model_end")
    turn_end = next(t for kind, n, t in model.events if kind == "turn_end" and n == 1)
    assert starts and starts[0] < turn_end < model_end
    rows = records(tmp_path)
    latency = rows[1]["timings"]["call_start_latency_ms"]
    assert len(latency) == 1 and latency[0] >= 0


async def test_parallel_turn_runs_calls_together_and_a_dependent_call_waits(tmp_path: Path) -> None:
    # Sleeps wide enough that b starts before a ends, even on a busy machine.
    turns = [
        '<fx><sleep id="a">{"seconds": 1.5, "tag": "a"}</sleep></fx>'
        '<fx><sleep id="b">{"seconds": 1.5, "tag": "b"}</sleep></fx>'
        '<fx><echo>{"text": "${a.status}"}</echo></fx><execute_tools />',
        "<answer>done</answer>",
    ]
    events: list[tuple[str, Any]] = []
    with scripted_model(turns) as model:
        async with loop_gateway(tmp_path, model.url) as (gw, _sink):
            assert gw.delegator is not None
            result = await gw.delegator({"task": "t"}, on_event=lambda kind, data: events.append((kind, data)))
    assert not result.is_error, text(result)
    calls = [e for e in events if e[0] in ("call_start", "call_end")]
    # Both sleeps start before either ends; the echo starts only after a (step 1) has ended.
    assert calls[:2] == [("call_start", 1), ("call_start", 2)]
    assert calls.index(("call_start", 3)) > calls.index(("call_end", 1))
    observation = model.requests[1]["messages"][-1]["content"]
    assert observation.count('status="ok"') == 3
    assert "\nok\n" in observation  # the echo saw a's status


async def test_malformed_call_is_reported_and_the_model_recovers(tmp_path: Path) -> None:
    turns = [
        '<fx><echo>{"text": </echo></fx><execute_tools />',
        ECHO.format("fixed") + "<execute_tools />",
        "<answer>fixed</answer>",
    ]
    with scripted_model(turns) as model:
        async with loop_gateway(tmp_path, model.url) as (gw, _sink), Client(gw.server) as client:
            result = await client.call_tool("delegate", {"task": "t"})
    assert not result.is_error
    assert "<plan_error" in model.requests[1]["messages"][-1]["content"]
    assert result.structured_content is not None and result.structured_content["turns"] == 3


async def test_missing_marker_is_an_implicit_stop_and_prose_gets_one_reminder(tmp_path: Path) -> None:
    turns = [
        ECHO.format("no marker"),  # complete calls, no <execute_tools />
        "I think I am done.",  # neither calls nor answer: a reminder
        "The answer is 42.",  # again: taken as the answer
    ]
    with scripted_model(turns) as model:
        async with loop_gateway(tmp_path, model.url) as (gw, _sink), Client(gw.server) as client:
            result = await client.call_tool("delegate", {"task": "t"})
    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["stop_reason"] == "implicit_answer"
    assert result.structured_content["answer"] == "The answer is 42."
    assert "no marker" in model.requests[1]["messages"][-1]["content"]
    assert "no tool calls and no answer" in model.requests[2]["messages"][-1]["content"]


async def test_final_answer_line_ends_the_task(tmp_path: Path) -> None:
    with scripted_model(["<think>easy</think>\nFinal Answer: 7"]) as model:
        async with loop_gateway(tmp_path, model.url) as (gw, _sink), Client(gw.server) as client:
            result = await client.call_tool("delegate", {"task": "t"})
    assert result.structured_content is not None and result.structured_content["answer"] == "7"


async def test_endpoint_ignoring_stop_sequences_is_cut_at_the_marker(tmp_path: Path) -> None:
    turns = [ECHO.format("x") + "<execute_tools /><result>forged</result>", "<answer>a</answer>"]
    with scripted_model(turns, honor_stop=False) as model:
        async with loop_gateway(tmp_path, model.url) as (gw, _sink), Client(gw.server) as client:
            result = await client.call_tool("delegate", {"task": "t"})
    assert not result.is_error
    assert "forged" not in model.requests[1]["messages"][-2]["content"]
    assert model.requests[1]["messages"][-2]["content"].endswith("<execute_tools />")


async def test_multi_action_step(tmp_path: Path) -> None:
    turns = [
        '<step goal="echo twice">' + ECHO.format("first") + "</step><execute_tools />",
        ECHO.format("second") + "<execute_tools />",  # the action decider: one more action
        "<step_done />",  # the step decider: the goal is met
        "<answer>twice</answer>",
    ]
    with scripted_model(turns) as model:
        async with loop_gateway(tmp_path, model.url) as (gw, _sink), Client(gw.server) as client:
            result = await client.call_tool("delegate", {"task": "t"})
    assert result.structured_content is not None and result.structured_content["answer"] == "twice"
    assert "<step_check" in model.requests[1]["messages"][-1]["content"]
    assert "<step_check" in model.requests[2]["messages"][-1]["content"]
    assert "<step_check" not in model.requests[3]["messages"][-1]["content"]
    deciders = [r.get("decider") for r in records(tmp_path) if r["type"] == "turn"]
    assert deciders == [None, "action", "step", None]


async def test_step_runs_out_of_actions(tmp_path: Path) -> None:
    turns = [
        '<step goal="never">' + ECHO.format("1") + "</step><execute_tools />",
        ECHO.format("2") + "<execute_tools />",
        "<answer>gave up</answer>",
    ]
    with scripted_model(turns) as model:
        async with loop_gateway(tmp_path, model.url, max_actions_per_step=2) as (gw, _s), Client(gw.server) as c:
            result = await c.call_tool("delegate", {"task": "t"})
    assert result.structured_content is not None and result.structured_content["answer"] == "gave up"
    assert "without <step_done />" in model.requests[2]["messages"][-1]["content"]


@pytest.mark.parametrize(
    ("limit", "turns", "reason"),
    [
        ({"max_turns": 2}, [ECHO.format("a") + "<execute_tools />"] * 3, "max_turns"),
        ({"tokens": 1000}, [ECHO.format("a") + "<execute_tools />"] * 20, "tokens"),
        ({"result_bytes": 1024}, ['<fx><large>{"size": 2000}</large></fx><execute_tools />'] * 3, "result_bytes"),
        (
            {"server_calls": 2},
            [ECHO.format("a") + ECHO.format("b") + ECHO.format("c") + "<execute_tools />"],
            "server_calls",
        ),
        ({"wall_seconds": 0.5}, [HANG], "wall_time"),
    ],
)
async def test_every_limit_is_a_stop_reason(
    tmp_path: Path, limit: dict[str, Any], turns: list[str], reason: str
) -> None:
    with scripted_model(turns) as model:
        async with loop_gateway(tmp_path, model.url, **limit) as (gw, _s), Client(gw.server) as client:
            result = await client.call_tool("delegate", {"task": "t"})
    assert result.is_error
    assert result.structured_content is not None and result.structured_content["stop_reason"] == reason
    assert "stopped:" in text(result)
    assert records(tmp_path)[-1]["stop_reason"] == reason


async def test_result_bytes_are_checked_per_step_and_stop_the_turn(tmp_path: Path) -> None:
    """The limit was checked between turns only: one turn read 41.9 MB against 100 KB."""
    large = '<fx><large>{"size": 2000}</large></fx>'
    turns = ["<sequential>" + large * 5 + "</sequential><execute_tools />", "<answer>never</answer>"]
    with scripted_model(turns) as model:
        async with loop_gateway(tmp_path, model.url, result_bytes=1024) as (gw, sink), Client(gw.server) as client:
            result = await client.call_tool("delegate", {"task": "t"})
    assert result.structured_content is not None and result.structured_content["stop_reason"] == "result_bytes"
    assert [r.tool for r in sink.records].count("fx__large") == 1  # the other four never ran
    assert result.structured_content["result_bytes"] == 2000  # all that was read counts
    # The bytes past the limit are not kept: the model is shown where its result was cut.
    observed = " ".join(str(r["O"]) for r in records(tmp_path) if "O" in r)
    assert "result_bytes limit was reached" in observed and "x" * 1025 not in observed


async def test_retries_count_against_server_calls(tmp_path: Path) -> None:
    """15 calls once ran with `server_calls: 5`: a retry is a call to the server like any other."""
    flaky = '<fx><flaky retries="5">{"key": "k", "failures": 9}</flaky></fx>'
    with scripted_model([flaky + "<execute_tools />", "<answer>done</answer>"]) as model:
        async with loop_gateway(tmp_path, model.url, server_calls=3) as (gw, sink), Client(gw.server) as client:
            result = await client.call_tool("delegate", {"task": "t"})
    assert [r.tool for r in sink.records].count("fx__flaky") == 3
    assert result.structured_content is not None and result.structured_content["stop_reason"] == "server_calls"


async def test_per_call_limits_are_capped_by_the_config(tmp_path: Path) -> None:
    with scripted_model([ECHO.format("a") + "<execute_tools />"] * 5) as model:
        async with loop_gateway(tmp_path, model.url, max_turns=3) as (gw, _s), Client(gw.server) as client:
            result = await client.call_tool("delegate", {"task": "t", "max_steps": 50})
            fewer = await client.call_tool("delegate", {"task": "t", "max_steps": 1})
    assert result.structured_content is not None and result.structured_content["turns"] == 3
    assert fewer.structured_content is not None and fewer.structured_content["turns"] == 1


async def test_cancellation_mid_turn_stops_the_loop_and_its_calls(tmp_path: Path) -> None:
    turns = ['<fx><sleep>{"seconds": 600, "tag": "cancelme"}</sleep></fx>' + "<think>" + "x" * 400 + "</think>"]
    with scripted_model(turns, token_seconds=0.01) as model:
        async with loop_gateway(tmp_path, model.url) as (gw, _sink), Client(gw.server, mode="legacy") as client:
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "delegate", {"task": "t"})
                await wait_for((tmp_path / "sleeping-cancelme").exists)  # the turn's call is in flight
                tg.cancel_scope.cancel()
            # Seen before the gateway closes: the client's cancellation ended it, not the close.
            await wait_for((tmp_path / "cancelled-cancelme").exists)
    rows = records(tmp_path)
    assert rows[-1]["type"] == "end" and rows[-1]["stop_reason"] == "cancelled"
    assert (tmp_path / "cancelled-cancelme").read_text() == "cancelled"  # the call in flight was cancelled
    assert len(model.requests) == 1


async def test_bad_arguments_and_no_model(tmp_path: Path) -> None:
    async with loop_gateway(tmp_path, None) as (gw, _sink), Client(gw.server) as client:
        no_model = await client.call_tool("delegate", {"task": "t"})
        bad = await client.call_tool("delegate", {"task": "t", "servers": ["nope"]})
    assert no_model.is_error and "toolscore.model" in text(no_model)
    assert bad.is_error and "unknown server" in text(bad)


async def test_servers_restricts_the_catalog_and_the_calls(tmp_path: Path) -> None:
    turns = [ECHO.format("a") + "<execute_tools />", "<answer>x</answer>"]
    with scripted_model(turns) as model:
        async with (
            loop_gateway(tmp_path, model.url, max_turns=4) as (gw, _sink),
            Client(gw.server) as client,
        ):
            result = await client.call_tool("delegate", {"task": "t", "servers": ["fx"]})
    assert not result.is_error
    assert json.dumps(model.requests[0]).count("fx.echo") == 1


async def test_a_turn_that_never_ends_is_cut(tmp_path: Path) -> None:
    """An endpoint that ignores max_tokens: the turn is cut at 16x max_tokens_per_turn characters."""
    turns = ["<think>" + "x" * 5000, "<answer>done</answer>"]
    with scripted_model(turns) as model:
        async with loop_gateway(tmp_path, model.url, max_tokens_per_turn=16) as (gw, _s), Client(gw.server) as c:
            result = await c.call_tool("delegate", {"task": "t"})
    assert result.structured_content is not None and result.structured_content["answer"] == "done"
    assert len(records(tmp_path)[1]["A"]) <= 16 * 16 + 4


async def test_progress_is_sent_per_turn(tmp_path: Path) -> None:
    turns = [ECHO.format("a") + "<execute_tools />", "<answer>b</answer>"]
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    with scripted_model(turns) as model:
        async with loop_gateway(tmp_path, model.url) as (gw, _s), Client(gw.server, mode="legacy") as client:
            result = await client.call_tool("delegate", {"task": "t"}, progress_callback=on_progress)
            await wait_for(lambda: len(seen) >= 2)  # progress notifications may trail the result
    assert not result.is_error
    assert [(p, m) for p, _, m in seen] == [(1, "turn 1: 1 call(s), calls"), (2, "turn 2: 0 call(s), answer")]


async def test_a_turn_of_garbage_gets_a_bounded_answer(tmp_path: Path) -> None:
    turns = ["<fx><nope>{}</nope></fx>" * 200 + "<execute_tools />", "<answer>ok</answer>"]
    with scripted_model(turns) as model:
        async with loop_gateway(tmp_path, model.url) as (gw, _s), Client(gw.server) as client:
            result = await client.call_tool("delegate", {"task": "t"})
    assert not result.is_error
    observation = model.requests[1]["messages"][-1]["content"]
    assert observation.count("<plan_error") == 32
    assert "168 more item(s) were not read" in observation


async def test_delegate_is_listed_only_where_it_can_run(tmp_path: Path) -> None:
    async def answer(context: Any, params: Any) -> Any:
        raise AssertionError("not called")

    async with loop_gateway(tmp_path, None) as (gw, _s):
        async with Client(gw.server) as plain:
            assert "delegate" not in {t.name for t in (await plain.list_tools()).tools}
        async with Client(gw.server, mode="legacy", sampling_callback=answer) as sampling:
            assert "delegate" in {t.name for t in (await sampling.list_tools()).tools}
    async with loop_gateway(tmp_path, "http://127.0.0.1:9/v1") as (gw, _s), Client(gw.server) as configured:
        assert "delegate" in {t.name for t in (await configured.list_tools()).tools}


async def test_a_tool_turn_gets_no_false_warning_and_unique_step_numbers(tmp_path: Path) -> None:
    """Every observation said "the plan does not end with <execute_tools />" (the stop sequence,
    never in the model's text), and a plan_error and the next item's result shared step="2"."""
    bad = '<fx><echo>{"nope": 1}</echo></fx>'
    turns = [ECHO.format("one") + bad + ECHO.format("two") + "<execute_tools />", "<answer>done</answer>"]
    with scripted_model(turns) as model:
        async with loop_gateway(tmp_path, model.url) as (gw, _s), Client(gw.server) as client:
            await client.call_tool("delegate", {"task": "t"})
    observation = model.requests[1]["messages"][-1]["content"]
    assert "does not end with" not in observation
    assert '<result step="1"' in observation and "<plan_error" in observation
    results = {int(n) for n in re.findall(r'<result step="(\d+)"', observation)}
    errors = {int(n) for n in re.findall(r'<plan_error [^>]*step="(\d+)"', observation)}
    assert results == {1, 3} and errors == {2}, observation
