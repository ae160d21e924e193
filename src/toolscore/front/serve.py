"""Running the front server: on stdin/stdout for one client, or on streamable HTTP for many.

The HTTP front's modules (uvicorn, the guard, the console's paths) are imported by `serve_http`
only: a stdio gateway does not load them.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from toolscore.front.server import FrontServer
from toolscore.front.stdio import pollable, stdio_transport

if TYPE_CHECKING:
    import uvicorn
    from starlette.types import ASGIApp

    from toolscore.downstream.credentials import SubjectTokens
    from toolscore.front.http import HttpExposure

__all__ = ["http_app", "listen_sockets", "serve_http", "serve_stdio"]

log = structlog.get_logger("toolscore")
KEEP_ALIVE_SECONDS = 30
"""How long the HTTP front keeps a client's idle connection open for its next request."""
RETRY_INTERVAL_MS = 1000
"""How long an HTTP client waits before resuming a lost SSE stream (the SSE `retry` field)."""


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


async def serve_stdio(server: FrontServer, *, max_request_bytes: int) -> None:
    """Serve one client on stdin/stdout until stdin closes or SIGTERM/SIGINT arrives."""
    # stdin redirected from a regular file cannot be polled: the SDK's threaded transport then.
    transport = stdio_transport(max_request_bytes=max_request_bytes, fast=server.fast) if pollable(0) else _sdk_stdio()
    with anyio.CancelScope() as scope:
        async with _stop_on_signals(scope.cancel), transport as (read, write):
            await server.run(read, write, server.create_initialization_options())


@asynccontextmanager
async def _sdk_stdio() -> AsyncIterator[tuple[MemoryObjectReceiveStream[SessionMessage | Exception], Any]]:
    """The SDK's threaded stdio transport, where a line it cannot read is answered (it only logs
    it, and the client would wait for its answer forever): -32700, or -32600 for JSON that is not
    a JSON-RPC message, with id `null` (the line is gone by then)."""
    async with stdio_server() as (read, write):
        inner, outer = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def forward() -> None:
            async with inner:
                async for item in read:
                    if not isinstance(item, Exception):
                        await inner.send(item)
                        continue
                    log.warning("a client line could not be read", error=str(item)[:200])
                    unparsable = isinstance(item, ValidationError) and item.errors()[0]["type"] == "json_invalid"
                    code = mcp_types.PARSE_ERROR if unparsable else mcp_types.INVALID_REQUEST
                    error = mcp_types.ErrorData(code=code, message="the line is not a JSON-RPC 2.0 message")
                    await write.send(SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=None, error=error)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(forward)
            yield outer, write
            tg.cancel_scope.cancel()


def listen_sockets(host: str, port: int) -> list[socket.socket]:
    """Bind and listen on every address `host` resolves to, as uvicorn would, before anything starts.

    Checking the port first lets `serve` refuse in one line instead of after the downstream
    servers have started; handing the bound sockets to uvicorn leaves no window for another
    process to take the port in between.

    Raises:
        OSError: `host` does not resolve, or an address cannot be bound (in use, not permitted).
    """
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen()
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _uvicorn_server(config: uvicorn.Config) -> uvicorn.Server:
    """uvicorn without its own signal handling.

    uvicorn re-raises a captured SIGTERM after its shutdown, which would kill the process before
    the gateway closes its downstream servers; toolscore handles the signals itself.
    """
    import uvicorn

    class _UvicornServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return _UvicornServer(config)


def http_app(
    server: FrontServer,
    *,
    host: str,
    exposure: HttpExposure,
    max_request_bytes: int,
    pages: Mapping[str, ASGIApp] | None = None,
    subjects: SubjectTokens | None = None,
) -> ASGIApp:
    """The HTTP front as one ASGI app (its lifespan runs the sessions): the guard, the gateway's pages,
    the hot path for passthrough calls (`front.http_fast`) and the SDK's streamable HTTP app.

    Args: as `serve_http`'s.
    """
    from toolscore._sdk import lifespan_state
    from toolscore.front.console import PUBLIC_PATHS
    from toolscore.front.events import BoundedEventStore
    from toolscore.front.http import HttpGuard
    from toolscore.front.http_fast import HttpCalls
    from toolscore.front.http_modern import ModernCalls
    from toolscore.front.routes import PathRoutes
    from toolscore.plan.tool import ORCHESTRATE

    app: ASGIApp = server.streamable_http_app(
        host=host,
        transport_security=exposure.security,
        max_request_body_size=max_request_bytes,
        # SSE streams carry event ids and a retry hint, so a client that loses one resumes it.
        event_store=BoundedEventStore(),
        retry_interval=RETRY_INTERVAL_MS,
    )
    if server.fast is not None:
        fast, handlers, manager = server.fast, server.tool_handlers, server.session_manager
        modern = ModernCalls(
            handle=partial(handlers.call_outcome, keep_bytes=True),
            # A plan of a 2026-07-28 client may be an extension task (`front.tasks`): the SDK's path.
            serves=lambda name: name != ORCHESTRATE and fast.serves(name),
            input_schema=handlers.input_schema,
            server_info=server.server_info_stamp,
            lifespan_state=lambda: lifespan_state(manager),
        )
        server.http_calls = HttpCalls(
            app,
            call=fast.call,
            serves=fast.serves,
            manager=manager,
            max_body=max_request_bytes,
            modern=modern,
        )
        app = server.http_calls
    return HttpGuard(
        PathRoutes(app, pages) if pages else app,
        security=exposure.security,
        token=exposure.token,
        oauth=exposure.oauth,
        subjects=subjects,
        public=PUBLIC_PATHS & set(pages or ()),
        max_body=max_request_bytes,
    )


async def serve_http(
    server: FrontServer,
    *,
    host: str,
    port: int,
    exposure: HttpExposure,
    max_request_bytes: int,
    banner: str = "",
    sockets: list[socket.socket] | None = None,
    pages: Mapping[str, ASGIApp] | None = None,
    subjects: SubjectTokens | None = None,
) -> None:
    """Serve streamable HTTP on `http(s)://host:port/mcp` until SIGTERM/SIGINT.

    Args:
        server: The front server.
        host: The bind address.
        port: The port.
        exposure: The checked token, allow-lists and TLS (`resolve_exposure`).
        max_request_bytes: The largest request body.
        banner: What is served, for the start-up line (e.g. "69 tools from 6 server(s)").
        sockets: Already listening on `host`:`port` (`listen_sockets`); uvicorn closes them at the end.
            Without them uvicorn binds, and a port in use ends the process from inside uvicorn.
        pages: The gateway's own pages beside `/mcp` by exact path (`/metrics`), behind the same guard.
        subjects: Where checked access tokens are noted for token exchange (`DownstreamHub.subjects`).
    """
    import uvicorn

    config = uvicorn.Config(
        http_app(
            server, host=host, exposure=exposure, max_request_bytes=max_request_bytes, pages=pages, subjects=subjects
        ),
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        # Longer than clients keep an idle connection (Node's fetch: 4 s, httpx: 5 s): a server
        # that closes first (uvicorn's default is 5 s) races a client reusing the connection, whose
        # request then fails on a busy machine ("fetch failed") though the gateway never saw it.
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        ssl_certfile=exposure.tls_cert,
        ssl_keyfile=exposure.tls_key,
    )
    uvicorn_server = _uvicorn_server(config)

    def stop() -> None:
        uvicorn_server.should_exit = True

    # Said on stderr whatever the log level: a person started this in a terminal.
    if warning := exposure.warning(host):
        sys.stderr.write(f"toolscore: warning: {warning}\n")
    where = f"[{host}]" if ":" in host else host
    serving = f"serving {banner} on" if banner else "serving on"
    sys.stderr.write(f"toolscore: {serving} {exposure.scheme}://{where}:{port}/mcp (Ctrl-C stops)\n")
    async with _stop_on_signals(stop):
        await uvicorn_server.serve(sockets=sockets)
