"""The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) for 2026-07-28 clients: the
gateway's own `orchestrate` run as a task, `tasks/get`, `tasks/update`, `tasks/cancel`, and the
gating of it all on the extension declared in the request.

A real 2026-07-28 client against the real front, over fixture servers in this process; requests
are sent with the capabilities each test names, as a client declaring (or not) the extension would.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client, MCPError, StdioServerParameters

from tests.conftest import TOOLSCORE, fixture_entry, memory_gateway, write_config
from tests.fixtures.scripted_model import scripted_model
from tests.loop.conftest import loop_gateway
from toolscore._sdk import send_as_client, send_raw_request
from toolscore.front.confirm import CONFIRM_KEY
from toolscore.front.task_extension import TASKS_EXTENSION

pytestmark = pytest.mark.anyio

WITH: dict[str, Any] = {"elicitation": {}, "extensions": {TASKS_EXTENSION: {}}}
WITHOUT: dict[str, Any] = {"elicitation": {}}
HELD = '<fx><echo id="e">{"text": "in a plan"}</echo><hold>{"text": "ext-task"}</hold></fx>'
ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")


async def ask(client: Client, method: str, params: dict[str, Any], capabilities: dict[str, Any]) -> dict[str, Any]:
    return await send_as_client(client, method, params, capabilities=capabilities, log_level=None)


async def plan(client: Client, text: str, capabilities: dict[str, Any] = WITH, **extra: Any) -> dict[str, Any]:
    params = {"name": "orchestrate", "arguments": {"plan": text}, **extra}
    with anyio.fail_after(60):  # a hang detector: a task answers before its plan ends
        return await ask(client, "tools/call", params, capabilities)


async def settled(client: Client, task_id: str, *statuses: str) -> dict[str, Any]:
    """`tasks/get` until the task reaches one of `statuses` (the plan runs in the background)."""
    with anyio.fail_after(60):
        while (got := await ask(client, "tasks/get", {"taskId": task_id}, WITH))["status"] not in statuses:  # noqa: ASYNC110 - polled, as the extension has clients do
            await anyio.sleep(0.02)
    return got


def steps_of(answer: dict[str, Any]) -> str:
    """A plan's answer less what differs from run to run: ids, timings, the server's stamp."""
    structured = answer["structuredContent"]
    dumped = json.dumps({k: v for k, v in answer.items() if k != "_meta"}, sort_keys=True)
    dumped = dumped.replace(structured["episode"], "E").replace(structured["plan_id"], "P")
    return re.sub(r'ms=\\"[0-9.]+\\"|"ms": [0-9.]+', "ms", dumped)


async def test_the_extension_is_declared_to_2026_clients_only(tmp_path: Path) -> None:
    async with memory_gateway(tmp_path) as (gateway, _):
        async with Client(gateway.server) as modern:
            caps = modern.server_capabilities
            assert TASKS_EXTENSION in (caps.extensions or {}) and caps.tasks is None
        async with Client(gateway.server, mode="legacy") as legacy:
            caps = legacy.server_capabilities
            assert TASKS_EXTENSION not in (caps.extensions or {}) and caps.tasks is not None
    denied = {"enabled": True, "tools": {"deny": ["orchestrate"]}}
    async with memory_gateway(tmp_path, constraints=denied) as (gateway, _), Client(gateway.server) as modern:
        assert TASKS_EXTENSION not in (modern.server_capabilities.extensions or {})
        refused = await plan(modern, '<fx><echo>{"text": "no"}</echo></fx>')
        assert refused["resultType"] == "complete" and refused["isError"] is True  # refused at once, whole


async def test_a_plan_is_a_task_whose_result_tasks_get_inlines(tmp_path: Path) -> None:
    async with memory_gateway(tmp_path, {"fx": {"extra_tools": ["hold"]}}) as (gateway, sink):
        async with Client(gateway.server) as client:
            created = await plan(client, HELD)
            assert created["resultType"] == "task" and created["status"] == "working"
            task_id = created["taskId"]
            assert len(task_id) >= 16 and ISO.match(created["createdAt"]) and ISO.match(created["lastUpdatedAt"])
            assert created["ttlMs"] > 0 and isinstance(created["ttlMs"], int)
            assert isinstance(created["pollIntervalMs"], int) and created["pollIntervalMs"] > 0
            for absent in ("task", "result", "error", "inputRequests", "requestState", "ttl", "pollInterval"):
                assert absent not in created, absent

            working = await ask(client, "tasks/get", {"taskId": task_id}, WITH)
            assert working["resultType"] == "complete" and working["taskId"] == task_id
            assert working["status"] == "working" and "result" not in working and "error" not in working

            (tmp_path / "release-ext-task").write_text("go")  # the plain call below finds it released too
            done = await settled(client, task_id, "completed", "failed", "cancelled")
            assert done["status"] == "completed" and "error" not in done and "requestState" not in done
            result = done["result"]
            assert "io.modelcontextprotocol/related-task" not in (result.get("_meta") or {})
            assert "in a plan" in result["content"][0]["text"] and result["isError"] is False
            assert sink.records[-1].tool == "orchestrate" and sink.records[-1].success

            plain = await plan(client, HELD, WITHOUT)  # no extension: answered whole
            assert plain["resultType"] == "complete" and "taskId" not in plain
        assert steps_of(result) == steps_of(plain)


async def test_without_the_extension_tasks_methods_are_refused_and_removed_ones_are_not_found(
    tmp_path: Path,
) -> None:
    async with memory_gateway(tmp_path) as (gateway, _), Client(gateway.server) as client:
        task_id = (await plan(client, '<fx><echo>{"text": "x"}</echo></fx>'))["taskId"]
        for method, params in (
            ("tasks/get", {"taskId": task_id}),
            ("tasks/update", {"taskId": task_id, "inputResponses": {}}),
            ("tasks/cancel", {"taskId": task_id}),
        ):
            with pytest.raises(MCPError) as refused:
                await ask(client, method, params, WITHOUT)
            assert refused.value.code == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY, method
            assert refused.value.error.data == {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
        for method, params in (("tasks/result", {"taskId": task_id}), ("tasks/list", {})):
            with pytest.raises(MCPError) as removed:
                await ask(client, method, params, WITH)
            assert removed.value.code == mcp_types.METHOD_NOT_FOUND, method
        for method in ("tasks/get", "tasks/cancel", "tasks/update"):
            with pytest.raises(MCPError) as unknown:
                await ask(client, method, {"taskId": "no-such-task", "inputResponses": {}}, WITH)
            assert unknown.value.code == mcp_types.INVALID_PARAMS, method
        await settled(client, task_id, "completed")
    async with memory_gateway(tmp_path) as (gateway, _), Client(gateway.server, mode="legacy") as legacy:
        with pytest.raises(MCPError) as handshake:
            await send_raw_request(legacy, "tasks/update", {"taskId": "x", "inputResponses": {}})
        assert handshake.value.code == mcp_types.METHOD_NOT_FOUND  # not a 2025-11-25 method


async def test_cancelling_a_plan_task_cancels_its_steps_and_only_its_caller_can(tmp_path: Path) -> None:
    slow = (
        '<parallel><fx><sleep>{"seconds": 30, "tag": "ext-task"}</sleep></fx>'
        '<fx><echo>{"text": "started"}</echo></fx></parallel>'
    )
    async with (
        memory_gateway(tmp_path) as (gateway, sink),
        Client(gateway.server) as owner,
        Client(gateway.server, mode="legacy") as other,  # another caller (in memory, 2026-07-28 clients are one)
    ):
        task_id = (await plan(owner, slow))["taskId"]
        with anyio.fail_after(60):  # the sleep is in flight
            while not (tmp_path / "sleeping-ext-task").exists():  # noqa: ASYNC110 - written by the fixture server
                await anyio.sleep(0.01)
        for method in ("tasks/get", "tasks/cancel"):
            with pytest.raises(MCPError, match="Unknown task") as unknown:
                await send_raw_request(other, method, {"taskId": task_id})
            assert unknown.value.code == mcp_types.INVALID_PARAMS

        ack = await ask(owner, "tasks/cancel", {"taskId": task_id}, WITH)
        assert ack["resultType"] == "complete"
        assert not {"taskId", "status", "result", "error", "inputRequests"} & set(ack)
        got = await ask(owner, "tasks/get", {"taskId": task_id}, WITH)
        assert got["status"] == "cancelled" and "result" not in got
        slept = [r for r in sink.records if r.tool == "fx__sleep"]
        assert len(slept) == 1 and slept[0].error_kind == "cancelled"
        again = await ask(owner, "tasks/cancel", {"taskId": task_id}, WITH)  # an ended task: the same ack
        assert again["resultType"] == "complete"
        assert (await ask(owner, "tasks/get", {"taskId": task_id}, WITH))["status"] == "cancelled"


async def test_a_plan_that_answers_an_error_completes_with_it(tmp_path: Path) -> None:
    broken = "<fx><echo>{not json}</echo></fx>"
    async with memory_gateway(tmp_path) as (gateway, _), Client(gateway.server) as client:
        plain = await plan(client, broken, WITHOUT)
        assert plain["isError"] is True
        done = await settled(client, (await plan(client, broken))["taskId"], "completed", "failed", "cancelled")
        assert done["status"] == "completed" and done["result"]["isError"] is True and "error" not in done


async def test_a_legacy_task_param_neither_makes_nor_keeps_a_task(tmp_path: Path) -> None:
    async with memory_gateway(tmp_path) as (gateway, _), Client(gateway.server) as client:
        hint = {"task": {"ttl": 60000, "pollInterval": 100}}
        echoed = await ask(client, "tools/call", {"name": "fx__echo", "arguments": {"text": "hi"}, **hint}, WITH)
        assert echoed["resultType"] == "complete" and "taskId" not in echoed and echoed["content"]
        created = await plan(client, '<fx><echo>{"text": "x"}</echo></fx>', **hint)
        assert created["resultType"] == "task" and created["ttlMs"] > 0
        await settled(client, created["taskId"], "completed")


async def test_a_plan_that_needs_approval_waits_in_input_required_until_tasks_update(tmp_path: Path) -> None:
    confirm: dict[str, Any] = {"constraints": {"enabled": True, "destructive": "confirm"}}
    plan_text = '<fx><delete>{"key": "a"}</delete><delete>{"key": "b"}</delete></fx><execute_tools />'
    async with memory_gateway(tmp_path, **confirm) as (gateway, _), Client(gateway.server) as client:
        task_id = (await plan(client, plan_text))["taskId"]
        waiting = await settled(client, task_id, "input_required", "completed", "failed")
        assert waiting["status"] == "input_required" and "requestState" not in waiting
        requests = waiting["inputRequests"]
        assert list(requests) == [CONFIRM_KEY] and requests[CONFIRM_KEY]["method"] == "elicitation/create"
        assert "fx__delete" in requests[CONFIRM_KEY]["params"]["message"]
        assert not list(tmp_path.glob("deleted-*"))

        ignored = await ask(client, "tasks/update", {"taskId": task_id, "inputResponses": {"other": {}}}, WITH)
        assert ignored["resultType"] == "complete"
        assert (await ask(client, "tasks/get", {"taskId": task_id}, WITH))["status"] == "input_required"

        yes = {CONFIRM_KEY: {"action": "accept", "content": {"confirm": True}}}
        ack = await ask(client, "tasks/update", {"taskId": task_id, "inputResponses": yes}, WITH)
        assert ack["resultType"] == "complete" and "status" not in ack
        done = await settled(client, task_id, "completed", "failed", "cancelled")
        assert done["status"] == "completed" and done["result"]["isError"] is False, done
        assert sorted(p.name for p in tmp_path.glob("deleted-*")) == ["deleted-a", "deleted-b"]


@pytest.mark.e2e  # the scripted model listens on loopback
async def test_a_delegation_is_a_task_and_its_client_model_answers_by_tasks_update(tmp_path: Path) -> None:
    turns = ['<fx><echo id="e">{"text": "first"}</echo></fx><execute_tools />', "<answer>done: first</answer>"]
    with scripted_model(["<answer>from endpoint</answer>"]) as model:
        async with loop_gateway(tmp_path, model.url) as (gateway, _), Client(gateway.server) as client:
            call = {"name": "delegate", "arguments": {"task": "t"}}
            # Without sampling the configured model runs it.
            created = await ask(client, "tools/call", call, WITH)
            assert created["resultType"] == "task"
            done = await settled(client, created["taskId"], "completed", "failed", "cancelled")
            assert done["status"] == "completed" and done["result"]["structuredContent"]["answer"] == "from endpoint"

            # With sampling each turn is the client's to write: the task waits for it, turn by turn.
            task_id = (await ask(client, "tools/call", call, {**WITH, "sampling": {}}))["taskId"]
            for turn in turns:
                waiting = await settled(client, task_id, "input_required", "completed", "failed")
                assert waiting["status"] == "input_required", waiting
                ((key, request),) = waiting["inputRequests"].items()
                assert request["method"] == "sampling/createMessage"
                answer = {"role": "assistant", "content": {"type": "text", "text": turn}, "model": "client-model"}
                await ask(client, "tasks/update", {"taskId": task_id, "inputResponses": {key: answer}}, WITH)
            done = await settled(client, task_id, "completed", "failed", "cancelled")
            assert done["status"] == "completed", done
            assert done["result"]["structuredContent"]["answer"] == "done: first"
            assert len(model.requests) == 1  # the client's model wrote the second task's turns


@pytest.mark.e2e  # `toolscore serve` over stdio: the stdio front's own fast path hands the call to the SDK
async def test_a_plan_is_a_task_through_toolscore_serve_over_stdio(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    async with Client(StdioServerParameters(command=TOOLSCORE, args=["serve", "--config", str(config)])) as client:
        assert client.protocol_version == "2026-07-28"
        created = await plan(client, '<fx><echo>{"text": "over stdio"}</echo></fx>')
        assert created["resultType"] == "task"
        done = await settled(client, created["taskId"], "completed", "failed", "cancelled")
        assert done["status"] == "completed" and "over stdio" in done["result"]["content"][0]["text"]
