"""A client's calls in flight are capped (`toolscore.max_calls_in_flight`): the excess is answered at
once with an error naming the cap, the reader never waits, and a freed slot is taken again.

Before, 40,000 `tools/call` in one write held +518 MB and a `ping` waited 34 s behind them. The
calls here wait on `tests/fixtures/backchannel_server.py`'s `ask` until released (no clock): over
stdio in both eras, in memory (two clients, and plans), and over HTTP, where a handshake session
and a 2026-07-28 principal are each one client.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client

from tests.conftest import (
    FIXTURES,
    TOOLSCORE,
    fixture_entry,
    free_port,
    http_client,
    make_config,
    running_gateway,
    text,
    wait_until_answering,
    write_config,
)
from tests.security.test_limits import answer
from tests.security.test_limits import send as write

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

SERVER = {"command": sys.executable, "args": [str(FIXTURES / "backchannel_server.py")], "timeout": 120}
CAP = 4


def _ask(request_id: int) -> bytes:
    params = {"name": "bc__ask", "arguments": {"what": "log", "text": str(request_id)}}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}).encode()


def _in_era(line: bytes) -> bytes:
    """A request as a 2026-07-28 client sends it: no handshake, its era in each request's `_meta`."""
    message = json.loads(line)
    message.setdefault("params", {})["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return json.dumps(message).encode()


def _responses(proc: subprocess.Popen[bytes], count: int) -> dict[Any, dict[str, Any]]:
    """The next `count` responses by id (notifications the gateway sends meanwhile are skipped)."""
    found: dict[Any, dict[str, Any]] = {}
    while len(found) < count:
        message = answer(proc)
        if "id" in message and "method" not in message:
            found[message["id"]] = message
    return found


@pytest.mark.parametrize("era", ["handshake", "2026-07-28"])  # the hot path and express lane; the SDK's path
def test_stdio_answers_calls_over_the_cap_at_once_and_frees_slots_as_calls_end(tmp_path: Path, era: str) -> None:
    config = write_config(tmp_path, {"bc": SERVER})
    settings = json.loads(config.read_text())
    settings["toolscore"]["max_calls_in_flight"] = CAP
    config.write_text(json.dumps(settings))
    proc = subprocess.Popen(
        [TOOLSCORE, "serve", "--config", str(config)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    modern = era != "handshake"

    def send(proc: subprocess.Popen[bytes], data: bytes) -> None:
        lines = data.split(b"\n")
        write(proc, b"\n".join(_in_era(line) if modern and b'"id"' in line else line for line in lines))

    try:
        if not modern:
            init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
            send(proc, json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}).encode())
            assert answer(proc)["id"] == 0
            send(proc, b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        # CAP calls that wait, then three more and a ping, all in one write (2026-07-28 has no
        # ping: a tools/list stands in for it).
        probe = b'{"jsonrpc":"2.0","id":"p","method":"' + (b"tools/list" if modern else b"ping") + b'"}'
        burst = [_ask(n) for n in range(1, CAP + 4)] + [probe]
        send(proc, b"\n".join(burst))
        by_id = _responses(proc, 4)  # the three over the cap and the ping: nothing else can end
        assert "result" in by_id["p"], by_id
        over = [by_id[n] for n in range(CAP + 1, CAP + 4)]
        for reply in over:
            result = reply["result"]
            assert result["isError"] and "max_calls_in_flight" in result["content"][0]["text"], result
            assert f"{CAP} calls in flight" in result["content"][0]["text"]
        # Ending one waiting call frees its slot (a cancelled call gets no answer): the release
        # takes it (sent again while it is refused: the cancel may still be under way), and every
        # other call in flight is answered.
        send(proc, b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}')
        release_id = 100
        while True:
            release_id += 1
            params = {"name": "bc__release", "arguments": {"count": CAP - 1}}
            send(
                proc,
                json.dumps({"jsonrpc": "2.0", "id": release_id, "method": "tools/call", "params": params}).encode(),
            )
            first = _responses(proc, 1)
            if release_id not in first or not first[release_id]["result"].get("isError"):
                break
            assert "max_calls_in_flight" in first[release_id]["result"]["content"][0]["text"], first
        done = first | _responses(proc, CAP - 1)  # the release and the CAP - 1 calls still waiting
        assert done[release_id]["result"]["content"][0]["text"] == "released", done
        assert [done[n]["result"]["content"][0]["text"] for n in range(2, CAP + 1)] == ["logged"] * (CAP - 1), done
    finally:
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


async def test_one_clients_cap_leaves_another_client_its_own(tmp_path: Path) -> None:
    cfg = make_config({"bc": SERVER}, toolscore={"max_calls_in_flight": CAP})
    async with (
        running_gateway(cfg, tmp_path) as (gw, sink),
        Client(gw.server, mode="legacy") as busy,
        Client(gw.server, mode="legacy") as other,
    ):
        results: list[mcp_types.CallToolResult] = []

        async def ask(n: int) -> None:
            results.append(await busy.call_tool("bc__ask", {"what": "log", "text": str(n)}))

        with anyio.fail_after(60):  # a hang detector
            async with anyio.create_task_group() as tg:
                for n in range(CAP):
                    tg.start_soon(ask, n)
                await anyio.wait_all_tasks_blocked()
                refused = await busy.call_tool("bc__ask", {"what": "log", "text": "over"})
                assert refused.is_error and "max_calls_in_flight" in text(refused)
                # The other client is not held to the busy one's cap: it releases the busy one's calls.
                assert text(await other.call_tool("bc__release", {"count": CAP})) == "released"
        assert [text(r) for r in results] == ["logged"] * CAP
        kinds: list[Any] = [r.error_kind for r in sink.records if r.tool == "bc__ask"]
        assert kinds.count("rejected") == 1


async def test_a_plan_holds_one_of_its_clients_calls_in_flight(tmp_path: Path) -> None:
    # orchestrate runs no engine call of its own: once, any number of plans ran at once uncounted.
    cfg = make_config({"bc": SERVER}, toolscore={"max_calls_in_flight": CAP})
    async with (
        running_gateway(cfg, tmp_path) as (gw, _),
        Client(gw.server, mode="legacy") as busy,
        Client(gw.server, mode="legacy") as other,
    ):
        plans: list[mcp_types.CallToolResult] = []

        async def plan(n: int) -> None:
            step = f'<call server="bc" tool="ask">{{"what": "log", "text": "{n}"}}</call>'
            plans.append(await busy.call_tool("orchestrate", {"plan": step}))

        with anyio.fail_after(60):  # a hang detector
            async with anyio.create_task_group() as tg:
                for n in range(CAP):
                    tg.start_soon(plan, n)
                await anyio.wait_all_tasks_blocked()
                for name, arguments in (("orchestrate", {"plan": "<bc__ask/>"}), ("bc__ask", {})):
                    refused = await busy.call_tool(name, arguments)
                    assert refused.is_error and f"{CAP} calls in flight" in text(refused), text(refused)
                assert text(await other.call_tool("bc__release", {"count": CAP})) == "released"
        assert len(plans) == CAP and all(not p.is_error and "logged" in text(p) for p in plans), [
            text(p) for p in plans
        ]
        # Every slot was given back: the busy client is served again.
        assert text(await busy.call_tool("bc__ask", {"what": "log", "text": "again"})) == "logged"


# --- the HTTP front: a cap per session (handshake era), per principal (2026-07-28) ------------------

ALICE, BOB = "alice-0123456789abcdefghij", "bob-9876543210zyxwvutsrqpo"


@pytest.fixture(scope="module")
def http_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway over HTTP with a token per principal, capped at CAP, in front of `fx` and one
    backchannel server per test (`legacy`, `auto`): a server's release lets every later ask through."""
    tmp_path = tmp_path_factory.mktemp("http")
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {ALICE}\nbob {BOB}\n")
    tokens.chmod(0o600)
    settings = {"audit": {"path": ""}, "log_dir": str(tmp_path / "logs"), "startup_grace_seconds": None}
    config = write_config(
        tmp_path,
        {"legacy": SERVER, "auto": SERVER, "fx": fixture_entry(tmp_path)},
        toolscore={**settings, "max_calls_in_flight": CAP},
    )
    port = free_port()
    argv = [TOOLSCORE, "serve", "--transport", "http", "--config", str(config), "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if k != "TOOLSCORE_TOKEN"}
    proc = subprocess.Popen([*argv, "--token-file", str(tokens)], stderr=subprocess.DEVNULL, env=env)
    try:
        wait_until_answering(f"http://127.0.0.1:{port}/", proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # a handshake session; 2026-07-28 requests
async def test_http_caps_each_session_or_principal_apart(http_url: str, mode: str) -> None:
    # Handshake era: alice's second session is another client. 2026-07-28: bob is; alice's
    # requests are one client however many connections carry them.
    other_token = ALICE if mode == "legacy" else BOB
    async with http_client(http_url, ALICE, mode) as busy, http_client(http_url, other_token, mode) as other:
        results: list[mcp_types.CallToolResult] = []

        async def ask(n: int) -> None:
            # Each request is a POST of its own, so a quick call below may take a slot before the
            # last ask does (the ask is then refused): it asks again until it holds one.
            while (result := await busy.call_tool(f"{mode}__ask", {"what": "log", "text": str(n)})).is_error:
                assert "max_calls_in_flight" in text(result), text(result)
                await anyio.sleep(0.01)
            results.append(result)

        with anyio.fail_after(120):  # a hang detector
            async with anyio.create_task_group() as tg:
                for n in range(CAP):
                    tg.start_soon(ask, n)
                # A quick call is taken until the CAP asks are all in flight, then refused at once.
                while not (quick := await busy.call_tool("fx__echo", {"text": "q"})).is_error:
                    assert text(quick) == "q"
                    await anyio.sleep(0.01)  # its slot free a while, for an ask it was taken from
                assert f"{CAP} calls in flight" in text(quick) and "max_calls_in_flight" in text(quick)
                assert text(await other.call_tool("fx__echo", {"text": "other"})) == "other"
                assert text(await other.call_tool(f"{mode}__release", {"count": CAP})) == "released"
        assert [text(r) for r in results] == ["logged"] * CAP
