"""Flow control: concurrency caps and single-flight batching, with calls held open by events, then over real traffic."""

from __future__ import annotations

from pathlib import Path

import anyio
import mcp_types
import pytest

from tests.conftest import text, wait_for
from tests.policy import config, context, policy_client, route
from toolscore import ExecutionContext
from toolscore.errors import Rejected
from toolscore.policy.flow import (
    ConcurrencyCap,
    MarkBatchable,
    SingleFlight,
    concurrency_cap,
    mark_batchable,
    single_flight,
)
from toolscore.policy.scope import resolve_scopes

pytestmark = pytest.mark.anyio


class Downstream:
    """A `call_next` whose calls wait for `release`; counts calls started and those running."""

    def __init__(self, *, fail: bool = False) -> None:
        self.release = anyio.Event()
        self.started = 0
        self.running = 0
        self.fail = fail

    async def __call__(self, ctx: ExecutionContext) -> mcp_types.CallToolResult:
        self.started += 1
        number = self.started
        self.running += 1
        try:
            await self.release.wait()
        finally:
            self.running -= 1
        if self.fail:
            raise RuntimeError("the downstream failed")
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=f"call {number}")])


async def settle() -> None:
    """Let every ready task run until it blocks."""
    for _ in range(10):
        await anyio.lowlevel.checkpoint()


async def test_a_cap_runs_per_server_calls_queues_queue_more_and_refuses_the_rest() -> None:
    cfg = config({}, fx={}, gx={})
    cap = ConcurrencyCap({"fx": (2, 1)})
    down = Downstream()
    outcomes: list[str] = []

    async def call(tool: str) -> None:
        try:
            outcomes.append(text(await cap(context(route(cfg, tool)), down)))
        except Rejected as exc:
            outcomes.append(str(exc))

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for tool in ["fx__echo"] * 4 + ["gx__echo"]:  # gx is not capped
                tg.start_soon(call, tool)
                await settle()
            assert down.running == 3  # two on fx, one on gx; one waits
            assert outcomes == [
                "Call rejected by policy 'concurrency': server 'fx' is at its concurrency limit (2 running, 1 "
                "waiting); try again shortly"
            ]
            down.release.set()
    assert len(outcomes) == 5 and down.started == 4


async def test_calls_arriving_together_are_not_counted_as_waiting_when_they_get_a_slot() -> None:
    cfg = config({})
    cap = ConcurrencyCap({"fx": (2, 1)})
    down = Downstream()
    refusals: list[str] = []

    async def call() -> None:
        try:
            await cap(context(route(cfg, "fx__echo")), down)
        except Rejected as exc:
            refusals.append(str(exc))

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for _ in range(3):  # in one tick: two take the slots, the third takes the one queue place
                tg.start_soon(call)
            await settle()
            assert (down.running, refusals) == (2, [])
            down.release.set()
    assert down.started == 3


async def test_a_cancelled_waiting_call_gives_its_place_in_the_queue_back() -> None:
    echo = route(config({}), "fx__echo")
    cap = ConcurrencyCap({"fx": (1, 1)})
    down = Downstream()
    waiting = anyio.CancelScope()

    async def wait_then_give_up() -> None:
        with waiting:
            await cap(context(echo), down)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(cap, context(echo), down)
            await settle()
            tg.start_soon(wait_then_give_up)
            await settle()
            waiting.cancel()
            await settle()
            tg.start_soon(cap, context(echo), down)  # queued in the place given back, not refused
            await settle()
            down.release.set()
    assert down.started == 2


async def test_identical_batchable_calls_share_the_first_ones_result() -> None:
    cfg = config({})
    flight = SingleFlight()
    down = Downstream()
    echo = route(cfg, "fx__echo")
    calls = [context(echo, {"text": t}) for t in ("a", "a", "a", "b")]
    for ctx in calls:
        ctx.should_batch = True
    results: list[str] = []

    async def call(ctx: ExecutionContext) -> None:
        results.append(text(await flight(ctx, down)))

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for ctx in calls:
                tg.start_soon(call, ctx)
            await settle()
            down.release.set()
    assert down.started == 2
    assert sorted(results) == ["call 1", "call 1", "call 1", "call 2"]
    assert [c.batched for c in calls] == [False, True, True, False]


async def test_when_the_first_call_fails_each_waiting_call_makes_its_own() -> None:
    cfg = config({})
    flight = SingleFlight()
    failing, working = Downstream(fail=True), Downstream()
    leader, follower = (context(route(cfg, "fx__echo"), {"text": "a"}) for _ in range(2))
    leader.should_batch = follower.should_batch = True
    working.release.set()
    outcome: list[str] = []

    async def lead() -> None:
        with pytest.raises(RuntimeError):
            await flight(leader, failing)

    async def follow() -> None:
        outcome.append(text(await flight(follower, working)))

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lead)
            await settle()
            tg.start_soon(follow)
            await settle()
            failing.release.set()
    assert outcome == ["call 1"] and not follower.batched


async def test_calls_not_marked_batchable_always_make_their_own_call() -> None:
    flight = SingleFlight()
    down = Downstream()
    down.release.set()
    ctx = context(route(config({}), "fx__echo"), {"text": "a"})
    for _ in range(2):
        await flight(ctx, down)
    assert down.started == 2


async def test_only_read_only_tools_are_marked_batchable() -> None:
    cfg = config({})
    mark = MarkBatchable()
    echo, counter = context(route(cfg, "fx__echo")), context(route(cfg, "fx__counter"))
    assert await mark(echo) is None and await mark(counter) is None
    assert (echo.should_batch, counter.should_batch) == (True, False)


def test_flow_hooks_exist_only_when_the_config_turns_them_on() -> None:
    off = resolve_scopes(config({}))
    assert (concurrency_cap(off), mark_batchable(off), single_flight(off)) == (None, None, None)
    on = resolve_scopes(config({"batching": True}, fx={"constraints": {"concurrency": {"per_server": 3}}}, gx={}))
    assert isinstance(concurrency_cap(on), ConcurrencyCap)
    assert isinstance(mark_batchable(on), MarkBatchable) and isinstance(single_flight(on), SingleFlight)


async def test_a_concurrency_cap_queues_then_refuses(tmp_path: Path) -> None:
    constraints = {"concurrency": {"per_server": 1, "queue": 1}}
    async with policy_client(tmp_path, constraints, {"extra_tools": ["hold"]}) as (client, _):
        results: list[mcp_types.CallToolResult] = []

        async def call(tool: str) -> None:
            results.append(await client.call_tool(f"fx__{tool}", {"text": "a"}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "hold")  # runs until released
            await wait_for(lambda: (tmp_path / "held-a").exists(), 60)
            tg.start_soon(call, "echo")
            tg.start_soon(call, "echo")  # one of the two waits in the queue, the other is refused
            await wait_for(lambda: len(results) == 1, 60)
            (tmp_path / "release-a").write_text("go")
    refused = [r for r in results if r.is_error]
    assert len(results) == 3 and len(refused) == 1
    assert "concurrency limit (1 running, 1 waiting)" in text(refused[0])


async def test_identical_concurrent_read_only_calls_share_one_downstream_call(tmp_path: Path) -> None:
    async with policy_client(tmp_path, {"batching": True}) as (client, sink):
        results: list[mcp_types.CallToolResult] = []

        async def call(key: str) -> None:
            results.append(
                await client.call_tool("fx__slow_count", {"key": key, "seconds": 2})
            )  # a window wide enough for a busy machine

        async with anyio.create_task_group() as tg:
            for key in ["same"] * 5 + ["other"]:
                tg.start_soon(call, key)
        # Not read-only: never coalesced.
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(client.call_tool, "fx__counter", {"key": "c"})
    assert (tmp_path / "count-slow-same").read_text() == "1"
    assert (tmp_path / "count-slow-other").read_text() == "1"
    assert (tmp_path / "count-c").read_text() == "3"
    assert sorted(text(r) for r in results) == ["counted 1"] * 6
    assert sum(r.batched for r in sink.records) == 4
