"""Assembly: config -> hub of downstreams -> policy -> engine -> orchestrate -> front server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server import Server

from toolscore._engine import EngineSettings, PostExecutionHook, PreExecutionHook, ToolExecutionEngine, WrapHook
from toolscore.audit.sinks import AuditSink, JsonlAuditSink, NullAuditSink
from toolscore.config import Config, state_dir
from toolscore.downstream.hub import DownstreamHub, open_hub
from toolscore.front.callers import Callers
from toolscore.front.server import FrontServer, build_server
from toolscore.plan.tool import ORCHESTRATE, Orchestrator
from toolscore.policy import RedactingAuditSink, build_policy

__all__ = ["Gateway", "audit_path", "open_gateway"]


@dataclass(frozen=True, slots=True)
class Gateway:
    """A running gateway: its downstreams, its engine and its front server."""

    config: Config
    hub: DownstreamHub
    engine: ToolExecutionEngine
    server: FrontServer
    orchestrator: Orchestrator


def _audit_sink(config: Config) -> AuditSink:
    audit = config.settings.audit
    if audit.path == "":
        return NullAuditSink()
    return JsonlAuditSink(audit_path(config), fsync=audit.fsync, max_bytes=audit.max_bytes, backups=audit.backups)


def audit_path(config: Config) -> Path:
    """Where the config puts the audit file."""
    path = config.settings.audit.path
    return Path(path).expanduser() if path else state_dir() / "audit.jsonl"


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
    """
    policy = build_policy(config)
    sink = audit if audit is not None else _audit_sink(config)
    if policy.redactor is not None:
        sink = RedactingAuditSink(sink, policy.redactor)
    logs = log_dir or Path(config.settings.log_dir or state_dir() / "logs")
    try:
        async with open_hub(config, log_dir=logs, memory_servers=memory_servers) as hub:
            engine = ToolExecutionEngine(
                tools=hub,
                call=hub.call,
                audit=sink,
                settings=EngineSettings.from_config(config),
                # Constraint hooks (the policy's and the caller's) are behind the feature flag.
                pre_hooks=(*policy.pre, *pre_hooks) if config.constraints.enabled else (),
                wrap_hooks=(*policy.wrap, *wrap_hooks),
                post_hooks=(*post_hooks, *policy.post),
            )
            orchestrator = Orchestrator(
                tools=hub,
                engine=engine,
                config=config,
                audit=sink,
                policy=policy.plan_problems,
                refusal=policy.gateway_tool_refusal(ORCHESTRATE),
            )
            callers = Callers()
            callers.on_gone(orchestrator.episodes.forget)
            callers.on_gone(hub.caller_gone)
            hub.add_reap_hook(callers.drain)
            server = build_server(hub, engine, orchestrator, callers)
            yield Gateway(config, hub, engine, server, orchestrator)
    finally:
        sink.close()
