"""The client's roots through the gateway: asked during a call, and announced as changed.

A real client against the real front; the downstream is the task fixture as a stdio subprocess
(its `roots` tool asks the client for its roots; on `roots/list_changed` it asks at once and keeps
the answer for `last_roots`), and server-filesystem where it is installed.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client

from tests.conftest import FIXTURES, make_config, running_gateway, text
from tests.stack.test_third_party import FILESYSTEM
from toolscore import Gateway

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def gateway(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    config = make_config({"fx": {"command": sys.executable, "args": [str(FIXTURES / "task_server.py")]}})
    async with running_gateway(config, tmp_path_factory.mktemp("roots")) as (running, _):
        yield running


def roots_of(*uris: str) -> Any:
    async def list_roots(context: Any) -> mcp_types.ListRootsResult:
        return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri=uri) for uri in uris])  # type: ignore[arg-type]

    return list_roots


async def test_a_server_asking_for_roots_during_a_call_gets_the_callers(gateway: Gateway) -> None:
    async with (
        Client(gateway.server, mode="legacy", list_roots_callback=roots_of("file:///srv/one")) as one,
        Client(gateway.server, mode="legacy", list_roots_callback=roots_of("file:///srv/two")) as two,
        Client(gateway.server, mode="legacy") as rootless,
    ):
        assert text(await one.call_tool("fx__roots", {})) == "file:///srv/one"
        assert text(await two.call_tool("fx__roots", {})) == "file:///srv/two"
        refused = await rootless.call_tool("fx__roots", {})
        assert refused.is_error and "did not declare the 'roots' capability" in text(refused)


async def test_a_roots_change_reaches_the_server_which_then_gets_the_new_roots(gateway: Gateway) -> None:
    async with Client(gateway.server, mode="legacy", list_roots_callback=roots_of("file:///srv/new")) as client:
        # The server asks back at once, outside any call of this client: the gateway knows whom to ask.
        await client.session.send_notification(mcp_types.RootsListChangedNotification())
        assert text(await client.call_tool("fx__last_roots", {})) == "file:///srv/new"


@pytest.mark.skipif(not FILESYSTEM.exists(), reason="run ./scripts/setup to install the npm servers")
async def test_server_filesystem_in_a_per_client_instance_takes_that_clients_roots(tmp_path: Path) -> None:
    """It asks for roots as it starts, which is during its client's first call, and keeps them."""
    started, mine = tmp_path / "started", tmp_path / "mine"
    started.mkdir()
    mine.mkdir()
    config = make_config({"fs": {"command": str(FILESYSTEM), "args": [str(started)], "isolation": "session"}})
    async with (
        running_gateway(config, tmp_path) as (gateway, _),
        Client(gateway.server, mode="legacy", list_roots_callback=roots_of(mine.as_uri())) as client,
    ):
        allowed = ""
        with anyio.fail_after(60):
            while str(mine) not in allowed:  # it applies the roots in the background, once it has them
                allowed = text(await client.call_tool("fs__list_allowed_directories", {}))
                await anyio.sleep(0.05)
        assert str(started) not in allowed
