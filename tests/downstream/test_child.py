"""A stdio downstream as a real child process: the parts where the process is the subject (death,
a command that is not there, stderr, hostile bytes on stdout, size limits)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client

from tests.conftest import RAW_SERVER, fixture_entry, make_config, running_gateway, text, wait_for
from toolscore.errors import DownstreamUnavailable
from toolscore.scope import NO_CLIENT

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


async def test_a_tool_with_an_invalid_schema_is_skipped_and_the_rest_served(tmp_path: Path) -> None:
    cfg = make_config({"raw": {"command": sys.executable, "args": [RAW_SERVER]}})
    async with running_gateway(cfg, tmp_path) as (gw, _), Client(gw.server) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert names == ["orchestrate", "raw__good"]
        assert text(await client.call_tool("raw__good", {})) == "ok"
        assert any("'bad' skipped" in p for p in gw.hub.registry.problems)


async def test_a_killed_server_fails_its_call_others_keep_working_and_it_comes_back(tmp_path: Path) -> None:
    cfg = make_config({"a": fixture_entry(tmp_path / "a"), "b": fixture_entry(tmp_path / "b")})
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with running_gateway(cfg, tmp_path) as (gw, _), Client(gw.server, mode="legacy") as client:
        pid = int(text(await client.call_tool("a__pid", {})))
        outcome: list[mcp_types.CallToolResult] = []

        async def slow_call() -> None:
            outcome.append(await client.call_tool("a__sleep", {"seconds": 600, "tag": "slow"}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow_call)
            await wait_for((tmp_path / "a" / "sleeping-slow").exists)  # the call is at the server
            os.kill(pid, signal.SIGKILL)
        assert outcome[0].is_error
        assert "closed the connection during the call" in text(outcome[0])
        # The other server is untouched.
        assert text(await client.call_tool("b__echo", {"text": "b"})) == "b"
        # A call while 'a' is down says so, at once.
        await wait_for(lambda: gw.hub.downstreams["a"].connects == 2)
        assert text(await client.call_tool("a__echo", {"text": "back"})) == "back"
        assert int(text(await client.call_tool("a__pid", {}))) != pid


async def test_a_server_that_cannot_start_does_not_block_the_others(tmp_path: Path) -> None:
    cfg = make_config({"gone": {"command": str(tmp_path / "no-such-binary")}, "fx": fixture_entry(tmp_path)})
    async with running_gateway(cfg, tmp_path) as (gw, _), Client(gw.server, mode="legacy") as client:
        assert text(await client.call_tool("fx__echo", {"text": "ok"})) == "ok"
        status = {s.name: s for s in gw.hub.statuses()}
        assert status["gone"].state.value == "down"
        assert "not found" in (status["gone"].error or "")
        assert status["fx"].state.value == "up"


async def test_a_server_stderr_goes_to_its_own_log_file(tmp_path: Path) -> None:
    async with running_gateway(make_config({"fx": fixture_entry(tmp_path)}), tmp_path):
        pass
    log = tmp_path / "logs" / "fx.log"
    assert log.exists()
    assert "starting 'fx'" in log.read_text()


async def test_a_server_that_exits_at_once_says_why_in_the_unavailable_message(tmp_path: Path) -> None:
    boom = {"command": sys.executable, "args": ["-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"]}
    async with running_gateway(make_config({"boom": boom}), tmp_path) as (gw, _):
        with pytest.raises(DownstreamUnavailable) as caught:
            await gw.hub.call("boom", "anything", {}, progress=None, scope=NO_CLIENT)
        assert "exit status 3" in str(caught.value)
        assert "stderr: boom" in str(caught.value)
        reason = gw.hub.unavailable_reason("boom")  # what the engine says of a routed call
        assert reason is not None
        assert "exit status 3" in reason
        assert "boom" in reason


async def test_a_server_killed_by_a_signal_is_reported_as_such_with_its_own_stderr_and_no_secret(
    tmp_path: Path,
) -> None:
    """The reaper once died re-raising SIGKILL (a handler cannot be set for it): the report read
    "exit status 1; stderr: … OSError: [Errno 22]". And stderr is quoted to clients: redacted."""
    script = "import os, sys; sys.stderr.write('OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx12 dying\\n'); "
    script += "sys.stderr.flush(); os.kill(os.getpid(), 9)"
    entry = {"command": sys.executable, "args": ["-c", script]}
    async with running_gateway(make_config({"k": entry}), tmp_path) as (gw, _), Client(gw.server, mode="legacy") as c:
        result = await c.call_tool("k__anything", {})
    message = text(result)
    assert result.is_error and "Server 'k' is not available" in message, message
    assert "killed by SIGKILL" in message and "dying" in message, message
    assert "OSError" not in message and "Errno" not in message, message
    assert "sk-proj-abcdef" not in message and "[REDACTED]" in message, message


async def test_an_error_text_quoting_stderr_is_redacted_with_the_configured_patterns(tmp_path: Path) -> None:
    script = "import sys; sys.stderr.write('connecting with db-pass-4242\\n'); sys.exit(2)"
    entry = {"command": sys.executable, "args": ["-c", script]}
    results = {"redact": True, "redact_patterns": ["db-pass-[0-9]+"]}
    cfg = make_config({"k": entry}, constraints={"enabled": True, "results": results})
    async with running_gateway(cfg, tmp_path) as (gw, _), Client(gw.server, mode="legacy") as c:
        result = await c.call_tool("k__anything", {})
    assert result.is_error and "exit status 2" in text(result), text(result)
    assert "db-pass-4242" not in text(result) and "connecting with [REDACTED]" in text(result)


async def test_a_server_that_never_came_up_is_named_not_taken_for_a_typo(tmp_path: Path) -> None:
    cfg = make_config({"gone": {"command": str(tmp_path / "no-such-binary")}, "fx": fixture_entry(tmp_path)})
    async with running_gateway(cfg, tmp_path) as (gw, _), Client(gw.server, mode="legacy") as client:
        down = await client.call_tool("gone__x", {})
        typo = await client.call_tool("nosuch__x", {})
    assert down.is_error and "Server 'gone' is not available" in text(down), text(down)
    assert "command not found" in text(down) and "Unknown tool" not in text(down)
    assert typo.is_error and "Unknown tool 'nosuch__x'" in text(typo)


@pytest.mark.parametrize(("reset", "delays"), [(None, [0.5, 1.0, 2.0]), (0.2, [0.5, 0.5, 0.5])])
async def test_the_restart_delay_starts_over_after_backoff_reset_seconds_up(
    tmp_path: Path, reset: float | None, delays: list[float]
) -> None:
    # The SDK-less raw server: it starts in milliseconds, and this test restarts it three times.
    entry: dict[str, Any] = {"command": sys.executable, "args": [RAW_SERVER]}
    if reset is not None:
        entry["backoff_reset_seconds"] = reset
    # A handshake-era client: a 2026-07-28 client's calls go to the server's second process.
    async with (
        running_gateway(make_config({"fx": entry}), tmp_path) as (gw, _),
        Client(gw.server, mode="legacy") as client,
    ):
        fx = gw.hub.downstreams["fx"]
        seen: list[float | None] = []
        for connects in range(2, 2 + len(delays)):
            await anyio.sleep(0.3)  # up longer than 0.2 s, far less than the default 10 s
            assert (await client.call_tool("fx__good", {"mode": "exit"})).is_error
            await wait_for(lambda n=connects: fx.connects == n)
            seen.append(fx.retry_delay)
        assert seen == delays


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_servers_own_minus_32000_is_its_answer_not_a_lost_connection(tmp_path: Path, mode: str) -> None:
    """-32000 is the SDK's code for a closed connection and a common "server error" code alike: a
    server answering with it is not restarted, and a sibling call in flight is answered.

    A handshake-era client's call goes on the gateway's raw channel; a 2026-07-28 client's through
    the SDK's session."""
    cfg = make_config({"a": fixture_entry(tmp_path)})
    async with running_gateway(cfg, tmp_path) as (gw, _), Client(gw.server, mode=mode) as client:  # type: ignore[arg-type]
        pid = text(await client.call_tool("a__pid", {}))
        sibling: list[mcp_types.CallToolResult] = []

        async def slow_call() -> None:
            sibling.append(await client.call_tool("a__sleep", {"seconds": 1}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow_call)
            answered = await client.call_tool("a__explode", {"code": -32000})
        assert answered.is_error
        assert "-32000" in text(answered) and "server error -32000" in text(answered)
        assert "restarted" not in text(answered)
        assert not sibling[0].is_error and text(sibling[0]) == "slept 1"
        assert text(await client.call_tool("a__pid", {})) == pid  # the same process: never restarted
        assert gw.hub.downstreams["a"].connects == 1
