"""How a downstream connection is opened: one seam, four transports (stdio, HTTP, SSE, in memory).

A `Transport` opens one connection at a time and yields the (read, write) message streams an
`mcp.Client` takes; `Downstream` supervises whatever it opens, so supervision, reconnection and
calls work the same over every transport. `MemoryTransport` runs an SDK server in this process,
in the style of httpx's `MockTransport`: tests and embedding programs put real MCP servers behind
the gateway without a subprocess. `transport_for` picks the transport a servers.json entry names.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

import anyio
import structlog
from mcp.shared.message import SessionMessage

from toolscore._redact import redact_text
from toolscore._sdk import ReadStream, WriteStream
from toolscore.config import ServerConfig
from toolscore.downstream.child import ChildProcess, spawn_stdio
from toolscore.downstream.raw import RawChannel
from toolscore.downstream.spawn import open_errlog, take_errlog

if TYPE_CHECKING:
    # Imported where a connection of their kind opens: a gateway of stdio servers loads no HTTP client.
    import httpx2
    from mcp.server import Server

log = structlog.get_logger("toolscore.downstream")

__all__ = [
    "HttpTransport",
    "MemoryTransport",
    "SseTransport",
    "StdioTransport",
    "Streams",
    "Transport",
    "transport_for",
]

Streams = tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]

HTTP_KEEPALIVE_SECONDS = 3.0
"""How long an idle connection to an HTTP server is kept for reuse: under the 5 s after which
common servers (uvicorn, Node) close it, so the gateway never sends on one the server is closing."""


class Transport(Protocol):
    """Opens connections to one server, one at a time."""

    kind: str
    """`stdio`, `http`, `sse` or `memory`: how `toolscore check` shows it."""

    def connect(self) -> AbstractAsyncContextManager[Streams]:
        """One connection: the streams, closed (and the server stopped, if it is ours) on exit."""
        ...

    def kill(self) -> None:
        """Stop a wedged server now, so the open connection ends (nothing to do for most)."""
        ...

    @property
    def pid(self) -> int | None:
        """The process of the current connection's server, if the gateway started one."""
        ...

    @property
    def raw(self) -> RawChannel | None:
        """The current connection's channel for the gateway's own `tools/call` (stdio only)."""
        ...

    def close(self) -> None:
        """Release what outlives connections (log files); the transport is not used after."""
        ...

    def last_exit(self) -> str | None:
        """How the last connection's server ended, if the gateway ran it: its exit status and the
        last lines it wrote on stderr (None for a server the gateway does not run)."""
        ...


class StdioTransport:
    """A child process speaking JSON-RPC lines on stdin/stdout (see `child`)."""

    kind = "stdio"

    def __init__(self, config: ServerConfig, *, log_dir: Path | None, max_message_bytes: int, label: str) -> None:
        assert config.command is not None
        self._config = config
        self._max_message_bytes = max_message_bytes
        self._label = label
        self._child: ChildProcess | None = None
        self._exit: str | None = None
        self._errlog: IO[str] | None
        self._early_log_start: int | None = None
        # Started before the gateway's imports (`spawn.start_early`): its log is already open.
        if (early := take_errlog(config)) is not None:
            self._errlog, self._early_log_start = early
        else:
            self._errlog = open_errlog(log_dir, config.name)

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Streams]:
        cfg = self._config
        assert cfg.command is not None
        started: list[ChildProcess] = []
        self._exit = None
        log_start = self._early_log_start if self._early_log_start is not None else _size(self._errlog)
        self._early_log_start = None
        try:
            async with spawn_stdio(
                cfg.command,
                cfg.args,
                env=cfg.env,
                cwd=cfg.cwd,
                errlog=self._errlog,
                max_message_bytes=self._max_message_bytes,
                server=self._label,
                started=started,
            ) as streams:
                self._child = started[0]
                yield streams
        finally:
            self._child = None
            if started:  # the child has been reaped: its status and stderr are complete
                self._exit = _exit_report(started[0].returncode, self._errlog, log_start)

    def kill(self) -> None:
        if self._child is not None:
            self._child.kill()  # SIGKILL reaches even a stopped or spinning process

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    @property
    def raw(self) -> RawChannel | None:
        return self._child.raw if self._child is not None else None

    def close(self) -> None:
        if self._errlog is not None:
            self._errlog.close()

    def last_exit(self) -> str | None:
        return self._exit


class HttpTransport:
    """Streamable HTTP; headers and auth go on the httpx2 client the SDK uses.

    `auth` (a principal's connection, `toolscore.downstream.credentials`) sets `Authorization` on
    each request, over whatever `headers` say.
    """

    kind = "http"
    pid = None
    raw = None

    def __init__(self, url: str, headers: dict[str, str] | None = None, auth: httpx2.Auth | None = None) -> None:
        self._url = url
        self._headers = headers or {}
        self._auth = auth

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Streams]:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        http = httpx2.AsyncClient(
            headers=self._headers,
            auth=self._auth,
            timeout=httpx2.Timeout(30.0, read=300.0),
            # An idle connection is dropped before the server drops it (5 s is uvicorn's and
            # Node's default): one the server closes as it is reused fails the request sent on it.
            limits=httpx2.Limits(keepalive_expiry=HTTP_KEEPALIVE_SECONDS),
        )
        async with http, streamable_http_client(self._url, http_client=http) as streams:
            yield streams[0], streams[1]

    def kill(self) -> None:
        """Nothing to kill: the connection is dropped by the caller."""

    def close(self) -> None:
        """Nothing outlives a connection."""

    def last_exit(self) -> str | None:
        """Not a process the gateway runs."""
        return None


class SseTransport:
    """The older HTTP+SSE transport (headers and auth as `HttpTransport`'s)."""

    kind = "sse"
    pid = None
    raw = None

    def __init__(self, url: str, headers: dict[str, str] | None = None, auth: httpx2.Auth | None = None) -> None:
        self._url = url
        self._headers = headers or {}
        self._auth = auth

    def connect(self) -> AbstractAsyncContextManager[Streams]:
        from mcp.client.sse import sse_client

        return sse_client(self._url, headers=self._headers or None, auth=self._auth)

    def kill(self) -> None:
        """Nothing to kill: the connection is dropped by the caller."""

    def close(self) -> None:
        """Nothing outlives a connection."""

    def last_exit(self) -> str | None:
        """Not a process the gateway runs."""
        return None


class MemoryTransport:
    """An SDK server in this process, reached over memory streams (no subprocess, no socket).

    Each connection runs `server.run` in its own task, as a subprocess would run its main loop:
    state kept in the server's handlers is shared by every connection, as in one process.
    """

    kind = "memory"
    pid = None
    raw = None

    def __init__(self, server: Server[Any]) -> None:
        self._server = server
        self._scope: anyio.CancelScope | None = None

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Streams]:
        from mcp.shared.memory import create_client_server_memory_streams

        server = self._server
        async with create_client_server_memory_streams() as (client, (read, write)), anyio.create_task_group() as tg:
            scope = self._scope = anyio.CancelScope()

            async def serve() -> None:
                with scope:
                    await server.run(read, write, server.create_initialization_options())
                await write.aclose()  # the client sees the end of the connection, as with a dead child

            tg.start_soon(serve)
            try:
                yield client[0], client[1]
            finally:
                self._scope = None
                tg.cancel_scope.cancel()

    def kill(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    def close(self) -> None:
        """Nothing outlives a connection."""

    def last_exit(self) -> str | None:
        """Not a process the gateway runs."""
        return None


def transport_for(
    config: ServerConfig,
    *,
    log_dir: Path | None,
    max_message_bytes: int,
    label: str,
    auth: httpx2.Auth | None = None,
) -> Transport:
    """The transport a servers.json entry names (`memory` servers are given in process instead);
    `auth`: the credential of one principal's connection to an HTTP or SSE server."""
    if config.transport == "stdio":
        return StdioTransport(config, log_dir=log_dir, max_message_bytes=max_message_bytes, label=label)
    assert config.url is not None
    if config.transport == "sse":
        return SseTransport(config.url, config.headers, auth)
    return HttpTransport(config.url, config.headers, auth)


_TAIL_LINES = 5
_TAIL_BYTES = 4096
_TAIL_LINE_CHARS = 200


def _size(errlog: IO[str] | None) -> int:
    """Where the next connection's stderr starts in the log."""
    if errlog is None:
        return 0
    errlog.flush()
    return os.fstat(errlog.fileno()).st_size


def _exit_report(returncode: int | None, errlog: IO[str] | None, start: int) -> str | None:
    """`exit status 3; stderr: boom`: how a child ended, with the last lines it wrote on stderr."""
    parts: list[str] = []
    if returncode is not None and returncode >= 0:
        parts.append(f"exit status {returncode}")
    elif returncode is not None:
        try:
            parts.append(f"killed by {signal.Signals(-returncode).name}")
        except ValueError:
            parts.append(f"killed by signal {-returncode}")
    if lines := _stderr_tail(errlog, start):
        parts.append("stderr: " + " | ".join(lines))
    return "; ".join(parts) or None


def _stderr_tail(errlog: IO[str] | None, start: int) -> list[str]:
    """The last few non-blank lines written to the log since `start` (this connection's stderr)."""
    if errlog is None:
        return []
    try:
        with open(errlog.name, "rb") as fh:
            end = fh.seek(0, os.SEEK_END)
            offset = max(start, end - _TAIL_BYTES)
            fh.seek(offset)
            data = fh.read(end - offset)
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    if offset > start and lines:
        lines = lines[1:]  # cut mid-line
    kept = ["".join(c if c.isprintable() else "?" for c in line.strip())[:_TAIL_LINE_CHARS] for line in lines]
    tail = [line for line in kept if line][-_TAIL_LINES:]
    # Quoted to clients, the console and the gateway's log: a server that prints its environment
    # or a connection string must not hand its keys to them. The raw lines stay in the server's
    # own log file, and in the gateway's log at debug level.
    log.debug("server stderr tail", lines=tail)
    return [redact_text(line) for line in tail]
