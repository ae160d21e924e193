"""Bad input at the front, over HTTP and stdio: a clear JSON-RPC error for each, the process alive after.

One gateway process per transport for the module, so each case also shows that the ones before it
left the gateway answering. Over stdio, malformed JSON-RPC, 100k-deep nesting, invalid UTF-8 and
object ids are in `tests/security/test_limits.py::test_unreadable_requests_are_answered_not_ignored`;
here are the rest.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from tests.conftest import TOOLSCORE, fixture_entry, free_port, wait_until_answering, write_config
from tests.security.test_limits import answer, call, send

pytestmark = pytest.mark.e2e

ACCEPT = "application/json, text/event-stream"
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}


class Http:
    """A raw HTTP client of one gateway session."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = httpx2.Client(timeout=30)
        reply = self.client.post(url, json=INIT, headers={"Accept": ACCEPT})
        assert reply.status_code == 200, reply.text
        self.headers = {
            "Accept": ACCEPT,
            "Content-Type": "application/json",
            "Mcp-Session-Id": reply.headers["mcp-session-id"],
            "MCP-Protocol-Version": "2025-11-25",
        }
        self.post(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())

    def post(self, body: bytes, **headers: str) -> httpx2.Response:
        merged = {k: v for k, v in {**self.headers, **headers}.items() if v}
        return self.client.post(self.url, content=body, headers=merged)

    @staticmethod
    def message(reply: httpx2.Response) -> dict[str, Any]:
        """The one JSON-RPC message of a reply, whether plain JSON or one SSE event."""
        if reply.headers.get("content-type", "").startswith("text/event-stream"):
            data = [line[5:].strip() for line in reply.text.splitlines() if line.startswith("data:")]
            value: dict[str, Any] = json.loads(next(d for d in data if d))
            return value
        value = reply.json()
        return value

    def echo(self, text: str) -> str:
        body = {
            "jsonrpc": "2.0",
            "id": 99,
            "method": "tools/call",
            "params": {"name": "fx__echo", "arguments": {"text": text}},
        }
        reply = self.post(json.dumps(body).encode())
        result: str = self.message(reply)["result"]["content"][0]["text"]
        return result


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Http]:
    tmp_path = tmp_path_factory.mktemp("http")
    path = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    port = free_port()
    argv = [TOOLSCORE, "serve", "--transport", "http", "--port", str(port), "--config", str(path)]
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    wait_until_answering(f"http://127.0.0.1:{port}/", proc)
    client = Http(url)
    try:
        yield client
    finally:
        client.client.close()
        proc.terminate()
        assert proc.wait(timeout=60) == 0  # and it was alive to the end


def _call(request_id: int, params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}).encode()


HTTP_CASES = {
    "wrong-accept": (_call(1, {"name": "fx__echo", "arguments": {"text": "x"}}), {"Accept": "text/plain"}, 406, -32600),
    "wrong-content-type": (_call(2, {"name": "fx__echo"}), {"Content-Type": "text/plain"}, 415, -32600),
    "missing-session": (_call(3, {"name": "fx__echo"}), {"Mcp-Session-Id": ""}, 400, -32600),
    "invalid-session": (_call(4, {"name": "fx__echo"}), {"Mcp-Session-Id": "not-a-session"}, 404, -32600),
    "malformed-json": (b'{"jsonrpc": "2.0", "id": 5, "method": ', {}, 400, -32700),
    "not-json-rpc": (b'{"jsonrpc": "2.0", "id": 6}', {}, 400, -32600),
    "object-id": (b'{"jsonrpc": "2.0", "id": {"an": "object"}, "method": "tools/list"}', {}, 400, -32600),
    "nesting-100k": (b"[" * 100_000 + b"]" * 100_000, {}, 400, -32700),
    "nested-arguments-100k": (
        b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "fx__echo", "arguments": '
        + b'{"a":' * 100_000
        + b"1"
        + b"}" * 100_000
        + b"}}",
        {},
        400,
        -32700,
    ),
    "invalid-utf8": (
        b'{"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {"x": "\xff\xfe"}}',
        {},
        400,
        -32700,
    ),
    "unknown-method": (b'{"jsonrpc": "2.0", "id": 9, "method": "no/such/method"}', {}, 200, -32601),
    "tool-name-not-a-string": (_call(10, {"name": 5}), {}, 200, -32602),
    "arguments-not-an-object": (_call(11, {"name": "fx__echo", "arguments": "text"}), {}, 200, -32602),
}


@pytest.mark.parametrize(("body", "headers", "status", "code"), HTTP_CASES.values(), ids=HTTP_CASES.keys())
def test_http_bad_input_gets_a_json_rpc_error(
    http: Http, body: bytes, headers: dict[str, str], status: int, code: int
) -> None:
    reply = http.post(body, **headers)
    assert reply.status_code == status, reply.text[:300]
    message = http.message(reply)
    assert message["jsonrpc"] == "2.0" and message["error"]["code"] == code and message["error"]["message"]
    assert http.echo("alive") == "alive"


def test_http_wrong_typed_arguments_are_a_tool_error_naming_the_field(http: Http) -> None:
    reply = http.post(_call(12, {"name": "fx__echo", "arguments": {"text": 5}}))
    result = http.message(reply)["result"]
    assert result["isError"] and "text: 5 is not of type 'string'" in result["content"][0]["text"]
    assert http.echo("alive") == "alive"


@pytest.fixture(scope="module")
def stdio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[bytes]]:
    tmp_path = tmp_path_factory.mktemp("stdio")
    path = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    proc = subprocess.Popen(
        [TOOLSCORE, "serve", "--config", str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    send(proc, json.dumps(INIT).encode())
    assert answer(proc)["id"] == 0
    send(proc, b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
    yield proc
    assert proc.poll() is None  # alive to the end
    proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


STDIO_CASES = {
    "unknown-method": (b'{"jsonrpc": "2.0", "id": 21, "method": "no/such/method"}', -32601),
    "tool-name-not-a-string": (_call(22, {"name": 5}), -32602),
    "arguments-not-an-object": (_call(23, {"name": "fx__echo", "arguments": "text"}), -32602),
}


@pytest.mark.parametrize(("line", "code"), STDIO_CASES.values(), ids=STDIO_CASES.keys())
def test_stdio_bad_input_gets_a_json_rpc_error(stdio: subprocess.Popen[bytes], line: bytes, code: int) -> None:
    send(stdio, line)
    reply = answer(stdio)
    assert reply["error"]["code"] == code and reply["id"] == json.loads(line)["id"]
    assert call(stdio, 30, "fx__echo", {"text": "alive"})["result"]["content"][0]["text"] == "alive"


def test_stdio_wrong_typed_arguments_are_a_tool_error_naming_the_field(stdio: subprocess.Popen[bytes]) -> None:
    result = call(stdio, 31, "fx__echo", {"text": 5})["result"]
    assert result["isError"] and "text: 5 is not of type 'string'" in result["content"][0]["text"]
