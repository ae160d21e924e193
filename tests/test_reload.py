"""Live reload of servers.json: servers added, removed and changed, rules replaced for calls begun
after the reload (a call in flight finishes under its own), an invalid file keeping the running
config, settings that wait for a restart named, and the watch on the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types
import pytest
from mcp import Client

from tests.conftest import text
from toolscore._gateway import http_pages, open_gateway
from toolscore._reload import effective, watch_config
from toolscore.audit.sinks import MemoryAuditSink
from toolscore.config import load_config
from toolscore.front.console import ConsoleFeed
from toolscore.front.routes import PathRoutes
from toolscore.testing import FakeDownstream, running_gateway

pytestmark = pytest.mark.anyio

HANG = 30  # seconds: a hang detector, never a speed check


def _write(path: Path, servers: dict[str, dict[str, Any]], **sections: Any) -> None:
    entries = {name: {**entry, "type": "memory"} for name, entry in servers.items()}
    path.write_text(json.dumps({"mcpServers": entries, **sections}))


def _fakes() -> dict[str, FakeDownstream]:
    fakes = {}
    for name in ("a", "b", "c"):
        fake = FakeDownstream(name)

        @fake.tool("ping")
        def ping(server: str = name) -> str:
            return f"pong from {server}"

        fakes[name] = fake
    return fakes


class Notices:
    """The list_changed notifications a client received."""

    def __init__(self) -> None:
        self.tools = 0
        self.seen = anyio.Event()

    async def __call__(self, message: object) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self.tools += 1
            self.seen.set()


async def _names(client: Client) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools if "__" in t.name}  # the servers' tools


async def test_a_reload_starts_added_servers_stops_removed_ones_and_tells_clients(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    _write(path, {"a": {}, "b": {}})
    notices = Notices()
    async with (
        running_gateway(_fakes(), config=load_config(path)) as (gw, _),
        Client(gw.server, mode="legacy", message_handler=notices) as client,
    ):
        assert await _names(client) == {"a__ping", "b__ping"}
        _write(path, {"a": {}, "c": {}})
        with anyio.fail_after(HANG):
            reloaded = await gw.reload()
            await notices.seen.wait()
        assert reloaded is not None
        assert (reloaded.changes.added, reloaded.changes.removed, reloaded.changes.changed) == (["c"], ["b"], [])
        assert await _names(client) == {"a__ping", "c__ping"}
        assert text(await client.call_tool("c__ping", {})) == "pong from c"
        gone = await client.call_tool("b__ping", {})
        assert gone.is_error


async def test_a_changed_entry_is_restarted_and_its_options_apply(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    _write(path, {"a": {}})
    async with running_gateway(_fakes(), config=load_config(path)) as (gw, _), Client(gw.server, mode="legacy") as c:
        _write(path, {"a": {"prefix": "alpha"}})
        with anyio.fail_after(HANG):
            reloaded = await gw.reload()
        assert reloaded is not None and reloaded.changes.changed == ["a"]
        assert await _names(c) == {"alpha__ping"}
        assert text(await c.call_tool("alpha__ping", {})) == "pong from a"


async def test_new_rules_apply_to_calls_begun_after_the_reload_and_not_to_one_in_flight(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    _write(path, {"a": {}})
    fakes = _fakes()
    started, release = anyio.Event(), anyio.Event()

    @fakes["a"].tool("slow")
    async def slow() -> str:
        started.set()
        await release.wait()
        return "finished"

    async with running_gateway(fakes, config=load_config(path)) as (gw, _), Client(gw.server, mode="legacy") as c:
        results: list[mcp_types.CallToolResult] = []
        async with anyio.create_task_group() as tg:

            async def in_flight() -> None:
                results.append(await c.call_tool("a__slow", {}))

            tg.start_soon(in_flight)
            with anyio.fail_after(HANG):
                await started.wait()
            _write(path, {"a": {}}, constraints={"enabled": True, "tools": {"deny": ["a__slow", "a__ping"]}})
            with anyio.fail_after(HANG):
                reloaded = await gw.reload()
            assert reloaded is not None and reloaded.rules and not reloaded.changes
            release.set()
        assert text(results[0]) == "finished", "the call began under the old rules"
        refused = await c.call_tool("a__ping", {})
        assert refused.is_error and "a__ping" in text(refused), text(refused)


async def test_an_invalid_file_keeps_the_running_config_and_says_why(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    _write(path, {"a": {}})
    async with running_gateway(_fakes(), config=load_config(path)) as (gw, _), Client(gw.server, mode="legacy") as c:
        running = gw.config
        path.write_text('{"mcpServers": {"a": {"type": "memory", "timeout": "soon"}}}')
        assert await gw.reload() is None
        assert gw.config is running
        assert gw.reload_problem is not None and "timeout" in gw.reload_problem
        assert text(await c.call_tool("a__ping", {})) == "pong from a"
        _write(path, {"a": {}, "b": {}})  # fixed: the next reload clears the problem
        with anyio.fail_after(HANG):
            assert await gw.reload() is not None
        assert gw.reload_problem is None


def test_settings_that_wait_for_a_restart_keep_their_running_values_and_are_named(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    _write(path, {"a": {}}, toolscore={"http": {"allowed_hosts": ["a.example"]}, "default_timeout": 30})
    running = load_config(path)
    _write(
        path, {"a": {}}, toolscore={"http": {"allowed_hosts": ["b.example"]}, "default_timeout": 5, "separator": "-"}
    )
    config, restart_only = effective(running, load_config(path))
    assert restart_only == ["toolscore.separator", "toolscore.http"]
    assert config.settings.http == running.settings.http and config.settings.separator == running.settings.separator
    assert config.settings.default_timeout == 5  # a live setting takes its new value


async def test_the_watch_reloads_when_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    _write(path, {"a": {}})
    reloads = 0
    changed = anyio.Event()

    async def reload() -> None:
        nonlocal reloads
        reloads += 1
        changed.set()

    async with anyio.create_task_group() as tg:
        await tg.start(
            lambda task_status: watch_config(path, reload, poll_seconds=0.01, hangup=False, task_status=task_status)
        )
        _write(path, {"a": {}, "b": {}})
        with anyio.fail_after(HANG):
            await changed.wait()
        tg.cancel_scope.cancel()
    assert reloads == 1


async def test_the_console_says_why_the_config_was_not_reloaded(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    _write(path, {"a": {}})
    fake = _fakes()["a"]
    async with open_gateway(
        load_config(path), audit=MemoryAuditSink(), memory_servers={"a": fake.server}, console=ConsoleFeed()
    ) as gw:
        app = PathRoutes(_no_mcp, http_pages(gw))
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url="http://gw") as client:
            assert (await client.get("/ui/api/config")).json() == {"reload_problem": None}
            path.write_text('{"mcpServers": {"a": {"type": "memory", "timeout": "soon"}}}')
            assert await gw.reload() is None
            problem = (await client.get("/ui/api/config")).json()["reload_problem"]
            assert "servers.json" in problem and "timeout" in problem


async def _no_mcp(scope: object, receive: object, send: object) -> None:
    raise AssertionError("a page path reached the MCP app")
