"""Every transport reaches the same server: streamable HTTP and SSE downstreams (real sockets), and
the in-memory transport's connection ending like a dead child when killed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import FIXTURE_SERVER, free_port, make_config, memory_gateway, running_gateway, text, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def http_fixture(tmp_path: Path) -> Iterator[Callable[[str], int]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(flag: str) -> int:
        port = free_port()
        env = {**os.environ, "FIXTURE_STATE_DIR": str(tmp_path)}
        procs.append(subprocess.Popen([sys.executable, FIXTURE_SERVER, flag, str(port)], env=env))
        return port

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(60)


@pytest.mark.parametrize(("flag", "entry"), [("--http", {"type": "http"}), ("--sse", {"type": "sse"})])
@pytest.mark.e2e
async def test_http_and_sse_downstreams(
    tmp_path: Path, http_fixture: Callable[[str], int], flag: str, entry: dict[str, str]
) -> None:
    port = http_fixture(flag)
    path = "/mcp" if flag == "--http" else "/sse"
    cfg = make_config({"web": {**entry, "url": f"http://127.0.0.1:{port}{path}", "connect_timeout": 15}})
    # The fixture needs a moment to bind; the hub retries with backoff until it answers.
    async with running_gateway(cfg, tmp_path) as (gw, _):
        await wait_for(lambda: gw.hub.unavailable_reason("web") is None, 20)
        async with Client(gw.server, mode="legacy") as client:
            assert text(await client.call_tool("web__echo", {"text": "over http"})) == "over http"
            result = await client.call_tool("web__add", {"a": 1, "b": 1})
            assert result.structured_content == {"sum": 2}


async def test_a_killed_in_memory_server_comes_back_like_a_child_would(tmp_path: Path) -> None:
    async with memory_gateway(tmp_path) as (gw, _), Client(gw.server, mode="legacy") as client:
        downstream = gw.hub.downstreams["fx"]
        assert downstream.transport.kind == "memory" and downstream.pid is None
        downstream.restart("killed by the test")
        await wait_for(lambda: downstream.connects == 2)
        assert text(await client.call_tool("fx__echo", {"text": "back"})) == "back"
