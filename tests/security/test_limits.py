"""Message size caps and hostile bytes, at both ends: nothing kills, freezes or bloats the gateway."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import RAW_SERVER, TOOLSCORE, fixture_entry, make_config, running_gateway, text

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


async def test_a_result_over_the_limit_fails_that_call_only(tmp_path: Path) -> None:
    cfg = make_config({"fx": fixture_entry(tmp_path)}, toolscore={"max_result_bytes": 256 * 1024})
    async with running_gateway(cfg, tmp_path) as (gw, _), Client(gw.server, mode="legacy") as client:
        before = rss_kib(os.getpid())
        result = await client.call_tool("fx__large", {"size": 8 * 1024 * 1024})
        assert result.is_error and "exceeds the gateway's limit of 262144 bytes" in text(result)
        assert rss_kib(os.getpid()) - before < 8 * 1024  # the 8 MiB answer was never held whole
        # The connection is intact: the next call on it works.
        assert text(await client.call_tool("fx__echo", {"text": "still here"})) == "still here"
        assert gw.hub.downstreams["fx"].connects == 1


@pytest.mark.no_cover  # timed: coverage's tracer would be measured, not the code
async def test_a_large_result_does_not_stall_other_clients(tmp_path: Path) -> None:
    cfg = make_config({"big": fixture_entry(tmp_path), "fx": fixture_entry(tmp_path)})
    async with running_gateway(cfg, tmp_path) as (gw, _):
        # Each small call's CPU time in this process (the gateway's own work, on its loop): a busy
        # machine stretches the wall time of a call, not the CPU this process spends blocking it.

        async def longest_stall() -> float:
            lags: list[float] = []
            done = anyio.Event()

            async def other_client() -> None:
                async with Client(gw.server, mode="legacy") as client:
                    while not done.is_set():
                        began = time.process_time()
                        assert text(await client.call_tool("fx__echo", {"text": "x"})) == "x"
                        lags.append(time.process_time() - began)

            async with anyio.create_task_group() as tg, Client(gw.server, mode="legacy") as client:
                tg.start_soon(other_client)
                result = await client.call_tool("big__large", {"size": 31 * 1024 * 1024})
                done.set()
            assert not result.is_error and len(text(result)) == 31 * 1024 * 1024
            assert len(lags) > 1
            return max(lags)

        # The SDK's reader re-copied its buffer per chunk: 31 MiB stalled every other client for
        # about a second, every time. Now the longest is one parse of the line (about 0.15 s). A
        # virtual machine counts time stolen by its neighbours as CPU time, so a stall over the
        # bound is measured again (twice at most): only a slow gateway is slow every time.
        stalls = [await longest_stall()]
        while stalls[-1] >= 0.6 and len(stalls) < 3:
            stalls.append(await longest_stall())
    assert min(stalls) < 0.6, stalls


async def test_invalid_utf8_and_noise_from_a_server_do_not_drop_it(tmp_path: Path) -> None:
    cfg = make_config({"raw": {"command": sys.executable, "args": [RAW_SERVER]}})
    async with running_gateway(cfg, tmp_path) as (gw, _), Client(gw.server, mode="legacy") as client:
        assert text(await client.call_tool("raw__good", {"mode": "latin1"})) == "caf\ufffd"
        assert text(await client.call_tool("raw__good", {"mode": "noise"})) == "ok"
        assert text(await client.call_tool("raw__good", {})) == "ok"
        assert gw.hub.downstreams["raw"].connects == 1


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_lone_surrogate_in_a_servers_result_is_replaced_not_dropped(tmp_path: Path, mode: str) -> None:
    """Such a line was dropped as not JSON-RPC: the call hung until its deadline. The legacy client's
    call takes the gateway's raw channel, the 2026-07-28 client's the SDK's session."""
    cfg = make_config({"raw": {"command": sys.executable, "args": [RAW_SERVER], "timeout": 60}})
    async with running_gateway(cfg, tmp_path) as (gw, _), Client(gw.server, mode=mode) as client:  # type: ignore[arg-type]
        with anyio.fail_after(30):  # a hang detector: the answer is there at once
            result = await client.call_tool("raw__good", {"mode": "surrogate"})
        assert not result.is_error and text(result) == "a\ufffdb"
        assert text(await client.call_tool("raw__good", {})) == "ok"
        assert gw.hub.downstreams["raw"].connects == 1


@pytest.fixture(scope="module")
def stdio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[bytes]]:
    """`toolscore serve` over stdio, initialized, with a 1 MiB request cap: one for the module, so
    each test also shows that the inputs before it left the gateway answering."""
    tmp_path = tmp_path_factory.mktemp("stdio")
    path = tmp_path / "servers.json"
    settings = {"max_request_bytes": 1024 * 1024, "startup_grace_seconds": None}
    config = {"mcpServers": {"fx": fixture_entry(tmp_path)}, "toolscore": settings}
    path.write_text(json.dumps(config))
    proc = subprocess.Popen(
        [TOOLSCORE, "serve", "--config", str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
    send(proc, json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}).encode())
    assert answer(proc)["id"] == 0
    send(proc, b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
    yield proc
    proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


def send(proc: subprocess.Popen[bytes], line: bytes) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + b"\n")
    proc.stdin.flush()


def answer(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "the gateway closed stdout"
    value: dict[str, Any] = json.loads(line)
    return value


def call(proc: subprocess.Popen[bytes], request_id: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments}
    send(proc, json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}).encode())
    return answer(proc)


def test_an_oversized_request_gets_an_error_for_its_id_and_is_never_held(stdio: subprocess.Popen[bytes]) -> None:
    before = rss_kib(stdio.pid)
    huge = (
        b'{"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": {"name": "fx__echo", "arguments": {"text": "'
    )
    send(stdio, huge + b"x" * (50 * 1024 * 1024) + b'"}}}')
    reply = answer(stdio)
    assert reply["id"] == 41 and "exceeds 1048576 bytes" in reply["error"]["message"]
    assert rss_kib(stdio.pid) - before < 16 * 1024
    assert call(stdio, 42, "fx__echo", {"text": "next"})["result"]["content"][0]["text"] == "next"


@pytest.mark.parametrize(
    ("line", "code", "request_id"),
    [
        (b"{not json", -32700, None),
        (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": "\xff\xfe"}', -32700, None),
        (b"[" * 100_000 + b"]" * 100_000, -32700, None),
        (b'{"jsonrpc": "2.0", "id": 8}', -32600, 8),
        (b'{"jsonrpc": "2.0", "id": {"an": "object"}, "method": "tools/list"}', -32600, None),
    ],
    ids=["bad-json", "bad-utf8", "deep-nesting", "no-method", "object-id"],
)
def test_unreadable_requests_are_answered_not_ignored(
    stdio: subprocess.Popen[bytes], line: bytes, code: int, request_id: int | None
) -> None:
    send(stdio, line)
    reply = answer(stdio)
    assert reply["error"]["code"] == code and reply["id"] == request_id
    assert call(stdio, 9, "fx__echo", {"text": "alive"})["result"]["content"][0]["text"] == "alive"
