"""The hub: every configured downstream, started concurrently, behind one tool registry."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import mcp_types
import structlog

from toolscore._downstream import Downstream, ServerStatus
from toolscore._registry import Registry, build_registry
from toolscore.config import Config
from toolscore.errors import DownstreamUnavailable
from toolscore.types import Arguments, ProgressFn

__all__ = ["DownstreamHub", "open_hub"]

log = structlog.get_logger("toolscore.hub")

ToolsChangedListener = Callable[[], Awaitable[None]]


class DownstreamHub:
    """Owns the downstream connections and the registry built from their tools."""

    def __init__(self, config: Config, *, log_dir: Path | None) -> None:
        self.config = config
        self.registry: Registry = Registry()
        self._listeners: list[ToolsChangedListener] = []
        self._closing = False
        self._problems: set[str] = set()
        self.downstreams: dict[str, Downstream] = {
            s.name: Downstream(
                s,
                connect_timeout=config.server_connect_timeout(s.name),
                log_dir=log_dir,
                on_tools_changed=self._rebuild,
            )
            for s in config.enabled_servers
        }

    def add_listener(self, listener: ToolsChangedListener) -> None:
        """Call `listener` whenever the set of exposed tools changes."""
        self._listeners.append(listener)

    def statuses(self) -> list[ServerStatus]:
        """Every enabled server's status, in config order."""
        return [d.status() for d in self.downstreams.values()]

    def unavailable_reason(self, server: str) -> str | None:
        """Why `server` cannot take calls now, or None."""
        downstream = self.downstreams.get(server)
        return "not configured" if downstream is None else downstream.unavailable_reason()

    async def call(
        self, server: str, tool: str, arguments: Arguments, *, progress: ProgressFn | None
    ) -> mcp_types.CallToolResult:
        """Call `tool` on `server` (the downstream's own tool name)."""
        downstream = self.downstreams.get(server)
        if downstream is None:
            raise DownstreamUnavailable(f"Server '{server}' is not configured.", server=server)
        return await downstream.call(tool, arguments, progress=progress)

    async def wait_started(self) -> None:
        """Wait until every server has connected or failed its first attempt."""
        for downstream in self.downstreams.values():
            await downstream.first_attempt.wait()

    async def _rebuild(self) -> None:
        tools = {d.name: d.tools for d in self.downstreams.values() if d.unavailable_reason() is None}
        registry = build_registry(tools, self.config)
        for problem in registry.problems:
            if problem not in self._problems:
                log.warning("tool not exposed as listed", problem=problem)
        self._problems = set(registry.problems)
        changed = [t.model_dump(by_alias=True) for t in registry.tools()] != [
            t.model_dump(by_alias=True) for t in self.registry.tools()
        ]
        self.registry = registry
        if changed and not self._closing:
            for listener in self._listeners:
                await listener()


@asynccontextmanager
async def open_hub(config: Config, *, log_dir: Path | None = None) -> AsyncIterator[DownstreamHub]:
    """Start every enabled server concurrently; yield once each has connected or failed once.

    Startup takes about as long as the slowest server (bounded by its connect timeout), not the
    sum. On exit every connection is closed and every stdio child reaped.
    """
    hub = DownstreamHub(config, log_dir=log_dir)
    async with anyio.create_task_group() as tg:
        for downstream in hub.downstreams.values():
            tg.start_soon(downstream.run, name=f"downstream:{downstream.name}")
        try:
            await hub.wait_started()
            yield hub
        finally:
            hub._closing = True
            tg.cancel_scope.cancel()
