"""Assembly: config -> hub of downstreams -> policy -> engine -> orchestrate -> front server.

What only the HTTP front uses (`/metrics`, the console, their audit sinks) and the Redis-backed
episode store are imported when they are asked for, so a stdio gateway does not load them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types
import structlog
from mcp.server import Server

from toolscore._engine import EngineSettings, PostExecutionHook, PreExecutionHook, ToolExecutionEngine, WrapHook
from toolscore._reload import Reloaded, effective
from toolscore._seal import Sealer
from toolscore.audit.sinks import AuditSink, JsonlAuditSink, NullAuditSink
from toolscore.config import Config, audit_path, load_config, server_log_dir
from toolscore.downstream.connection import ServerState, ServerStatus
from toolscore.downstream.hub import ConfigChanges, DownstreamHub, open_hub
from toolscore.downstream.reads import ResourceReads
from toolscore.downstream.registry import Route
from toolscore.errors import ConfigError
from toolscore.front.callers import CONSOLE_CALLER, Callers, console_caller
from toolscore.front.plan_tasks import running_plans
from toolscore.front.server import FrontServer, build_server, exposed_tools
from toolscore.loop.tool import DELEGATE, Delegator
from toolscore.plan.tool import ORCHESTRATE, Orchestrator
from toolscore.policy import Policy, RedactingAuditSink, build_policy
from toolscore.policy.principals import Directory
from toolscore.scope import CallScope
from toolscore.spill import ResultStore
from toolscore.state import open_state
from toolscore.telemetry import tracing
from toolscore.toolhub import ObservingSink, Scoreboard, ToolHub
from toolscore.toolhub.catalog import OWN_TOOLS
from toolscore.toolhub.persist import saved_while_open, score_store

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from toolscore.front.console import ConsoleFeed
    from toolscore.telemetry.metrics import CallMetrics

__all__ = ["CONSOLE_CALLER", "Gateway", "audit_path", "http_pages", "open_gateway"]

log = structlog.get_logger("toolscore.gateway")


@dataclass(slots=True)
class Gateway:
    """A running gateway: its downstreams, its engine and its front server."""

    config: Config
    """The config in force (a live reload replaces it: `reload`)."""
    hub: DownstreamHub
    engine: ToolExecutionEngine
    server: FrontServer
    orchestrator: Orchestrator
    toolhub: ToolHub | None = None
    """Capability calls and the search catalog (docs/toolhub.md)."""
    delegator: Delegator | None = None
    """The `delegate` tool: the agent loop (docs/agent-loop.md)."""
    metrics: CallMetrics | None = None
    """The counters behind `/metrics` (HTTP front only)."""
    console: ConsoleFeed | None = None
    """The audit records the web console at `/ui` shows (HTTP front only)."""
    lossy: AuditSink | None = None
    """The sink whose own `lost` count says how many records it dropped (the file, the stream)."""
    apply: Callable[[Config], Awaitable[ConfigChanges]] | None = None
    """Puts a new config in force (`reload`)."""
    roles: Directory | None = None
    """The roles each principal's credentials carried when last seen (per-principal policy)."""
    reload_problem: str | None = None
    """Why the last reload kept the running config (an invalid file), until one succeeds."""

    async def reload(self) -> Reloaded | None:
        """Read the config file again and put what changed in force (docs/configuration.md#live-reload).

        An invalid file keeps the running config, and says why in one line (the log, `reload_problem`).
        Settings that cannot change while running keep their values and are named in a warning.
        Returns what changed (None: the file is invalid, or no file).
        """
        path = self.config.path
        if path is None or self.apply is None:
            return None
        try:
            loaded = load_config(path)
        except ConfigError as exc:
            self.reload_problem = str(exc)
            log.warning("config not reloaded; the running one stays", problem=str(exc))
            return None
        self.reload_problem = None
        config, restart_only = effective(self.config, loaded)
        if restart_only:
            log.warning("these settings take effect at the next start", settings=restart_only)
        if config == self.config:
            return Reloaded(ConfigChanges([], [], []), restart_only, rules=False)
        rules = config.constraints != self.config.constraints or config.settings != self.config.settings
        changes = await self.apply(config)
        self.config = config
        log.info(
            "config reloaded",
            added=changes.added,
            removed=changes.removed,
            changed=changes.changed,
            rules_changed=rules,
        )
        return Reloaded(changes, restart_only, rules=rules)

    @property
    def audit_lost(self) -> int:
        """Audit records lost: those a sink raised on, and those a sink dropped and counted itself."""
        return self.engine.audit_lost + int(getattr(self.lossy, "lost", 0))


def _hidden(policy: Policy) -> Callable[[Route], bool] | None:
    """The tools the policy refuses whatever their arguments: routed, never listed."""
    return policy.tool_denied if policy.static is not None else None


def _audit_sink(config: Config) -> AuditSink:
    audit = config.settings.audit
    if audit.path == "":
        return NullAuditSink()
    return JsonlAuditSink(audit_path(config), fsync=audit.fsync, max_bytes=audit.max_bytes, backups=audit.backups)


def listed_statuses(hub: DownstreamHub) -> list[ServerStatus]:
    """Every server's status with `tools` counted as clients see them (after `tools.deny`)."""
    listed = hub.registry.listed_per_server()
    return [dataclasses.replace(s, tools=listed.get(s.name, 0)) for s in hub.statuses()]


def http_pages(gateway: Gateway) -> dict[str, ASGIApp]:
    """The gateway's own pages beside `/mcp` on the HTTP front: `/metrics` and the console at `/ui`, when on."""
    from toolscore.front.console import console_pages
    from toolscore.front.routes import metrics_page
    from toolscore.telemetry.metrics import ServerGauge

    pages: dict[str, ASGIApp] = {}
    metrics = gateway.metrics
    if metrics is not None:

        def render() -> str:
            listed = gateway.hub.registry.listed_per_server()  # after `tools.deny`, as `check` counts
            gauges = (
                ServerGauge(s.name, s.state is ServerState.UP, s.start_seconds, listed.get(s.name, 0))
                for s in gateway.hub.statuses()
            )
            return metrics.render(gauges, audit_lost=gateway.audit_lost)

        pages["/metrics"] = metrics_page(render)
    if gateway.console is not None:

        async def call(tool: str, arguments: dict[str, Any], request: Mapping[str, Any]) -> mcp_types.CallToolResult:
            # The principal that signed in calls, under its own rules and quotas.
            scope = CallScope(console_caller(request, gateway.roles))
            if tool == ORCHESTRATE:
                return await gateway.orchestrator(arguments, scope=scope)
            return (await gateway.engine.execute(tool, arguments, scope=scope)).result

        pages.update(
            console_pages(
                feed=gateway.console,
                statuses=lambda: listed_statuses(gateway.hub),
                tools=lambda: exposed_tools(gateway.hub, gateway.orchestrator, gateway.toolhub),
                server_of=lambda name: route.server if (route := gateway.hub.registry.get(name)) else None,
                call=call,
                slow_ms=gateway.config.settings.slow_call_seconds * 1000,
                reload_problem=lambda: gateway.reload_problem,
            )
        )
    return pages


@asynccontextmanager
async def open_gateway(
    config: Config,
    *,
    audit: AuditSink | None = None,
    log_dir: Path | None = None,
    pre_hooks: Sequence[PreExecutionHook] = (),
    wrap_hooks: Sequence[WrapHook] = (),
    post_hooks: Sequence[PostExecutionHook] = (),
    memory_servers: Mapping[str, Server[Any]] | None = None,
    metrics: CallMetrics | None = None,
    console: ConsoleFeed | None = None,
) -> AsyncIterator[Gateway]:
    """Start every downstream and build the front server over them.

    Yields once every server has connected or failed once, or after `toolscore.startup_grace_seconds`
    (then a server up later joins with `tools/list_changed`); `await gateway.hub.wait_started()`
    waits for the rest, for a one-shot command that needs every server.

    Args:
        config: The validated servers.json.
        audit: Where audit records go (default: from the config).
        log_dir: Where each stdio server's stderr goes (default: from the config).
        pre_hooks: Constraint hooks of your own, run after the built-in rules when `constraints.enabled`.
        wrap_hooks: Hooks around each downstream call, inside the policy's own.
        post_hooks: Post-execution hooks.
        memory_servers: SDK servers run in this process, by server name, in place of what the config
            says of how to reach them (see `toolscore.testing`).
        metrics: Counts every audit record, for `/metrics` (None: nothing is counted).
        console: Keeps the latest audit records for the web console (None: no console).
    """
    state = open_state(config)  # None: every piece of state in this process
    records = state.episodes(config.settings.loop.episode_ttl_seconds) if state is not None else None
    # A 2026-07-28 client's confirmation or plan approval may come back to any replica.
    sealer = Sealer(await state.seal_key(), spend_once=state.spend_once) if state is not None else None
    directory = Directory()  # the principals' roles, as the HTTP front authenticates them
    policy = build_policy(config, state=state, directory=directory)
    sink = audit if audit is not None else _audit_sink(config)
    settings = config.settings
    if settings.audit.stream and state is not None:  # every replica's records in one stream
        sink = state.with_audit_stream(sink, settings.audit)
    lossy = sink  # the writers: they drop a record they cannot write, and count it
    # Always there, so a reload that turns redaction on reaches the audit records too.
    sink = redacting = RedactingAuditSink(sink, policy.redactor)
    # The ToolHub orders capability candidates by what the audit stream says of each tool.
    scores = Scoreboard(half_life_seconds=config.settings.toolhub.half_life_seconds)
    sink = ObservingSink(sink, scores)
    # What it learned in earlier runs (the state directory, or Redis), saved again when it closes.
    kept = score_store(config, state)
    if kept is not None:
        await kept.load_into(scores)
    if metrics is not None:
        from toolscore.telemetry.metrics import MetricsSink

        sink = MetricsSink(sink, metrics)
    if console is not None:
        from toolscore.front.console import ConsoleSink

        sink = ConsoleSink(sink, console)
    logs = log_dir or server_log_dir(config)
    try:
        async with open_hub(config, log_dir=logs, memory_servers=memory_servers, hide=_hidden(policy)) as hub:
            # Results over their server's `spill_bytes`, kept for `resources/read` (`toolscore.spill`).
            results = ResultStore(ttl_seconds=settings.results_ttl_seconds, max_bytes=settings.results_max_bytes)
            engine = ToolExecutionEngine(tools=hub, call=hub.call, audit=sink, results=results)

            def rules(config: Config, policy: Policy) -> None:
                engine.reconfigure(
                    EngineSettings.from_config(config),
                    # Constraint hooks (the policy's and the caller's) are behind the feature flag.
                    pre_hooks=(*policy.pre, *pre_hooks) if config.constraints.enabled else (),
                    wrap_hooks=(*policy.wrap, *wrap_hooks),
                    post_hooks=(*post_hooks, *policy.post),
                    redact=policy.redactor.text if policy.redactor is not None else None,
                )
                redacting.redactor = policy.redactor

            rules(config, policy)
            toolhub = ToolHub(
                tools=hub,
                engine=engine,
                config=config,
                scores=scores,
                refusals={name: policy.gateway_tool_refusal(name) for name in OWN_TOOLS},
                hidden_for=lambda caller: policy.hidden_for(caller),  # the policy in force (a reload replaces it)
            )
            orchestrator = Orchestrator(
                tools=hub,
                engine=engine,
                config=config,
                audit=sink,
                policy=policy.plan_problems,
                refusal=policy.gateway_tool_refusal(ORCHESTRATE),
                capabilities=toolhub,  # `<call capability="...">` steps go through the hub
                reads=ResourceReads(hub),  # `<call tool="resources/read">` steps, as clients' reads
            )
            callers = Callers(roles=directory)
            callers.on_gone(orchestrator.episodes.forget)
            callers.on_gone(hub.caller_gone)
            hub.add_reap_hook(callers.drain)
            delegator = Delegator(
                tools=hub,
                engine=engine,
                config=config,
                contract=lambda: orchestrator.tool().description or "",
                policy=policy.plan_problems,
                refusal=policy.gateway_tool_refusal(DELEGATE),
                admit=policy.admit_task,
                plan_episodes=orchestrator.episodes,
                # Shared: any replica continues any episode, and any paused 2026-era `delegate` task.
                records=records,
            )
            server = build_server(
                hub,
                engine,
                orchestrator,
                callers,
                toolhub=toolhub,
                delegator=delegator,
                hidden_for=lambda caller: policy.hidden_for(caller),  # the policy in force (a reload replaces it)
                sealer=sealer,
                results=results,
            )

            async def apply(config: Config) -> ConfigChanges:
                # One step with no await until the hub's: every call begun after it runs under the
                # new rules, every call in flight under those it began with.
                nonlocal policy
                policy = build_policy(config, state=state, directory=directory)
                rules(config, policy)
                orchestrator.reconfigure(
                    config, policy=policy.plan_problems, refusal=policy.gateway_tool_refusal(ORCHESTRATE)
                )
                toolhub.reconfigure(config, refusals={name: policy.gateway_tool_refusal(name) for name in OWN_TOOLS})
                delegator.reconfigure(
                    config,
                    policy=policy.plan_problems,
                    refusal=policy.gateway_tool_refusal(DELEGATE),
                    admit=policy.admit_task,
                )
                return await hub.apply(config, hide=_hidden(policy))

            if tracing.tracer is not None:  # an HTTP `traceparent` continues the caller's trace
                server.middleware.insert(0, tracing.TraceparentMiddleware())
            try:
                async with (
                    running_plans(server.plan_tasks),  # plans run as tasks end with the gateway
                    saved_while_open(kept, scores, settings.toolhub.save_seconds),
                ):
                    yield Gateway(
                        config,
                        hub,
                        engine,
                        server,
                        orchestrator,
                        toolhub,
                        delegator,
                        metrics,
                        console,
                        lossy,
                        apply,
                        roles=directory,
                    )
            finally:
                with anyio.CancelScope(shield=True):
                    await delegator.aclose()
    finally:
        sink.close()
        if kept is not None:
            with anyio.CancelScope(shield=True):
                await kept.save_from(scores)
        if state is not None:
            with anyio.CancelScope(shield=True):
                await state.aclose()
