"""Assembly: config -> hub of downstreams -> engine -> front server, and running it."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import structlog
import uvicorn
from mcp.server.stdio import stdio_server

from toolscore._audit import AuditSink, JsonlAuditSink, NullAuditSink
from toolscore._engine import PostExecutionHook, PreExecutionHook, ToolExecutionEngine
from toolscore._hub import DownstreamHub, open_hub
from toolscore._server import FrontServer, build_server
from toolscore.config import Config, state_dir

__all__ = ["Gateway", "open_gateway", "serve_http", "serve_stdio"]

log = structlog.get_logger("toolscore")


@dataclass(frozen=True, slots=True)
class Gateway:
    """A running gateway: its downstreams, its engine and its front server."""

    config: Config
    hub: DownstreamHub
    engine: ToolExecutionEngine
    server: FrontServer


def _audit_sink(config: Config) -> AuditSink:
    path = config.settings.audit.path
    if path == "":
        return NullAuditSink()
    return JsonlAuditSink(Path(path) if path else state_dir() / "audit.jsonl")


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
        pre_hooks: Constraint hooks, used when `constraints.enabled` is true.
        post_hooks: Post-execution hooks.
    """
    sink = audit if audit is not None else _audit_sink(config)
    logs = log_dir or Path(config.settings.log_dir or state_dir() / "logs")
    try:
        async with open_hub(config, log_dir=logs) as hub:
            engine = ToolExecutionEngine(
                tools=hub, call=hub.call, config=config, audit=sink, pre_hooks=pre_hooks, post_hooks=post_hooks
            )
            yield Gateway(config, hub, engine, build_server(hub, engine))
    finally:
        sink.close()


async def serve_stdio(gateway: Gateway) -> None:
    """Serve one client on stdin/stdout until stdin closes or SIGTERM/SIGINT arrives."""
    server = gateway.server
    async with anyio.create_task_group() as tg:

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    log.info("stopping", signal=signal.Signals(signum).name)
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(stop_on_signal)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        tg.cancel_scope.cancel()


async def serve_http(gateway: Gateway, *, host: str, port: int) -> None:
    """Serve streamable HTTP on `http://host:port/mcp` until SIGTERM/SIGINT."""
    app = gateway.server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    log.info("serving", url=f"http://{host}:{port}/mcp")
    await server.serve()
