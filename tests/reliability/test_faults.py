"""Faults against real subprocesses: wedged servers, and the gateway killed under load.

The rest of the fault list is tested where its code lives; `REFERENCED` names those tests, and
`test_the_referenced_fault_tests_exist` keeps the list honest:
"""

from __future__ import annotations

import importlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import (
    FIXTURE_SERVER,
    TOOLSCORE,
    fixture_entry,
    free_port,
    make_config,
    running_gateway,
    text,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.e2e

REFERENCED = {
    "kill -9 mid-call: that call errors, the others keep working, back within 2 s": (
        "tests.downstream.test_child",
        "test_a_killed_server_fails_its_call_others_keep_working_and_it_comes_back",
    ),
    "a downstream that hangs at start": (
        "tests.downstream.test_startup",
        "test_a_server_that_hangs_at_start_does_not_block_initialize",
    ),
    "a downstream that hangs mid-call": (
        "tests.security.test_isolation",
        "test_a_server_that_stops_answering_is_killed_and_restarted",
    ),
    "a downstream that writes garbage to stdout": (
        "tests.security.test_limits",
        "test_invalid_utf8_and_noise_from_a_server_do_not_drop_it",
    ),
    "a downstream that exits at once": (
        "tests.downstream.test_child",
        "test_a_server_that_exits_at_once_says_why_in_the_unavailable_message",
    ),
    "a SIGSTOPped downstream, detected by a timed-out call": (
        "tests.security.test_isolation",
        "test_a_stopped_server_is_detected_and_restarted",
    ),
}


def test_the_referenced_fault_tests_exist() -> None:
    for module, name in REFERENCED.values():
        assert callable(getattr(importlib.import_module(module), name)), f"{module}::{name}"


# -- health checks and the circuit breaker ---------------------------------------------------------


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is as good as gone


def checked(tmp_path: Path, **server: Any) -> Any:
    """A gateway whose server is pinged every 0.3 s and must answer within 0.5 s; calls may take 60 s."""
    options = {"timeout": 60, "health_interval": 0.3, "ping_timeout": 0.5, "breaker_cooldown": 0.5, **server}
    return running_gateway(make_config({"fx": fixture_entry(tmp_path, **options)}), tmp_path)


@pytest.mark.anyio
async def test_an_idle_wedged_server_fails_calls_fast_then_is_restarted(tmp_path: Path) -> None:
    async with (
        checked(tmp_path, breaker_failures=1, health_failures=4) as (gw, sink),
        Client(gw.server, mode="legacy") as client,
    ):
        fx = gw.hub.downstreams["fx"]
        before = int(text(await client.call_tool("fx__pid", {})))
        os.kill(before, signal.SIGSTOP)  # no call in flight: only the health check can notice
        try:
            await wait_for(lambda: fx.breaker.state != "closed")
            # A hang detector only: a call sent to the stopped server would end at the 60 s call
            # timeout with another answer than the breaker's.
            with anyio.fail_after(120):
                result = await client.call_tool("fx__echo", {"text": "anyone?"})
            assert result.is_error and "unhealthy: " in text(result) and "calls fail fast" in text(result)
            assert "no answer to ping within 0.5 s" in text(result)
            await wait_for(lambda: fx.connects >= 2)  # restarted after 4 failed checks in a row
            assert not alive(before)
            assert text(await client.call_tool("fx__echo", {"text": "back"})) == "back"
            assert fx.breaker.state == "closed"
        finally:
            if alive(before):
                os.kill(before, signal.SIGKILL)
        refused = [r for r in sink.records if r.server == "fx" and not r.success]
        assert refused and all("unhealthy" in (r.error or "") for r in refused)


@pytest.mark.anyio
async def test_a_server_that_recovers_closes_the_breaker_at_the_half_open_probe(tmp_path: Path) -> None:
    async with (
        checked(tmp_path, breaker_failures=1, health_failures=1000) as (gw, _),
        Client(gw.server, mode="legacy") as client,
    ):
        fx = gw.hub.downstreams["fx"]
        pid = int(text(await client.call_tool("fx__pid", {})))
        os.kill(pid, signal.SIGSTOP)
        try:
            await wait_for(lambda: fx.breaker.state != "closed")
        finally:
            os.kill(pid, signal.SIGCONT)
        await wait_for(lambda: fx.breaker.state == "closed")
        assert text(await client.call_tool("fx__echo", {"text": "still me"})) == "still me"
        assert fx.connects == 1 and int(text(await client.call_tool("fx__pid", {}))) == pid


@pytest.mark.anyio
async def test_a_call_inside_its_deadline_is_not_ended_by_the_health_check(tmp_path: Path) -> None:
    """A server busy with a call (here one blocking its own loop, as code that sleeps in a sandbox)
    answers no ping until the call ends; the call's deadline decides, not two failed checks."""
    async with (
        checked(tmp_path, breaker_failures=1, health_failures=2) as (gw, _),
        Client(gw.server, mode="legacy") as client,
    ):
        fx = gw.hub.downstreams["fx"]
        # Long enough for several checks (every 0.3 s, 0.5 s to answer): once ended two of them.
        result = await client.call_tool("fx__spin", {"seconds": 4})
        assert not result.is_error and text(result) == "spun", text(result)
        assert fx.connects == 1 and fx.breaker.state == "closed"
        assert text(await client.call_tool("fx__echo", {"text": "after"})) == "after"


# -- the gateway killed ------------------------------------------------------------------------------


def descendants(pid: int) -> dict[int, str]:
    """Every live process below `pid`, with its command name."""
    found: dict[int, str] = {}
    stack = [pid]
    while stack:
        parent = stack.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                try:
                    found[child] = Path(f"/proc/{child}/comm").read_text().strip()
                except OSError:
                    continue
                stack.append(child)
    return found


def spawner(tmp_path: Path) -> dict[str, Any]:
    """A fixture server that first starts what real servers start, each trying to outlive it: a
    node process in a session of its own that ignores SIGTERM, a bwrap sandbox, a headless
    chromium (whose crash handler starts its own session too)."""
    quiet = "</dev/null >/dev/null 2>&1 &"
    script = "\n".join(
        [
            f"setsid node -e 'process.on(\"SIGTERM\", () => {{}}); setInterval(() => {{}}, 1000)' {quiet}",
            f"bwrap --ro-bind / / --dev /dev --proc /proc sleep 600 {quiet}",
            f"setsid chromium --headless --no-sandbox --disable-gpu --user-data-dir={tmp_path / 'chromium'} "
            f"about:blank {quiet}",
            f"exec {shlex.quote(sys.executable)} {shlex.quote(FIXTURE_SERVER)}",
        ]
    )
    return {"command": "sh", "args": ["-c", script], "env": {"FIXTURE_STATE_DIR": str(tmp_path)}}


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`toolscore serve` (stdio) over the spawner, once everything it starts is running."""
    path = write_config(tmp_path, {"fx": spawner(tmp_path)})
    proc = subprocess.Popen(
        [TOOLSCORE, "serve", "--config", str(path)], stdin=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while not {"node", "bwrap", "sleep", "chromium"} <= set(descendants(proc.pid).values()):
            assert time.monotonic() < deadline, descendants(proc.pid)
            time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        assert proc.stdin is not None
        proc.stdin.close()


@pytest.mark.skipif(not all(map(shutil.which, ("node", "bwrap", "chromium"))), reason="needs node, bwrap, chromium")
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_the_gateway_killed_leaves_no_process_behind(serving: subprocess.Popen[bytes], signum: int) -> None:
    deadline = time.monotonic() + 60  # a hang detector: chromium starts its helpers
    while len(left := descendants(serving.pid)) < 5:
        assert time.monotonic() < deadline, left
        time.sleep(0.05)
    serving.send_signal(signum)
    serving.wait(timeout=60)
    deadline = time.monotonic() + 60
    while (survivors := {p: name for p, name in left.items() if alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not survivors, f"left running after {signal.Signals(signum).name}: {survivors}"


@pytest.fixture
def http_serving(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    path = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    port = free_port()
    argv = [TOOLSCORE, "serve", "--transport", "http", "--port", str(port), "--config", str(path)]
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.anyio
async def test_kill_9_of_the_gateway_during_a_burst_leaves_every_audit_line_whole(
    tmp_path: Path, http_serving: tuple[subprocess.Popen[bytes], int]
) -> None:
    proc, port = http_serving
    audit = tmp_path / "audit.jsonl"
    url = f"http://127.0.0.1:{port}/mcp"

    async def caller(n: int) -> None:
        # Until the gateway dies under it: every error past that point is expected.
        with anyio.move_on_after(60):
            try:
                async with Client(streamable_http_client(url), mode="legacy") as client:
                    for i in range(10_000):
                        await client.call_tool("fx__echo", {"text": f"{n}:{i}:" + "x" * 300})
            except Exception:
                return

    await wait_for(lambda: _listening(port), 60)
    async with anyio.create_task_group() as tg:
        for n in range(8):
            tg.start_soon(caller, n)
        # Enough records that the kill lands mid-burst (the volume is not the point).
        await wait_for(lambda: audit.exists() and audit.stat().st_size > 60_000)
        proc.kill()  # mid-burst: calls are being answered and recorded
    data = audit.read_bytes()
    assert data.endswith(b"\n"), data[-200:]  # no torn last line
    records = [json.loads(line) for line in data.splitlines()]
    assert len(records) > 50 and all(r["tool"] == "fx__echo" and r["server"] == "fx" for r in records)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
