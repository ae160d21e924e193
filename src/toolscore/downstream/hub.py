"""The hub: every configured downstream, started concurrently, behind one tool registry.

A server with `isolation: "session"` has one instance per front client: the instance started at
boot only lists the tools, and each client's first call starts that client's own instance (its
own process, its own state). At most `max_sessions` such instances run per server; past that,
the least recently used one with no call in flight is stopped, and one unused for
`session_idle_seconds` stops by itself. A client that disconnects loses its instances.

A server with `credentials` is reached with each principal's own credential
(`toolscore.downstream.credentials`): its calls go over one connection per principal, kept as
those instances are (keyed `principal:<name>`, within `max_sessions`, stopped when idle), and the
connection started at boot, which carries the entry's `headers` alone, only lists the tools. With
`isolation: "session"` as well, each client's instance carries its principal's credential.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import mcp_types
import structlog
from anyio.abc import TaskGroup
from mcp.server import Server

from toolscore._gc import release as release_collector
from toolscore.config import Config, ServerConfig, state_dir
from toolscore.downstream.backchannel import Peer
from toolscore.downstream.breaker import Verdict
from toolscore.downstream.caching import ListHint, Scope, combined
from toolscore.downstream.catalog import Catalog, build_catalog
from toolscore.downstream.connection import Downstream, ServerState, ServerStatus
from toolscore.downstream.credentials import Credential, SubjectTokens, credential_for
from toolscore.downstream.raw import RawResult
from toolscore.downstream.registry import Registry, Route, build_registry
from toolscore.downstream.skillbook import SkillBook
from toolscore.downstream.skills import SKILLS_EXTENSION
from toolscore.downstream.tasks import TASKS_EXTENSION, call_as_task, runs_as_task
from toolscore.downstream.transports import MemoryTransport, Transport, transport_for
from toolscore.errors import ConfigError, DownstreamUnavailable, Rejected, UsageError
from toolscore.scope import CallScope, principal_of
from toolscore.trust.pins import PinBook
from toolscore.types import ANONYMOUS_CALLER, Arguments, ProgressFn

if TYPE_CHECKING:
    from toolscore.downstream.bearer import BearerAuth

__all__ = ["ConfigChanges", "DownstreamHub", "open_hub"]

log = structlog.get_logger("toolscore.hub")

ToolsChangedListener = Callable[[], Awaitable[None]]
CatalogListener = Callable[[frozenset[str]], Awaitable[None]]
"""Told which of "resources" and "prompts" changed."""
UpdateListener = Callable[[str], Awaitable[None]]
"""Told the public URI of a resource its server says changed."""
_REAP_INTERVAL = 5.0
_RETIRE_POLL = 0.05
"""Seconds between looks at whether a retired connection's last call has ended."""


async def _nothing() -> None:
    """Tool-list changes of a per-client instance: the shared instance already reports them."""


async def _check_health(downstream: Downstream) -> None:
    """Ping `downstream` every `health_interval` seconds while it is up, and act on the breaker's
    verdict: fail calls fast while it is open, restart the server after too many failures.

    A ping unanswered while a tool call is in flight does not count: a server running a call
    (single-threaded, say) may not answer until it ends, and the call's own deadline, not the
    health check, decides when it has taken too long (`Downstream.check_after_timeout`)."""
    interval = downstream.config.health_interval
    if interval is None:
        return
    breaker = downstream.breaker
    while True:
        await anyio.sleep(breaker.next_check_in(anyio.current_time(), interval))
        if downstream.state is not ServerState.UP:
            continue  # down or starting: the supervisor is on it
        breaker.checking(anyio.current_time())
        busy = downstream.busy()
        problem = await downstream.ping()
        if problem is not None and (busy or downstream.busy()):
            log.debug("ping unanswered during a call; not counted", server=downstream.label, problem=problem)
            continue
        verdict = breaker.record(problem, anyio.current_time())
        if verdict is Verdict.OPENED:
            log.warning("server unhealthy; calls fail fast", server=downstream.label, problem=problem)
        elif verdict is Verdict.RESTART:
            downstream.restart(f"{breaker.failures} health checks in a row failed ({problem})")


@dataclass(frozen=True)
class ConfigChanges:
    """What a live reload changed in the set of servers (`DownstreamHub.apply`)."""

    added: list[str]
    removed: list[str]
    changed: list[str]

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


@dataclass(eq=False)
class _Instance:
    """One client's own instance of an isolated server."""

    downstream: Downstream
    scope: anyio.CancelScope
    used: float = field(default_factory=time.monotonic)
    calls: int = 0


def _pin_book(config: Config) -> PinBook:
    """The pins: shared in Redis with `toolscore.state`, else `<state dir>/pins.json`."""
    if config.settings.state is None:
        return PinBook(state_dir() / "pins.json")
    from toolscore.state.redis_store import RedisPinBook  # the Redis client: only when configured

    return RedisPinBook(config.settings.state, prefix=config.settings.state_prefix)


class DownstreamHub:
    """Owns the downstream connections and the registry built from their tools."""

    def __init__(
        self,
        config: Config,
        *,
        log_dir: Path | None,
        memory_servers: Mapping[str, Server[Any]] | None = None,
        hide: Callable[[Route], bool] | None = None,
    ) -> None:
        self.config = config
        self._hide = hide
        self.registry: Registry = build_registry({}, config)  # no tools yet, but every prefix
        pinning = any(server.pinning != "off" for server in config.servers.values())
        self._pins = _pin_book(config) if pinning else None
        self.catalog: Catalog = Catalog()
        self.skills = SkillBook(self)
        """The servers' skills as listed (SEP-2640): judged as tools are, and each file read checked."""
        self._catalog_listeners: list[CatalogListener] = []
        self._update_listeners: list[UpdateListener] = []
        self._log_dir = log_dir
        self._memory_servers = dict(memory_servers or {})
        self._listeners: list[ToolsChangedListener] = []
        self._closing = False
        self._problems: set[str] = set()
        self._announced: dict[str, dict[str, int]] = {}  # each server's `announced`, as last passed on
        self._task_group: TaskGroup | None = None
        self._instances: dict[tuple[str, str], _Instance] = {}
        self.subjects = SubjectTokens()
        """The principals' access tokens, noted by the HTTP front's guard, for token exchange."""
        self._credentials: dict[str, Credential] = {}
        """The servers reached with each principal's own credential (`credentials`), by name."""
        self._configure_credentials(config.enabled_servers)
        self._gone: set[str] = set()
        self._reap_hooks: list[Callable[[], None]] = []
        self.downstreams: dict[str, Downstream] = {
            s.name: self._downstream(s, on_tools_changed=self._rebuild) for s in config.enabled_servers
        }
        self._scopes: dict[Downstream, anyio.CancelScope] = {}
        """The cancel scope each shared connection runs in (`_run_shared`)."""

    def _configure_credentials(self, servers: list[ServerConfig]) -> None:
        """The credentials of `servers` (added or changed), and whether access tokens are kept."""
        for server in servers:
            credential = credential_for(server, self.subjects)
            if credential is None:
                self._credentials.pop(server.name, None)
            else:
                self._credentials[server.name] = credential
        enabled = {s.name: s for s in self.config.enabled_servers}
        for name in [n for n in self._credentials if n not in enabled]:
            del self._credentials[name]
        self.subjects.wanted = any(
            s.credentials is not None and s.credentials.token_exchange is not None for s in enabled.values()
        )

    def _downstream(
        self,
        server: ServerConfig,
        *,
        on_tools_changed: ToolsChangedListener,
        label: str | None = None,
        auth: BearerAuth | None = None,
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
                auth=auth,
            )
        downstream = Downstream(
            server,
            transport,
            connect_timeout=self.config.server_connect_timeout(server.name),
            on_tools_changed=on_tools_changed,
            label=label,
        )
        downstream.on_resource_updated = self._resource_updated
        return downstream

    def add_catalog_listener(self, listener: CatalogListener) -> None:
        """Call `listener(kinds)` whenever the exposed resources or prompts change."""
        self._catalog_listeners.append(listener)

    def add_update_listener(self, listener: UpdateListener) -> None:
        """Call `listener(public_uri)` whenever a subscribed resource changes."""
        self._update_listeners.append(listener)

    async def _resource_updated(self, server: str, uri: str) -> None:
        public = self.catalog.public_uri(server, uri)
        for listener in self._update_listeners:
            await listener(public)

    def capable(self, capability: str) -> bool:
        """Whether some connected server declared `capability` (`resources`, `prompts`, `completions`,
        `logging`, `subscribe` for resource subscriptions, `skills` for the skills extension, or
        `tasks-extension` for the tasks extension, which only a 2026-07-28 connection shows)."""
        for downstream in self.downstreams.values():
            caps = downstream.capabilities
            if caps is None or downstream.state is not ServerState.UP:  # an open breaker keeps them declared
                continue
            if capability == "subscribe":
                if caps.resources is not None and caps.resources.subscribe:
                    return True
            elif capability == "skills":
                if SKILLS_EXTENSION in (caps.extensions or {}):
                    return True
            elif capability == "tasks-extension":
                if TASKS_EXTENSION in (caps.extensions or {}):
                    return True
            elif getattr(caps, capability, None) is not None:
                return True
        return False

    def list_hints(self, kind: str, *, per_caller: bool = False) -> tuple[int, Scope]:
        """The `ttlMs` and `cacheScope` of the gateway's `kind` list (`tools`, `resources`,
        `resource_templates`, `prompts`) from every connected server's (`toolscore.downstream.caching`).

        A server whose list's `ttlMs` has run out is listed again (in the background: this answer
        stays the list held, and a change reaches clients as `list_changed`).
        """
        now = time.monotonic()
        hints: list[ListHint | None] = []
        for downstream in self.downstreams.values():
            if downstream.state is not ServerState.UP:
                continue
            caps = downstream.capabilities
            if kind != "tools" and (
                caps is None or getattr(caps, "prompts" if kind == "prompts" else "resources") is None
            ):
                continue  # the server lists none of these (now: a hint of an earlier connection stays behind)
            hint = downstream.list_hints.get(kind)
            if hint is not None and hint.stale(now):
                downstream.relist()
            hints.append(hint)
        return combined(hints, now, per_caller=per_caller)

    def shared(self, server: str) -> Downstream | None:
        """The connection every client shares to `server` (None if not configured)."""
        return self.downstreams.get(server)

    async def request(self, server: str, request: Any, result_type: type[Any], what: str, *, scope: CallScope) -> Any:
        """Send a request other than `tools/call` to `server` for `scope`, on its caller's instance if isolated.

        Raises what `Downstream.request` raises.
        """
        downstream = self.downstreams.get(server)
        if downstream is None:
            raise DownstreamUnavailable(f"Server '{server}' is not configured.", server=server)
        if downstream.config.isolation != "session" and server not in self._credentials:
            return await downstream.request(request, result_type, what, scope=scope)
        instance = await self._instance(downstream.config, scope)
        instance.calls += 1
        try:
            return await instance.downstream.request(request, result_type, what, scope=scope)
        finally:
            instance.calls -= 1
            instance.used = time.monotonic()

    @property
    def pins(self) -> PinBook | None:
        """The pinned definitions (tools, prompts, templates, skills), where some server pins."""
        return self._pins

    async def request_raw(
        self, server: str, method: str, params: dict[str, Any] | None, what: str, *, scope: CallScope
    ) -> dict[str, Any]:
        """`request` for a result the SDK has no model of (`Downstream.request_raw`)."""
        async with self._serving(server, scope) as downstream:
            return await downstream.request_raw(method, params, what, scope=scope)

    def roots_changed(self, caller: str, peer: Peer, window: float) -> None:
        """`caller` changed its roots: tell the shared servers and its own instances, in the background.

        A `roots/list` they send back within `window` seconds goes to `peer`, detached after.
        """
        targets = [d for d in self.downstreams.values() if d.config.isolation != "session"]
        principal = principal_of(caller)
        mine = (caller, f"principal:{principal}") if principal is not None else (caller,)
        targets += [i.downstream for (_, owner), i in self._instances.items() if owner in mine]
        if self._task_group is None or not targets:
            peer.detach()
            return

        async def tell() -> None:
            try:
                async with anyio.create_task_group() as tg:
                    for downstream in targets:
                        tg.start_soon(downstream.roots_changed, peer, window)
            finally:
                peer.detach()

        self._task_group.start_soon(tell, name="downstream:roots-changed")

    def add_listener(self, listener: ToolsChangedListener) -> None:
        """Call `listener` whenever the set of exposed tools changes."""
        self._listeners.append(listener)

    def statuses(self) -> list[ServerStatus]:
        """Every enabled server's status, in config order."""
        return [d.status() for d in self.downstreams.values()]

    def unavailable_reason(self, server: str) -> str | None:
        """Why `server` cannot take calls now, or None; a down server's says when it is retried."""
        downstream = self.downstreams.get(server)
        return "not configured" if downstream is None else downstream.call_refusal()

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
        scope: CallScope,
        keep_bytes: bool = False,
    ) -> RawResult | mcp_types.CallToolResult:
        """Call `tool` on `server` (the server's own tool name) for `scope`, on its caller's instance
        if isolated, as a task where it must be (`toolscore.downstream.tasks`); `keep_bytes`: the
        result may stay the server's bytes (`Downstream.call`)."""
        shared = self.downstreams.get(server)
        if shared is not None and shared.config.isolation != "session" and server not in self._credentials:
            # What `_serving` gives a shared server, without its context manager: the hot path's every call.
            return await _call(shared, tool, arguments, progress, scope, keep_bytes)
        async with self._serving(server, scope) as downstream:
            return await _call(downstream, tool, arguments, progress, scope, keep_bytes)

    @asynccontextmanager
    async def _serving(self, server: str, scope: CallScope) -> AsyncIterator[Downstream]:
        """The connection a call of `scope` to `server` goes to: the shared one, its caller's instance,
        or its principal's connection."""
        downstream = self.downstreams.get(server)
        if downstream is None:
            raise DownstreamUnavailable(f"Server '{server}' is not configured.", server=server)
        if downstream.config.isolation != "session" and server not in self._credentials:
            yield downstream
            return
        if scope.caller == ANONYMOUS_CALLER and downstream.config.isolation == "session":
            # Stateless requests with no token are all one caller: one instance would be shared
            # by every such client, which is what isolation exists to prevent.
            raise Rejected(
                f"server '{server}' runs one instance per client (isolation: \"session\"), and this "
                "2026-07-28 request does not say which client it is: give the gateway a token file with "
                "one 'NAME TOKEN' line per client (--token-file), or connect in the handshake era",
                hook="isolation",
            )
        instance = await self._instance(downstream.config, scope)
        instance.calls += 1
        try:
            yield instance.downstream
        finally:
            instance.calls -= 1
            instance.used = time.monotonic()

    def call_timed_out(self, server: str, caller: str | None = None) -> None:
        """A call to `server` ran past its deadline: check, in the background, that it is not wedged."""
        downstream = self.downstreams.get(server)
        if downstream is None or self._task_group is None:
            return
        if downstream.config.isolation == "session" or server in self._credentials:
            instance = self._instances.get((server, self._owner(downstream.config, caller)))
            if instance is None:
                return
            downstream = instance.downstream
        self._task_group.start_soon(downstream.check_after_timeout)

    def _owner(self, config: ServerConfig, caller: str | None) -> str:
        """Whose instance of `config`'s server a call of `caller` goes to: the caller's own
        (`isolation: "session"`), else its principal's (`principal:<name>`, a server with `credentials`)."""
        if config.isolation == "session":
            return caller or "anonymous"
        return f"principal:{principal_of(caller)}"

    async def _instance(self, config: ServerConfig, scope: CallScope) -> _Instance:
        credential = self._credentials.get(config.name)
        principal = principal_of(scope.caller)
        if credential is not None:
            # Refuses a caller without a credential here, before anything is sent; a token due for
            # renewal is renewed before the call rather than by its request.
            await credential.bearer(principal)
        caller = self._owner(config, scope.caller)
        key = (config.name, caller)
        instance = self._instances.get(key)
        if (
            instance is not None
            and credential is not None
            and instance.calls == 0
            and instance.downstream.state is ServerState.DOWN
        ):
            # Down while idle, its credential lapsed perhaps: started again, with the one just obtained.
            self._stop(key, "down; started again for a call")
            instance = None
        if instance is None:
            self._make_room(config)
            assert self._task_group is not None, "the hub is not running"
            auth = None
            if credential is not None and principal is not None:
                from toolscore.downstream.bearer import BearerAuth  # httpx2's: loaded for HTTP servers only

                auth = BearerAuth(credential, principal)
            label = f"{config.name}[{caller}]"
            downstream = self._downstream(config, on_tools_changed=_nothing, label=label, auth=auth)
            downstream.opened_for = scope.peer  # for a roots/list it sends as it starts
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
            async with anyio.create_task_group() as tg:
                tg.start_soon(_check_health, instance.downstream)
                tg.start_soon(instance.downstream.run)

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

    def _start(self, downstream: Downstream) -> None:
        """Run a shared connection (and its health check) until the hub closes or `_retire` stops it."""
        assert self._task_group is not None, "the hub is not running"
        scope = self._scopes[downstream] = anyio.CancelScope()
        self._task_group.start_soon(self._run_shared, downstream, scope, name=f"downstream:{downstream.name}")

    @staticmethod
    async def _run_shared(downstream: Downstream, scope: anyio.CancelScope) -> None:
        with scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_check_health, downstream, name=f"downstream:{downstream.name}:health")
                tg.start_soon(downstream.run, name=f"downstream:{downstream.name}")

    async def _retire(self, downstream: Downstream, grace: float) -> None:
        """Stop a connection the config no longer has (or has changed): the calls in flight on it
        finish first, within `grace` seconds (their deadline), then it is closed."""
        with anyio.move_on_after(grace):
            while downstream.busy():  # noqa: ASYNC110 (calls in flight are counted, not signalled)
                await anyio.sleep(_RETIRE_POLL)
        scope = self._scopes.pop(downstream, None)
        if scope is not None:
            scope.cancel()

    async def apply(self, config: Config, *, hide: Callable[[Route], bool] | None) -> ConfigChanges:
        """Serve `config` from now on (a live reload): start the servers it adds, stop those it
        removes and restart those whose entry changed (their calls in flight finish first), then
        rebuild what clients see, telling them of every list that changed (`list_changed`).

        A server's per-client instances of a removed or changed entry stop as well; new ones start
        from the new entry.
        """
        assert self._task_group is not None, "the hub is not running"
        old = {s.name: s for s in self.config.enabled_servers}
        new = {s.name: s for s in config.enabled_servers}
        changes = ConfigChanges(
            added=sorted(new.keys() - old.keys()),
            removed=sorted(old.keys() - new.keys()),
            changed=sorted(n for n in old.keys() & new.keys() if old[n] != new[n]),
        )
        self.config, self._hide = config, hide
        self._configure_credentials([new[n] for n in (*changes.added, *changes.changed)])
        for name in (*changes.removed, *changes.changed):
            retired = self.downstreams.pop(name)
            grace = self.config.settings.default_timeout if retired.config.timeout is None else retired.config.timeout
            self._task_group.start_soon(self._retire, retired, grace, name=f"downstream:{name}:retire")
            for key in [k for k in self._instances if k[0] == name]:
                self._stop(key, "its server's entry changed in the config")
            self._announced.pop(name, None)
            self.skills.forget(name)
        started = []
        for name in (*changes.added, *changes.changed):
            downstream = self.downstreams[name] = self._downstream(new[name], on_tools_changed=self._rebuild)
            self._start(downstream)
            started.append(downstream)
        # What clients see stays as it was while the new connections start, as at startup: bounded
        # by the grace, after which a server still starting joins with `list_changed` when it is up.
        with anyio.move_on_after(config.settings.startup_grace_seconds):
            for downstream in started:
                await downstream.first_attempt.wait()
        await self._rebuild()
        return changes

    async def wait_started(self) -> None:
        """Wait until every server has connected or failed its first attempt."""
        for downstream in self.downstreams.values():
            await downstream.first_attempt.wait()

    def _new_announcements(self, known: list[Downstream]) -> set[str]:
        """The list kinds a server announced a change of since the last rebuild: passed on even when
        the lists read again are equal, since the server said they changed (a tool added, then removed)."""
        kinds: set[str] = set()
        for downstream in known:
            seen = self._announced.get(downstream.name, {})
            kinds.update(kind for kind, count in downstream.announced.items() if seen.get(kind, 0) != count)
            self._announced[downstream.name] = dict(downstream.announced)
        return kinds

    async def _rebuild(self) -> None:
        # A server that was up once and is down now keeps its last tools routed (not listed), so
        # a call to one answers "restarting, retry in ..." rather than "unknown tool".
        # Connection state, not `unavailable_reason`: an open breaker keeps the tools listed.
        known = [d for d in self.downstreams.values() if d.state is ServerState.UP or d.connects > 0]
        down = {d.name for d in known if d.state is not ServerState.UP}
        if self._pins is not None:
            try:
                self._pins.refresh()  # a `pins approve` from the command line since
            except ConfigError as exc:
                log.error("pins not read again; the ones in memory stay", error=str(exc))
        registry = build_registry(
            {d.name: d.tools for d in known}, self.config, down=down, hide=self._hide, pins=self._pins
        )
        warned = self._problems  # each problem is logged once, not at every rebuild it lasts
        for problem in registry.problems:
            if problem not in warned:
                log.warning("tool not exposed as listed", problem=problem)
        announced = self._new_announcements(known)
        changed = "tools" in announced or [t.model_dump(by_alias=True) for t in registry.tools()] != [
            t.model_dump(by_alias=True) for t in self.registry.tools()
        ]
        self.registry = registry
        catalog = build_catalog({d.name: d.lists for d in known}, self.config, down=down, pins=self._pins)
        if self._pins is not None:  # first sights and changes of tools, prompts and templates
            try:
                self._pins.save()
            except OSError as exc:
                log.error("pins not saved", path=str(self._pins.path), error=str(exc))
        for problem in catalog.problems:
            if problem not in warned:
                log.warning("resource or prompt not exposed as listed", problem=problem)
        self._problems = set(registry.problems) | set(catalog.problems)
        kinds = frozenset(
            kind
            for kind, old, new in (
                ("resources", self.catalog.listed_resources(), catalog.listed_resources()),
                ("resources", self.catalog.listed_templates(), catalog.listed_templates()),
                ("prompts", self.catalog.listed_prompts(), catalog.listed_prompts()),
            )
            if old != new
        ) | (announced & {"resources", "prompts"})
        self.catalog = catalog
        if changed and not self._closing:
            for listener in self._listeners:
                await listener()
        if kinds and not self._closing:
            for catalog_listener in self._catalog_listeners:
                await catalog_listener(kinds)


@asynccontextmanager
async def open_hub(
    config: Config,
    *,
    log_dir: Path | None = None,
    memory_servers: Mapping[str, Server[Any]] | None = None,
    hide: Callable[[Route], bool] | None = None,
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
        hide: Tools the policy refuses whatever their arguments: routed, never listed.
    """
    hub = DownstreamHub(config, log_dir=log_dir, memory_servers=memory_servers, hide=hide)
    async with anyio.create_task_group() as tg:
        hub._task_group = tg
        for downstream in hub.downstreams.values():
            hub._start(downstream)
        tg.start_soon(hub._reap, name="downstream:reaper")
        try:
            # Start-up's imports are done and the servers are starting: the command's one full
            # collection (`toolscore._gc`) runs now, while the gateway waits for them anyway, not
            # once they are up and a client waits. After a pass of the loop: the connections start first.
            await anyio.lowlevel.checkpoint()
            release_collector()
            with anyio.move_on_after(config.settings.startup_grace_seconds):
                await hub.wait_started()
            if starting := [d.name for d in hub.downstreams.values() if not d.first_attempt.is_set()]:
                log.warning("these servers are not up yet; they join when they are", servers=starting)
            yield hub
        finally:
            hub._closing = True
            tg.cancel_scope.cancel()


async def _call(
    downstream: Downstream,
    tool: str,
    arguments: Arguments,
    progress: ProgressFn | None,
    scope: CallScope,
    keep_bytes: bool,
) -> RawResult | mcp_types.CallToolResult:
    if runs_as_task(downstream, tool, scope):
        return await call_as_task(downstream, tool, arguments, scope=scope)  # a model
    return await downstream.call(tool, arguments, progress=progress, scope=scope, keep_bytes=keep_bytes)
