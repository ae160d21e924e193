"""Start-up: a stdio gateway imports only what passthrough needs, and starts its servers first.

The gateway runs in a fresh interpreter (`toolscore.__main__.main`, the console script's entry point)
that writes the names in `sys.modules` to a file when it exits, and notes for each process it
starts whether the SDK was imported by then; a real `mcp` client lists the tools and makes one
passthrough call first.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import fixture_entry, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

_DRIVER = """\
import atexit, gc, json, subprocess, sys
config, out = sys.argv[1:]
spawned = []
popen = subprocess.Popen.__init__
def noting(self, *args, **kwargs):
    spawned.append("mcp" in sys.modules)
    popen(self, *args, **kwargs)
subprocess.Popen.__init__ = noting
def dump():
    collector = {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}
    noted = {"modules": sorted(sys.modules), "sdk_at_spawn": spawned, "collector": collector}
    open(out, "w").write(json.dumps(noted))
atexit.register(dump)
from toolscore.__main__ import main
sys.argv = ["toolscore", "serve", "--config", config]
sys.exit(main())
"""

NOT_FOR_PASSTHROUGH = (
    # the HTTP front and what only it serves
    "toolscore.front.http",
    "toolscore.front.http_input",
    "toolscore.front.console",
    "toolscore.front.events",
    "toolscore.front.routes",
    "toolscore.front.oauth",
    "toolscore.telemetry.metrics",
    "jwt",
    # the SDK's HTTP clients, its in-process transport and its MCPServer framework (`mcp.Client`)
    "mcp.client.client",
    "mcp.client.session_group",
    "mcp.client.streamable_http",
    "mcp.client.sse",
    "mcp.client.stdio",
    "mcp.client._memory",
    "mcp.shared.memory",
    "mcp.server.mcpserver",
    # the HTTP client library: HTTP servers, token exchange and the loop's own model endpoints only
    "httpx2",
    "toolscore.downstream.bearer",
    # shared state
    "toolscore.state.redis_store",
    "toolscore.state.episodes",
    "redis",
    "opentelemetry.sdk",
    # plans: the parser, the checker, the runner
    "toolscore.plan.lex",
    "toolscore.plan.parse",
    "toolscore.plan.check",
    "toolscore.plan.refs",
    "toolscore.plan.approval",
    "toolscore.plan.values",
    "toolscore.plan.run",
    "toolscore.plan.transcript",
    # the agent loop
    "toolscore.loop.agent",
    "toolscore.loop.execute",
    "toolscore.loop.models",
    "toolscore.loop.store",
    "toolscore.loop.trajectory",
    "toolscore.loop.scan",
    "toolscore.loop.stops",
    # the ToolHub's calls and search
    "toolscore.toolhub.search",
    "toolscore.toolhub.mapping",
    "toolscore.toolhub.sampling",
    "toolscore.toolhub.synthesis",
)
"""Modules a stdio gateway must not have loaded after `tools/list` and one passthrough call.

What stays: the definitions of the gateway's own tools (`plan.tool`, `loop.tool`, `toolhub.hub`
and the light modules they describe themselves with), which `tools/list` shows; and what the SDK's
lowlevel `Server` module imports for its own HTTP app, whoever serves it: starlette, sse-starlette,
uvicorn (sse-starlette imports it), the SDK's OAuth routes (docs/performance.md#cold-start).
"""


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """Run `toolscore serve` on one stdio fixture server: list, call echo once, stop; what it noted,
    and its folder. One run for the module: each test reads a different part of what it noted."""
    tmp_path = tmp_path_factory.mktemp("served")
    config = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    out = tmp_path / "modules.json"
    params = StdioServerParameters(command=sys.executable, args=["-c", _DRIVER, str(config), str(out)])
    async with Client(params, mode="legacy") as client:
        result = await client.call_tool("fx__echo", {"text": "hello"})  # lists the tools first
        assert result.content[0].model_dump()["text"] == "hello"
    noted: dict[str, Any] = json.loads(out.read_text())
    return noted, tmp_path


async def test_a_stdio_gateway_loads_neither_the_http_front_nor_plans_loop_or_search(
    served: tuple[dict[str, Any], Path],
) -> None:
    loaded = served[0]["modules"]
    assert "toolscore.front.server" in loaded  # the dump is the gateway's own
    found = sorted(m for m in loaded if m.startswith(NOT_FOR_PASSTHROUGH))
    assert found == []


async def test_the_server_starts_before_the_sdk_is_imported_and_the_gateway_uses_that_process(
    served: tuple[dict[str, Any], Path],
) -> None:
    noted, folder = served
    # One process started, before the SDK: the hub's connection took it instead of starting another.
    assert noted["sdk_at_spawn"] == [False]
    log = (folder / "logs" / "fx.log").read_text()
    assert log.count("--- toolscore: starting 'fx'") == 1


async def test_the_collector_is_held_while_the_gateway_starts_and_runs_once_it_serves(
    served: tuple[dict[str, Any], Path],
) -> None:
    collector = served[0]["collector"]
    assert collector["enabled"] is True  # released once the gateway was open
    # What start-up made (the SDK's classes and validators, the gateway's modules) went to the
    # permanent generation, which the collections while serving skip.
    assert collector["frozen"] > 20_000


_LAZY = """\
import json, sys
from toolscore._sdk_packages import lazy_sdk_packages
made = lazy_sdk_packages()
from mcp import MCPError
import mcp.client.session
from mcp.server import Server
before = "mcp.client.client" in sys.modules or "mcp.server.mcpserver" in sys.modules
import mcp
from mcp import Client
from mcp.client.client import Client as Defined
from mcp.shared.exceptions import MCPError as Error
same = Client is Defined and MCPError is Error and mcp.Client is Client and "Client" in mcp.__all__
print(json.dumps({"made": made, "before": before, "same": same}))
"""


def test_the_sdk_packages_load_a_name_only_when_it_is_used() -> None:
    import subprocess

    done = subprocess.run([sys.executable, "-c", _LAZY], capture_output=True, text=True, timeout=120, check=True)
    noted = json.loads(done.stdout)
    assert noted["made"] == ["mcp", "mcp.client", "mcp.server"]
    assert noted["before"] is False  # MCPError, a session and the lowlevel Server: no mcp.Client, no MCPServer
    assert noted["same"] is True


_AUDIT = """\
import atexit, json, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
from toolscore.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_the_audit_commands_read_their_file_without_the_gateway_or_the_sdks_servers(tmp_path: Path) -> None:
    import subprocess

    config = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    (tmp_path / "audit.jsonl").write_text("")
    out = tmp_path / "modules.json"
    argv = [sys.executable, "-c", _AUDIT, str(out), "audit", "stats", "--json", "--config", str(config)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["calls"] == 0
    loaded = json.loads(out.read_text())
    assert "toolscore.audit.stats" in loaded  # the dump is the command's own
    # `mcp.server` and `mcp.client` themselves are the lazy packages: no module under them is loaded.
    heavy = ("toolscore._gateway", "toolscore.front", "mcp.server.", "mcp.client.", "mcp.shared.session")
    assert sorted(m for m in loaded if m.startswith(heavy)) == []
