"""The stdio front as MCP hosts run it: a real process, bare environment, raw pipes and real clients."""

from __future__ import annotations

import contextvars
import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import TOOLSCORE, fixture_entry, wait_for, write_config
from toolscore._lines import LineWriter
from toolscore.front.stdio import _IDLE_WORKERS, ClientLines, _Workers

pytestmark = pytest.mark.e2e


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _rpc(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(message) + "\n").encode())
    proc.stdin.flush()


def _read(proc: subprocess.Popen[bytes], msg_id: int) -> dict[str, Any]:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        assert line, "the gateway closed stdout"
        message = json.loads(line)  # every stdout line must be one JSON-RPC message
        assert message["jsonrpc"] == "2.0"
        if message.get("id") == msg_id:
            return message


@pytest.fixture
def stdio_gateway(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    path = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    # The bare environment MCP hosts give their servers, and cwd "/".
    env = {k: os.environ[k] for k in ("HOME", "PATH") if k in os.environ}
    proc = subprocess.Popen(
        [TOOLSCORE, "serve", "--config", str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd="/",
    )
    _rpc(
        proc,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        },
    )
    assert _read(proc, 1)["result"]["serverInfo"]["name"] == "toolscore"
    _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None and not pipe.closed:
            pipe.close()


def test_stdio_carries_only_json_rpc_and_exits_on_stdin_eof(stdio_gateway: subprocess.Popen[bytes]) -> None:
    proc = stdio_gateway
    _rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert len(_read(proc, 2)["result"]["tools"]) == 1 + 18  # orchestrate + the fixture's
    _rpc(proc, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "fx__pid", "arguments": {}}})
    child = int(_read(proc, 3)["result"]["content"][0]["text"])
    size = 200_000
    _rpc(
        proc,
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "fx__large", "arguments": {"size": size}},
        },
    )
    assert len(_read(proc, 4)["result"]["content"][0]["text"]) == size  # one line, whole
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    assert not alive(child)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_gateway_and_leaves_no_child(stdio_gateway: subprocess.Popen[bytes], signum: int) -> None:
    proc = stdio_gateway
    _rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "fx__pid", "arguments": {}}})
    child = int(_read(proc, 2)["result"]["content"][0]["text"])
    assert alive(child)
    proc.send_signal(signum)
    proc.wait(timeout=60)
    deadline = time.monotonic() + 60  # a hang detector
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_real_stdio_client_in_both_eras(tmp_path: Path, mode: str) -> None:
    path = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    params = StdioServerParameters(command=TOOLSCORE, args=["serve", "--config", str(path)])
    async with Client(params, mode=mode) as client:
        assert len((await client.list_tools()).tools) == 1 + 18  # orchestrate + the fixture's
        result = await client.call_tool("fx__add", {"a": 1, "b": 2})
        assert result.structured_content == {"sum": 3}


_WORKER: contextvars.ContextVar[int] = contextvars.ContextVar("worker")


class _Recorder:
    """Stands in for the hot path under `_Workers`: notes which task ran each call, and holds
    every call until released, so a burst's calls all run at once."""

    def __init__(self) -> None:
        self.tasks: list[int] = []
        self.release = anyio.Event()
        self._numbers = itertools.count()

    async def run(self, job: object, send: object) -> None:
        # A worker is one task, with a context of its own: it keeps its number from call to call
        # (task ids are addresses, reused once a task ends).
        number = _WORKER.get(None)
        if number is None:
            number = next(self._numbers)
            _WORKER.set(number)
        self.tasks.append(number)
        await self.release.wait()


@pytest.mark.anyio
async def test_workers_run_a_burst_at_once_and_keep_a_few_for_the_next() -> None:
    recorder = _Recorder()
    out = os.open(os.devnull, os.O_WRONLY)
    async with anyio.create_task_group() as tg:
        workers = _Workers(tg, recorder, ClientLines(LineWriter(out)))  # type: ignore[arg-type]
        for job in range(20):
            workers.run(job)  # type: ignore[arg-type]
        await wait_for(lambda: len(recorder.tasks) == 20)
        assert len(set(recorder.tasks)) == 20  # none waited for another
        recorder.release.set()
        await anyio.sleep(0.1)  # the burst's workers are done: a few wait, the rest ended
        first = set(recorder.tasks)
        recorder.tasks.clear()
        for job in range(10):  # one after another: the same few workers, no new ones
            workers.run(job)  # type: ignore[arg-type]
            await wait_for(lambda n=job + 1: len(recorder.tasks) == n)
        assert set(recorder.tasks) <= first
        await anyio.sleep(0.1)  # the last of them is waiting again
        recorder.release = anyio.Event()
        recorder.tasks.clear()
        for job in range(20):  # the next burst: the idle workers, and new ones for the rest
            workers.run(job)  # type: ignore[arg-type]
        await wait_for(lambda: len(recorder.tasks) == 20)
        assert len(set(recorder.tasks)) == 20
        assert len(set(recorder.tasks) & first) == _IDLE_WORKERS
        recorder.release.set()
        workers.end()
    workers.close()
    os.close(out)
