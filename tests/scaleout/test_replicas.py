"""Two gateway replicas over HTTP sharing one real redis-server: rate limits, episodes, the audit stream."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import anyio
import mcp_types
import pytest
import redis
from mcp import Client

from tests.conftest import TOOLSCORE, text
from tests.scaleout.conftest import Replica, start_replica
from toolscore.state.redis_store import read_stream

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

N = 5
"""Calls a minute the shared limit allows."""


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[tuple[Replica, Replica]]:
    redis.Redis.from_url(redis_url).flushdb()
    constraints = {
        "enabled": True,
        "batching": True,
        "rate_limits": [{"match": "fx__add", "rate": N / 60, "burst": N}],
    }
    base = tmp_path_factory.mktemp("replicas")
    a = start_replica(base / "a", redis_url, constraints=constraints)
    b = start_replica(base / "b", redis_url, constraints=constraints)
    yield a, b
    a.stop()
    b.stop()


async def test_a_rate_limit_holds_across_both_replicas(replicas: tuple[Replica, Replica], redis_url: str) -> None:
    a, b = replicas
    passed = refused = 0
    async with Client(a.url, mode="legacy") as on_a, Client(b.url, mode="legacy") as on_b:
        for n in range(2 * N):
            result = await (on_a if n % 2 else on_b).call_tool("fx__add", {"a": n, "b": 1})
            if result.is_error:
                assert "rate limit" in text(result)
                refused += 1
            else:
                passed += 1
    assert (passed, refused) == (N, N)
    keys = redis.Redis.from_url(redis_url).keys("toolscore:rate:*")
    assert keys
    for key in keys:  # every key expires
        assert 0 < redis.Redis.from_url(redis_url).pttl(key) <= 61_000


async def test_an_episode_started_on_one_replica_continues_on_the_other(replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    async with Client(a.url, mode="legacy") as on_a:
        first = await on_a.call_tool("orchestrate", {"plan": '<fx><echo id="x">{"text": "said on a"}</echo></fx>'})
        assert first.structured_content is not None, text(first)
        episode = first.structured_content["episode"]
        async with Client(b.url, mode="legacy") as on_b:
            plan = '<fx><echo id="y">{"text": "${x.text}, then b"}</echo></fx>'
            second = await on_b.call_tool("orchestrate", {"plan": plan, "episode": episode})
            assert not second.is_error, text(second)
            assert "said on a, then b" in text(second)
        # Back on a, in the same connection, whose memory holds the episode as it was after turn
        # one: the turn on b is read from Redis.
        plan = '<fx><echo>{"text": "${y.text}; step 3"}</echo></fx>'
        third = await on_a.call_tool("orchestrate", {"plan": plan, "episode": episode})
        assert not third.is_error, text(third)
        assert "said on a, then b; step 3" in text(third)


async def test_killing_a_replica_loses_no_audit_record(
    tmp_path: Path, redis_url: str, replicas: tuple[Replica, Replica]
) -> None:
    victim = start_replica(tmp_path / "victim", redis_url)
    before = {r.call_id for r in read_stream(redis_url)}
    async with Client(victim.url, mode="legacy") as client:
        for n in range(20):
            assert not (await client.call_tool("fx__echo", {"text": f"record {n}"})).is_error
    victim.stop(signal.SIGKILL)  # no shutdown, no flush: what was answered must already be in Redis
    new = [r for r in read_stream(redis_url) if r.call_id not in before]
    assert sorted(r.tool for r in new) == ["fx__echo"] * 20
    # Every replica's records, read by the CLI from the stream.
    config = tmp_path / "victim" / "servers.json"
    done = await anyio.run_process([TOOLSCORE, "audit", "stats", "--shared", "--json", "--config", str(config)])
    assert json.loads(done.stdout)["calls"] >= 20


def _calls_made(replica: Replica, key: str) -> int:
    """Downstream calls of `slow_count` for `key` made by this replica's fixture server (its marker)."""
    marker = replica.audit.parent / f"count-slow-{key}"
    return int(marker.read_text()) if marker.exists() else 0


async def test_identical_read_only_calls_on_both_replicas_share_one_downstream_call(
    replicas: tuple[Replica, Replica], redis_url: str
) -> None:
    a, b = replicas
    results: list[mcp_types.CallToolResult] = []
    async with Client(a.url, mode="legacy") as on_a, Client(b.url, mode="legacy") as on_b:

        async def call(client: Client) -> None:
            results.append(await client.call_tool("fx__slow_count", {"key": "shared", "seconds": 2.0}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, on_a)
            await anyio.sleep(0.3)  # a's call leads; the rest arrive while it runs
            for client in (on_b, on_a, on_b):
                tg.start_soon(call, client)
    assert [r.is_error for r in results] == [False] * 4, [text(r) for r in results]
    assert {text(r) for r in results} == {"counted 1"}
    assert _calls_made(a, "shared") + _calls_made(b, "shared") == 1
    batched = [json.loads(line) for r in (a, b) for line in r.audit.read_text().splitlines()]
    assert sum(1 for rec in batched if rec.get("tool") == "fx__slow_count" and rec.get("batched")) == 3
    client = redis.Redis.from_url(redis_url)
    flights = client.keys("toolscore:flight:*")
    assert flights and all(0 < client.pttl(k) <= 10_000 for k in flights)  # only the result, expiring


def _turn(text: str) -> mcp_types.CreateMessageResult:
    return mcp_types.CreateMessageResult(role="assistant", content=mcp_types.TextContent(text=text), model="m")


async def test_a_paused_delegate_task_goes_on_wherever_its_retry_lands(replicas: tuple[Replica, Replica]) -> None:
    """2026-07-28: each model turn is an input-required round trip; each retry goes to the other replica."""

    async def unused(context: object, params: mcp_types.CreateMessageRequestParams) -> mcp_types.CreateMessageResult:
        raise AssertionError("2026-07-28 asks through input-required results")

    a, b = replicas
    async with Client(a.url, sampling_callback=unused) as on_a, Client(b.url, sampling_callback=unused) as on_b:
        task = {"task": "say hello twice"}
        first = await on_a.session.call_tool("delegate", task, allow_input_required=True)
        assert isinstance(first, mcp_types.InputRequiredResult) and first.request_state is not None
        step = _turn('<fx><echo id="e">{"text": "hello"}</echo></fx><execute_tools />')
        second = await on_b.session.call_tool(
            "delegate", task, input_responses={"turn": step}, request_state=first.request_state,
            allow_input_required=True,
        )  # fmt: skip
        assert isinstance(second, mcp_types.InputRequiredResult), second
        assert second.request_state is not None and second.input_requests is not None
        asked = second.input_requests["turn"]
        assert isinstance(asked, mcp_types.CreateMessageRequest)
        last = asked.params.messages[-1].content
        assert isinstance(last, mcp_types.TextContent) and "hello" in last.text  # b ran the step a's turn paused on
        replayed = await on_a.session.call_tool(
            "delegate", task, input_responses={"turn": step}, request_state=first.request_state,
            allow_input_required=True,
        )  # fmt: skip
        assert isinstance(replayed, mcp_types.CallToolResult) and replayed.is_error  # each state resumes once
        done = await on_a.session.call_tool(
            "delegate", task, input_responses={"turn": _turn("<answer>hello twice</answer>")},
            request_state=second.request_state, allow_input_required=True,
        )  # fmt: skip
    assert isinstance(done, mcp_types.CallToolResult) and not done.is_error, done
    assert done.structured_content is not None and done.structured_content["turns"] == 2
    assert done.structured_content["answer"] == "hello twice"
