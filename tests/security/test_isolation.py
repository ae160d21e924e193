"""Per-client server instances, and wedged servers killed from outside."""

from __future__ import annotations

import gc
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import fixture_entry, make_config, running_gateway, text, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"  # a zombie is as good as gone
    except (FileNotFoundError, ProcessLookupError):  # reaped between the two looks
        return False


async def pid_of(client: Client, tool: str = "fx__pid") -> int:
    return int(text(await client.call_tool(tool, {})))


async def test_each_client_gets_its_own_instance_and_state(tmp_path: Path) -> None:
    cfg = make_config({"fx": fixture_entry(tmp_path, isolation="session")})
    async with running_gateway(cfg, tmp_path) as (gw, _):
        boot = gw.hub.downstreams["fx"]
        async with Client(gw.server, mode="legacy") as alice, Client(gw.server, mode="legacy") as bob:
            a, b = await pid_of(alice), await pid_of(bob)
            assert a != b and boot.pid is not None and boot.pid not in (a, b)
            # In-process state (the fixture's counters) is not shared either.
            assert [text(await alice.call_tool("fx__counter", {"key": "k"})) for _ in range(3)] == ["1", "2", "3"]
            assert text(await bob.call_tool("fx__counter", {"key": "k"})) == "1"
            assert await pid_of(alice) == a  # and it stays the client's own
        # Both clients left: their instances are stopped.
        gc.collect()
        await wait_for(lambda: not alive(a) and not alive(b))


async def test_instances_are_capped_and_the_least_recently_used_idle_one_goes(tmp_path: Path) -> None:
    cfg = make_config({"fx": fixture_entry(tmp_path, isolation="session", max_sessions=2)})
    async with (
        running_gateway(cfg, tmp_path) as (gw, _),
        Client(gw.server, mode="legacy") as one,
        Client(gw.server, mode="legacy") as two,
        Client(gw.server, mode="legacy") as three,
    ):
        first = await pid_of(one)
        await pid_of(two)
        await pid_of(three)  # evicts `one`, the least recently used
        await wait_for(lambda: not alive(first))
        assert await pid_of(one) != first  # `one` gets a fresh instance on its next call


def wedged_gateway(tmp_path: Path, **server: Any) -> Any:
    """A gateway whose calls time out after 1 s, and whose servers get 1 s to answer a ping (unless
    `server` says otherwise)."""
    cfg = make_config({"fx": fixture_entry(tmp_path, **{"timeout": 1, "ping_timeout": 1, **server})})
    return running_gateway(cfg, tmp_path)


async def test_a_server_that_stops_answering_is_killed_and_restarted(tmp_path: Path) -> None:
    async with wedged_gateway(tmp_path) as (gw, _), Client(gw.server, mode="legacy") as client:
        before = await pid_of(client)
        with anyio.fail_after(60):  # a hang detector: only the 1 s timeout ends a 600 s spin
            result = await client.call_tool("fx__spin", {"seconds": 600})
        assert result.is_error and "did not answer within 1 s" in text(result)
        # The ping after the timeout goes unanswered: the server is killed and comes back.
        await wait_for(lambda: not alive(before))
        await wait_for(lambda: gw.hub.downstreams["fx"].connects == 2)
        assert await pid_of(client) != before


async def test_a_slow_call_that_times_out_does_not_restart_a_healthy_server(tmp_path: Path) -> None:
    # A ping deadline no busy machine reaches: the server is healthy, so only a gateway that
    # restarts it anyway fails this test.
    async with wedged_gateway(tmp_path, ping_timeout=60) as (gw, _), Client(gw.server, mode="legacy") as client:
        before = await pid_of(client)
        result = await client.call_tool("fx__sleep", {"seconds": 600})
        assert result.is_error and "did not answer within 1 s" in text(result)
        fx = gw.hub.downstreams["fx"]
        await wait_for(lambda: not fx._probing)  # the ping after the timeout was answered
        assert await pid_of(client) == before
        assert fx.connects == 1


async def test_on_timeout_restart_kills_at_once(tmp_path: Path) -> None:
    async with (
        wedged_gateway(tmp_path, on_timeout="restart") as (gw, _),
        Client(gw.server, mode="legacy") as client,
    ):
        before = await pid_of(client)
        with anyio.fail_after(60):  # a hang detector: only the 1 s timeout ends a 600 s sleep
            await client.call_tool("fx__sleep", {"seconds": 600})
        # The server answers pings (its sleep is async): only on_timeout's restart kills it.
        await wait_for(lambda: not alive(before))


async def test_a_stopped_server_is_detected_and_restarted(tmp_path: Path) -> None:
    async with wedged_gateway(tmp_path) as (gw, _), Client(gw.server, mode="legacy") as client:
        before = await pid_of(client)
        os.kill(before, signal.SIGSTOP)
        try:
            result = await client.call_tool("fx__echo", {"text": "anyone?"})
            assert result.is_error
            await wait_for(lambda: gw.hub.downstreams["fx"].connects >= 2)
            assert text(await client.call_tool("fx__echo", {"text": "back"})) == "back"
        finally:
            if alive(before):
                os.kill(before, signal.SIGKILL)
