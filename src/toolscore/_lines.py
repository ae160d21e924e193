"""Newline-delimited JSON-RPC framing with a size limit, in linear time.

Both stdio ends of the gateway (the front, and each stdio downstream) read lines with this.
`LineSplitter` is pure: bytes go in as they arrive; complete lines come out. `read_lines` drives
it from a non-blocking file descriptor polled by the event loop (no worker threads). On asyncio
the descriptor stays registered with the loop while it is read (`_Readable`): anyio's
`wait_readable` registers and unregisters it around every wait, two `epoll_ctl` calls and a
round of bookkeeping per message, on both ends of every call. A line
longer than the limit is never held: only its first KiB is kept (to find the id of the request
it belongs to), and the rest is dropped up to the next newline. Each chunk is searched once, and
a line that came in several chunks is joined once: a long line costs one pass and one copy.
"""

from __future__ import annotations

import asyncio  # noqa: TID251 (the loop's own reader registration: see `_Readable`)
import fcntl
import json
import os
import re
import select
import stat
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import suppress
from dataclasses import dataclass

import anyio
import anyio.lowlevel
import mcp_types

__all__ = [
    "LineSplitter",
    "LineWriter",
    "Oversized",
    "answerable_id",
    "message_id",
    "read_lines",
    "widen_pipe",
    "write_lines",
]

_CHUNK = 1 << 16  # below malloc's mmap threshold: a small message does not cost a mapping per read
# (1 MiB reads of a large message measured no faster, and held 2.7 MB more at peak)
_PIPE_BYTES = 1 << 20

_HEAD = 1024
_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"[^"\\]{0,256}")')


@dataclass(frozen=True, slots=True)
class Oversized:
    """A line that exceeded the limit and was dropped; `head` is its beginning."""

    head: bytes


class LineSplitter:
    """Splits a byte stream into lines of at most `limit` bytes."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._parts: list[bytes] = []
        """The unfinished line, as the chunks it came in: joined once, when its newline comes."""
        self._held = 0
        self._skipping: bytes | None = None

    def feed(self, chunk: bytes) -> list[bytes | Oversized]:
        """The lines (without their newline, not stripped) and oversized lines `chunk` completes."""
        out: list[bytes | Oversized] = []
        start = 0
        if self._skipping is not None:
            newline = chunk.find(b"\n")
            if newline < 0:
                return out
            out.append(Oversized(self._skipping))
            self._skipping, start = None, newline + 1
        parts = self._parts
        while (newline := chunk.find(b"\n", start)) >= 0:
            if parts:  # one copy of a line that came in parts, however many
                parts.append(chunk[start:newline])
                out.append(b"".join(parts))
                parts.clear()
                self._held = 0
            else:
                out.append(chunk[start:newline])
            start = newline + 1
        if start < len(chunk):
            parts.append(chunk[start:] if start else chunk)
            self._held += len(chunk) - start
            if self._held > self._limit:
                self._skipping = _head(parts)
                parts.clear()
                self._held = 0
        return out

    def finish(self) -> bytes | Oversized | None:
        """At end of stream: the unterminated last line, if any."""
        if self._skipping is not None:
            return Oversized(self._skipping)
        last = b"".join(self._parts)
        return last if last.strip() else None


def _head(parts: list[bytes]) -> bytes:
    """The first `_HEAD` bytes of a line held in `parts`."""
    head = bytearray()
    for part in parts:
        head += part[: _HEAD - len(head)]
        if len(head) >= _HEAD:
            break
    return bytes(head)


def widen_pipe(fd: int) -> None:
    """Let the pipe behind `fd` hold 1 MiB (Linux; 64 KiB by default), when the system allows.

    A large message then crosses in a few writes and wake-ups instead of one per 64 KiB; a pipe that
    cannot grow (a lower `/proc/sys/fs/pipe-max-size`, not a pipe at all) is left as it is.
    """
    get, put = getattr(fcntl, "F_GETPIPE_SZ", None), getattr(fcntl, "F_SETPIPE_SZ", None)
    if get is None or put is None:  # not Linux
        return
    with suppress(OSError):
        if fcntl.fcntl(fd, get) < _PIPE_BYTES:
            fcntl.fcntl(fd, put, _PIPE_BYTES)


def message_id(head: bytes) -> mcp_types.RequestId | None:
    """The id of a JSON-RPC message that could not be read whole, if its first bytes show it."""
    match = _ID.search(head)
    try:
        return json.loads(match.group(1)) if match else None
    except ValueError:  # not UTF-8: no id an answer could carry
        return None


def answerable_id(value: object) -> mcp_types.RequestId | None:
    """`value` as the id of an answer, or None (JSON `null`) where no answer can carry it.

    That is anything but an integer or a string, and a string that cannot be written as UTF-8
    (a lone surrogate, which JSON's `\\ud800` escape can spell): echoing it would fail to encode.
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return None
    return value


class _Readable:
    """Waits for a non-blocking `fd` to be readable, keeping it registered with the event loop.

    The registration is level-triggered: while data waits unread, the loop calls `_ready` on every
    iteration. When nobody waits (the reader is busy handing a line on) the registration is
    dropped, so a loaded reader never makes the loop spin, and taken again by the next `wait`.
    """

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop) -> None:
        self._fd = fd
        self._loop = loop
        self._waiter: asyncio.Future[None] | None = None
        self._registered = False

    def _ready(self) -> None:
        waiter = self._waiter
        if waiter is None:
            self._loop.remove_reader(self._fd)
            self._registered = False
        elif not waiter.done():
            waiter.set_result(None)
        # else: already woken, the reader runs this iteration

    async def wait(self) -> None:
        if not self._registered:
            self._loop.add_reader(self._fd, self._ready)
            self._registered = True
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def close(self) -> None:
        """Unregister; before the descriptor is closed (its number may be reused)."""
        if self._registered:
            self._registered = False
            self._loop.remove_reader(self._fd)


def _readable(fd: int) -> _Readable | None:
    """The watcher for `fd` on an asyncio loop, else None (another backend: `anyio.wait_readable`)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return _Readable(fd, loop)


async def read_lines(fd: int, limit: int) -> AsyncGenerator[bytes | Oversized, None]:
    """Lines read from a non-blocking `fd` until end of file (or a read error).

    Close the iterator (`contextlib.aclosing`) before closing `fd`: that unregisters it.
    """
    splitter = LineSplitter(limit)
    watcher = _readable(fd)
    try:
        while True:
            if watcher is not None:
                await watcher.wait()
            else:
                await anyio.wait_readable(fd)
            while True:  # a full chunk: more is likely there, read on without waiting on the selector
                try:
                    chunk = os.read(fd, _CHUNK)
                except BlockingIOError:
                    break
                except OSError:
                    return
                if not chunk:
                    last = splitter.finish()
                    if last is not None:
                        yield last
                    return
                for line in splitter.feed(chunk):
                    yield line
                if len(chunk) < _CHUNK:
                    break
                await anyio.lowlevel.checkpoint()  # others run between chunks: a flood cannot starve them
    finally:
        if watcher is not None:
            watcher.close()


class LineWriter:
    """Whole lines to a non-blocking `fd`, from any number of tasks, never interleaved.

    A line the pipe cannot take at once is finished before the next one starts (the lock is only
    contended then), so the SDK's writer and the gateway's own fast path share one pipe.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = anyio.Lock(fast_acquire=True)  # no extra trip through the event loop when free
        self.closed = False
        """Set once the reader is gone (EPIPE): later lines are dropped."""
        try:
            fifo = stat.S_ISFIFO(os.fstat(fd).st_mode)
        except OSError:
            fifo = False
        # A pipe takes a write of up to PIPE_BUF bytes whole or not at all (POSIX), even non-blocking.
        self._whole = select.PIPE_BUF if fifo else 0

    def write_now(self, line: bytes) -> bool:
        """Write `line` now, whole, without waiting; False: nothing was written (the pipe is full, a
        line is being written, the line is longer than the pipe takes at once, or `fd` is not a
        pipe), and `write` is the way. Once the reader is gone, the line is dropped (True)."""
        if len(line) > self._whole or self._lock.locked():
            return False
        if self.closed:
            return True
        try:
            os.write(self._fd, line)  # all of it: at most PIPE_BUF bytes to a pipe
        except BlockingIOError:
            return False
        except OSError:  # EPIPE: as `_put`
            self.closed = True
        return True

    async def write(self, *parts: bytes) -> None:
        """Write `parts` back to back as one line (the caller ends it with a newline)."""
        if self.closed:
            return
        rest = memoryview(parts[0] if len(parts) == 1 else b"".join(parts))  # one write, one wake-up
        if not self._lock.locked():
            # Nobody is in the middle of a line: the whole line usually goes at once, with no
            # await before it, so the lock is not needed for it.
            rest = self._put(rest)
            if not rest:
                return
        async with self._lock:  # free: taken without yielding, so the rest follows what was written
            while rest := self._put(rest):
                await anyio.wait_writable(self._fd)

    def _put(self, data: memoryview) -> memoryview:
        """Write what the pipe takes now; the part it did not take (empty once the reader is gone)."""
        try:
            return data[os.write(self._fd, data) :]
        except BlockingIOError:
            return data
        except OSError:  # EPIPE: the other end closed; its reader's EOF ends the session
            self.closed = True
            return data[len(data) :]


async def write_lines(writer: LineWriter, lines: AsyncIterator[bytes]) -> None:
    """Write each line with `writer`; stop once the reader is gone."""
    async for line in lines:
        await writer.write(line)
        if writer.closed:
            return
