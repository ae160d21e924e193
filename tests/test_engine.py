"""The ToolExecutionEngine on its own: phases, hooks, validation, deadlines, audit.

The downstream here is a small in-process fake of the I/O seam (`CallDownstream`); the engine is
the code under test. End-to-end behaviour over real servers is in test_passthrough.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client

from tests.conftest import make_config, memory_gateway
from toolscore import EngineSettings, ExecutionContext, MemoryAuditSink, ToolExecutionEngine
from toolscore._gateway import CONSOLE_CALLER
from toolscore.downstream.registry import Registry, build_registry
from toolscore.errors import Rejected
from toolscore.scope import CallScope
from toolscore.testing import FakeDownstream, captured_logs, memory_config, running_gateway
from toolscore.types import Arguments, ProgressFn

pytestmark = pytest.mark.anyio

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}}, "required": ["n"]}


class FakeServers:
    """One server 'srv' with tools 'calc' and 'slow'; records what reached it."""

    def __init__(self) -> None:
        tools = [mcp_types.Tool(name="calc", input_schema=SCHEMA), mcp_types.Tool(name="slow", input_schema=SCHEMA)]
        self.registry: Registry = build_registry({"srv": tools}, make_config({"srv": {"command": "x"}}))
        self.down: str | None = None
        self.calls: list[tuple[str, Arguments]] = []
        self.started = anyio.Event()
        self.cancelled = anyio.Event()
        self.timed_out: list[str] = []

    def unavailable_reason(self, server: str) -> str | None:
        return self.down

    def call_timed_out(self, server: str, caller: str | None) -> None:
        self.timed_out.append(server)

    async def __call__(
        self,
        server: str,
        tool: str,
        arguments: Arguments,
        *,
        progress: ProgressFn | None,
        scope: CallScope,
        keep_bytes: bool = False,
    ) -> mcp_types.CallToolResult:
        self.calls.append((tool, arguments))
        if tool == "slow":
            self.started.set()
            try:
                await anyio.sleep(10)
            except anyio.get_cancelled_exc_class():
                self.cancelled.set()
                raise
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(text="x" * 400)])


class Recorder:
    def __init__(self, name: str, log: list[str], *, reject: bool = False, answer: bool = False) -> None:
        self.name = name
        self.log = log
        self.reject = reject
        self.answer = answer

    async def __call__(self, ctx: ExecutionContext, result: Any = None) -> Any:
        self.log.append(f"{self.name}:{ctx.phase.value}")
        if self.reject:
            raise Rejected("n is too large", hook=self.name)
        if self.answer:
            return mcp_types.CallToolResult(content=[mcp_types.TextContent(text="from hook")])
        return result


def engine(servers: FakeServers, **kwargs: Any) -> tuple[ToolExecutionEngine, MemoryAuditSink]:
    sink = MemoryAuditSink()
    settings = EngineSettings(server_timeouts={"srv": 5})
    return ToolExecutionEngine(tools=servers, call=servers, audit=sink, settings=settings, **kwargs), sink


async def test_phases_run_in_order_and_leave_one_audit_record() -> None:
    servers, log = FakeServers(), []
    eng, sink = engine(servers, pre_hooks=[Recorder("pre", log)], post_hooks=[Recorder("post", log)])
    run = await eng.execute("srv__calc", {"n": 1}, request_id=7)
    assert log == ["pre:pre_execution", "post:post_execution"]
    assert run.context.success and run.error is None
    assert servers.calls == [("calc", {"n": 1})]
    (record,) = sink.records
    assert (record.tool, record.server, record.remote_tool, record.phase) == (
        "srv__calc",
        "srv",
        "calc",
        "post_execution",
    )
    assert record.success
    assert record.request_id == "7"
    assert record.argument_names == ("n",)
    assert record.arguments is None  # values are kept only when configured
    assert record.actual_tokens == 2 + 100  # {"n":1} is 7 chars, the result 400


@pytest.mark.parametrize("enabled", [False, True])
async def test_the_gateway_runs_constraint_hooks_only_when_enabled(enabled: bool) -> None:
    log: list[str] = []
    fake = FakeDownstream()

    @fake.tool(schema=SCHEMA)
    def calc(n: int) -> str:
        return str(n)

    config = memory_config(["srv"], constraints={"enabled": enabled})
    hook = Recorder("pre", log, reject=True)
    async with running_gateway({"srv": fake}, config=config, pre_hooks=[hook]) as (gateway, _):
        run = await gateway.engine.execute("srv__calc", {"n": 1})
    assert run.context.success is not enabled
    assert log == (["pre:pre_execution"] if enabled else [])


async def test_a_rejecting_hook_stops_the_call_before_the_downstream() -> None:
    servers = FakeServers()
    eng, sink = engine(servers, pre_hooks=[Recorder("limit", [], reject=True)])
    run = await eng.execute("srv__calc", {"n": 1})
    assert run.result is not None
    assert run.result.is_error
    assert "rejected by policy 'limit': n is too large" in run.result.content[0].text  # type: ignore[union-attr]
    assert servers.calls == []
    assert sink.records[0].violations == ("limit: n is too large",)
    assert sink.records[0].error_kind == "rejected"


async def test_a_hook_may_answer_in_place_of_the_downstream() -> None:
    servers = FakeServers()
    eng, sink = engine(servers, pre_hooks=[Recorder("cache", [], answer=True)])
    run = await eng.execute("srv__calc", {"n": 1})
    assert run.result is not None
    assert run.result.content[0].text == "from hook"
    assert servers.calls == []
    assert sink.records[0].answered_by == "cache"
    assert sink.records[0].success


async def test_invalid_arguments_list_every_problem_and_never_reach_the_downstream() -> None:
    servers = FakeServers()
    eng, sink = engine(servers)
    run = await eng.execute("srv__calc", {"s": 3})
    text = run.result.content[0].text  # type: ignore[union-attr]
    assert run.result is not None
    assert run.result.is_error
    assert "'n' is a required property" in text
    assert "s: 3 is not of type 'string'" in text
    assert servers.calls == []
    assert sink.records[0].phase == "error_handling"
    assert sink.records[0].error_kind == "invalid_arguments"


async def test_unknown_tool_names_the_servers() -> None:
    eng, sink = engine(FakeServers())
    run = await eng.execute("nope", {})
    assert "Unknown tool 'nope'. Servers: srv." in run.result.content[0].text  # type: ignore[union-attr]
    assert sink.records[0].error_kind == "tool_not_found"


async def test_a_down_server_is_reported_without_calling_it() -> None:
    servers = FakeServers()
    servers.down = "down: exited"
    eng, sink = engine(servers)
    run = await eng.execute("srv__calc", {"n": 1})
    assert "Server 'srv' is not available (down: exited)" in run.result.content[0].text  # type: ignore[union-attr]
    assert servers.calls == []
    assert sink.records[0].error_kind == "unavailable"


async def test_a_deadline_cancels_the_downstream_call() -> None:
    servers = FakeServers()
    eng, sink = engine(servers)
    with anyio.fail_after(60):
        run = await eng.execute("srv__slow", {"n": 1}, timeout=0.05)
    assert servers.cancelled.is_set()
    assert "did not answer within 0.05 s" in run.result.content[0].text  # type: ignore[union-attr]
    assert sink.records[0].error_kind == "timeout"
    assert servers.timed_out == ["srv"]  # the hub is told, to check the server is not wedged
    assert sink.records[0].phase == "error_handling"


async def test_a_cancelled_call_is_audited_and_the_cancellation_propagates() -> None:
    servers = FakeServers()
    eng, sink = engine(servers)
    async with anyio.create_task_group() as tg:
        tg.start_soon(eng.execute, "srv__slow", {"n": 1})
        with anyio.fail_after(60):  # a hang detector
            await servers.started.wait()  # cancelled while the server runs it, not before
        tg.cancel_scope.cancel()
    assert servers.cancelled.is_set()
    (record,) = sink.records
    assert record.error_kind == "cancelled"
    assert record.phase == "execution"
    assert not record.success


async def test_token_estimates_learn_from_previous_results() -> None:
    eng, sink = engine(FakeServers())
    await eng.execute("srv__calc", {"n": 1})
    await eng.execute("srv__calc", {"n": 1})
    first, second = sink.records
    assert first.estimated_tokens == 2 + 256  # nothing known yet: the default prediction
    assert second.estimated_tokens == second.actual_tokens == 102


async def test_a_bug_in_a_hook_is_audited_and_raised_to_the_boundary() -> None:
    class Broken:
        name = "broken"

        async def __call__(self, ctx: ExecutionContext) -> None:
            raise KeyError("oops")

    eng, sink = engine(FakeServers(), pre_hooks=[Broken()])
    with pytest.raises(KeyError):
        await eng.execute("srv__calc", {"n": 1})
    assert sink.records[0].error == "internal error: KeyError"


async def test_a_call_stopped_at_pre_validation_is_audited_with_its_server() -> None:
    # `audit stats --server` counts by this field: a refused call of a known tool must carry it.
    servers = FakeServers()
    eng, sink = engine(servers)
    await eng.execute("srv__calc", {"s": 3})
    servers.down = "down: exited"
    await eng.execute("srv__calc", {"n": 1})
    await eng.execute("nope", {})
    invalid, unavailable, unknown = sink.records
    assert (invalid.error_kind, invalid.server, invalid.remote_tool) == ("invalid_arguments", "srv", "calc")
    assert (unavailable.error_kind, unavailable.server, unavailable.remote_tool) == ("unavailable", "srv", "calc")
    assert (unknown.error_kind, unknown.server) == ("tool_not_found", None)


class FullDisk:
    """An audit sink whose writes fail as on a full disk, until `heal()`."""

    def __init__(self) -> None:
        self.failing = True
        self.records: list[str] = []

    def write(self, record: Any) -> None:
        if self.failing:
            raise OSError(28, "No space left on device")
        self.records.append(record.call_id)

    def close(self) -> None:
        pass

    def heal(self) -> None:
        self.failing = False


async def test_a_failing_audit_sink_loses_the_record_not_the_downstream_result() -> None:
    servers = FakeServers()
    sink = FullDisk()
    eng = ToolExecutionEngine(tools=servers, call=servers, audit=sink)
    with captured_logs() as logs:
        first = await eng.execute("srv__calc", {"n": 1})
        second = await eng.execute("srv__calc", {"n": 2})
        sink.heal()
        third = await eng.execute("srv__calc", {"n": 3})
    # The calls ran downstream: their results come back, so the client does not retry them.
    assert [r.is_error for r in (first.result, second.result, third.result)] == [False, False, False]
    assert first.result.content[0].text == "x" * 400  # type: ignore[union-attr]
    assert servers.calls == [("calc", {"n": 1}), ("calc", {"n": 2}), ("calc", {"n": 3})]
    assert eng.audit_lost == 2
    assert sink.records == [third.context.call_id]
    lost = [entry for entry in logs if entry["log_level"] == "error"]
    assert len(lost) == 1  # once per burst, not once per call
    assert "OSError" in lost[0]["error"] and lost[0]["lost"] == 1
    assert any(entry["event"] == "audit sink writes again" and entry["lost"] == 2 for entry in logs)


async def test_every_record_names_its_caller(tmp_path: Path) -> None:
    """The docs say a console call's caller is `console`; the audit record had no caller field."""
    async with memory_gateway(tmp_path) as (gw, sink):
        await gw.engine.execute("fx__echo", {"text": "hi"}, scope=CallScope(CONSOLE_CALLER))
        assert sink.records[-1].caller == "console"
        async with Client(gw.server, mode="legacy") as client:
            await client.call_tool("fx__echo", {"text": "hi"})
        assert sink.records[-1].caller not in (None, "console")
