"""Tasks through the gateway: task-augmented calls relayed, `tasks/*` routed back, and tools that
require a task answering plain calls.

A real client against the real front; the downstreams are the task fixture as stdio subprocesses.
Two copies of it hand out the same task ids, so the second one's are renamed. The gateway's own
plans run as tasks too, their steps on those servers and on the plain fixture (`fx`).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client, MCPError, StdioServerParameters

from tests.conftest import (
    FIXTURES,
    TOOLSCORE,
    fixture_entry,
    make_config,
    memory_gateway,
    running_gateway,
    text,
    write_config,
)
from tests.stack.test_third_party import EVERYTHING
from toolscore import Gateway, MemoryAuditSink
from toolscore._sdk import send_raw_request

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

TASKS = str(FIXTURES / "task_server.py")


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def _task_gateway(state: Path) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    config = make_config(
        {
            "a": {"command": sys.executable, "args": [TASKS]},
            "b": {"command": sys.executable, "args": [TASKS]},
            "fx": fixture_entry(state, env={"FIXTURE_EXTRA_TOOLS": "hold"}),
        }
    )
    async with running_gateway(config, state) as running:
        yield running


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module gateway's fixture state: where `hold` writes `held-<text>` and reads `release-<text>`."""
    return tmp_path_factory.mktemp("tasks")


@pytest.fixture(scope="module")
async def pair(state: Path) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    async with _task_gateway(state) as running:
        yield running


@pytest.fixture
async def fresh_pair(tmp_path: Path) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    """A gateway of the test's own: the servers number their tasks from 1 whatever ran before."""
    async with _task_gateway(tmp_path) as running:
        yield running


async def create(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return await send_raw_request(client, "tools/call", {"name": tool, "arguments": arguments, "task": {"ttl": 60000}})


async def test_a_task_augmented_call_is_relayed_and_its_task_routed_back_to_its_server(
    fresh_pair: tuple[Gateway, MemoryAuditSink],
) -> None:
    gateway, sink = fresh_pair
    async with Client(gateway.server, mode="legacy") as client:
        tasks = client.server_capabilities.tasks
        assert tasks is not None and tasks.requests is not None and tasks.requests.tools is not None
        listed = {t.name: t for t in (await client.list_tools()).tools}
        research = listed["a__research"].execution
        assert research is not None and research.task_support == "required"  # the client knows

        first = await create(client, "a__research", {"topic": "owls"})
        second = await create(client, "b__research", {"topic": "bats", "seconds": 0.2})
        assert first["task"]["taskId"] == "task-1" and first["task"]["status"] == "working"
        assert second["task"]["taskId"] == "b:task-1"  # b's own id clashes with a's
        assert sink.records[-1].tool == "b__research" and sink.records[-1].success

        status = await send_raw_request(client, "tasks/get", {"taskId": "b:task-1"})
        assert status["taskId"] == "b:task-1" and status["status"] in ("working", "completed")

        done = await send_raw_request(client, "tasks/result", {"taskId": "b:task-1"})
        assert done["content"][0]["text"] == "report on bats [task-1]"
        assert done["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": "b:task-1"}
        assert sink.records[-1].tool == "tasks/result" and sink.records[-1].server == "b"
        first_done = await send_raw_request(client, "tasks/result", {"taskId": "task-1"})
        assert first_done["content"][0]["text"] == "report on owls [task-1]"

        merged = await send_raw_request(client, "tasks/list", None)
        assert sorted(t["taskId"] for t in merged["tasks"]) == ["b:task-1", "task-1"]

        with pytest.raises(MCPError) as unknown:
            await send_raw_request(client, "tasks/get", {"taskId": "task-99"})
        assert unknown.value.code == mcp_types.INVALID_PARAMS

        # A tool without task support answers at once, as it would without the gateway.
        plain = await send_raw_request(client, "tools/call", {"name": "a__plain", "arguments": {}, "task": {}})
        assert plain["content"][0]["text"] == "at once: plain"


async def test_one_client_can_neither_see_nor_reach_anothers_tasks(pair: tuple[Gateway, MemoryAuditSink]) -> None:
    gateway, _ = pair
    async with Client(gateway.server, mode="legacy") as owner, Client(gateway.server, mode="legacy") as other:
        created = await create(owner, "a__quick", {"text": "mine", "seconds": 5})
        task_id = created["task"]["taskId"]
        assert (await send_raw_request(other, "tasks/list", None))["tasks"] == []
        with pytest.raises(MCPError, match="Unknown task"):
            await send_raw_request(other, "tasks/cancel", {"taskId": task_id})
        cancelled = await send_raw_request(owner, "tasks/cancel", {"taskId": task_id})
        assert cancelled["status"] == "cancelled"
        with pytest.raises(MCPError, match="was cancelled"):  # the server's own error, passed on
            await send_raw_request(owner, "tasks/result", {"taskId": task_id})


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_tool_that_requires_a_task_answers_a_plain_call(
    pair: tuple[Gateway, MemoryAuditSink], mode: str
) -> None:
    gateway, sink = pair
    async with Client(gateway.server, mode=mode) as client:
        result = await client.call_tool("a__research", {"topic": "moths"})
    assert not result.is_error and text(result).startswith("report on moths [task-")
    assert sink.records[-1].tool == "a__research" and sink.records[-1].success


async def test_an_elicitation_tied_to_a_task_reaches_the_client_that_runs_it(
    pair: tuple[Gateway, MemoryAuditSink],
) -> None:
    gateway, _ = pair
    asked: list[str] = []

    async def elicit(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"which": "nocturnal"})

    async with Client(gateway.server, mode="legacy", elicitation_callback=elicit) as client:
        created = await create(client, "b__research", {"topic": "moths", "ask": True})
        done = await send_raw_request(client, "tasks/result", {"taskId": created["task"]["taskId"]})
        assert done["content"][0]["text"].startswith("report on moths (accept: nocturnal)")
        plain = await client.call_tool("a__research", {"topic": "moths", "ask": True})  # the gateway runs it
        assert text(plain).startswith("report on moths (accept: nocturnal)")
    assert asked == ["Which moths?", "Which moths?"]


def _without_ids(answer: dict[str, Any]) -> str:
    """A plan's answer less what differs from run to run: its episode and plan ids, and timings."""
    structured = answer["structuredContent"]
    dumped = json.dumps({k: v for k, v in answer.items() if k != "_meta"}, sort_keys=True)
    dumped = dumped.replace(structured["episode"], "E").replace(structured["plan_id"], "P")
    return re.sub(r'ms=\\"[0-9.]+\\"|"ms": [0-9.]+', "ms", dumped)


async def test_a_plan_asked_for_as_a_task_answers_at_once_and_later_what_a_plain_call_answers(
    pair: tuple[Gateway, MemoryAuditSink], state: Path
) -> None:
    gateway, sink = pair
    # `hold` keeps the task working until the test releases it, so the task's answer came before
    # the plan ended however slow the machine, and the first tasks/get sees it working; `quick`
    # runs as a plain call in a plan.
    plan = '<a><quick id="q">{"text": "in a plan"}</quick></a><fx><hold>{"text": "plan-task"}</hold></fx>'
    async with Client(gateway.server, mode="legacy") as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        execution = listed["orchestrate"].execution
        assert execution is not None and execution.task_support == "optional"

        with anyio.fail_after(60):  # a hang detector: the plan cannot end before it is released
            created = await send_raw_request(
                client, "tools/call", {"name": "orchestrate", "arguments": {"plan": plan}, "task": {"ttl": 60000}}
            )
        task = created["task"]
        task_id = task["taskId"]
        assert task["status"] == "working" and task["ttl"] == 60000 and task["pollInterval"] > 0
        assert len(task_id) >= 16 and task["createdAt"] and "content" not in created
        assert (await send_raw_request(client, "tasks/get", {"taskId": task_id}))["status"] == "working"

        (state / "release-plan-task").write_text("go")  # the plain call below finds it released too
        done = await send_raw_request(client, "tasks/result", {"taskId": task_id})
        assert done["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
        assert "at once: in a plan" in done["content"][0]["text"]
        status = await send_raw_request(client, "tasks/get", {"taskId": task_id})
        assert status["status"] == "completed" and status["taskId"] == task_id
        assert task_id in [t["taskId"] for t in (await send_raw_request(client, "tasks/list", None))["tasks"]]
        assert sink.records[-1].tool == "orchestrate" and sink.records[-1].success

        plain = await send_raw_request(client, "tools/call", {"name": "orchestrate", "arguments": {"plan": plan}})
    assert _without_ids(done) == _without_ids(plain)


async def test_a_plan_task_is_its_clients_alone_and_cancelling_it_cancels_its_steps(
    pair: tuple[Gateway, MemoryAuditSink],
) -> None:
    gateway, sink = pair
    plan = (
        '<parallel><fx><sleep>{"seconds": 30, "tag": "plan-task"}</sleep></fx>'
        '<fx><echo>{"text": "started"}</echo></fx></parallel>'
    )
    async with Client(gateway.server, mode="legacy") as owner, Client(gateway.server, mode="legacy") as other:
        before = len(sink.records)
        created = await send_raw_request(
            owner, "tools/call", {"name": "orchestrate", "arguments": {"plan": plan}, "task": {}}
        )
        task_id = created["task"]["taskId"]
        assert created["task"]["ttl"] > 0  # the gateway's own, when the client names none
        with anyio.fail_after(10):  # the echo beside it has answered: the sleep is in flight
            while not any(r.tool == "fx__echo" for r in sink.records[before:]):  # noqa: ASYNC110 - the audit sink has no event
                await anyio.sleep(0.01)

        assert (await send_raw_request(other, "tasks/list", None))["tasks"] == []
        for method in ("tasks/get", "tasks/cancel", "tasks/result"):
            with pytest.raises(MCPError, match="Unknown task") as unknown:
                await send_raw_request(other, method, {"taskId": task_id})
            assert unknown.value.code == mcp_types.INVALID_PARAMS
        mine = (await send_raw_request(owner, "tasks/list", None))["tasks"]
        assert [(t["taskId"], t["status"]) for t in mine] == [(task_id, "working")]

        cancelled = await send_raw_request(owner, "tasks/cancel", {"taskId": task_id})
        assert cancelled["status"] == "cancelled" and cancelled["taskId"] == task_id
        slept = [r for r in sink.records[before:] if r.tool == "fx__sleep"]
        assert (
            len(slept) == 1 and slept[0].error_kind == "cancelled"
        )  # the step in flight was cancelled, and audited so
        with pytest.raises(MCPError, match="was cancelled"):
            await send_raw_request(owner, "tasks/result", {"taskId": task_id})
        with pytest.raises(MCPError, match="already ended"):
            await send_raw_request(owner, "tasks/cancel", {"taskId": task_id})
        assert (await send_raw_request(owner, "tasks/get", {"taskId": task_id}))["status"] == "cancelled"


async def test_tasks_work_through_toolscore_serve_over_stdio(tmp_path: Path) -> None:
    """The stdio front's own fast path for calls hands task-augmented ones to the SDK, and runs a
    plain call of a tool that requires a task as one."""
    config = write_config(tmp_path, {"a": {"command": sys.executable, "args": [TASKS]}})
    serve = StdioServerParameters(command=TOOLSCORE, args=["serve", "--config", str(config)])
    async with Client(serve, mode="legacy") as client:
        created = await create(client, "a__research", {"topic": "eels"})
        done = await send_raw_request(client, "tasks/result", {"taskId": created["task"]["taskId"]})
        assert done["content"][0]["text"] == "report on eels [task-1]"
        plain = await client.call_tool("a__research", {"topic": "rays"})
        assert text(plain) == "report on rays [task-2]"


async def test_tasks_are_declared_for_plans_alone_unless_policy_forbids_orchestrate(tmp_path: Path) -> None:
    async with memory_gateway(tmp_path) as (gateway, _), Client(gateway.server, mode="legacy") as client:
        tasks = client.server_capabilities.tasks
        assert tasks is not None and tasks.requests is not None and tasks.requests.tools is not None
    denied = {"enabled": True, "tools": {"deny": ["orchestrate"]}}
    async with (
        memory_gateway(tmp_path, constraints=denied) as (gateway, _),
        Client(gateway.server, mode="legacy") as client,
    ):
        assert client.server_capabilities.tasks is None
        plan = '<fx><echo>{"text": "no"}</echo></fx>'
        answer = await send_raw_request(
            client, "tools/call", {"name": "orchestrate", "arguments": {"plan": plan}, "task": {}}
        )
        assert "task" not in answer and answer["isError"] is True  # refused at once, as a plain call is


@pytest.mark.skipif(not EVERYTHING.exists(), reason="run ./scripts/setup to install the npm servers")
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_server_everythings_research_query_works_through_the_gateway(tmp_path: Path, mode: str) -> None:
    config = make_config({"ev": {"command": str(EVERYTHING), "args": ["stdio"]}})
    asked: list[str] = []

    async def elicit(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"interpretation": "historical"})

    legacy = mode == "legacy"  # a handshake-era client can run the task itself, and be asked
    async with (
        running_gateway(config, tmp_path) as (gateway, _),
        Client(gateway.server, mode=mode, elicitation_callback=elicit if legacy else None) as client,
    ):
        if legacy:
            created = await create(client, "ev__simulate-research-query", {"topic": "tides", "ambiguous": True})
            task_id = created["task"]["taskId"]
            assert (await send_raw_request(client, "tasks/get", {"taskId": task_id}))["status"] == "working"
            done = await send_raw_request(client, "tasks/result", {"taskId": task_id})
            assert "# Research Report: tides (historical)" in done["content"][0]["text"]
            assert len(asked) == 1 and "could have multiple interpretations" in asked[0]
        result = await client.call_tool("ev__simulate-research-query", {"topic": "tides"})
    assert not result.is_error and "# Research Report: tides" in text(result)
