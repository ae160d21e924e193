"""Principals: one token per client in the token file, and per-client state keyed by who calls.

A handshake-era client is one caller per session; a 2026-07-28 request stands alone, so its caller
is the principal whose token it carries. Before, every 2026-07-28 request was one caller
(`principal:bearer`, or `anonymous`): two such clients shared an `isolation: "session"` instance,
so one read the other's state.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import TOOLSCORE, fixture_entry, free_port, http_client, text, wait_for, wait_until_answering
from toolscore.errors import ConfigError
from toolscore.front.http import SINGLE_PRINCIPAL, parse_token_file

# Fixed, not random: they appear in test ids, which every xdist worker must collect alike.
ALICE, BOB = "alice-0123456789abcdefghij", "bob-9876543210zyxwvutsrqpo"


# --- the token file (no process) -----------------------------------------------------------------


def test_a_token_file_names_one_principal_per_line_and_a_bare_token_is_one_principal() -> None:
    tokens = parse_token_file(f"# the team\nalice {ALICE}\n\nbob   {BOB}\n", "tokens")
    assert tokens.principal(ALICE.encode()) == "alice" and tokens.principal(BOB.encode()) == "bob"
    assert tokens.principal(b"x" * 32) is None and ALICE not in repr(tokens)
    single = parse_token_file(f"  {ALICE}\n", "token")
    assert single.principal(ALICE.encode()) == SINGLE_PRINCIPAL


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("", "holds no token"),
        ("# only a comment\n", "holds no token"),
        (f"alice {ALICE}\nalice {BOB}\n", "line 2: the name 'alice' is given twice"),
        (f"alice {ALICE}\nbob {ALICE}\n", "line 2: this token is already another name's"),
        (f"alice {ALICE}\nbob\n", "line 2: expected 'NAME TOKEN'"),
        (f"alice {ALICE} extra\n", "line 1: expected 'NAME TOKEN'"),
        (f"al/ice {ALICE}\n", "line 1: a name is 1-64 of"),
        ("alice short\n", "line 1 is shorter than 16 characters"),
    ],
)
def test_a_malformed_token_file_names_the_file_and_line_never_a_token(content: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_token_file(content, "tokens.txt")
    assert "tokens.txt" in str(caught.value) and says in str(caught.value), str(caught.value)
    assert ALICE not in str(caught.value) and BOB not in str(caught.value)


# --- two principals on one gateway (a process) ---------------------------------------------------


def _start(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen[bytes], str]:
    entry = fixture_entry(tmp_path, isolation="session")
    section = {"audit": {"path": ""}, "log_dir": str(tmp_path / "logs"), "startup_grace_seconds": None}
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"fx": entry}, "toolscore": section}))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "TOOLSCORE_TOKEN"}
    argv = [TOOLSCORE, "serve", "--transport", "http", "--config", str(config), "--port", str(port), *flags]
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL, env=env)
    wait_until_answering(f"http://127.0.0.1:{port}/", proc)
    return proc, f"http://127.0.0.1:{port}/mcp"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    assert proc.wait(timeout=60) == 0


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway with a token per principal (alice, bob) in front of an `isolation: "session"` server."""
    tmp_path = tmp_path_factory.mktemp("team")
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {ALICE}\nbob {BOB}\n")
    tokens.chmod(0o600)
    proc, url = _start(tmp_path, "--token-file", str(tokens))
    yield url
    _stop(proc)


@pytest.fixture(scope="module")
def open_front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A loopback gateway without tokens in front of the same kind of server."""
    proc, url = _start(tmp_path_factory.mktemp("open"))
    yield url
    _stop(proc)


async def _count(url: str, token: str | None, mode: str, key: str) -> mcp_types.CallToolResult:
    async with http_client(url, token, mode) as session:
        return await session.call_tool("fx__counter", {"key": key})


pytestmark = pytest.mark.e2e


@pytest.mark.anyio
async def test_two_principals_stateless_requests_get_instances_of_their_own(team: str) -> None:
    # Each request a new connection: only the token says who calls.
    assert text(await _count(team, ALICE, "auto", "k")) == "1"
    assert text(await _count(team, ALICE, "auto", "k")) == "2"  # alice's instance, again
    assert text(await _count(team, BOB, "auto", "k")) == "1"  # never alice's count
    assert text(await _count(team, ALICE, "auto", "k")) == "3"


@pytest.mark.anyio
async def test_handshake_sessions_are_one_client_each_whoever_holds_the_token(team: str) -> None:
    async with http_client(team, ALICE, "legacy") as one, http_client(team, ALICE, "legacy") as two:
        assert text(await one.call_tool("fx__counter", {"key": "s"})) == "1"
        assert text(await one.call_tool("fx__counter", {"key": "s"})) == "2"
        assert text(await two.call_tool("fx__counter", {"key": "s"})) == "1"


@pytest.mark.anyio
async def test_an_anonymous_stateless_request_to_a_per_client_server_is_refused_saying_why(open_front: str) -> None:
    refused = await _count(open_front, None, "auto", "k")
    assert refused.is_error
    assert "one instance per client" in text(refused) and "token file" in text(refused), text(refused)
    async with http_client(open_front, None, "legacy") as session:  # a session is a client: it works
        assert text(await session.call_tool("fx__counter", {"key": "k"})) == "1"


@pytest.mark.anyio
async def test_a_sessions_own_instance_stops_when_the_session_ends(open_front: str) -> None:
    """After `DELETE /mcp` (200) the session's instance ran on until the 10-minute idle limit."""
    async with http_client(open_front, None, "legacy") as session:
        pid = int(text(await session.call_tool("fx__pid", {})))
        assert Path(f"/proc/{pid}").exists()
    # The client closed its session (DELETE): the instance is stopped at the next reaping (5 s).
    await wait_for(lambda: not Path(f"/proc/{pid}").exists(), 60)  # a hang detector, not a speed check


SECRET_PLAN = '<fx><echo id="x">{"text": "alice\'s secret"}</echo></fx>'
READ_PLAN = '<fx><echo>{"text": "read: ${x.text}"}</echo></fx>'


async def _orchestrate(session: Client, plan: str, episode: str | None = None) -> mcp_types.CallToolResult:
    arguments = {"plan": plan} if episode is None else {"plan": plan, "episode": episode}
    return await session.call_tool("orchestrate", arguments)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_another_principal_cannot_continue_an_episode_by_its_id(team: str, mode: str) -> None:
    async with http_client(team, ALICE, mode) as alice:
        first = await _orchestrate(alice, SECRET_PLAN)
        assert first.structured_content is not None, text(first)
        episode = first.structured_content["episode"]
        assert len(episode) >= 32  # 128 random bits, in hex
        async with http_client(team, BOB, mode) as bob:
            stolen = await _orchestrate(bob, READ_PLAN, episode)
            assert stolen.is_error and "unknown or has expired" in text(stolen), text(stolen)
            assert "secret" not in text(stolen)
        own = await _orchestrate(alice, READ_PLAN, episode)
        assert "read: alice's secret" in text(own), text(own)


@pytest.mark.anyio
async def test_a_session_opened_with_one_principals_token_refuses_another_principals_token(team: str) -> None:
    opened: list[str] = []

    async def note(response: httpx2.Response) -> None:
        if "mcp-session-id" in response.headers:
            opened.append(response.headers["mcp-session-id"])

    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {ALICE}"}, timeout=60, event_hooks={"response": [note]}
        ) as http,
        Client(streamable_http_client(team, http_client=http), mode="legacy") as alice,  # type: ignore[arg-type]
    ):
        assert text(await alice.call_tool("fx__counter", {"key": "hijack"})) == "1"
        headers = {
            "Authorization": f"Bearer {BOB}",
            "Mcp-Session-Id": opened[0],
            "Mcp-Protocol-Version": "2025-11-25",
            "Accept": "application/json, text/event-stream",
        }
        call = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "fx__counter", "arguments": {"key": "hijack"}},
        }
        async with httpx2.AsyncClient(timeout=60) as bob:
            stolen = await bob.post(team, json=call, headers=headers)
            assert stolen.status_code == 404 and "Session not found" in stolen.text, stolen.text
            ended = await bob.delete(team, headers=headers)  # nor can bob end alice's session
            assert ended.status_code == 404
        assert text(await alice.call_tool("fx__counter", {"key": "hijack"})) == "2"  # bob's call never ran
