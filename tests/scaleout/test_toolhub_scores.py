"""The ToolHub's learned scores in the shared Redis: every replica's, across restarts."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from mcp import Client

from tests.toolhub.test_persist import servers
from tests.toolhub.test_scoring import Clock, record
from toolscore.state.redis_store import RedisState
from toolscore.testing import memory_config, running_gateway
from toolscore.toolhub.persist import RedisScores
from toolscore.toolhub.scoring import FORGET_AFTER_SECONDS, Scoreboard

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


@pytest.fixture
def flushed(redis_url: str) -> str:
    redis.Redis.from_url(redis_url).flushdb()
    return redis_url


async def test_replicas_add_up_their_scores_and_the_hash_expires(flushed: str) -> None:
    clock = Clock()
    one, two = RedisState(flushed, prefix="t:"), RedisState(flushed, prefix="t:")
    try:
        first, second = Scoreboard(clock=clock), Scoreboard(clock=clock)
        await RedisScores(two).load_into(second)  # started before the first saved anything
        first.observe(record("a__t", False))
        await RedisScores(one).save_from(first)
        second.observe(record("b__t", True))
        await RedisScores(two).save_from(second)  # writes only what it scored: a__t stays the first's
        redis.Redis.from_url(flushed).hset("t:toolhub:scores", "bad__t", b"\xff{not json")
        fresh = Scoreboard(clock=clock)
        assert await RedisScores(one).load_into(fresh) == 2
        failed = fresh.get("a__t")
        assert failed is not None and failed.success == 0.5
    finally:
        await one.aclose()
        await two.aclose()
    ttl = redis.Redis.from_url(flushed).ttl("t:toolhub:scores")
    assert FORGET_AFTER_SECONDS - 60 < ttl <= FORGET_AFTER_SECONDS


async def test_a_restarted_gateway_on_shared_state_knows_what_failed(flushed: str) -> None:
    entries: dict[str, dict[str, Any]] = {n: {"capabilities": {"lookup": ["define"]}} for n in ("alpha", "beta")}
    toolhub = {"capabilities": {"define": {"strategy": "fallback"}}}
    config = memory_config(entries, toolscore={"state": flushed, "toolhub": toolhub})
    async with running_gateway(servers(), config=config) as (gw, _), Client(gw.server) as client:
        await client.call_tool("call_capability", {"capability": "define", "arguments": {"query": "x"}})
    async with running_gateway(servers(), config=config) as (again, _):
        assert [t.route.public_name for t in again.toolhub.ranked("define")] == ["beta__lookup", "alpha__lookup"]
