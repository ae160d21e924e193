"""The HTTP front's JSON-RPC answers to POSTs the SDK would misread, as an ASGI app in memory.

The same cases against a real gateway process: tests/reliability/test_bad_input.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolscore.front.http_input import check_body, problem

pytestmark = pytest.mark.anyio


async def _post(
    body: bytes, content_type: str | None = "application/json", chunk: int = 0, limit: int = 4 << 20
) -> tuple[int, Any, bytes]:
    """POST `body` (in chunks of `chunk` bytes, if given) through `check_body` with the app's size
    `limit`; (status, JSON, what the app read)."""
    headers = [(b"content-type", content_type.encode())] if content_type is not None else []
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
    parts = [body[i : i + chunk] for i in range(0, len(body), chunk)] if chunk else [body]
    incoming = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)]
    sent: list[dict[str, Any]] = []
    seen = bytearray()

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            seen.extend(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    await check_body(app, scope, receive, send, limit=limit)
    status = sent[0]["status"]
    payload = b"".join(m.get("body", b"") for m in sent[1:])
    return status, json.loads(payload), bytes(seen)


async def test_a_valid_request_reaches_the_app_whole_even_in_chunks() -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": "y" * 5000}}).encode()
    assert await _post(body, chunk=1000) == (299, {}, body)


@pytest.mark.parametrize("content_type", ["text/plain", None, "application/jsonx"])
async def test_a_content_type_other_than_json_is_415_with_a_json_rpc_error(content_type: str | None) -> None:
    status, reply, seen = await _post(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}', content_type)
    assert status == 415 and reply["error"]["code"] == -32600 and "application/json" in reply["error"]["message"]
    assert seen == b""  # the body was never read


async def test_json_with_a_charset_is_json() -> None:
    assert (await _post(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}', "application/json; charset=utf-8"))[0] == 299


@pytest.mark.parametrize(
    ("body", "request_id", "says"),
    [
        (b'{"jsonrpc": "2.0", "id": {"an": "object"}, "method": "tools/list"}', None, "string or a number"),
        (b'{"jsonrpc": "2.0", "id": [1], "method": "tools/list"}', None, "string or a number"),
        (b'{"jsonrpc": "2.0", "id": true, "method": "tools/list"}', None, "string or a number"),
        (b'{"jsonrpc": "2.0", "id": 7}', 7, "no 'method'"),
        (b'[{"jsonrpc": "2.0", "id": "a", "method": "ping"}, {"jsonrpc": "2.0", "id": "b"}]', "b", "no 'method'"),
    ],
)
async def test_a_message_the_sdk_would_misread_is_a_400_invalid_request(
    body: bytes, request_id: Any, says: str
) -> None:
    status, reply, _ = await _post(body)
    assert status == 400 and reply["id"] == request_id
    assert reply["error"]["code"] == -32600 and says in reply["error"]["message"]


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",  # the SDK's own -32700
        b"[" * 100_000 + b"]" * 100_000,
        b'{"jsonrpc": "2.0", "id": 1, "result": {}}',  # a response from the client
        b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
        b'[1, "x", {"jsonrpc": "2.0", "id": 2, "method": "ping"}]',
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {"id": null}}}',
    ],
)
async def test_everything_else_is_the_sdks_to_answer(body: bytes) -> None:
    assert problem(body) is None


async def test_a_body_past_the_apps_size_limit_passes_through_for_it_to_refuse() -> None:
    body = b'{"jsonrpc": "2.0", "id": {"x": 1}, "pad": "' + b"x" * (2 << 20) + b'"}'
    assert await _post(body, chunk=64 * 1024, limit=1 << 20) == (299, {}, body)


@pytest.mark.parametrize(
    "hostile", [b'"id": "\\ud800"', b'"id": 1, "pad": "\xed\xa0\x80"', b'"id": 1, "pad": "\\udc00"']
)
async def test_a_large_body_below_the_limit_is_checked_whole(hostile: bytes) -> None:
    # Past 1 MiB, such bodies once reached the SDK: the call ran, its id echoed unreadable.
    pad = b"x" * (2 << 20)
    body = b'{"jsonrpc": "2.0", "method": "tools/call", ' + hostile + b', "params": {"x": "' + pad + b'"}}'
    status, reply, seen = await _post(body, chunk=64 * 1024)
    assert (status, reply["error"]["code"], reply["id"], seen) == (400, -32700, 1 if b"udc00" in hostile else None, b"")


async def test_other_methods_and_a_client_that_leaves_go_to_the_app() -> None:
    calls: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        calls.append(scope["method"] if scope["type"] == "http" else scope["type"])
        if scope["type"] == "http" and scope["method"] == "POST":
            assert (await receive())["type"] == "http.disconnect"

    async def gone() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        raise AssertionError(message)

    json_post = {"type": "http", "method": "POST", "headers": [(b"content-type", b"application/json")]}
    for scope in ({"type": "http", "method": "GET", "headers": []}, {"type": "lifespan"}, json_post):
        await check_body(app, scope, gone, send)
    assert calls == ["GET", "lifespan", "POST"]
