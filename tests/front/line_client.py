"""A JSON-RPC client of `toolscore serve` over stdio that keeps every line as bytes, and the
corpus server's gateway: the machinery of tests/front/test_fast.py, test_fast_flight.py and test_express.py.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

from tests.conftest import TOOLSCORE, write_config
from toolscore import load_config, open_gateway
from toolscore._lines import LineWriter, read_lines
from toolscore.front.fast import FastCalls
from toolscore.front.stdio import stdio_transport

CORPUS_SERVER = str(Path(__file__).parent.parent / "fixtures" / "corpus_server.py")
LATEST = "2025-11-25"
_LIMIT = 64 << 20


class LineClient:
    """A JSON-RPC client over the gateway's stdin/stdout that keeps every line as bytes."""

    def __init__(self, write: Callable[[bytes], Awaitable[object]], lines: AsyncIterator[bytes]) -> None:
        self._write = write
        self._lines = lines
        self.other: list[bytes] = []
        """Lines read while waiting for an answer (notifications, other answers)."""
        self.fast: FastCalls | None = None
        """The front's hot path, when the gateway runs in this process."""

    async def send(self, message: dict[str, Any] | bytes) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        await self._write(data + b"\n")

    async def line(self) -> bytes:
        return await anext(self._lines)

    async def answer(self, request_id: int | str) -> bytes:
        """The answer line for `request_id`; what came before it is kept in `other`."""
        with anyio.fail_after(60):
            while True:
                line = await self.line()
                if json.loads(line).get("id") == request_id and "method" not in json.loads(line):
                    return line
                self.other.append(line)

    async def start(self, request_id: int | str, name: str, arguments: dict[str, Any], **params: Any) -> None:
        """Send a `tools/call` without waiting for its answer."""
        request = {"name": name, "arguments": arguments, **params}
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": request})

    async def call(self, request_id: int | str, name: str, arguments: dict[str, Any], **params: Any) -> bytes:
        await self.start(request_id, name, arguments, **params)
        return await self.answer(request_id)

    async def handshake(self, version: str, capabilities: dict[str, Any] | None = None) -> None:
        hello = {
            "protocolVersion": version,
            "capabilities": capabilities or {},
            "clientInfo": {"name": "lines", "version": "1"},
        }
        await self.send({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": hello})
        await self.answer("init")
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})


async def _receive_lines(stream: BufferedByteReceiveStream) -> AsyncIterator[bytes]:
    while True:
        yield await stream.receive_until(b"\n", _LIMIT)


@asynccontextmanager
async def gateway(
    config: Path, *, version: str = LATEST, capabilities: dict[str, Any] | None = None
) -> AsyncIterator[LineClient]:
    """`toolscore serve` as a client starts it."""
    process = await anyio.open_process([TOOLSCORE, "serve", "--config", str(config)], stderr=sys.stderr)
    async with process:
        assert process.stdin is not None and process.stdout is not None
        client = LineClient(process.stdin.send, _receive_lines(BufferedByteReceiveStream(process.stdout)))
        await client.handshake(version, capabilities)
        try:
            yield client
        finally:
            await process.stdin.aclose()
            with anyio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
            await process.wait()


@asynccontextmanager
async def gateway_in_process(
    config: Path, *, version: str = LATEST, capabilities: dict[str, Any] | None = None, hot: bool = True
) -> AsyncIterator[LineClient]:
    """The same front on a pair of pipes in this process (its servers are still subprocesses);
    `hot=False`: without the hot path, every request the SDK's."""
    server_in, client_out = os.pipe()
    client_in, server_out = os.pipe()
    os.set_blocking(client_out, False)
    os.set_blocking(client_in, False)
    ended = anyio.Event()
    async with open_gateway(load_config(config)) as gw, anyio.create_task_group() as tg:
        await gw.hub.wait_started()

        async def serve() -> None:
            async with stdio_transport(server_in, server_out, fast=gw.server.fast if hot else None) as (read, write):
                await gw.server.run(read, write, gw.server.create_initialization_options())
            ended.set()

        tg.start_soon(serve)
        lines = (line async for line in read_lines(client_in, _LIMIT) if isinstance(line, bytes))
        client = LineClient(LineWriter(client_out).write, lines)
        client.fast = gw.server.fast
        await client.handshake(version, capabilities)
        try:
            yield client
        finally:
            os.close(client_out)  # end of input: the front ends, as on stdin EOF
            with anyio.move_on_after(10):
                await ended.wait()
            tg.cancel_scope.cancel()
    for fd in (server_in, server_out, client_in):
        os.close(fd)


Launch = Callable[..., AbstractAsyncContextManager[LineClient]]


LAUNCHES: dict[str, Launch] = {"process": gateway, "in-process": gateway_in_process}
"""`toolscore serve` as a client runs it, and the same front in this process (measured by coverage):
the test files' `launch` fixture runs each case on both."""


def corpus_config(tmp_path: Path, **sections: Any) -> Path:
    env = {"CORPUS_LOG": str(tmp_path / "cancelled.log")}
    servers = {"c": {"command": sys.executable, "args": [CORPUS_SERVER], "env": env}}
    return write_config(tmp_path, servers, **sections)


def result_bytes(line: bytes, request_id: int) -> bytes:
    """The `result` of an answer the gateway wrote in its own envelope."""
    head = b'{"jsonrpc":"2.0","id":' + str(request_id).encode() + b',"result":'
    assert line.startswith(head) and line.endswith(b"}"), line[:200]
    return line[len(head) : -1]


async def appears(path: Path) -> None:
    """Wait for a file another process writes."""
    with anyio.fail_after(60):
        while not path.exists():  # noqa: ASYNC110 - nothing to wait on but the file system
            await anyio.sleep(0.05)


def audit(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
