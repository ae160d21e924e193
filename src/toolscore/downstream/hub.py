"""The hub: every configured downstream, started concurrently, behind one tool registry.

A server with `isolation: "session"` has one instance per front client: the instance started at
boot only lists the tools, and each client's first call starts that client's own instance (its
own process, its own state). At most `max_sessions` such instances run per server; past that,
the least recently used one with no call in flight is stopped, and one unused for
`session_idle_seconds` stops by itself. A client that disconnects loses its instances.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import structlog
from anyio.abc import TaskGroup
from mcp.server import Server

from toolscore.config import Config, ServerConfig
from toolscore.downstream.connection import Downstream, ServerStatus
from toolscore.downstream.registry import Registry, build_registry
from toolscore.downstream.transports import MemoryTransport, Transport, transport_for
from toolscore.errors import DownstreamUnavailable, UsageError
from toolscore.types import Arguments, ProgressFn

__all__ = ["DownstreamHub", "open_hub"]

log = structlog.get_logger("toolscore.hub")

ToolsChangedListener = Callable[[], Awaitable[None]]
_REAP_INTERVAL = 5.0


async def _nothing() -> None:
    """Tool-list changes of a per-client instance: the shared instance already reports them."""


@dataclass(eq=False)
class _Instance:
    """One client's own instance of an isolated server."""

    downstream: Downstream
    scope: anyio.CancelScope
    used: float = field(default_factory=time.monotonic)
    calls: int = 0


class DownstreamHub:
    """Owns the downstream connections and the registry built from their tools."""

    def __init__(
        self, config: Config, *, log_dir: Path | None, memory_servers: Mapping[str, Server[Any]] | None = None
    ) -> None:
        self.config = config
        self.registry: Registry = Registry()
        self._log_dir = log_dir
        self._memory_servers = dict(memory_servers or {})
        self._listeners: list[ToolsChangedListener] = []
        self._closing = False
        self._problems: set[str] = set()
        self._task_group: TaskGroup | None = None
        self._instances: dict[tuple[str, str], _Instance] = {}
        self._gone: set[str] = set()
        self._reap_hooks: list[Callable[[], None]] = []
        self.downstreams: dict[str, Downstream] = {
            s.name: self._downstream(s, on_tools_changed=self._rebuild) for s in config.enabled_servers
        }

    def _downstream(
        self, server: ServerConfig, *, on_tools_changed: ToolsChangedListener, label: str | None = None
    ) -> Downstream:
        transport: Transport
        if server.name in self._memory_servers:
            transport = MemoryTransport(self._memory_servers[server.name])
        elif server.transport == "memory":
            raise UsageError(f"server '{server.name}' is of type 'memory': pass it in memory_servers")
        else:
            transport = transport_for(
                server,
                log_dir=self._log_dir,
                max_message_bytes=self.config.settings.max_result_bytes,
                label=label or server.name,
            )
        return Downstream(
            server,
            transport,
            connect_timeout=self.config.server_connect_timeout(server.name),
            on_tools_changed=on_tools_changed,
            label=label,
        )

    def add_listener(self, listener: ToolsChangedListener) -> None:
        """Call `listener` whenever the set of exposed tools changes."""
        self._listeners.append(listener)

    def statuses(self) -> list[ServerStatus]:
        """Every enabled server's status, in config order."""
        return [d.status() for d in self.downstreams.values()]

    def unavailable_reason(self, server: str) -> str | None:
        """Why `server` cannot take calls now, or None; a down server's says when it is retried."""
        downstream = self.downstreams.get(server)
        return "not configured" if downstream is None else downstream.unavailable_reason()

    def add_reap_hook(self, hook: Callable[[], None]) -> None:
        """Run `hook` on the event loop every few seconds, before instances are reaped."""
        self._reap_hooks.append(hook)

    def caller_gone(self, caller: str) -> None:
        """A front client disconnected: its own instances stop at the next reaping (thread-safe)."""
        self._gone.add(caller)

    async def call(
        self,
        server: str,
        tool: str,
        arguments: Arguments,
        *,
        progress: ProgressFn | None,
        caller: str | None = None,
    ) -> mcp_types.CallToolResult:
        """Call `tool` on `server` (the downstream's own tool name), on `caller`'s instance if isolated."""
        downstream = self.downstreams.get(server)
        if downstream is None:
            raise DownstreamUnavailable(f"Server '{server}' is not configured.", server=server)
        if downstream.config.isolation != "session":
            return await downstream.call(tool, arguments, progress=progress)
        instance = await self._instance(downstream.config, caller or "anonymous")
        instance.calls += 1
        try:
            return await instance.downstream.call(tool, arguments, progress=progress)
        finally:
            instance.calls -= 1
            instance.used = time.monotonic()

    def call_timed_out(self, server: str, caller: str | None = None) -> None:
        """A call to `server` ran past its deadline: check, in the background, that it is not wedged."""
        downstream = self.downstreams.get(server)
        if downstream is None or self._task_group is None:
            return
        if downstream.config.isolation == "session":
            instance = self._instances.get((server, caller or "anonymous"))
            if instance is None:
                return
            downstream = instance.downstream
        self._task_group.start_soon(downstream.check_after_timeout)

    async def _instance(self, config: ServerConfig, caller: str) -> _Instance:
        key = (config.name, caller)
        instance = self._instances.get(key)
        if instance is None:
            self._make_room(config)
            assert self._task_group is not None, "the hub is not running"
            downstream = self._downstream(config, on_tools_changed=_nothing, label=f"{config.name}[{caller}]")
            instance = _Instance(downstream, anyio.CancelScope())
            self._instances[key] = instance
            self._task_group.start_soon(self._run_instance, instance, name=f"downstream:{config.name}:{caller}")
        instance.used = time.monotonic()
        if instance.downstream.unavailable_reason() == "still starting":
            await instance.downstream.first_attempt.wait()
        return instance

    def _make_room(self, config: ServerConfig) -> None:
        mine = [(k, i) for k, i in self._instances.items() if k[0] == config.name]
        if len(mine) < config.max_sessions:
            return
        idle = [(i.used, k) for k, i in mine if i.calls == 0]
        if not idle:
            raise DownstreamUnavailable(
                f"Server '{config.name}' already runs {config.max_sessions} per-client instances, all busy; "
                "try again shortly.",
                server=config.name,
            )
        self._stop(min(idle)[1], "evicted to make room")

    async def _run_instance(self, instance: _Instance) -> None:
        with instance.scope:
            await instance.downstream.run()

    def _stop(self, key: tuple[str, str], why: str) -> None:
        instance = self._instances.pop(key, None)
        if instance is not None:
            log.info("per-client instance stopped", server=key[0], caller=key[1], why=why)
            instance.scope.cancel()

    async def _reap(self) -> None:
        """Stop instances of clients that left or that sat unused too long."""
        while True:
            await anyio.sleep(_REAP_INTERVAL)
            for hook in self._reap_hooks:
                hook()
            gone, self._gone = self._gone, set()
            now = time.monotonic()
            for key, instance in list(self._instances.items()):
                if key[1] in gone:
                    self._stop(key, "client disconnected")
                elif instance.calls == 0 and now - instance.used > instance.downstream.config.session_idle_seconds:
                    self._stop(key, "idle")

    async def wait_started(self) -> None:
        """Wait until every server has connected or failed its first attempt."""
        for downstream in self.downstreams.values():
            await downstream.first_attempt.wait()

    async def _rebuild(self) -> None:
        # A server that was up once and is down now keeps its last tools routed (not listed), so
        # a call to one answers "restarting, retry in ..." rather than "unknown tool".
        known = [d for d in self.downstreams.values() if d.unavailable_reason() is None or d.connects > 0]
        down = {d.name for d in known if d.unavailable_reason() is not None}
        registry = build_registry({d.name: d.tools for d in known}, self.config, down=down)
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
async def open_hub(
    config: Config, *, log_dir: Path | None = None, memory_servers: Mapping[str, Server[Any]] | None = None
) -> AsyncIterator[DownstreamHub]:
    """Start every enabled server concurrently; yield once each has connected or failed once, or
    once `toolscore.startup_grace_seconds` have passed, whichever comes first.

    Startup takes about as long as the slowest server, bounded by the grace (a server that hangs
    must not keep clients from initializing); a server up later is added to the registry then,
    and the listeners hear of it (`tools/list_changed`). `wait_started` waits for the rest. On
    exit every connection is closed and every stdio child reaped.

    Args:
        memory_servers: SDK servers run in this process, by server name: they replace what the
            config says of how to reach those servers (tests, embedding).
    """
    hub = DownstreamHub(config, log_dir=log_dir, memory_servers=memory_servers)
    async with anyio.create_task_group() as tg:
        hub._task_group = tg
        for downstream in hub.downstreams.values():
            tg.start_soon(downstream.run, name=f"downstream:{downstream.name}")
        tg.start_soon(hub._reap, name="downstream:reaper")
        try:
            with anyio.move_on_after(config.settings.startup_grace_seconds):
                await hub.wait_started()
            if starting := [d.name for d in hub.downstreams.values() if not d.first_attempt.is_set()]:
                log.warning("serving before these servers are up; they join when they are", servers=starting)
            yield hub
        finally:
            hub._closing = True
            tg.cancel_scope.cancel()
