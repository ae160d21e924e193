"""Rate limits: token buckets on a clock the tests set, then once over real traffic."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import text
from tests.policy import config, context, policy_client, refused, registry, route
from toolscore.config import RateLimit
from toolscore.errors import Rejected
from toolscore.policy.rate import RateLimits, TokenBucket, rate_limits
from toolscore.policy.scope import resolve_scopes

pytestmark = pytest.mark.anyio


class Clock:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_starts_full_and_each_call_takes_a_token() -> None:
    bucket = TokenBucket.full(rate=0.5, burst=2, now=0.0)
    assert [bucket.take(0.0), bucket.take(0.0)] == [None, None]
    assert bucket.take(0.0) == pytest.approx(2.0)  # one token comes back in 1 / 0.5 s


def test_a_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    bucket = TokenBucket.full(rate=2.0, burst=3, now=0.0)
    for _ in range(3):
        assert bucket.take(0.0) is None
    assert bucket.take(0.25) == pytest.approx(0.25)  # half a token back: half a token to wait for
    assert bucket.take(0.5) is None
    assert bucket.take(1000.0) is None  # a long pause refills only up to `burst`
    assert [bucket.take(1000.0), bucket.take(1000.0), bucket.take(1000.0) is None] == [None, None, False]


def test_a_refused_call_takes_no_token() -> None:
    bucket = TokenBucket.full(rate=1.0, burst=1, now=0.0)
    assert bucket.take(0.0) is None
    for _ in range(5):
        assert bucket.take(0.5) == pytest.approx(0.5)
    assert bucket.take(1.0) is None


async def limited(limits: list[dict[str, Any]], calls: list[tuple[str, str | None]], clock: Clock) -> list[str]:
    """Make `(tool, session)` calls through a `RateLimits` hook; each is `ok` or the refusal's reason."""
    tools = registry(config({}, fx={}, gx={}))
    hook = RateLimits([RateLimit.model_validate(limit) for limit in limits], clock=clock)
    outcomes: list[str] = []
    for tool, session in calls:
        try:
            await hook(context(tools.routes[tool], session=session))
            outcomes.append("ok")
        except Rejected as exc:
            outcomes.append(exc.reason if exc.hook == "rate_limits" else f"refused by {exc.hook}")
    return outcomes


async def test_each_tool_server_or_session_has_its_own_bucket() -> None:
    clock = Clock()
    per_tool = [{"scope": "tool", "rate": 1, "burst": 1}]
    assert await limited(per_tool, [("fx__echo", None), ("fx__add", None), ("fx__echo", None)], clock) == [
        "ok",
        "ok",
        "rate limit of 1 calls/s per tool reached for 'fx__echo'; retry in 1.0 s",
    ]
    per_server = [{"scope": "server", "rate": 1, "burst": 1}]
    outcomes = await limited(per_server, [("fx__echo", None), ("gx__echo", None), ("fx__add", None)], clock)
    assert [o[:24] for o in outcomes] == ["ok", "ok", "rate limit of 1 calls/s "]
    per_session = [{"scope": "session", "rate": 1, "burst": 1}]
    outcomes = await limited(per_session, [("fx__echo", "a"), ("gx__add", "b"), ("fx__add", "a")], clock)
    assert [o[:2] for o in outcomes] == ["ok", "ok", "ra"]


async def test_limits_apply_only_to_the_tools_they_match_and_wait_on_the_clock() -> None:
    clock = Clock()
    hook = RateLimits([RateLimit(match="fx__e*", rate=0.25, burst=1)], clock=clock)
    cfg = config({})
    echo, add = context(route(cfg, "fx__echo")), context(route(cfg, "fx__add"))
    assert await hook(echo) is None
    for _ in range(3):
        assert await hook(add) is None
    clock.now += 3.5
    with pytest.raises(Rejected, match=r"retry in 0.5 s"):
        await hook(echo)
    clock.now += 0.5
    assert await hook(echo) is None


async def test_every_matching_limit_must_have_a_token() -> None:
    clock = Clock()
    outcomes = await limited(
        [{"rate": 100, "burst": 100}, {"match": "fx__echo", "rate": 1, "burst": 1}],
        [("fx__echo", None), ("fx__echo", None)],
        clock,
    )
    assert outcomes[0] == "ok" and "1 calls/s" in outcomes[1]


async def test_buckets_of_past_sessions_are_dropped_once_refilled_but_an_empty_one_still_holds() -> None:
    clock = Clock()
    hook = RateLimits([RateLimit(scope="session", rate=1, burst=1)], clock=clock)
    echo = route(config({}), "fx__echo")
    for n in range(5000):
        await hook(context(echo, session=f"s{n}"))
        clock.now += 0.001  # each session's bucket is full again 1 s after its call
    await hook(context(echo, session="busy"))  # empty now, for one second
    for n in range(3000):
        await hook(context(echo, session=f"t{n}"))
        clock.now += 0.0001
    assert len(hook._buckets) <= 4096  # bounded, not one per session ever seen (8001)
    with pytest.raises(Rejected):
        await hook(context(echo, session="busy"))  # pruning never forgot a bucket that is still in use
    clock.now += 1
    assert await hook(context(echo, session="busy")) is None


def test_no_limit_configured_means_no_hook() -> None:
    assert rate_limits(resolve_scopes(config({}))) is None
    assert isinstance(rate_limits(resolve_scopes(config({"rate_limits": [{"rate": 1}]}))), RateLimits)


async def test_rate_limits_refuse_calls_beyond_the_bucket(tmp_path: Path) -> None:
    constraints = {"rate_limits": [{"scope": "tool", "match": "fx__counter", "rate": 0.5, "burst": 2}]}
    async with policy_client(tmp_path, constraints) as (client, sink):
        outcomes = [(await client.call_tool("fx__counter", {"key": "r"})).is_error for _ in range(3)]
        assert outcomes == [False, False, True]
        assert not (await client.call_tool("fx__echo", {"text": "other tools are not limited"})).is_error
    assert (tmp_path / "count-r").read_text() == "2"
    assert "rate limit of 0.5 calls/s per tool" in sink.records[2].violations[0]


async def test_a_refusal_tells_the_model_how_long_to_wait(tmp_path: Path) -> None:
    constraints = {"rate_limits": [{"rate": 0.1, "burst": 1}]}
    async with policy_client(tmp_path, constraints) as (client, _):
        await client.call_tool("fx__echo", {"text": "a"})
        result = await client.call_tool("fx__echo", {"text": "b"})
    # 10 s less the time since the first call (a loaded machine may take 0.1 s between them).
    assert refused(result, "rate_limits") and re.search(r"retry in (9\.[5-9]|10\.0) s", text(result))
