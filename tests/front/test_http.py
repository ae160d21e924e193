"""The streamable HTTP front as clients use it: a real `toolscore serve --transport http` process."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import httpx2
import mcp_types
import pytest
from mcp import Client

from tests.conftest import fixture_entry, http_gateway_process, wait_for, write_config

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def http_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One HTTP gateway process for the module: every test is a new client of it."""
    tmp_path = tmp_path_factory.mktemp("http")
    with http_gateway_process(write_config(tmp_path, {"fx": fixture_entry(tmp_path)})) as base:
        yield f"{base}/mcp"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_streamable_http_front_in_both_eras(http_gateway: str, mode: str) -> None:
    async with Client(http_gateway, mode=mode) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert "fx__echo" in names
        result = await client.call_tool("fx__echo", {"text": "via http"})
        assert result.content == [mcp_types.TextContent(text="via http")]
        with anyio.fail_after(60):
            result = await client.call_tool("fx__nope", {})
        assert result.is_error

        seen: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        await client.call_tool("fx__progress", {"steps": 3}, progress_callback=on_progress)
        await wait_for(lambda: len(seen) == 3)
        assert seen == [1, 2, 3]


def test_http_front_answers_oauth_probes_with_a_clean_4xx(http_gateway: str) -> None:
    base = http_gateway.removesuffix("/mcp")
    for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-authorization-server"):
        response = httpx2.get(base + path, timeout=60)
        assert 400 <= response.status_code < 500
