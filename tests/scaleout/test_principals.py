"""Two gateway replicas sharing a redis-server, with a token per principal: an episode moves
across replicas for its own principal, never to another one, in both eras; a 2026-07-28 client's
confirmation or plan approval asked on one replica is answered on the other, a plan's once.

Before, every stateless request was one caller (`principal:bearer`): a client holding another
token read a live episode on the other replica by its id; and a handshake-era session's episodes
were stored as "any connection's", so any client presenting the id read them there.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
import pytest
import redis
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import fixture_entry, http_client, start_http_gateway, text, write_config
from tests.scaleout.conftest import Replica
from toolscore.front.confirm import CONFIRM_KEY

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

# Fixed, not random: they appear in test ids, which every xdist worker must collect alike.
ALICE, BOB = "alice-0123456789abcdefghij", "bob-9876543210zyxwvutsrqpo"
CAROL, DAVE = "carol-0123456789abcdefghij", "dave-9876543210zyxwvutsrqpo"
ERIN = "erin-0123456789abcdefghijkl"
# Only carol and dave have quotas: the day's counters live in Redis, so two replicas share them.
QUOTAS = {
    "enabled": True,
    "destructive": "confirm",  # fx__delete: a question, answered on either replica
    "principals": {
        "carol": {"quota": {"calls_per_day": 3}},
        "dave": {"quota": {"result_bytes_per_day": 10}},
        "erin": {"tools": {"deny": ["fx__echo"]}},
    },
}
SECRET_PLAN = '<fx><echo id="x">{"text": "alice\'s secret"}</echo></fx>'
READ_PLAN = '<fx><echo>{"text": "read: ${x.text}"}</echo></fx>'


def _replica(tmp_path: Path, redis_url: str, tokens: Path) -> Replica:
    tmp_path.mkdir(parents=True)
    settings = {
        "audit": {"path": str(tmp_path / "audit.jsonl")},
        "log_dir": str(tmp_path / "logs"),
        "startup_grace_seconds": None,
        "state": redis_url,
        "loop": {"episodes_db": ""},
        "http": {"token_file": str(tokens)},
    }
    config = write_config(tmp_path, {"fx": fixture_entry(tmp_path)}, toolscore=settings, constraints=QUOTAS)
    proc, base = start_http_gateway(config, env={"TOOLSCORE_TOKEN": ""})
    return Replica(proc, base + "/mcp", tmp_path / "audit.jsonl")


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[tuple[Replica, Replica]]:
    redis.Redis.from_url(redis_url).flushdb()
    base = tmp_path_factory.mktemp("principals")
    tokens = base / "tokens"
    tokens.write_text(f"alice {ALICE}\nbob {BOB}\ncarol {CAROL}\ndave {DAVE}\nerin {ERIN}\n")
    tokens.chmod(0o600)
    a, b = _replica(base / "a", redis_url, tokens), _replica(base / "b", redis_url, tokens)
    yield a, b
    a.stop()
    b.stop()


async def _orchestrate(session: Client, plan: str, episode: str | None = None) -> mcp_types.CallToolResult:
    arguments = {"plan": plan} if episode is None else {"plan": plan, "episode": episode}
    return await session.call_tool("orchestrate", arguments)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_episode_id_from_one_principal_is_not_readable_by_another_on_the_other_replica(
    replicas: tuple[Replica, Replica], mode: str
) -> None:
    # auto: each request stands alone, only its token says whose episode it may read; legacy: a
    # session, whose caller on the other replica is a new connection of the same principal.
    a, b = replicas
    async with http_client(a.url, ALICE, mode) as alice_on_a:
        first = await _orchestrate(alice_on_a, SECRET_PLAN)
        assert first.structured_content is not None, text(first)
        episode = first.structured_content["episode"]
        async with http_client(b.url, BOB, mode) as bob_on_b:  # the episode is live on a, in Redis for b
            stolen = await _orchestrate(bob_on_b, READ_PLAN, episode)
            assert stolen.is_error and "unknown or has expired" in text(stolen), text(stolen)
            assert "secret" not in text(stolen)
        async with http_client(b.url, ALICE, mode) as alice_on_b:  # alice herself, on the other replica
            own = await _orchestrate(alice_on_b, READ_PLAN, episode)
            assert "read: alice's secret" in text(own), text(own)


async def test_a_principals_day_quotas_hold_across_both_replicas(replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    async with http_client(a.url, CAROL, "auto") as carol_on_a, http_client(b.url, CAROL, "auto") as carol_on_b:
        for session in (carol_on_a, carol_on_b, carol_on_a):
            assert not (await session.call_tool("fx__echo", {"text": "hi"})).is_error
        refused = await carol_on_b.call_tool("fx__echo", {"text": "hi"})
        assert refused.is_error and "carol's quota of 3 calls a day is used; resets at 00:00 UTC" in text(refused)
    async with http_client(a.url, DAVE, "auto") as dave_on_a, http_client(b.url, DAVE, "auto") as dave_on_b:
        crossing = await dave_on_a.call_tool("fx__echo", {"text": "more than ten bytes"})
        assert not crossing.is_error, "the call that crosses the line is answered"
        after = await dave_on_b.call_tool("fx__echo", {"text": "x"})
        assert after.is_error and "dave's quota of 10 result bytes a day is used" in text(after), text(after)


async def test_the_web_console_calls_as_the_principal_that_signed_in(replicas: tuple[Replica, Replica]) -> None:
    a, _ = replicas
    base = a.url.removesuffix("/mcp")
    call = {"tool": "fx__echo", "arguments": {"text": "from the console"}}
    async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
        refused = (await http.post("/ui/api/call", json=call, headers={"Authorization": f"Bearer {ERIN}"})).json()
        assert refused["isError"] and "denied to erin" in refused["content"][0]["text"], refused
        allowed = (await http.post("/ui/api/call", json=call, headers={"Authorization": f"Bearer {ALICE}"})).json()
        assert allowed["content"] == [{"type": "text", "text": "from the console"}], allowed
    callers = [json.loads(line).get("caller") for line in a.audit.read_text().splitlines()]
    assert "principal:erin/console" in callers and "principal:alice/console" in callers


YES = {CONFIRM_KEY: mcp_types.ElicitResult(action="accept", content={"confirm": True})}


@asynccontextmanager
async def _asked(url: str, token: str) -> AsyncIterator[Client]:
    """A 2026-07-28 client that can be asked (elicitation); its rounds are driven by the test."""

    async def never(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        raise AssertionError("the rounds are the test's")

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), mode="auto", elicitation_callback=never) as client,
    ):
        yield client


async def test_a_confirmation_asked_on_one_replica_is_answered_on_the_other(replicas: tuple[Replica, Replica]) -> None:
    # Before, each replica signed request states with a key of its own: the retry was refused.
    a, b = replicas
    async with _asked(a.url, ALICE) as on_a, _asked(b.url, ALICE) as on_b:
        asked = await on_a.session.call_tool("fx__delete", {"key": "k"}, allow_input_required=True)
        assert isinstance(asked, mcp_types.InputRequiredResult) and asked.request_state, asked
        state = asked.request_state
        done = await on_b.session.call_tool(
            "fx__delete", {"key": "k"}, input_responses=YES, request_state=state, allow_input_required=True
        )
        assert isinstance(done, mcp_types.CallToolResult) and not done.is_error, done
    assert (b.audit.parent / "deleted-k").exists()  # run by the replica that got the answer
    forged = b.audit.parent / "forged"
    async with _asked(b.url, ALICE) as on_b:  # the shared key still binds the call: other arguments are refused
        other = await on_b.session.call_tool(
            "fx__delete", {"key": forged.name}, input_responses=YES, request_state=asked.request_state,
            allow_input_required=True,
        )  # fmt: skip
        assert isinstance(other, mcp_types.CallToolResult) and other.is_error
        assert "does not belong to this call" in text(other)
    assert not (b.audit.parent / f"deleted-{forged.name}").exists()


async def test_a_plan_approved_on_one_replica_runs_once_across_both(replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    plan = {"plan": '<fx><delete>{"key": "p"}</delete></fx>'}
    async with _asked(a.url, ALICE) as on_a, _asked(b.url, ALICE) as on_b:
        asked = await on_a.session.call_tool("orchestrate", plan, allow_input_required=True)
        assert isinstance(asked, mcp_types.InputRequiredResult) and asked.request_state, asked
        ran = await on_b.session.call_tool(
            "orchestrate", plan, input_responses=YES, request_state=asked.request_state, allow_input_required=True
        )
        assert isinstance(ran, mcp_types.CallToolResult) and not ran.is_error, ran
        assert (b.audit.parent / "deleted-p").exists()
        again = await on_a.session.call_tool(  # the same approval, back to the first replica
            "orchestrate", plan, input_responses=YES, request_state=asked.request_state, allow_input_required=True
        )
        assert isinstance(again, mcp_types.CallToolResult) and again.is_error
        assert "this approval was used already" in text(again), text(again)
    assert not (a.audit.parent / "deleted-p").exists()
