"""A stdio downstream: the server as a child process, JSON-RPC lines on its stdin and stdout.

Theory of operation. The SDK's `stdio_client` re-joins its text buffer for every chunk it reads,
so one 32 MB result costs seconds of copying on the event loop, while every other client waits;
and one byte of invalid UTF-8 fails its decoder and drops the connection. Here, as on the front
(`_stdio`), the pipes are non-blocking file descriptors polled by the event loop:

- stdout is read into one growing buffer that is scanned for newlines once, from where the last
  scan stopped, so reading is linear in the bytes received;
- a message longer than `max_message_bytes` is not kept: its first KiB is, to find the request
  it answers, and that request gets a JSON-RPC error naming the limit (the rest is skipped up to
  the next newline);
- invalid UTF-8 or an unpaired surrogate (`\\ud800`) in a line is replaced (U+FFFD) and logged
  once per connection, instead of dropping the connection or the answer;
  a line that is not JSON-RPC at all is logged and skipped;
- the gateway's own `tools/call` requests share the pipes (`raw.RawChannel`): both writers write
  whole lines through one `LineWriter`, and the reader hands the channel its answers (and log
  messages while a call is in flight) before the SDK would parse them.

The child runs in its own session (a process group), so closing kills everything it started:
stdin is closed first (the spec's polite request), then SIGTERM to the group after a grace
period, then SIGKILL. `kill()` skips the grace period: that is for a server that stopped answering.

On Linux the server runs under a server reaper, forked by the gateway's one reaper process
(`_reaper.py`: child subreapers with parent-death signals): what the server starts stays findable
even in a session of its own (a browser, a sandbox), and all of it dies with the gateway, even
when the gateway is SIGKILLed. `pid` is then the server reaper's.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing, asynccontextmanager, suppress
from typing import IO

import anyio
import anyio.lowlevel
import mcp_types
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from toolscore._json import repaired_json_line
from toolscore._lines import LineWriter, Oversized, message_id, read_lines, widen_pipe, write_lines
from toolscore.downstream.raw import RawChannel
from toolscore.downstream.spawn import DEFAULT_ENV_KEYS as DEFAULT_ENV_KEYS
from toolscore.downstream.spawn import USE_REAPER as _USE_REAPER
from toolscore.downstream.spawn import Process
from toolscore.downstream.spawn import start as _start

__all__ = ["DEFAULT_ENV_KEYS", "ChildProcess", "spawn_stdio"]

log = structlog.get_logger("toolscore.child")

_GRACE = 2.0


class ChildProcess:
    """The running child of one connection."""

    def __init__(self, popen: Process, *, reaper: bool = False) -> None:
        self.pid = popen.pid
        self._popen = popen
        self._reaper = reaper
        self.raw: RawChannel | None = None
        """The gateway's own `tools/call` requests on this child's pipes (`downstream.raw`)."""

    @property
    def returncode(self) -> int | None:
        """The exit status once the child has exited (negative: killed by that signal)."""
        return self._popen.poll()

    def signal_group(self, signum: int) -> None:
        """Send `signum` to the child's whole process group (what it started, too)."""
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def kill(self) -> None:
        """Kill the server and all it started now: the connection then ends as if it had died."""
        if self._reaper:  # it kills every descendant, in whatever session; a group kill would miss some
            with suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, signal.SIGUSR1)
        else:
            self.signal_group(signal.SIGKILL)

    async def stop(self) -> None:
        """Wait for a polite exit, then SIGTERM the group, then SIGKILL it."""
        for signum in (signal.SIGTERM, signal.SIGKILL):
            if await self._exited_within(_GRACE):
                break
            self.signal_group(signum)
        if not await self._exited_within(_GRACE):
            log.warning("child did not exit after SIGKILL", pid=self.pid)
        # The group may outlive its leader (a grandchild that ignored SIGTERM).
        self.signal_group(signal.SIGKILL)

    async def _exited_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while self._popen.poll() is None:
            if time.monotonic() >= deadline:
                return False
            await anyio.sleep(0.01)
        return True


def _response_error(head: bytes, limit: int) -> SessionMessage | None:
    """A JSON-RPC error for the request an oversized response answers, if its id can be found."""
    if b'"result"' not in head and b'"error"' not in head:
        return None  # a request or notification from the server: nothing waits for it
    request_id = message_id(head)
    if request_id is None:
        return None
    error = mcp_types.ErrorData(
        code=mcp_types.INTERNAL_ERROR, message=f"the server's answer exceeds the gateway's limit of {limit} bytes"
    )
    return SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


def _parse(line: bytes) -> SessionMessage | None:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError:
        return None


async def _read(
    fd: int,
    sink: MemoryObjectSendStream[SessionMessage | Exception],
    *,
    limit: int,
    server: str,
    raw: RawChannel,
) -> None:
    delivering = True  # once the session stops listening, output is read and dropped
    repaired = 0  # lines read only once repaired: logged on the first

    async def deliver(message: SessionMessage | None) -> None:
        nonlocal delivering
        if message is None or not delivering:
            return
        try:
            await sink.send(message)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            delivering = False  # keep draining, so a child flushing output can still exit

    async with sink:
        try:
            async with aclosing(read_lines(fd, limit)) as lines:  # unregistered before the pipe closes
                async for line in lines:  # until EOF: the server exited or closed stdout
                    if isinstance(line, Oversized):
                        log.warning("server message over the size limit; skipped", server=server, limit=limit)
                        answer = _response_error(line.head, limit)
                        if answer is not None:
                            error = answer.message
                            assert isinstance(error, mcp_types.JSONRPCError)
                            if raw.fail(error.id, error.error):
                                continue
                        await deliver(answer)
                    elif raw.claims(line) and await raw.deliver(line):
                        continue  # the answer to the gateway's own call: the SDK never parses it
                    elif line.strip() and delivering:
                        message = _parse(line.strip())
                        if message is None and (fixed := repaired_json_line(line)) is not None:
                            # Invalid UTF-8 or an unpaired surrogate (`\\ud800`, as browsers read from
                            # real pages): replaced, so the call it answers is not left to time out.
                            repaired += 1
                            if repaired == 1:
                                log.warning(
                                    "server wrote invalid UTF-8 or unpaired surrogates; replaced with U+FFFD",
                                    server=server,
                                    line=line[:120].decode("utf-8", errors="replace"),
                                )
                            if raw.claims(fixed) and await raw.deliver(fixed):
                                continue
                            message = _parse(fixed)
                        if message is None:
                            log.warning(
                                "server wrote a line that is not JSON-RPC; skipped",
                                server=server,
                                line=line[:200].decode("utf-8", errors="replace"),
                            )
                        await deliver(message)
        finally:
            raw.close()


async def _write(writer: LineWriter, source: MemoryObjectReceiveStream[SessionMessage]) -> None:
    async with source:
        encoded = ((m.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode() async for m in source)
        await write_lines(writer, encoded)


@asynccontextmanager
async def spawn_stdio(
    command: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    errlog: IO[str] | None = None,
    max_message_bytes: int,
    server: str,
    started: list[ChildProcess] | None = None,
) -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
]:
    """Start `command` and yield the (read, write) streams an `mcp.Client` takes.

    Args:
        env: Added to the inherited `DEFAULT_ENV_KEYS`.
        errlog: Where the child's stderr goes (default: the gateway's stderr).
        max_message_bytes: The largest message accepted from the child.
        server: The server's name, for logs.
        started: Receives the `ChildProcess` once it runs (to kill a wedged server).

    Raises:
        OSError: the command cannot be started.
    """
    popen = _start(command, args, env, cwd, errlog)
    child = ChildProcess(popen, reaper=_USE_REAPER)
    if started is not None:
        started.append(child)
    assert popen.stdin is not None and popen.stdout is not None
    stdin_fd, stdout_fd = popen.stdin.fileno(), popen.stdout.fileno()
    for fd in (stdin_fd, stdout_fd):
        widen_pipe(fd)
    os.set_blocking(stdin_fd, False)
    os.set_blocking(stdout_fd, False)
    lines_in = LineWriter(stdin_fd)
    child.raw = raw = RawChannel(lines_in, server)
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as tg:
            reader, writer = anyio.CancelScope(), anyio.CancelScope()

            async def read() -> None:
                with reader:
                    await _read(stdout_fd, read_send, limit=max_message_bytes, server=server, raw=raw)

            async def write() -> None:
                with writer:
                    await _write(lines_in, write_recv)

            tg.start_soon(read)
            tg.start_soon(write)
            try:
                yield read_recv, write_send
            finally:
                with anyio.CancelScope(shield=True):
                    read_recv.close()  # the reader now drains instead of delivering
                    raw.close()
                    lines_in.closed = True  # no write may reach the descriptor once it is closed
                    writer.cancel()  # before its descriptor is closed under it
                    await anyio.lowlevel.checkpoint()
                    popen.stdin.close()  # EOF: the polite request to exit
                    await child.stop()
                reader.cancel()
    finally:
        with suppress(OSError):
            popen.stdin.close()
        with suppress(OSError):
            popen.stdout.close()
        for stream in (read_send, read_recv, write_send, write_recv):
            stream.close()
