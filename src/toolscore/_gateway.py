"""Assembly: config -> hub of downstreams -> engine -> front server, and running it."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import structlog
import uvicorn
from mcp.server.stdio import stdio_server

from toolscore._audit import AuditSink, JsonlAuditSink, NullAuditSink
from toolscore._callers import Callers
from toolscore._engine import PostExecutionHook, PreExecutionHook, ToolExecutionEngine
from toolscore._http_auth import HttpExposure, HttpGuard, resolve_exposure
from toolscore._hub import DownstreamHub, open_hub
from toolscore._plan_tool import ORCHESTRATE, Orchestrator
from toolscore._policy import RedactingAuditSink, build_policy
from toolscore._server import FrontServer, build_server
from toolscore._stdio import pollable, stdio_transport
from toolscore.config import Config, state_dir

__all__ = ["Gateway", "audit_path", "open_gateway", "serve_http", "serve_stdio"]

log = structlog.get_logger("toolscore")


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
    post_hooks: Sequence[PostExecutionHook] = (),
) -> AsyncIterator[Gateway]:
    """Start every downstream and build the front server over them.

    Args:
        config: The validated servers.json.
        audit: Where audit records go (default: from the config).
        log_dir: Where each stdio server's stderr goes (default: from the config).
        pre_hooks: Constraint hooks of your own, run after the built-in rules when `constraints.enabled`.
        post_hooks: Post-execution hooks.
    """
    policy = build_policy(config)
    sink = audit if audit is not None else _audit_sink(config)
    if policy.redactor is not None:
        sink = RedactingAuditSink(sink, policy.redactor)
    logs = log_dir or Path(config.settings.log_dir or state_dir() / "logs")
    try:
        async with open_hub(config, log_dir=logs) as hub:
            engine = ToolExecutionEngine(
                tools=hub,
                call=hub.call,
                config=config,
                audit=sink,
                pre_hooks=(*policy.pre, *pre_hooks),
                wrap_hooks=policy.wrap,
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


@asynccontextmanager
async def _stop_on_signals(stop: Callable[[], None]) -> AsyncIterator[None]:
    """Call `stop` on the first SIGTERM or SIGINT received inside the block."""
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    log.info("stopping", signal=signal.Signals(signum).name)
                    stop()
                    return

        tg.start_soon(watch)
        yield
        tg.cancel_scope.cancel()


async def serve_stdio(gateway: Gateway) -> None:
    """Serve one client on stdin/stdout until stdin closes or SIGTERM/SIGINT arrives."""
    server = gateway.server
    # stdin redirected from a regular file cannot be polled: the SDK's threaded transport then.
    limit = gateway.config.settings.max_request_bytes
    transport = stdio_transport(max_request_bytes=limit) if pollable(0) else stdio_server()
    with anyio.CancelScope() as scope:
        async with _stop_on_signals(scope.cancel), transport as (read, write):
            await server.run(read, write, server.create_initialization_options())


class _UvicornServer(uvicorn.Server):
    """uvicorn without its own signal handling.

    uvicorn re-raises a captured SIGTERM after its shutdown, which would kill the process before
    the gateway closes its downstream servers; toolscore handles the signals itself.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_http(gateway: Gateway, *, host: str, port: int, exposure: HttpExposure | None = None) -> None:
    """Serve streamable HTTP on `http(s)://host:port/mcp` until SIGTERM/SIGINT.

    Args:
        gateway: The started gateway.
        host: The bind address.
        port: The port.
        exposure: The checked token, allow-lists, TLS and body cap (default: from `toolscore.http`
            and `$TOOLSCORE_TOKEN`, which raises ConfigError for a non-loopback bind without a token).
    """
    if exposure is None:
        exposure = resolve_exposure(gateway.config.settings.http, host=host, port=port)
    app = gateway.server.streamable_http_app(
        host=host, transport_security=exposure.security, max_request_body_size=gateway.config.settings.max_request_bytes
    )
    guarded = HttpGuard(app, security=exposure.security, token=exposure.token)
    config = uvicorn.Config(
        guarded,
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        ssl_certfile=exposure.tls_cert,
        ssl_keyfile=exposure.tls_key,
    )
    server = _UvicornServer(config)

    def stop() -> None:
        server.should_exit = True

    routes = gateway.hub.registry.routes
    # Said on stderr whatever the log level: a person started this in a terminal.
    if warning := exposure.warning(host):
        sys.stderr.write(f"toolscore: warning: {warning}\n")
    where = f"[{host}]" if ":" in host else host
    sys.stderr.write(
        f"toolscore: serving {len(routes)} tools from {len(gateway.hub.registry.servers)} server(s) "
        f"on {exposure.scheme}://{where}:{port}/mcp (Ctrl-C stops)\n"
    )
    async with _stop_on_signals(stop):
        await server.serve()
