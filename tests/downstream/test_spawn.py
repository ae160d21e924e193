"""Servers started before the gateway's imports: taken by the first connection, or killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.conftest import RAW_SERVER, fixture_entry
from toolscore import parse_config
from toolscore._gateway import open_gateway
from toolscore.config import ServerConfig
from toolscore.downstream import spawn

pytestmark = pytest.mark.e2e  # they start processes

_WAIT = "import sys; sys.stdin.read()"
"""A server that runs until its stdin closes."""


def _processes() -> dict[int, int]:
    """pid -> parent pid of every live process, from /proc."""
    found: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            state, parent = stat[stat.rindex(")") + 2 :].split()[:2]
            if state != "Z":
                found[int(entry)] = int(parent)
    return found


def _is_reaper(pid: int) -> bool:
    try:
        return b"_reaper.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _children() -> set[int]:
    """The live processes `spawn.start` gave this process: the children of its one reaper (or,
    without the reaper, its own children)."""
    processes = _processes()
    mine = {pid for pid, parent in processes.items() if parent == os.getpid()}
    reapers = {pid for pid in mine if _is_reaper(pid)}
    return {pid for pid, parent in processes.items() if parent in reapers} | (mine - reapers)


@pytest.fixture
def clean() -> Iterator[None]:
    yield
    spawn.abandon_early()


def _server(name: str, *args: str) -> ServerConfig:
    return ServerConfig(name=name, command=sys.executable, args=("-c", _WAIT, *args))


@pytest.mark.usefixtures("clean")
def test_the_first_start_of_the_same_command_takes_the_early_process_and_its_log(tmp_path: Path) -> None:
    server = _server("a")
    spawn.start_early([server], tmp_path)
    early = _children()
    assert len(early) == 1
    log = spawn.take_errlog(server)
    assert log is not None
    errlog, log_start = log
    assert log_start == (tmp_path / "a.log").stat().st_size  # after the header
    popen = spawn.start(server.command or "", server.args, server.env, server.cwd, errlog)
    assert {popen.pid} == early  # no second process
    again = spawn.start(server.command or "", server.args, server.env, server.cwd, errlog)
    assert again.pid not in early  # the next start (a reconnection) is a new process
    for started in (popen, again):
        assert started.stdin is not None and started.stdout is not None
        started.stdin.close()
        started.wait(10)
        started.stdout.close()
    errlog.close()


@pytest.mark.usefixtures("clean")
def test_servers_never_taken_are_killed(tmp_path: Path) -> None:
    spawn.start_early([_server("a"), _server("b", "second")], tmp_path)
    started = _children()
    assert len(started) == 2
    spawn.abandon_early()
    deadline = time.monotonic() + 60
    while _children() & started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _children() & started


@pytest.mark.usefixtures("clean")
def test_of_two_identical_servers_only_the_first_starts_early_and_a_missing_command_not_at_all(tmp_path: Path) -> None:
    missing = ServerConfig(name="gone", command="/nonexistent/server")
    http = ServerConfig(name="web", url="http://127.0.0.1:9/mcp")
    spawn.start_early([_server("a"), _server("twin"), missing, http], tmp_path)
    assert len(_children()) == 1
    assert spawn.take_errlog(_server("twin")) is None  # its own connection opens its own log
    log = spawn.take_errlog(missing)  # open, with its header: the hub's attempt reports there
    assert log is not None
    log[0].close()
    assert (tmp_path / "gone.log").read_text().count("--- toolscore: starting 'gone'") == 1


@pytest.mark.usefixtures("clean")
@pytest.mark.anyio
async def test_a_server_started_early_reports_its_start_from_its_process_start(tmp_path: Path) -> None:
    """`check` showed 0.03 s (the handshake with a server started early) where the console showed
    the server's whole start: both now count from the process's start."""
    config = parse_config({"mcpServers": {"fx": fixture_entry(tmp_path)}}, source=str(tmp_path / "s.json"), env={})
    began = time.perf_counter()
    spawn.start_early(config.enabled_servers, tmp_path)
    await anyio.sleep(3)  # the connection begins at least this long after the process started
    waited = time.perf_counter() - began
    async with open_gateway(config, log_dir=tmp_path) as gw:
        await gw.hub.wait_started()
        (status,) = gw.hub.statuses()
    assert status.state.value == "up" and status.start_seconds is not None
    assert status.start_seconds >= waited


_GATEWAY = """\
import sys, time
from toolscore.config import ServerConfig
from toolscore.downstream import spawn
script = "setsid sleep 600 </dev/null >/dev/null 2>&1 & exec sleep 600"
for name in ("a", "b", "c"):
    spawn.start("sh", ["-c", script, name], None, None, None)
print("started", flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not spawn.USE_REAPER, reason="the reaper runs on Linux")
def test_one_reaper_runs_every_server_and_the_gateway_killed_takes_them_all_down(tmp_path: Path) -> None:
    """Three servers, each leaving a process in a session of its own: one reaper process (one
    Python start) above them all, and a SIGKILL of the gateway kills every one of them."""
    import signal
    import subprocess

    gateway = subprocess.Popen([sys.executable, "-c", _GATEWAY], stdout=subprocess.PIPE)
    try:
        assert gateway.stdout is not None and gateway.stdout.readline() == b"started\n"
        deadline = time.monotonic() + 60
        while True:  # the three sleeps and the three they started, below one reaper
            processes = _processes()
            reapers = [pid for pid, parent in processes.items() if parent == gateway.pid]
            below: list[int] = []
            todo = list(reapers)
            while todo:
                top = todo.pop()
                kids = [pid for pid, parent in processes.items() if parent == top]
                below += kids
                todo += kids
            sleeps = [pid for pid in below if Path(f"/proc/{pid}/comm").read_text().strip() == "sleep"]
            if len(sleeps) == 6:
                break
            assert time.monotonic() < deadline, (reapers, below)
            time.sleep(0.05)
        assert len(reapers) == 1 and _is_reaper(reapers[0])
        gateway.send_signal(signal.SIGKILL)
        gateway.wait(10)
        deadline = time.monotonic() + 60
        while (left := set(below) & set(_processes())) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left, f"left running after the gateway's SIGKILL: {sorted(left)}"
    finally:
        if gateway.poll() is None:
            gateway.kill()
        gateway.wait()
        assert gateway.stdout is not None
        gateway.stdout.close()


def test_the_reaper_ends_with_the_interpreter_that_started_it(tmp_path: Path) -> None:
    """At exit the gateway's process closes its reaper's socket and collects it: no reaper left to
    outlive it unwaited (Python warns of a child still running at exit in development mode)."""
    script = tmp_path / "gateway.py"
    script.write_text(
        "import anyio, json, sys\n"
        "from toolscore import parse_config\n"
        "from toolscore._gateway import open_gateway\n"
        "async def main() -> None:\n"
        "    entry = json.loads(sys.argv[1])\n"
        "    async with open_gateway(parse_config({'mcpServers': {'a': entry}})) as gw:\n"
        "        await gw.hub.wait_started()\n"
        "        assert gw.hub.downstreams['a'].protocol_version is not None  # it came up\n"
        "anyio.run(main)\n"
    )
    entry = {"command": sys.executable, "args": [RAW_SERVER]}  # a server without the SDK: a cheap start
    env = {**os.environ, "TOOLSCORE_STATE_DIR": str(tmp_path / "state")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    run = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "always::ResourceWarning", str(script), json.dumps(entry)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "still running" not in run.stderr, run.stderr[-2000:]
