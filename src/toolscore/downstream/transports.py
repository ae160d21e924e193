"""How a downstream connection is opened: one seam, four transports (stdio, HTTP, SSE, in memory).

A `Transport` opens one connection at a time and yields the (read, write) message streams an
`mcp.Client` takes; `Downstream` supervises whatever it opens, so supervision, reconnection and
calls work the same over every transport. `MemoryTransport` runs an SDK server in this process,
in the style of httpx's `MockTransport`: tests and embedding programs put real MCP servers behind
the gateway without a subprocess. `transport_for` picks the transport a servers.json entry names.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import IO, Any, Protocol

import anyio
import httpx2
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server
from mcp.shared.memory import create_client_server_memory_streams
from mcp.shared.message import SessionMessage

from toolscore._sdk import ReadStream, WriteStream
from toolscore.config import ServerConfig
from toolscore.downstream.child import ChildProcess, spawn_stdio

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

    def close(self) -> None:
        """Release what outlives connections (log files); the transport is not used after."""
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
        self._errlog = _open_errlog(log_dir, config.name)

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Streams]:
        cfg = self._config
        assert cfg.command is not None
        started: list[ChildProcess] = []
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

    def kill(self) -> None:
        if self._child is not None:
            self._child.kill()  # SIGKILL reaches even a stopped or spinning process

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    def close(self) -> None:
        if self._errlog is not None:
            self._errlog.close()


class HttpTransport:
    """Streamable HTTP; headers (auth) go on the httpx2 client the SDK uses."""

    kind = "http"
    pid = None

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self._url = url
        self._headers = headers or {}

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Streams]:
        http = httpx2.AsyncClient(headers=self._headers, timeout=httpx2.Timeout(30.0, read=300.0))
        async with http, streamable_http_client(self._url, http_client=http) as streams:
            yield streams[0], streams[1]

    def kill(self) -> None:
        """Nothing to kill: the connection is dropped by the caller."""

    def close(self) -> None:
        """Nothing outlives a connection."""


class SseTransport:
    """The older HTTP+SSE transport."""

    kind = "sse"
    pid = None

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self._url = url
        self._headers = headers or {}

    def connect(self) -> AbstractAsyncContextManager[Streams]:
        return sse_client(self._url, headers=self._headers or None)

    def kill(self) -> None:
        """Nothing to kill: the connection is dropped by the caller."""

    def close(self) -> None:
        """Nothing outlives a connection."""


class MemoryTransport:
    """An SDK server in this process, reached over memory streams (no subprocess, no socket).

    Each connection runs `server.run` in its own task, as a subprocess would run its main loop:
    state kept in the server's handlers is shared by every connection, as in one process.
    """

    kind = "memory"
    pid = None

    def __init__(self, server: Server[Any]) -> None:
        self._server = server
        self._scope: anyio.CancelScope | None = None

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Streams]:
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


def transport_for(config: ServerConfig, *, log_dir: Path | None, max_message_bytes: int, label: str) -> Transport:
    """The transport a servers.json entry names (`memory` servers are given in process instead)."""
    if config.transport == "stdio":
        return StdioTransport(config, log_dir=log_dir, max_message_bytes=max_message_bytes, label=label)
    assert config.url is not None
    if config.transport == "sse":
        return SseTransport(config.url, config.headers)
    return HttpTransport(config.url, config.headers)


def _open_errlog(log_dir: Path | None, name: str) -> IO[str] | None:
    if log_dir is None:
        return None
    log_dir.mkdir(parents=True, exist_ok=True)
    # Line-buffered append: the child writes to the file descriptor directly.
    fh = open(log_dir / f"{name}.log", "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed by close()
    fh.write(f"--- toolscore: starting '{name}' (pid {os.getpid()}) ---\n")
    return fh
