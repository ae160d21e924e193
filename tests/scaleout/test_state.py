"""The Redis state in process, against the real redis-server: buckets, episodes, the stream and its failures."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import anyio
import mcp_types
import pytest
import redis
from mcp import Client

from tests.conftest import free_port, make_config, text, wait_for
from tests.fixtures.fixture_server import build_server
from tests.scaleout.conftest import REDIS_SERVER
from toolscore._gateway import Gateway, open_gateway
from toolscore.audit.sinks import AuditRecord, MemoryAuditSink
from toolscore.config import AuditConfig
from toolscore.errors import ConfigError, Rejected
from toolscore.state import open_state
from toolscore.state.redis_store import RedisState, RedisStreamSink, read_stream
from toolscore.testing import memory_config

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


def _record(n: int, tool: str = "fx__echo") -> AuditRecord:
    return AuditRecord(
        time=datetime.now(UTC), call_id=f"r{n}", tool=tool, server="fx", phase="post_execution", duration_ms=1.0,
        success=True,
    )  # fmt: skip


@pytest.fixture
def flushed(redis_url: str) -> str:
    redis.Redis.from_url(redis_url).flushdb()
    return redis_url


async def test_a_shared_bucket_gives_burst_tokens_then_says_how_long_to_wait(flushed: str) -> None:
    state = RedisState(flushed, prefix="t:")
    try:
        waits = [await state.take_token("k", 1 / 60, 3) for _ in range(4)]
    finally:
        await state.aclose()
    assert waits[:3] == [None, None, None]
    assert waits[3] is not None and 50 < waits[3] <= 60
    ttl = redis.Redis.from_url(flushed).pttl("t:rate:k")
    assert 0 < ttl <= 181_000  # until the bucket would be full again, plus a second


async def test_episode_records_belong_to_their_owner_and_expire(flushed: str) -> None:
    state = RedisState(flushed)
    records = state.episodes(ttl_seconds=30)
    try:
        await records.put("plan", "e1", "connection", {"id": "e1", "next_step": 2})
        assert await records.get("plan", "e1", "connection") == {"id": "e1", "next_step": 2}
        assert await records.get("plan", "e1", "principal:someone") is None
        await records.delete("plan", "e1", "principal:someone")  # not theirs: stays
        assert await records.get("plan", "e1", "connection") is not None
        assert 0 < redis.Redis.from_url(flushed).pttl("toolscore:episode:plan:e1") <= 30_000
        redis.Redis.from_url(flushed).set("toolscore:episode:plan:junk", b"\xff not json")
        assert await records.get("plan", "junk", "connection") is None
        await records.delete("plan", "e1", "connection")
        assert await records.get("plan", "e1", "connection") is None
        records.close()
    finally:
        await state.aclose()


async def test_the_stream_sink_appends_with_a_ttl_and_the_reader_skips_junk(flushed: str) -> None:
    state = RedisState(flushed)
    inner = MemoryAuditSink()
    sink = state.with_audit_stream(inner, AuditConfig(stream=True, stream_ttl_seconds=60))
    for n in range(3):
        sink.write(_record(n, tool="\ud800 lone surrogate" if n == 1 else "fx__echo"))
    redis.Redis.from_url(flushed).xadd("toolscore:audit", {"r": "not a record"})
    sink.close()
    await state.aclose()
    assert len(inner.records) == 3
    warnings: list[str] = []
    records = list(read_stream(flushed, warn=warnings.append))
    assert [r.call_id for r in records] == ["r0", "r1", "r2"]
    assert len(warnings) == 1 and "not an audit record" in warnings[0]
    assert 0 < redis.Redis.from_url(flushed).pttl("toolscore:audit") <= 60_000


def test_the_stream_reader_pages_through_long_streams(flushed: str) -> None:
    client = redis.Redis.from_url(flushed)
    pipe = client.pipeline(transaction=False)
    for n in range(2500):
        pipe.xadd("toolscore:audit", {"r": _record(n).model_dump_json()})
    pipe.execute()
    assert len({r.call_id for r in read_stream(flushed)}) == 2500


def test_a_redis_that_is_down_loses_records_without_failing_calls_and_is_left_alone_a_while() -> None:
    now = [0.0]
    sink = RedisStreamSink(f"redis://127.0.0.1:{free_port()}/0", clock=lambda: now[0])
    sink.write(_record(1))  # refused: counted, then a back-off
    sink.write(_record(2))  # within the back-off: not even tried
    assert sink.lost == 2
    now[0] = 10.0
    sink.write(_record(3))
    assert sink.lost == 3
    sink.close()
    with pytest.raises(ConfigError, match="cannot read the audit stream"):
        list(read_stream(f"redis://127.0.0.1:{free_port()}/0"))


def test_the_config_names_what_is_wrong() -> None:
    assert open_state(make_config({})) is None
    with pytest.raises(ConfigError, match=r"toolscore\.state"):
        make_config({}, toolscore={"state": "http://example.com"})
    with pytest.raises(ConfigError, match=r"audit\.stream needs toolscore\.state"):
        make_config({}, toolscore={"audit": {"stream": True}})
    config = make_config({}, toolscore={"state": "redis://127.0.0.1:1/0", "state_prefix": "team-a:"})
    state = open_state(config)
    assert isinstance(state, RedisState) and state.prefix == "team-a:"
    assert json.loads(config.settings.model_dump_json())["state"] == "redis://127.0.0.1:1/0"


async def test_a_rate_limit_whose_redis_is_down_refuses_the_call_saying_why() -> None:
    state = RedisState(f"redis://127.0.0.1:{free_port()}/0")
    try:
        with pytest.raises(Rejected, match="could not be checked"):
            await state.take_token("k", 1.0, 1)
    finally:
        await state.aclose()


async def test_the_seal_key_is_shared_and_a_state_spent_once_and_a_redis_that_is_down_says_so(flushed: str) -> None:
    first, second, down = RedisState(flushed), RedisState(flushed), RedisState(f"redis://127.0.0.1:{free_port()}/0")
    try:
        key = await first.seal_key()
        assert key is not None and len(key) == 32 and await second.seal_key() == key  # the first one's
        assert await first.spend_once("n1", time.time() + 60) is True
        assert await second.spend_once("n1", time.time() + 60) is False  # spent on the other replica
        assert await down.seal_key() is None  # that replica signs with a key of its own
        with pytest.raises(Rejected, match="could not be checked"):  # an approval it cannot spend is not taken
            await down.spend_once("n2", time.time() + 60)
    finally:
        for state in (first, second, down):
            await state.aclose()


async def test_two_gateways_in_process_share_episodes_and_buckets(flushed: str, tmp_path: Path) -> None:
    config = memory_config(
        ["fx"],
        toolscore={"state": flushed, "loop": {"episodes_db": ""}},
        constraints={"enabled": True, "rate_limits": [{"match": "fx__add", "rate": 1 / 60, "burst": 1}]},
    )
    async with (
        open_gateway(config, audit=MemoryAuditSink(), memory_servers={"fx": build_server(tmp_path)}) as one,
        open_gateway(config, audit=MemoryAuditSink(), memory_servers={"fx": build_server(tmp_path)}) as two,
        Client(one.server, mode="legacy") as first,
        Client(two.server, mode="legacy") as second,
    ):
        started = await first.call_tool("orchestrate", {"plan": '<fx><echo id="a">{"text": "one"}</echo></fx>'})
        assert started.structured_content is not None
        plan = {
            "plan": '<fx><echo>{"text": "${a.text} two"}</echo></fx>',
            "episode": started.structured_content["episode"],
        }
        assert "one two" in text(await second.call_tool("orchestrate", plan))
        assert not (await first.call_tool("fx__add", {"a": 1, "b": 2})).is_error
        assert "rate limit" in text(await second.call_tool("fx__add", {"a": 1, "b": 2}))


async def test_a_concurrency_cap_holds_across_gateways(flushed: str, tmp_path: Path) -> None:
    config = memory_config(
        ["fx"],
        toolscore={"state": flushed, "loop": {"episodes_db": ""}},
        constraints={"enabled": True, "concurrency": {"per_server": 1, "queue": 1}},
    )
    results: dict[str, mcp_types.CallToolResult] = {}
    async with (
        open_gateway(
            config, audit=MemoryAuditSink(), memory_servers={"fx": build_server(tmp_path, extra_tools=("hold",))}
        ) as one,
        open_gateway(
            config, audit=MemoryAuditSink(), memory_servers={"fx": build_server(tmp_path, extra_tools=("hold",))}
        ) as two,
    ):

        async def call(gw: Gateway, name: str, tool: str) -> None:
            results[name] = (await gw.engine.execute(f"fx__{tool}", {"text": name})).result

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, one, "running", "hold")  # runs until the test releases it
            await wait_for(lambda: bool(redis.Redis.from_url(flushed).zcard("toolscore:slots:fx")))
            tg.start_soon(call, two, "waiting", "echo")  # the one slot is taken on the other gateway: it waits
            await wait_for(lambda: bool(redis.Redis.from_url(flushed).zcard("toolscore:waiting:fx")))
            tg.start_soon(call, one, "refused", "echo")  # one running, one waiting: no room
            await wait_for(lambda: "refused" in results)
            assert "running" not in results and "waiting" not in results
            (tmp_path / "release-running").write_text("go")
        assert not results["running"].is_error and not results["waiting"].is_error
        assert results["refused"].is_error and "concurrency limit" in text(results["refused"])
    client = redis.Redis.from_url(flushed)
    assert client.zcard("toolscore:slots:fx") == 0 and client.zcard("toolscore:waiting:fx") == 0


async def test_a_call_cancelled_while_waiting_for_a_shared_slot_leaves_the_queue(flushed: str) -> None:
    state = RedisState(flushed)
    try:
        assert await state.acquire_slot("s", 1, 5, "holder-1", 30)
        async with anyio.create_task_group() as tg:
            tg.start_soon(state.acquire_slot, "s", 1, 5, "holder-2", 30)
            await wait_for(lambda: redis.Redis.from_url(flushed).zcard("toolscore:waiting:s") == 1)  # queued
            tg.cancel_scope.cancel()
        assert redis.Redis.from_url(flushed).zcard("toolscore:waiting:s") == 0
        await state.release_slot("s", "holder-1")
        assert await state.acquire_slot("s", 1, 5, "holder-3", 30)
    finally:
        await state.aclose()
    down = RedisState(f"redis://127.0.0.1:{free_port()}/0")
    try:
        with pytest.raises(Rejected, match="concurrency cap could not be checked"):
            await down.acquire_slot("s", 1, 1, "h", 1)
    finally:
        await down.aclose()


async def test_episode_records_are_taken_once_by_their_owner(flushed: str) -> None:
    state = RedisState(flushed)
    records = state.episodes(ttl_seconds=30)
    try:
        await records.put("pending", "s1", "connection", {"task": "t"})
        assert await records.take("pending", "s1", "principal:mallory") is None
        got: list[dict[str, object] | None] = []

        async def take() -> None:
            got.append(await records.take("pending", "s1", "connection"))

        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(take)
        assert sorted(got, key=lambda g: g is None) == [{"task": "t"}, None, None, None]
        redis.Redis.from_url(flushed).set("toolscore:episode:pending:junk", b"\xff not json", px=30_000)
        assert await records.take("pending", "junk", "connection") is None
    finally:
        await state.aclose()


async def test_a_flight_has_one_leader_and_its_result_reaches_those_who_waited(flushed: str) -> None:
    one, two = RedisState(flushed), RedisState(flushed)
    try:
        assert await one.start_flight("k", "f1", lease=30) is None  # leads
        assert await two.start_flight("k", "f2", lease=30) == "f1"  # follows f1
        waited: list[bytes | None] = []

        async def wait() -> None:
            waited.append(await two.await_flight("k", "f1"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.sleep(0.1)
            assert waited == []  # still under way
            await one.end_flight("k", "f1", b"the result", keep=5)
        assert waited == [b"the result"]
        client = redis.Redis.from_url(flushed)
        assert client.get("toolscore:flight:k") is None  # ended: the next call leads again
        assert 0 < client.pttl("toolscore:flight:k:f1") <= 5000
        # A leader that fails publishes nothing: those waiting call for themselves.
        assert await one.start_flight("k", "f3", lease=30) is None
        assert await two.start_flight("k", "f4", lease=30) == "f3"
        await one.end_flight("k", "f3", None, keep=5)
        assert await two.await_flight("k", "f3") is None
        # A leader whose replica died: its lease runs out, then the waiting call goes on alone.
        assert await one.start_flight("k", "dead", lease=0.001) is None  # leases are 1 s at least
        assert 0 < client.pttl("toolscore:flight:k") <= 1000
        with anyio.fail_after(60):
            assert await two.await_flight("k", "dead") is None
    finally:
        await one.aclose()
        await two.aclose()
    down = RedisState(f"redis://127.0.0.1:{free_port()}/0")
    try:  # batching only saves calls: without Redis each call leads, unshared
        assert await down.start_flight("k", "f", lease=1) is None
        assert await down.await_flight("k", "f") is None
        await down.end_flight("k", "f", b"x", keep=1)
    finally:
        await down.aclose()


async def test_identical_read_only_calls_on_two_gateways_share_one_downstream_call(
    flushed: str, tmp_path: Path
) -> None:
    config = memory_config(
        ["fx"],
        toolscore={"state": flushed, "loop": {"episodes_db": ""}},
        constraints={"enabled": True, "batching": True},
    )
    sinks = MemoryAuditSink(), MemoryAuditSink()
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
    results: list[mcp_types.CallToolResult] = []
    async with (
        open_gateway(config, audit=sinks[0], memory_servers={"fx": build_server(tmp_path / "one")}) as one,
        open_gateway(config, audit=sinks[1], memory_servers={"fx": build_server(tmp_path / "two")}) as two,
    ):

        async def call(gw: Gateway, key: str) -> None:
            results.append(
                (await gw.engine.execute("fx__slow_count", {"key": key, "seconds": 2})).result
            )  # wide: the later calls join it on a busy machine

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, one, "same")
            await wait_for(lambda: bool(redis.Redis.from_url(flushed).keys("toolscore:flight:*")))
            for gw in (one, two, two):
                tg.start_soon(call, gw, "same")
        assert sorted(text(r) for r in results) == ["counted 1"] * 4
        counts = [int(p.read_text()) for p in tmp_path.glob("*/count-slow-same")]
        assert counts == [1]  # one downstream call in all
        assert sum(r.batched for s in sinks for r in s.records) == 3
        # Only calls made while a flight runs share it: a later one calls again.
        await call(two, "same")
        assert text(results[-1]) == "counted 1" and sorted(
            int(p.read_text()) for p in tmp_path.glob("*/count-slow-same")
        ) == [1, 1]
    client = redis.Redis.from_url(flushed)
    assert client.keys("toolscore:flight:*")
    assert all(0 < client.pttl(k) <= 10_000 for k in client.keys("toolscore:flight:*"))


def test_a_result_too_large_or_not_serialisable_is_not_published() -> None:
    from toolscore.policy.flow import _publishable

    def result(text: str) -> mcp_types.CallToolResult:
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=text)], structured_content={"k": "é"})

    published = _publishable(result("fine"))
    assert published is not None and mcp_types.CallToolResult.model_validate_json(published) == result("fine")
    assert _publishable(result("x" * (5 * 1024 * 1024))) is None  # over 4 MiB: each waiting call calls
    assert _publishable(result("lone \udc80 surrogate")) is None  # the leader's caller still gets it


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A redis-server of this test's own, which the test may stop."""
    port = free_port()
    proc = subprocess.Popen(
        [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield f"redis://127.0.0.1:{port}/0", proc
    finally:
        proc.kill()
        proc.wait()


async def test_a_redis_blip_after_a_plans_steps_ran_is_a_warning_not_an_error(
    tmp_path: Path, own_redis: tuple[str, subprocess.Popen[bytes]]
) -> None:
    """Saving the episode failed and the whole answer became "internal gateway error", though its
    steps had run (a retry would run them again)."""
    url, proc = own_redis
    await wait_for(lambda: _pings(url), 20)
    settings = {"state": url, "loop": {"episodes_db": ""}, "audit": {"path": "", "stream": True}}
    config = memory_config(["fx"], toolscore=settings)
    async with (
        open_gateway(config, audit=MemoryAuditSink(), memory_servers={"fx": build_server(tmp_path)}) as gw,
        Client(gw.server, mode="legacy") as client,
    ):
        started = await client.call_tool("orchestrate", {"plan": '<fx><echo id="a">{"text": "one"}</echo></fx>'})
        assert started.structured_content is not None and not started.is_error
        proc.terminate()
        await anyio.to_thread.run_sync(proc.wait)
        plan = {
            "plan": '<fx><echo>{"text": "${a.text} two"}</echo></fx>',
            "episode": started.structured_content["episode"],
        }
        went_on = await client.call_tool("orchestrate", plan)
        # The stream dropped this plan's records: /metrics counts them (it said 0 while the log said 701).
        assert gw.audit_lost >= 1
    assert not went_on.is_error, text(went_on)
    assert "one two" in text(went_on)  # the episode went on from memory
    shown = " ".join(b.text for b in went_on.content if isinstance(b, mcp_types.TextContent))
    assert "the episode could not be saved" in shown


def _pings(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url).ping())
    except redis.ConnectionError:
        return False
