"""JSON-RPC line framing: linear, bounded, and exact about what it drops."""

from __future__ import annotations

import fcntl
import os
import select
import socket
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path

import anyio
import pytest

from toolscore._lines import LineSplitter, LineWriter, Oversized, message_id, read_lines, widen_pipe, write_lines


def test_lines_come_out_whole_whatever_the_chunks() -> None:
    data = b'{"a": 1}\n{"b": 2}\n\n{"c": 3}'
    for size in (1, 2, 3, 7, len(data)):
        splitter = LineSplitter(100)
        out: list[bytes | Oversized] = []
        for i in range(0, len(data), size):
            out += splitter.feed(data[i : i + size])
        assert out == [b'{"a": 1}', b'{"b": 2}', b""], size
        assert splitter.finish() == b'{"c": 3}'


def test_a_line_over_the_limit_is_dropped_but_its_head_kept() -> None:
    splitter = LineSplitter(64)
    head = b'{"jsonrpc": "2.0", "id": 7, "result": "'
    out = splitter.feed(head + b"x" * 50)
    out += splitter.feed(b"y" * 1000)  # nothing of it is held
    out += splitter.feed(b'"}\n{"id": 8}\n')
    assert isinstance(out[0], Oversized) and out[0].head.startswith(head)
    assert out[1:] == [b'{"id": 8}']
    assert message_id(out[0].head) == 7


def test_an_oversized_last_line_is_reported_at_the_end() -> None:
    splitter = LineSplitter(8)
    assert splitter.feed(b"0123456789") == []
    assert isinstance(splitter.finish(), Oversized)
    assert LineSplitter(8).finish() is None


@pytest.mark.parametrize(
    ("head", "found"),
    [
        (b'{"id": "abc", "result"', "abc"),
        (b'{"id":-3}', -3),
        (b'{"method": "x"}', None),
        (b'{"id": {"o": 1}}', None),
        (b'{"id": "\xff", "method"', None),  # not UTF-8: no id, not an exception
    ],
)
def test_message_ids_are_read_from_the_head_of_a_message(head: bytes, found: object) -> None:
    assert message_id(head) == found


@pytest.mark.anyio
async def test_reading_and_writing_non_blocking_pipes() -> None:
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    big = b"z" * 300_000  # more than a pipe holds: the writer must wait for the reader

    async def lines() -> AsyncIterator[bytes]:
        yield b'{"id": 1}\n'
        yield big + b"\n"

    got: list[bytes | Oversized] = []

    async def read() -> None:
        async for line in read_lines(read_fd, 1_000_000):
            got.append(line)

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        await write_lines(LineWriter(write_fd), lines())
        os.close(write_fd)
    os.close(read_fd)
    assert got == [b'{"id": 1}', big]


@pytest.mark.anyio
async def test_lines_written_by_several_tasks_never_interleave() -> None:
    # The SDK's writer and the fast path share a pipe: a line the pipe cannot take at once
    # must be finished before another task's line starts.
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    writer = LineWriter(write_fd)
    lines = [bytes([ord("a") + n]) * 200_000 for n in range(4)]
    got: list[bytes | Oversized] = []

    async def read() -> None:
        async for line in read_lines(read_fd, 1_000_000):
            got.append(line)

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        async with anyio.create_task_group() as writers:
            for line in lines:
                writers.start_soon(writer.write, line[:1000], line[1000:], b"\n")
        os.close(write_fd)
    os.close(read_fd)
    assert sorted(got, key=bytes) == lines  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_writer_whose_reader_is_gone_drops_its_lines() -> None:
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    os.close(read_fd)
    writer = LineWriter(write_fd)
    await writer.write(b"lost\n")
    assert writer.closed
    os.close(write_fd)


def test_a_pipe_is_widened_where_the_system_allows_and_anything_else_is_left_alone(tmp_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    try:
        widen_pipe(write_fd)
        size = fcntl.fcntl(write_fd, fcntl.F_GETPIPE_SZ)
        with open("/proc/sys/fs/pipe-max-size") as f:
            allowed = int(f.read())
        assert size == 1 << 20 if allowed >= 1 << 20 else size <= allowed
    finally:
        os.close(read_fd)
        os.close(write_fd)
    with open(tmp_path / "file", "wb") as f:  # not a pipe: nothing happens, nothing is raised
        widen_pipe(f.fileno())


def _pipe() -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    return read_fd, write_fd


@pytest.mark.anyio
async def test_a_closed_reader_leaves_no_registration_behind_for_a_reused_descriptor() -> None:
    # The descriptor stays registered with the loop while it is read; closing the iterator must
    # unregister it, or a new pipe given the same number could not be read (or would be misread).
    read_fd, write_fd = _pipe()
    os.write(write_fd, b'{"id": 1}\n')
    async with aclosing(read_lines(read_fd, 1024)) as lines:
        assert await anext(lines) == b'{"id": 1}'
    os.close(read_fd)
    os.close(write_fd)
    again_read, again_write = _pipe()
    assert again_read == read_fd  # the lowest free number: the same one
    os.write(again_write, b'{"id": 2}\n')
    with anyio.fail_after(60):
        async with aclosing(read_lines(again_read, 1024)) as lines:
            assert await anext(lines) == b'{"id": 2}'
    os.close(again_read)
    os.close(again_write)


@pytest.mark.anyio
async def test_unread_input_does_not_spin_the_loop_while_the_reader_is_busy() -> None:
    # The registration is level-triggered: with lines waiting and the reader busy elsewhere, the
    # loop must not be woken on every iteration (a spinning loop burns a core doing nothing).
    read_fd, write_fd = _pipe()
    os.write(write_fd, b'{"id": 1}\n')
    async with aclosing(read_lines(read_fd, 1024)) as lines:
        assert await anext(lines) == b'{"id": 1}'
        os.write(write_fd, b'{"id": 2}\n')  # waiting, unread, while the reader "handles" line 1
        cpu = time.process_time()
        await anyio.sleep(0.5)
        assert time.process_time() - cpu < 0.2
        assert await anext(lines) == b'{"id": 2}'  # and it is read once the reader asks again
    os.close(read_fd)
    os.close(write_fd)


def test_write_now_writes_a_whole_line_or_nothing() -> None:
    read_fd, write_fd = os.pipe()
    try:
        os.set_blocking(write_fd, False)
        writer = LineWriter(write_fd)
        assert writer.write_now(b'{"id": 1}\n') and os.read(read_fd, 100) == b'{"id": 1}\n'
        assert not writer.write_now(b"x" * (select.PIPE_BUF + 1))  # longer than a pipe takes whole
        line = b"y" * 1000 + b"\n"
        while writer.write_now(line):  # until the pipe is full
            pass
        data = b""
        while chunk := _read_now(read_fd):
            data += chunk
        assert len(data) % len(line) == 0 and data.count(b"\n") == len(data) // len(line)  # no partial line
    finally:
        os.close(read_fd)
    assert writer.write_now(b"dropped\n") and writer.closed  # the reader is gone: dropped, as `write` does
    os.close(write_fd)
    left, right = socket.socketpair()
    with left, right:
        assert not LineWriter(left.fileno()).write_now(b"{}\n")  # not a pipe: no whole-or-nothing promise


def _read_now(fd: int) -> bytes:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 1 << 20)
    except BlockingIOError:
        return b""
