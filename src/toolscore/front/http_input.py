"""What the HTTP front answers to a POST the SDK's transport would misread: a JSON-RPC error.

The SDK's streamable HTTP app answers most bad input well (406 for a wrong Accept, -32700 for
bad JSON or UTF-8, 400/404 for a missing or unknown session). Three cases it does not, and the
stdio front does:

- a Content-Type other than JSON gets a bare-text 400: here, 415 with a JSON-RPC error;
- a message with an `id` that is neither a string nor a number validates as a *notification*
  and is dropped with 202: here, -32600 "the id must be a string or a number";
- a message with no `method` (and no `result`/`error`) gets -32602 with a pydantic dump: here,
  -32600 "not a JSON-RPC 2.0 message".

A body that is not UTF-8, or whose strings hold a lone surrogate (`\\ud800`, or the bytes ED A0 80
that `json.loads` lets through), gets -32700 here too: the SDK would run the call and fail later
with an internal error, or echo an id no client can read.

Bodies are parsed a second time only when a cheap scan says one of these may apply (or for a
batch). Every body up to the request size limit is checked; a larger one passes through to the
SDK, which refuses it (413) without parsing it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolscore._json import holds_unpaired_surrogate
from toolscore._lines import answerable_id
from toolscore.config import DEFAULT_MAX_REQUEST_BYTES

__all__ = ["check_body"]

_SUSPECT_ID = re.compile(rb'"id"\s*:\s*[\[{tfn]')  # an object, array, true, false or null id
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # \ud800-\udfff: paired, or not (then -32700)


def _error(code: int, message: str, request_id: str | int | None = None, status: int = 400) -> JSONResponse:
    return JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}, status)


def _valid_id(value: Any) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


def problem(body: bytes) -> JSONResponse | None:
    """The error for a JSON-RPC message (or batch) the SDK would misread, or None."""
    try:
        body.decode()
    except UnicodeDecodeError:
        # The SDK's modern-era app reads bytes with `json.loads`, which lets encoded surrogates
        # (ED A0 80) through to fail later as an internal error: the stdio front's answer instead.
        return _error(-32700, "Parse error: the body is not UTF-8")
    if _SURROGATE_ESCAPE.search(body) is not None and (answer := _unpaired(body)) is not None:
        return answer
    if b'"method"' in body and not _SUSPECT_ID.search(body) and not body.lstrip().startswith(b"["):
        return None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None  # the SDK answers -32700 itself
    for message in value if isinstance(value, list) else [value]:
        if not isinstance(message, dict):
            continue
        request_id = message.get("id")
        if "id" in message and not _valid_id(request_id):
            return _error(-32600, "Invalid request: the id must be a string or a number")
        if "method" not in message and "result" not in message and "error" not in message:
            return _error(-32600, "Invalid request: not a JSON-RPC 2.0 message (no 'method')", request_id)
    return None


def _unpaired(body: bytes) -> JSONResponse | None:
    """-32700 for a body whose strings hold an unpaired surrogate escape (no reply could echo them)."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None  # the SDK answers -32700 itself
    if not holds_unpaired_surrogate(value):
        return None
    request_id = answerable_id(value.get("id")) if isinstance(value, dict) else None
    return _error(-32700, "Parse error: a string holds a lone surrogate (U+D800 to U+DFFF)", request_id)


async def check_body(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, *, limit: int = DEFAULT_MAX_REQUEST_BYTES
) -> None:
    """Run `app`, answering first for a POST whose content type or message it would misread.

    `limit`: the app's own body size limit (a larger body is its to refuse, unread).
    """
    if scope["type"] != "http" or scope["method"] != "POST":
        await app(scope, receive, send)
        return
    headers = dict(scope["headers"])
    media = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    if media != b"application/json":
        shown = media.decode("latin-1")[:80] or "none"
        refused = _error(-32600, f"Unsupported Content-Type '{shown}': send 'application/json'", status=415)
        await refused(scope, receive, send)
        return
    buffered: list[Message] = []
    size, complete = 0, False
    while size <= limit:
        message = await receive()
        buffered.append(message)
        if message["type"] != "http.request":
            break  # the client went away: let the app see it
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            complete = True
            break
    if complete and (answer := problem(b"".join(m.get("body", b"") for m in buffered))) is not None:
        await answer(scope, receive, send)
        return

    async def replay() -> Message:
        return buffered.pop(0) if buffered else await receive()

    await app(scope, replay, send)
