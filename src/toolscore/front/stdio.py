"""The front's stdio transport: newline-delimited JSON-RPC on fd 0/1 without worker threads.

The SDK's `stdio_server()` reads and writes through `anyio.wrap_file`, one worker-thread hop per
line read and two per message written. That costs about a millisecond per call, and a blocked
`readline` in a thread cannot be cancelled, so SIGTERM would wait for the client's next message.
Here fd 0 and a private duplicate of fd 1 are non-blocking and polled by the event loop.

While serving, fd 1 points at stderr, as the SDK does: a stray `print()` in any library lands in
the log instead of corrupting the JSON-RPC channel. Everything is restored on exit.

Each line is offered to the server's hot path first (`front.fast`): a passthrough `tools/call` is
answered there, as bytes; every other line goes to the SDK. Outgoing messages, the SDK's and the
hot path's, are written by the task that sends them (`ClientLines`), in the order they were sent,
so an answer never overtakes the progress notifications sent for it; a writer task behind a
stream would cost one more trip through the event loop per message.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from types import TracebackType
from typing import Self

import anyio
import mcp_types
import structlog
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from toolscore._json import holds_unpaired_surrogate
from toolscore._lines import LineWriter, Oversized, answerable_id, message_id, read_lines, widen_pipe
from toolscore.config import DEFAULT_MAX_REQUEST_BYTES
from toolscore.front.fast import FastCalls, Job

__all__ = ["ClientLines", "pollable", "stdio_transport"]

log = structlog.get_logger("toolscore.stdio")

_IDLE_WORKERS = 8


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
    """The JSON-RPC error a line that is not a valid message gets (the spec's parse/invalid-request errors).

    The id is echoed where one can be read and written back, so the client stops waiting for it.
    """
    try:
        text = line.decode()
    except UnicodeDecodeError:  # json.loads would read bytes with `surrogatepass`: not here
        return _error(None, mcp_types.PARSE_ERROR, "Parse error: the line is not UTF-8")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return _error(None, mcp_types.PARSE_ERROR, "Parse error: the line is not valid JSON")
    request_id = answerable_id(value.get("id") if isinstance(value, dict) else None)
    if "\\u" in text and holds_unpaired_surrogate(value):
        return _error(
            request_id, mcp_types.PARSE_ERROR, "Parse error: a string holds a lone surrogate (U+D800 to U+DFFF)"
        )
    return _error(request_id, mcp_types.INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 message")


Outgoing = SessionMessage | bytes
"""What goes to the client: the SDK's messages, and whole lines the hot path encoded itself."""


class ClientLines:
    """The client's side of the wire as the SDK's write stream: each message written by its sender."""

    def __init__(self, writer: LineWriter) -> None:
        self._writer = writer
        self._closed = False

    async def send(self, message: Outgoing, /) -> None:
        """Write `message` (the SDK's; refused once the SDK closed this stream)."""
        if self._closed:
            raise anyio.ClosedResourceError
        await self.write(message)

    async def write(self, message: Outgoing) -> None:
        """Write `message` whatever the SDK did (the gateway's own answers).

        Raises:
            anyio.BrokenResourceError: the client closed its end.
        """
        line = _encode(message)
        if line:
            await self._writer.write(line)
        if self._writer.closed:
            raise anyio.BrokenResourceError

    def write_now(self, line: bytes) -> bool:
        """Write one whole line without waiting, if the pipe takes it at once; False: nothing was written."""
        return self._writer.write_now(line)

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class _Workers:
    """Tasks that stay in the transport's task group and run the hot path's calls one after another.

    Handing a call to a waiting worker costs one wake-up (about 14 µs); an anyio task started per
    call costs 30-60 µs (its cancel scope and task state), a few percent of a passthrough call.
    A call that finds every worker busy starts one more; at most `_IDLE_WORKERS` stay idle.
    """

    def __init__(self, tg: TaskGroup, fast: FastCalls, out: ClientLines) -> None:
        self.tg = tg
        """The transport's task group (the express lane's too)."""
        self._fast = fast
        self._out = out
        self._send, self._jobs = anyio.create_memory_object_stream[Job](math.inf)
        self._idle = 0
        """Workers waiting for a call (counted here: the stream's statistics build an object per call)."""

    def run(self, job: Job) -> None:
        """Answer `job` on a worker."""
        if self._idle:
            self._idle -= 1  # a waiting worker takes it
        else:
            self.tg.start_soon(self._work)  # which takes it
        self._send.send_nowait(job)

    async def _work(self) -> None:
        async for job in self._jobs:
            await self._fast.run(job, self._out.write)
            if self._idle >= _IDLE_WORKERS:
                return  # enough are waiting: a burst's extra workers end
            self._idle += 1  # waiting from here: a call handed over before it receives waits in the stream

    def end(self) -> None:
        """No more calls: each worker ends once its call is answered."""
        self._send.close()

    def close(self) -> None:
        """Release the queue, once no worker runs."""
        self._send.close()
        self._jobs.close()


async def _read_lines(
    fd: int,
    sink: MemoryObjectSendStream[SessionMessage | Exception],
    out: ClientLines,
    limit: int,
    fast: FastCalls | None,
    workers: _Workers | None,
) -> None:
    async with sink, aclosing(read_lines(fd, limit)) as lines:
        async for line in lines:  # until EOF: the client is gone
            try:
                await _take(line, sink, out, limit, fast, workers)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                raise  # the session is over: nothing left to answer
            except Exception:
                # The boundary: no line, however it was crafted, ends the transport and every
                # server under it. Whatever slipped past the checks gets an answer, not a crash.
                log.exception("a client line could not be handled")
                await _answer(out, _error(None, mcp_types.PARSE_ERROR, "Parse error: the line could not be read"))
    if workers is not None:
        workers.end()  # idle workers end; after EOF the transport's exit cancels the calls in flight


async def _take(
    line: bytes | Oversized,
    sink: MemoryObjectSendStream[SessionMessage | Exception],
    out: ClientLines,
    limit: int,
    fast: FastCalls | None,
    workers: _Workers | None,
) -> None:
    """One line from the client: refused, handed to the hot path, or delivered to the SDK."""
    if isinstance(line, Oversized):
        log.warning("request over the size limit refused", limit=limit)
        request_id = answerable_id(message_id(line.head))
        await _answer(out, _error(request_id, mcp_types.INVALID_REQUEST, f"the request exceeds {limit} bytes"))
        return
    if fast is not None and workers is not None:
        await fast.settled(line)
        if fast.cancels(line):
            return
        if (job := fast.take(line)) is not None:
            if not fast.express(job, out, workers.tg):
                workers.run(job)
            return
    await _deliver(line, sink, out)


async def _answer(out: ClientLines, message: SessionMessage) -> None:
    try:
        await out.write(message)
    except anyio.BrokenResourceError:
        log.debug("answer not delivered: the client is gone")


async def _deliver(line: bytes, sink: MemoryObjectSendStream[SessionMessage | Exception], out: ClientLines) -> None:
    if not line.strip():
        return
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        # The SDK would only log it: answer, so the client does not wait forever.
        await _answer(out, _answer_to_unreadable(line))
        return
    if isinstance(message, mcp_types.JSONRPCNotification) and b'"id"' in line:
        # A request whose id is neither a string nor a number validates as a notification
        # (which never gets an answer): the spec calls it an invalid request.
        value = json.loads(line)
        if isinstance(value, dict) and "id" in value:
            await _answer(
                out, _error(None, mcp_types.INVALID_REQUEST, "Invalid request: the id must be a string or a number")
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
        if not hasattr(message.message, "id"):
            return b""  # a notification: nobody waits for it
        # An id that cannot be encoded itself (a lone surrogate) is answered as `null`.
        request_id = answerable_id(message.message.id)
        reply = _error(request_id, mcp_types.INTERNAL_ERROR, "the reply could not be encoded as JSON")
        return (reply.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode()


@asynccontextmanager
async def stdio_transport(
    stdin_fd: int = 0,
    stdout_fd: int = 1,
    *,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    fast: FastCalls | None = None,
) -> AsyncIterator[tuple[MemoryObjectReceiveStream[SessionMessage | Exception], ClientLines]]:
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
    out = ClientLines(LineWriter(wire_out))
    workers: _Workers | None = None
    try:
        async with anyio.create_task_group() as tg:
            workers = _Workers(tg, fast, out) if fast is not None else None
            tg.start_soon(_read_lines, stdin_fd, read_send, out, max_request_bytes, fast, workers)
            try:
                yield read_recv, out
            finally:
                if fast is not None:
                    with anyio.CancelScope(shield=True):
                        await fast.close()  # the express lane's calls: their servers are told
                tg.cancel_scope.cancel()
    finally:
        if workers is not None:
            workers.close()
        for fd, was_blocking in blocking.items():
            os.set_blocking(fd, was_blocking)
        os.dup2(wire_out, stdout_fd)
        os.close(wire_out)
