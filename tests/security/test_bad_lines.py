"""One hostile line never ends a transport: each gets one JSON-RPC error, the gateway answers on.

Invalid UTF-8 where the hot path reads (arguments, tool name, `_meta`, id, a plan), a UTF-8-encoded
surrogate (ED A0 80), and lone-surrogate escapes (`\\ud800`) as an id or inside arguments, over
stdio in both protocol eras and over HTTP in both eras. Each case's gateway must answer the line
once (-32700 or -32600; the id echoed only where it can be written back, else `null`), then
answer a valid call: before, 8 of these lines ended the stdio gateway with exit status 1.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.conftest import TOOLSCORE, fixture_entry, free_port, wait_until_answering, write_config
from tests.reliability.test_bad_input import Http as SessionHttp
from tests.security.test_limits import answer, send

pytestmark = pytest.mark.e2e

MODERN = "2026-07-28"
ENVELOPE = (
    b'"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
    b'"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"},'
    b'"io.modelcontextprotocol/clientCapabilities":{}}'
)
INIT = (
    b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
    b'"capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}'
)


def _call(request_id: bytes, name: bytes, arguments: bytes, meta: bytes = b"") -> bytes:
    extra = b',"_meta":' + meta if meta else b""
    return (
        b'{"jsonrpc":"2.0","id":' + request_id + b',"method":"tools/call","params":{"name":"' + name + b'",'
        b'"arguments":' + arguments + extra + b"}}"
    )


BAD_LINES = {
    "invalid-utf8-in-arguments": _call(b"1", b"fx__echo", b'{"text":"\xff\xfe"}'),
    "invalid-utf8-in-tool-name": _call(b"2", b"fx__ech\xffo", b'{"text":"a"}'),
    "invalid-utf8-in-meta": _call(b"3", b"fx__echo", b'{"text":"a"}', b'{"x":"\xc3"}'),
    "invalid-utf8-in-id": _call(b'"\xff4"', b"fx__echo", b'{"text":"a"}'),
    "invalid-utf8-in-plan": _call(b"5", b"orchestrate", b'{"plan":"<fx__echo text=\\"\xff\\"/>"}'),
    "encoded-surrogate": _call(b"6", b"fx__echo", b'{"text":"\xed\xa0\x80"}'),
    "surrogate-id-ping": b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}',
    "surrogate-id-call": _call(b'"\\ud800"', b"fx__echo", b'{"text":"a"}'),
    "surrogate-in-arguments": _call(b"9", b"fx__echo", b'{"text":"\\udc00"}'),
    "surrogate-tool-name": _call(b"10", b"\\ud800", b"{}"),
    "truncated-utf8-at-end": _call(b"11", b"fx__echo", b'{"text":"\xe2\x82"}'),
    "nul-and-overlong": _call(b"12", b"fx__echo", b'{"text":"\xc0\xaf\x00"}'),
    # Past 1 MiB (below the 4 MiB request limit), where the HTTP front once stopped checking.
    "large-surrogate-id": _call(b'"\\ud800"', b"fx__echo", b'{"text":"' + b"x" * (2 << 20) + b'"}'),
    "large-encoded-surrogate": _call(b"14", b"fx__echo", b'{"text":"\xed\xa0\x80' + b"x" * (2 << 20) + b'"}'),
}
"""Each line and the id its answer may carry (`null`, or the line's own where it can be read)."""


def _modern(line: bytes) -> bytes:
    """The same line as a 2026-07-28 request (its era travels in each request's `_meta`)."""
    if b'"_meta":' in line:
        return line  # its own _meta is the hostile part
    if b'"params":{' in line:
        return line.replace(b'"params":{', b'"params":{' + ENVELOPE + b",", 1)
    return line[:-1] + b',"params":{' + ENVELOPE + b"}}"


def _check_error(reply: dict[str, Any], line: bytes) -> None:
    assert reply["jsonrpc"] == "2.0", reply
    assert reply["error"]["code"] in (-32700, -32600), reply
    assert reply["error"]["message"], reply
    # The id is echoed only when it is a plain number the line spelled cleanly, else null.
    assert reply["id"] is None or f'"id":{reply["id"]},'.encode() in line, reply


class Stdio:
    """One `toolscore serve` over stdio, spoken to in raw lines."""

    def __init__(self, config: str, *, modern: bool) -> None:
        self.modern = modern
        self.proc = subprocess.Popen(
            [TOOLSCORE, "serve", "--config", config],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        if not modern:
            send(self.proc, INIT)
            assert answer(self.proc)["id"] == 0
            send(self.proc, b'{"jsonrpc":"2.0","method":"notifications/initialized"}')

    def line(self, line: bytes) -> bytes:
        return _modern(line) if self.modern else line

    def echo(self, request_id: int, text: str) -> str:
        send(self.proc, self.line(_call(str(request_id).encode(), b"fx__echo", json.dumps({"text": text}).encode())))
        reply = answer(self.proc)
        assert reply["id"] == request_id, reply
        value: str = reply["result"]["content"][0]["text"]
        return value


@pytest.fixture(scope="module", params=["handshake", MODERN])
def stdio(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stdio]:
    tmp_path = tmp_path_factory.mktemp("stdio")
    gateway = Stdio(str(write_config(tmp_path, {"fx": fixture_entry(tmp_path)})), modern=request.param == MODERN)
    yield gateway
    assert gateway.proc.poll() is None, "the gateway died"
    gateway.proc.kill()
    gateway.proc.wait()
    for pipe in (gateway.proc.stdin, gateway.proc.stdout):
        if pipe is not None:
            pipe.close()


@pytest.mark.parametrize("line", BAD_LINES.values(), ids=BAD_LINES.keys())
def test_stdio_answers_each_hostile_line_once_and_lives(stdio: Stdio, line: bytes) -> None:
    send(stdio.proc, stdio.line(line))
    _check_error(answer(stdio.proc), line)
    assert stdio.echo(100, "alive") == "alive"  # the next answer is this one: nothing else was sent


def test_stdio_survives_every_hostile_line_in_one_write(stdio: Stdio) -> None:
    batch = b"\n".join(stdio.line(line) for line in BAD_LINES.values())
    send(stdio.proc, batch)
    replies = [answer(stdio.proc) for _ in BAD_LINES]
    for reply in replies:
        assert "error" in reply, reply
    assert stdio.echo(101, "still alive") == "still alive"


def test_stdio_answers_an_oversized_line_with_an_unreadable_id_as_oversized(stdio: Stdio) -> None:
    # The id is read from the line's first bytes; invalid UTF-8 there once raised, and the line
    # got a bare parse error instead of the size limit's.
    line = _call(b'"\xff"', b"fx__echo", b'{"text":"' + b"x" * (5 << 20) + b'"}')
    send(stdio.proc, stdio.line(line))
    reply = answer(stdio.proc)
    assert reply["id"] is None and reply["error"]["code"] == -32600, reply
    assert "exceeds" in reply["error"]["message"], reply
    assert stdio.echo(102, "alive") == "alive"


class Http:
    """Raw POSTs to one HTTP gateway, in the handshake era (a session) or the 2026-07-28 era."""

    def __init__(self, url: str, *, modern: bool) -> None:
        self.url, self.modern = url, modern
        self.client = httpx2.Client(timeout=30)
        self.headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        if modern:
            self.headers["MCP-Protocol-Version"] = MODERN
            return
        reply = self.client.post(url, content=INIT, headers=self.headers)
        assert reply.status_code == 200, reply.text
        self.headers |= {"Mcp-Session-Id": reply.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        self.client.post(url, content=b'{"jsonrpc":"2.0","method":"notifications/initialized"}', headers=self.headers)

    def post(self, line: bytes, method: str, name: str | None) -> httpx2.Response:
        headers = dict(self.headers)
        if self.modern:
            line = _modern(line)
            headers["Mcp-Method"] = method
            if name is not None:
                headers["Mcp-Name"] = name
        return self.client.post(self.url, content=line, headers=headers)

    message = staticmethod(SessionHttp.message)  # one JSON-RPC message, whether JSON or one SSE event

    def echo(self, text: str) -> str:
        line = _call(b"100", b"fx__echo", json.dumps({"text": text}).encode())
        reply = self.post(line, "tools/call", "fx__echo")
        assert reply.status_code == 200, reply.text
        result: str = self.message(reply)["result"]["content"][0]["text"]
        return result


@pytest.fixture(scope="module")
def http_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp_path = tmp_path_factory.mktemp("http")
    path = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    port = free_port()
    argv = [TOOLSCORE, "serve", "--transport", "http", "--port", str(port), "--config", str(path)]
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    wait_until_answering(f"http://127.0.0.1:{port}/", proc)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    assert proc.wait(timeout=60) == 0  # and it was alive to the end


@pytest.mark.parametrize("era", ["handshake", MODERN])
def test_http_answers_each_hostile_body_with_a_json_rpc_error(http_url: str, era: str) -> None:
    http = Http(http_url, modern=era == MODERN)
    try:
        for key, line in BAD_LINES.items():
            method = "ping" if key == "surrogate-id-ping" else "tools/call"
            reply = http.post(line, method, "fx__echo" if method == "tools/call" else None)
            assert reply.status_code == 400, (key, reply.status_code, reply.text[:300])
            _check_error(http.message(reply), line)
        assert http.echo("alive") == "alive"
    finally:
        http.client.close()


def test_stdin_from_a_regular_file_answers_each_unreadable_line(tmp_path: Path) -> None:
    # A file cannot be polled: the SDK's threaded transport reads it, and it only logged such
    # lines, so a client waited forever for their answers. (Requests after them are not asserted:
    # the file's end closes the session, and may cut them off before they are answered.)
    unreadable = [BAD_LINES["surrogate-id-ping"], BAD_LINES["surrogate-id-call"], b'{"jsonrpc":"2.0","id":5,']
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(b"\n".join([INIT, b'{"jsonrpc":"2.0","method":"notifications/initialized"}', *unreadable]))
    config = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    with requests.open("rb") as stdin:
        done = subprocess.run(
            [TOOLSCORE, "serve", "--config", str(config)], stdin=stdin, capture_output=True, timeout=120, check=False
        )
    assert done.returncode == 0, done.stderr[-2000:]
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    errors = [r["error"] for r in replies if r["id"] is None]
    assert len(errors) == len(unreadable) and {e["code"] for e in errors} == {-32700}, replies
