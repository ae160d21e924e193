"""Start-up as MCP hosts see it: `toolscore serve` answers `initialize` within the start-up grace
whatever a server does, and a server that comes up later joins with `tools/list_changed`.

The gateway runs as the console script and a real client drives it over stdio: the process (and
how long its first answer takes) is the subject.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.session import IncomingMessage

from tests.conftest import FIXTURE_SERVER, TOOLSCORE, fixture_entry, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

HANG_LIMIT = 300.0
"""A hang detector: far below the hanging server's connect_timeout, far above a slow start."""


def _gateway(path: Path) -> StdioServerParameters:
    return StdioServerParameters(command=TOOLSCORE, args=["serve", "--config", str(path)])


def _names(tools: list[mcp_types.Tool]) -> set[str]:
    return {t.name for t in tools}


async def test_a_server_that_hangs_at_start_does_not_block_initialize(tmp_path: Path) -> None:
    # Before the fix the gateway waited out the hanging server's connect_timeout first. It is an
    # hour here, so a gateway that waits for it hangs this test until its hang detector fires; how
    # fast `initialize` is answered (the MCP Inspector gives up after 15 s) is a speed, measured
    # by benchmarks/cold_start.py, not asserted here, where a busy machine would fail it.
    hang = {"command": "sleep", "args": ["100000"], "connect_timeout": 3600}
    path = write_config(
        tmp_path,
        {"hang": hang, "fx": fixture_entry(tmp_path)},
        toolscore={"log_dir": str(tmp_path / "logs"), "audit": {"path": ""}, "connect_timeout": 3600},
    )
    with anyio.fail_after(HANG_LIMIT):
        async with Client(_gateway(path), mode="legacy") as client:
            names = _names((await client.list_tools()).tools)
    assert "fx__echo" in names
    assert not any(name.startswith("hang__") for name in names)


async def test_a_server_up_after_the_grace_joins_with_list_changed(tmp_path: Path) -> None:
    # The fixture server, four seconds late; the gateway waits half a second for it.
    late = fixture_entry(
        tmp_path,
        args=["-c", f"import runpy, time; time.sleep(4); runpy.run_path({FIXTURE_SERVER!r}, run_name='__main__')"],
    )
    path = write_config(
        tmp_path,
        {"late": late},
        toolscore={"log_dir": str(tmp_path / "logs"), "audit": {"path": ""}, "startup_grace_seconds": 0.5},
    )
    changed = anyio.Event()

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            changed.set()

    params: dict[str, Any] = {"mode": "legacy", "message_handler": on_message}
    with anyio.fail_after(30):
        async with Client(_gateway(path), **params) as client:
            first = _names((await client.list_tools()).tools)
            await changed.wait()
            second = _names((await client.list_tools()).tools)
    assert first == {"orchestrate"}  # served before 'late' was up
    assert "late__echo" in second
