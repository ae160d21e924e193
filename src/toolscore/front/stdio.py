"""The front's stdio transport: newline-delimited JSON-RPC on fd 0/1 without worker threads.

The SDK's `stdio_server()` reads and writes through `anyio.wrap_file`, one worker-thread hop per
line read and two per message written. That costs about a millisecond per call, and a blocked
`readline` in a thread cannot be cancelled, so SIGTERM would wait for the client's next message.
Here fd 0 and a private duplicate of fd 1 are non-blocking and polled by the event loop.

While serving, fd 1 points at stderr, as the SDK does: a stray `print()` in any library lands in
the log instead of corrupting the JSON-RPC channel. Everything is restored on exit.

Each line is offered to the server's hot path first (`front.fast`): a passthrough `tools/call` is
answered there, as bytes on the same outgoing stream (so its answer never overtakes the progress
notifications the SDK wrote for it); every other line goes to the SDK.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import mcp_types
import structlog
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from toolscore._lines import LineWriter, Oversized, message_id, read_lines, widen_pipe, write_lines
from toolscore.config import DEFAULT_MAX_REQUEST_BYTES
from toolscore.front.fast import FastCalls

__all__ = ["pollable", "stdio_transport"]

log = structlog.get_logger("toolscore.stdio")


def pollable(fd: int) -> bool:
    """Whether the event loop can poll `fd` (pipes, sockets, terminals; not regular files)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


def _error(request_id: mcp_types.RequestId | None, code: int, message: str) -> SessionMessage:
    error = mcp_types.ErrorData(code=code, message=message)
    return SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


def _answer_to_unreadable(line: bytes) -> SessionMessage:
    """The JSON-RPC error a line that is not a valid message gets (the spec's parse/invalid-request errors)."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return _error(None, mcp_types.PARSE_ERROR, "Parse error: the line is not valid JSON (or not UTF-8)")
    request_id = value.get("id") if isinstance(value, dict) else None
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        request_id = None
    return _error(request_id, mcp_types.INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 message")


Outgoing = SessionMessage | bytes
"""What goes to the client: the SDK's messages, and whole lines the hot path encoded itself."""


async def _read_lines(
    fd: int,
    sink: MemoryObjectSendStream[SessionMessage | Exception],
    answer: MemoryObjectSendStream[Outgoing],
    limit: int,
    fast: FastCalls | None,
    tg: TaskGroup,
) -> None:
    async with sink, answer:
        async for line in read_lines(fd, limit):  # until EOF: the client is gone
            if isinstance(line, Oversized):
                log.warning("request over the size limit refused", limit=limit)
                error = _error(message_id(line.head), mcp_types.INVALID_REQUEST, f"the request exceeds {limit} bytes")
                await answer.send(error)
                continue
            if fast is not None:
                await fast.settled(line)
                if fast.cancels(line):
                    continue
                if (job := fast.take(line)) is not None:
                    tg.start_soon(fast.run, job, answer.send)  # after EOF there is no one to answer
                    continue
            await _deliver(line, sink, answer)


async def _deliver(
    line: bytes,
    sink: MemoryObjectSendStream[SessionMessage | Exception],
    answer: MemoryObjectSendStream[Outgoing],
) -> None:
    if not line.strip():
        return
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        # The SDK would only log it: answer, so the client does not wait forever.
        await answer.send(_answer_to_unreadable(line))
        return
    if isinstance(message, mcp_types.JSONRPCNotification) and b'"id"' in line:
        # A request whose id is neither a string nor a number validates as a notification
        # (which never gets an answer): the spec calls it an invalid request.
        value = json.loads(line)
        if isinstance(value, dict) and "id" in value:
            await answer.send(
                _error(None, mcp_types.INVALID_REQUEST, "Invalid request: the id must be a string or a number")
            )
            return
    await sink.send(SessionMessage(message))


def _encode(message: Outgoing) -> bytes:
    if isinstance(message, bytes):
        return message
    try:
        return (message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode()
    except ValueError:
        # Text that cannot be encoded (an unpaired surrogate) must not kill the writer, and so
        # the whole session: the client gets an error for this one request instead.
        log.exception("a reply could not be serialised")
        request_id = getattr(message.message, "id", None)
        if request_id is None:
            return b""
        reply = _error(request_id, mcp_types.INTERNAL_ERROR, "the reply could not be encoded as JSON")
        return (reply.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode()


async def _write_lines(fd: int, source: MemoryObjectReceiveStream[Outgoing]) -> None:
    async with source:
        await write_lines(LineWriter(fd), (_encode(message) async for message in source))


@asynccontextmanager
async def stdio_transport(
    stdin_fd: int = 0,
    stdout_fd: int = 1,
    *,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    fast: FastCalls | None = None,
) -> AsyncIterator[tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[Outgoing]]]:
    """Serve JSON-RPC lines on `stdin_fd`/`stdout_fd`; yields the (read, write) streams for `Server.run`.

    `fast`: the server's hot path for `tools/call` (None: every line goes to the SDK).
    """
    if fast is not None:
        fast.enable()
    wire_out = os.dup(stdout_fd)
    for fd in (stdin_fd, wire_out):
        widen_pipe(fd)  # the client's pipes, when they are pipes: large messages in fewer wake-ups
    os.dup2(2, stdout_fd)  # stray writes to fd 1 now go to stderr
    blocking = {fd: os.get_blocking(fd) for fd in (stdin_fd, wire_out)}
    for fd in blocking:
        os.set_blocking(fd, False)
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[Outgoing](0)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read_lines, stdin_fd, read_send, write_send.clone(), max_request_bytes, fast, tg)
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
