"""`serve` runs on uvloop where it is installed, and on asyncio's own loop with TOOLSCORE_UVLOOP=0.

Which loop runs is read from outside, as an operator would: whether uvloop's extension module is
mapped into the gateway process (/proc/<pid>/maps). Both loops serve a whole passthrough call.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from tests.conftest import TOOLSCORE, fixture_entry, write_config

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.anyio,
    pytest.mark.skipif(
        importlib.util.find_spec("uvloop") is None or not Path("/proc/self/maps").exists(),
        reason="uvloop is not installed here (Windows), or no /proc to look into",
    ),
]


async def _serve_one_call(config: Path, env: dict[str, str]) -> bool:
    """Run `toolscore serve`, relay one echo call; whether uvloop was loaded in the gateway."""
    process = await anyio.open_process(
        [TOOLSCORE, "serve", "--config", str(config)], stderr=sys.stderr, env={**os.environ, **env}
    )
    async with process:
        assert process.stdin is not None and process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)

        async def exchange(message: dict[str, object]) -> dict[str, object]:
            assert process.stdin is not None
            await process.stdin.send(json.dumps(message).encode() + b"\n")
            answer: dict[str, object] = json.loads(await lines.receive_until(b"\n", 1 << 20))
            return answer

        with anyio.fail_after(60):
            hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
            await exchange({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
            await process.stdin.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
            call = {"name": "fx__echo", "arguments": {"text": "loop"}}
            answer = await exchange({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
        assert answer["result"] == {"content": [{"type": "text", "text": "loop"}], "isError": False}
        maps = Path(f"/proc/{process.pid}/maps").read_text()
        await process.stdin.aclose()
        with anyio.move_on_after(10):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
    return "uvloop" in maps


async def test_serve_runs_on_uvloop_where_installed(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    assert await _serve_one_call(config, {})


async def test_toolscore_uvloop_0_keeps_the_asyncio_loop(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    assert not await _serve_one_call(config, {"TOOLSCORE_UVLOOP": "0"})
