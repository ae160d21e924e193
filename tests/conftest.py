"""Shared test helpers: fixture-server configs and a running gateway over them."""

from __future__ import annotations

import itertools
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import coverage
import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.fixtures.fixture_server import build_server
from toolscore import Config, Gateway, MemoryAuditSink, open_gateway, parse_config, testing

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_SERVER = str(FIXTURES / "fixture_server.py")
RAW_SERVER = str(FIXTURES / "raw_server.py")
TOOLSCORE = str(Path(sys.executable).parent / "toolscore")
"""The console script, for tests whose subject is the process."""


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


_STATE_DIRS = itertools.count()


@pytest.fixture(autouse=True)
def _own_state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's gateways keep what they save by default (the ToolHub's learned scores, logs) in a
    folder of their own, created only when written: never the user's, and never another test's."""
    base = tmp_path_factory.getbasetemp() / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(base / str(next(_STATE_DIRS))))


def fixture_entry(state_dir: Path, **extra: Any) -> dict[str, Any]:
    """A servers.json entry running the fixture server over stdio."""
    env = {"FIXTURE_STATE_DIR": str(state_dir), **extra.pop("env", {})}
    return {"command": sys.executable, "args": [FIXTURE_SERVER], "env": env, **extra}


def write_config(tmp_path: Path, servers: dict[str, Any], **sections: Any) -> Path:
    """A servers.json in `tmp_path`, its audit log and server logs kept there too.

    `serve` waits for every server before answering (no start-up grace), so a test's first
    `tools/list` sees them all however loaded the machine is; tests of the grace set their own.
    """
    path = tmp_path / "servers.json"
    sections.setdefault(
        "toolscore",
        {
            "audit": {"path": str(tmp_path / "audit.jsonl")},
            "log_dir": str(tmp_path / "logs"),
            "startup_grace_seconds": None,
        },
    )
    path.write_text(json.dumps({"mcpServers": servers, **sections}))
    return path


def make_config(servers: dict[str, dict[str, Any]], **sections: Any) -> Config:
    return parse_config({"mcpServers": servers, **sections})


@asynccontextmanager
async def running_gateway(config: Config, tmp_path: Path) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    """A gateway over `config` as written: stdio servers run as subprocesses."""
    sink = MemoryAuditSink()
    async with open_gateway(config, audit=sink, log_dir=tmp_path / "logs") as gw:
        await gw.hub.wait_started()  # every server, however loaded the machine (past the start-up grace)
        yield gw, sink


@asynccontextmanager
async def memory_gateway(
    tmp_path: Path, servers: dict[str, dict[str, Any]] | None = None, **sections: Any
) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    """A gateway over fixture servers run in this process (no subprocess): the fast default.

    `servers` maps names to entry options (`prefix`, `tools`, `constraints`, `timeout`, ...; plus
    `extra_tools` and `page_size` for the fixture itself); default: one server `fx`. Markers go
    to `tmp_path`. The fixture's `crash` and `spin` end or block the process: use a subprocess
    (`fixture_entry` + `running_gateway`) for those.
    """
    entries = {name: dict(options) for name, options in (servers or {"fx": {}}).items()}
    memory = {
        name: build_server(
            tmp_path, extra_tools=tuple(options.pop("extra_tools", ())), page_size=options.pop("page_size", 0)
        )
        for name, options in entries.items()
    }
    async with testing.running_gateway(memory, config=testing.memory_config(entries, **sections)) as pair:
        yield pair


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def text(result: mcp_types.CallToolResult) -> str:
    """The first content block's text."""
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    return block.text


async def wait_for(predicate: Callable[[], bool], seconds: float = 60.0) -> None:
    """Poll an effect that happens elsewhere (a subprocess, a progress task); the bound only detects a hang."""
    with anyio.fail_after(seconds):
        while not predicate():  # noqa: ASYNC110 - the effect is in another process or task: no event to await
            await anyio.sleep(0.01)


@contextmanager
def loopback_http(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve `handler` on 127.0.0.1 in a thread; yields the base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@asynccontextmanager
async def http_client(url: str, token: str | None, mode: str) -> AsyncIterator[Client]:
    """A real `mcp` client over streamable HTTP to `url`, sending `token` as its bearer (none: no header)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as session,  # type: ignore[arg-type]
    ):
        yield session


def wait_until_answering(
    url: str,
    proc: subprocess.Popen[bytes] | None = None,
    *,
    errlog: Path | None = None,
    verify: bool | str | ssl.SSLContext = True,
) -> None:
    """Wait until `url` answers HTTP, whatever the status (the answer's body is not read).

    A hang detector, not a speed check: a loaded machine can take many seconds to start Python, so
    the ceiling is a minute. When `proc` exits first, or the minute passes, it is killed and reaped
    (else its `Popen` warns inside whichever test runs next) and the error quotes `errlog`'s tail.
    """
    deadline = time.monotonic() + 60
    while True:
        try:
            with httpx2.stream("GET", url, timeout=10, verify=verify):
                return
        except httpx2.TransportError:
            exited = proc is not None and proc.poll() is not None
            if not exited and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
        said = f": {errlog.read_text(errors='replace')[-2000:]}" if errlog is not None and errlog.is_file() else ""
        if proc is None:
            raise RuntimeError(f"nothing answered at {url} within 60 s")
        if exited:
            raise RuntimeError(f"the process serving {url} exited with {proc.returncode}{said}")
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the process serving {url} did not answer within 60 s{said}")


def start_http_gateway(
    config: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """`toolscore serve --transport http` on a free loopback port, once it answers; (process, base URL).

    `args` go to `serve`. Its stderr goes to `gateway-stderr.txt` beside the config, and is quoted
    when it does not come up.
    """
    port = free_port()
    errlog = config.parent / "gateway-stderr.txt"
    with errlog.open("ab") as sink:
        proc = subprocess.Popen(
            [TOOLSCORE, "serve", "--transport", "http", "--port", str(port), "--config", str(config), *args],
            stderr=sink,
            env={**os.environ, **(env or {})},
        )
    base = f"http://127.0.0.1:{port}"
    wait_until_answering(base + "/", proc, errlog=errlog)
    return proc, base


@contextmanager
def http_gateway_process(config: Path, *, env: dict[str, str] | None = None) -> Iterator[str]:
    """An HTTP gateway process for a block; yields its base URL; it must exit 0 on SIGTERM."""
    proc, base = start_http_gateway(config, env=env)
    try:
        yield base
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0


LONG_FILES = (
    "tests/security/test_downstream_credentials.py",
    "tests/front/test_fast.py",
    "tests/test_cli.py",
    "tests/front/test_fast_flight.py",
    "tests/reliability/test_documented_serve.py",
    "tests/downstream/test_child.py",
    "tests/security/test_exposure.py",
    "tests/reliability/test_documented_serve_exposed.py",
    "tests/reliability/test_documented_others.py",
    "tests/front/test_conformance.py",
    "tests/security/test_principals.py",
    "tests/front/test_oauth_clients.py",
    "tests/front/test_skills_conformance.py",
    "tests/reliability/test_documented_calls.py",
    "tests/reliability/test_faults.py",
    "tests/front/test_stdio.py",
    "tests/scaleout/test_replicas.py",
    "tests/security/test_isolation.py",
    "tests/front/test_inflight_cap.py",
    "tests/front/test_http_fast.py",
    "tests/front/test_task_extension_conformance.py",
)
"""The test files that take the most of one worker's time, longest first (each 50 s or more of the
whole suite's run at a load of 7 to 10 on 2 cores, 2026-11-27): they start first. Later that day
test_strategies.py and test_documented_audit.py fell to a third and two fifths of their CPU
(benchmarks/suite_cpu.py, CONTRIBUTING.md) and left the list."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest files first: one worker runs a whole file (`--dist loadfile`), in the order collected
    (`--no-loadscope-reorder`), so a long file that starts last is the run's tail. Then the other
    files that start processes (`e2e`), then the in-memory ones, which fill the gaps at the end.

    Pytest-randomly has shuffled the files and the tests in each already; this sort is stable, so
    the order within each of those three parts is still the seed's.
    """
    starts_processes = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("e2e")}

    def rank(item: pytest.Item) -> tuple[int, bool]:
        path = item.nodeid.split("::")[0]
        long = LONG_FILES.index(path) if path in LONG_FILES else len(LONG_FILES)
        return long, path not in starts_processes

    items.sort(key=rank)


CORE = ("toolscore.plan", "toolscore.policy", "toolscore._engine")
"""The core that ./scripts/test holds to its coverage floor."""
CORE_TESTS = ("tests/plan/", "tests/policy/", "tests/test_engine.py")
"""The core's own tests: the floor is theirs to meet."""


def measures_the_core_alone(config: pytest.Config) -> bool:
    """Whether this run's coverage measures the core and nothing else (./scripts/test)."""
    sources = set(getattr(config.option, "cov_source", None) or ())
    return bool(sources) and sources <= set(CORE)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Trace the core only while its own tests run (setup and teardown included), when coverage
    measures nothing but the core (./scripts/test). Python 3.11's tracer is called for every
    function call of every test, traced module or not: it doubled the in-memory tier's CPU (75 s
    to 168 s on 2 cores) for a floor the core's tests meet alone. `--cov=toolscore` traces all.

    The collector is paused, not stopped: stopping and starting the `Coverage` around each test
    (new tracers each time) reported 70.7 % where pausing reports the 94.0 % that the core's tests
    reach run alone; lines were lost, by a cause not traced further. A coverage without
    `_collector` (a later release) traces everything, as before: slower, not wrong."""
    alone = measures_the_core_alone(item.config)
    collector = getattr(coverage.Coverage.current() if alone else None, "_collector", None)
    if collector is None or not hasattr(collector, "pause") or item.nodeid.startswith(CORE_TESTS):
        yield
        return
    collector.pause()
    try:
        yield
    finally:
        collector.resume()


class _ProcessStarted(Exception):
    """A test outside the `e2e` tier started a process."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _no_processes_unless_e2e(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _no_processes_unless_e2e(item):
        yield


@contextmanager
def _no_processes_unless_e2e(item: pytest.Item) -> Iterator[None]:
    """Keep the tiers true: the default tier runs in memory, so a test that starts a process (a
    server, the gateway, a browser, redis) must be marked `e2e`; unmarked, it fails saying so."""
    if item.get_closest_marker("e2e") is not None:
        yield
        return
    original = subprocess.Popen.__init__

    def refuse(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        raise _ProcessStarted(f"{item.nodeid} starts a process ({args!r:.80}): mark it `e2e`")

    def refuse_os(name: str) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            raise _ProcessStarted(f"{item.nodeid} starts a process (os.{name}): mark it `e2e`")

        return refused

    # Popen is under asyncio's and anyio's subprocesses; os.fork under multiprocessing.
    os_calls = {name: getattr(os, name) for name in ("fork", "posix_spawn", "posix_spawnp") if hasattr(os, name)}
    subprocess.Popen.__init__ = refuse  # type: ignore[method-assign]
    for name in os_calls:
        setattr(os, name, refuse_os(name))
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original  # type: ignore[method-assign]
        for name, call in os_calls.items():
            setattr(os, name, call)
