"""The front's stdio transport: newline-delimited JSON-RPC on fd 0/1 without worker threads.

The SDK's `stdio_server()` reads and writes through `anyio.wrap_file`, one worker-thread hop per
line read and two per message written. That costs about a millisecond per call, and a blocked
`readline` in a thread cannot be cancelled, so SIGTERM would wait for the client's next message.
Here fd 0 and a private duplicate of fd 1 are non-blocking and polled by the event loop.

While serving, fd 1 points at stderr, as the SDK does: a stray `print()` in any library lands in
the log instead of corrupting the JSON-RPC channel. Everything is restored on exit.
"""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

__all__ = ["pollable", "stdio_transport"]

_CHUNK = 1 << 16


def pollable(fd: int) -> bool:
    """Whether the event loop can poll `fd` (pipes, sockets, terminals; not regular files)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


async def _read_lines(fd: int, sink: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
    buffer = bytearray()
    async with sink:
        while True:
            await anyio.wait_readable(fd)
            try:
                chunk = os.read(fd, _CHUNK)
            except BlockingIOError:
                continue
            if not chunk:  # EOF: the client is gone
                if buffer.strip():
                    await _deliver(bytes(buffer), sink)
                return
            buffer.extend(chunk)
            start = 0
            while (end := buffer.find(b"\n", start)) >= 0:
                if end > start:
                    await _deliver(bytes(buffer[start:end]), sink)
                start = end + 1
            del buffer[:start]


async def _deliver(line: bytes, sink: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except Exception as exc:  # a malformed line is reported to the session, as the SDK does
        await sink.send(exc)
        return
    await sink.send(SessionMessage(message))


async def _write_lines(fd: int, source: MemoryObjectReceiveStream[SessionMessage]) -> None:
    async with source:
        async for session_message in source:
            data = memoryview(
                (session_message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode()
            )
            while data:
                try:
                    written = os.write(fd, data)
                except BlockingIOError:
                    await anyio.wait_writable(fd)
                    continue
                data = data[written:]


@asynccontextmanager
async def stdio_transport(
    stdin_fd: int = 0, stdout_fd: int = 1
) -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
]:
    """Serve JSON-RPC lines on `stdin_fd`/`stdout_fd`; yields the (read, write) streams for `Server.run`."""
    wire_out = os.dup(stdout_fd)
    os.dup2(2, stdout_fd)  # stray writes to fd 1 now go to stderr
    blocking = {fd: os.get_blocking(fd) for fd in (stdin_fd, wire_out)}
    for fd in blocking:
        os.set_blocking(fd, False)
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read_lines, stdin_fd, read_send)
            tg.start_soon(_write_lines, wire_out, write_recv)
            try:
                yield read_recv, write_send
            finally:
                tg.cancel_scope.cancel()
    finally:
        for fd, was_blocking in blocking.items():
            os.set_blocking(fd, was_blocking)
        os.dup2(wire_out, stdout_fd)
        os.close(wire_out)
