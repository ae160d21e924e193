"""The front declares resources, prompts, completion and logging only when a downstream has them."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client, MCPError

from tests.conftest import memory_gateway

pytestmark = pytest.mark.anyio


async def test_a_tools_only_downstream_gives_a_tools_only_front(tmp_path: Path) -> None:
    async with memory_gateway(tmp_path) as (gateway, _), Client(gateway.server, mode="legacy") as client:
        caps = client.server_capabilities
        assert caps.tools is not None
        assert (caps.resources, caps.prompts, caps.completions, caps.logging) == (None, None, None, None)
        assert (await client.list_resources()).resources == []  # served all the same, and empty
        with pytest.raises(MCPError, match="Resource not found"):
            await client.read_resource("toolscore://fx/file:///etc/passwd")
