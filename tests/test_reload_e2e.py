"""Live reload through the real command: `toolscore serve` over stdio notices its servers.json
changing, starts the server added, and tells its client (the rest: tests/test_reload.py)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import mcp_types
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import TOOLSCORE, fixture_entry, text, write_config

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

HANG = 60  # seconds: a hang detector, never a speed check


async def test_serve_reloads_its_config_file_and_tells_the_client(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"one": fixture_entry(tmp_path)})
    changed = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            changed.set()

    params = StdioServerParameters(command=TOOLSCORE, args=["serve", "--config", str(path)])
    async with Client(params, mode="legacy", message_handler=on_message) as client:
        before = {t.name for t in (await client.list_tools()).tools}
        assert "one__echo" in before and not any(n.startswith("two__") for n in before)
        config = json.loads(path.read_text())
        config["mcpServers"]["two"] = fixture_entry(tmp_path)
        path.write_text(json.dumps(config))
        with anyio.fail_after(HANG):
            await changed.wait()
            while "two__echo" not in {t.name for t in (await client.list_tools()).tools}:
                changed = anyio.Event()
                await changed.wait()
        assert text(await client.call_tool("two__echo", {"text": "new"})) == "new"
