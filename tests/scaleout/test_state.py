"""The Redis state in process, against the real redis-server: buckets, episodes, the stream and its failures."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import anyio
import mcp_types
import pytest
import redis
from mcp import Client

from tests.conftest import free_port, make_config, text, wait_for
from tests.fixtures.fixture_server import build_server
from toolscore._gateway import Gateway, open_gateway
from toolscore.audit.sinks import AuditRecord, MemoryAuditSink
from toolscore.config import AuditConfig
from toolscore.errors import ConfigError, Rejected
from toolscore.state import open_state
from toolscore.state.redis_store import RedisState, RedisStreamSink, read_stream
from toolscore.testing import memory_config

pytestmark = pytest.mark.anyio


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
        open_gateway(config, audit=MemoryAuditSink(), memory_servers={"fx": build_server(tmp_path)}) as one,
        open_gateway(config, audit=MemoryAuditSink(), memory_servers={"fx": build_server(tmp_path)}) as two,
    ):

        async def call(gw: Gateway, name: str, seconds: float) -> None:
            results[name] = (await gw.engine.execute("fx__sleep", {"seconds": seconds, "tag": name})).result

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, one, "running", 0.6)
            await wait_for(lambda: bool(redis.Redis.from_url(flushed).zcard("toolscore:slots:fx")))
            tg.start_soon(call, two, "waiting", 0.01)  # the one slot is taken on the other gateway: it waits
            await wait_for(lambda: bool(redis.Redis.from_url(flushed).zcard("toolscore:waiting:fx")))
            tg.start_soon(call, one, "refused", 0.01)  # one running, one waiting: no room
        assert not results["running"].is_error and not results["waiting"].is_error
        assert results["refused"].is_error and "concurrency limit" in text(results["refused"])
    client = redis.Redis.from_url(flushed)
    assert client.zcard("toolscore:slots:fx") == 0 and client.zcard("toolscore:waiting:fx") == 0


async def test_a_call_cancelled_while_waiting_for_a_shared_slot_leaves_the_queue(flushed: str) -> None:
    state = RedisState(flushed)
    try:
        assert await state.acquire_slot("s", 1, 5, "holder-1", 30)
        with anyio.move_on_after(0.2):
            await state.acquire_slot("s", 1, 5, "holder-2", 30)
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
