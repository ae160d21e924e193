"""The gateway's own `tools/call` requests on a stdio downstream's pipe, answered as bytes.

Theory of operation. The SDK's client session owns each connection: the handshake, the lists,
notifications and the server's own requests (sampling, elicitation, logs). On the hot path the
gateway writes a `tools/call` line itself, with an id from a space of its own (a random prefix
per connection; the SDK numbers its requests), and the connection's reader hands every line that
carries the prefix to `RawChannel.deliver` before the SDK would parse it. msgspec checks the
whole answer in one pass and returns where `result` lies in the line without decoding it: those
bytes go to the front client as they came, so the result is verbatim by construction. Only what
the engine needs is read from them (`isError`, the sizes the token estimate counts), and each
content block's shape is checked, so a malformed result is refused as on the SDK path.

Progress notifications for a call carry its id as their token and are routed here too, and so
are the server's log messages while a call is in flight: a server logs before it answers, and
the client must see the log first, which two paths through the SDK's tasks would not promise. A
call that is cancelled (its deadline, or the front client) sends `notifications/cancelled`. Whatever
the fast reading cannot vouch for (invalid UTF-8, a lone surrogate, a block type it does not
know, the downstream's `serverInfo` stamp) is decoded by the SDK's models instead.

A call is either awaited (`call`: the caller's task waits on a future) or sent (`send`: the
answer is handed to a callback by the connection's reader, with no task waiting for it; the
front's express lane, `toolscore.front.express`).
"""

from __future__ import annotations

import asyncio  # noqa: TID251 (the gateway runs on asyncio; see `_Call.done`)
import itertools
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types
import msgspec
from mcp import MCPError
from pydantic import ValidationError

from toolscore._lines import LineWriter

if TYPE_CHECKING:  # `toolscore.types` names `RawResult` in its own protocols
    from toolscore.types import Arguments, ProgressFn

__all__ = ["Answer", "ConnectionLost", "RawChannel", "RawResult", "Sent"]

_CANCEL_WRITE_SECONDS = 1.0
_SERVER_INFO = mcp_types.SERVER_INFO_META_KEY.encode()
_HEAD = b'{"jsonrpc":"2.0","id":"'
_AFTER_ID = b'","result":'
_ID_DIGITS = 20
_LOG = b'"notifications/message"'
_QUOTE = ord('"')
_BACKSLASH = b"\\"
LogFn = Callable[[mcp_types.LoggingMessageNotificationParams], Awaitable[None]]


class _Error(msgspec.Struct):
    code: int
    message: str
    data: Any = None


class _Incoming(msgspec.Struct):
    """A response to one of the gateway's requests, or a progress notification for one."""

    id: str | int | None = None
    method: str | None = None
    result: msgspec.Raw = msgspec.Raw()
    error: _Error | None = None
    params: msgspec.Raw = msgspec.Raw()


class _Progress(msgspec.Struct):
    progressToken: str | int
    progress: float
    total: float | None = None
    message: str | None = None


# The large members (text, base64 data) stay raw: their size is what the estimate needs, and a
# plain string's size is its length in the line (`_chars`), without building a str of it.
class _Contents(msgspec.Struct):
    uri: str
    text: msgspec.Raw = msgspec.Raw()
    blob: msgspec.Raw = msgspec.Raw()


class _Block(msgspec.Struct):
    type: str
    text: msgspec.Raw = msgspec.Raw()
    data: msgspec.Raw = msgspec.Raw()
    mimeType: str | None = None
    resource: _Contents | None = None
    uri: str | None = None
    name: str | None = None


class _Summary(msgspec.Struct):
    """What the engine reads of a `CallToolResult` (in one pass); the rest stays undecoded."""

    content: list[_Block]
    isError: bool | None = None
    structuredContent: msgspec.Raw = msgspec.Raw()
    meta: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="_meta")
    resultType: msgspec.Raw = msgspec.Raw()


class _TextBlock(msgspec.Struct):
    type: str
    text: str | None = None


class _Readable(msgspec.Struct):
    """What a plan step reads of a result: its text blocks and its structured content."""

    content: list[_TextBlock]
    structuredContent: dict[str, Any] | None = None


_incoming = msgspec.json.Decoder(_Incoming)
_readable = msgspec.json.Decoder(_Readable)
_progress = msgspec.json.Decoder(_Progress)
_summary = msgspec.json.Decoder(_Summary)
_string = msgspec.json.Decoder(str)
_encode = msgspec.json.Encoder().encode


@dataclass(frozen=True, slots=True)
class RawResult:
    """A `tools/call` result kept as the bytes the downstream wrote."""

    data: bytes
    """The JSON of the result object, exactly as the server sent it."""
    is_error: bool
    chars: int
    """What the token estimate counts (as `toolscore._tokens.result_tokens` does for a model)."""
    bare: bool = False
    """It has neither `_meta` nor `resultType`: what a 2026-07-28 answer adds can follow its last member."""

    def model(self) -> mcp_types.CallToolResult:
        """The result decoded, for whoever needs more than the bytes."""
        return mcp_types.CallToolResult.model_validate_json(self.data)

    def readable(self) -> tuple[str, dict[str, Any] | None] | None:
        """The text of its text blocks (joined by newlines, as a plan step reads it) and its
        structured content, decoded without the SDK's models; None where only they can say (a
        member of an unexpected type)."""
        try:
            parts = _readable.decode(self.data)
        except msgspec.DecodeError:
            return None
        texts = [block.text for block in parts.content if block.type == "text"]
        if None in texts:
            return None
        return "\n".join(texts), parts.structuredContent  # type: ignore[arg-type]  # None ruled out above


def _chars(value: msgspec.Raw, plain: bool) -> int | None:
    """The characters of the JSON string `value`; None if it is absent or not a string.

    `plain`: the result is ASCII without a backslash, so no string in it has an escape and its
    characters are its bytes between the quotes. Otherwise the string is decoded to count them,
    which also refuses a lone surrogate (the SDK's models then say what is wrong).
    """
    if not value or memoryview(value)[0] != _QUOTE:
        return None
    if plain:
        return len(value) - 2
    return len(_string.decode(value))


def _block_chars(block: _Block, plain: bool) -> int | None:
    """The characters of one content block the estimate counts; None: a shape to leave to the SDK."""
    kind = block.type
    if kind == "text":
        return _chars(block.text, plain)
    if kind in ("image", "audio"):
        return None if block.mimeType is None else _chars(block.data, plain)
    if kind == "resource":
        res = block.resource
        if res is None:
            return None
        text, blob = _chars(res.text, plain), _chars(res.blob, plain)
        return None if (text is None) == (blob is None) else text if text is not None else blob
    if kind == "resource_link":  # counted whole, as the models count a block of another kind
        if block.uri is None or block.name is None:
            return None
        return len(_encode(_link_fields(block)))
    return None


def _link_fields(block: _Block) -> dict[str, Any]:
    """The members of a resource_link block that are there and not null, strings decoded."""
    fields: dict[str, Any] = {}
    for name in block.__struct_fields__:
        value = getattr(block, name)
        if isinstance(value, msgspec.Raw):
            value = None if not value or bytes(value) == b"null" else _string.decode(value)
        if value is not None:
            fields[name] = value
    return fields


def read_result(data: bytes) -> RawResult | None:
    """`data` (a result's JSON) checked and summarised, or None where the SDK's models must decode it."""
    ascii_only = data.isascii()
    if not ascii_only and not _utf8(data):
        return None
    plain = ascii_only and _BACKSLASH not in data
    try:
        summary = _summary.decode(data)
        if summary.meta and _SERVER_INFO in bytes(summary.meta):
            return None  # a 2026-era server's stamp: the models take it out (`Downstream.call`)
        chars = 0
        for block in summary.content:
            size = _block_chars(block, plain)
            if size is None:
                return None
            chars += size
    except msgspec.DecodeError:  # a lone surrogate, a wrong type: the models say what is wrong
        return None
    if not summary.content and summary.structuredContent:
        chars += len(summary.structuredContent)
    return RawResult(data, bool(summary.isError), chars, bare=not summary.meta and not summary.resultType)


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@dataclass(slots=True)
class _Call:
    progress: ProgressFn | None
    # A bare future: an anyio Event is one wrapped, and costs twice as much to make, set and await.
    done: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    answer: _Incoming | RawResult | mcp_types.ErrorData | None = None
    """What ended the call: the server's answer, or the error its answer could not be read for."""


Answer = Callable[["RawResult | mcp_types.CallToolResult | MCPError | ValidationError"], None]
"""Receives a sent call's outcome (what `RawChannel.call` would return or raise), without waiting."""


@dataclass(slots=True)
class Sent:
    """A call sent without a task waiting for it (`RawChannel.send`): its answer is handed on."""

    then: Answer
    """Called with the outcome by the connection's reader, or with the error that ended the call
    when the connection ended or the answer could not be read."""


class ConnectionLost(MCPError):
    """The connection ended before the answer came: not an error the server sent (which may carry
    the same code, -32000)."""


def _lost(server: str) -> ConnectionLost:
    return ConnectionLost(code=mcp_types.CONNECTION_CLOSED, message=f"connection to '{server}' closed")


class RawChannel:
    """The gateway's own requests on one connection's pipe, beside the SDK's session."""

    def __init__(self, writer: LineWriter, server: str) -> None:
        self._writer = writer
        self._server = server
        self._prefix = f"toolscore.{secrets.token_hex(8)}."
        self._marker = self._prefix.encode()
        self._head = _HEAD + self._marker
        self._ids: Callable[[], int] = itertools.count(1).__next__
        self._calls: dict[str, _Call | Sent] = {}
        self._closed = False
        self.on_log: LogFn | None = None
        """Receives the server's log messages while a call is in flight (None: the SDK does)."""

    @property
    def busy(self) -> bool:
        """Whether a call is in flight on the channel (sent and not yet answered, failed or withdrawn)."""
        return bool(self._calls)

    def claims(self, line: bytes) -> bool:
        """Whether `line` may be for this channel's calls in flight (a cheap look; `deliver` decides)."""
        return bool(self._calls) and (self._marker in line or (self.on_log is not None and _LOG in line))

    async def deliver(self, line: bytes) -> bool:
        """Take the answer to, or progress of, one of this channel's calls; False: not ours after all."""
        plain = self._plain_answer(line)
        if plain is not None and self._end(*plain):
            return True
        try:
            message = _incoming.decode(line)
        except msgspec.DecodeError:
            if line.isascii():
                return False
            try:  # invalid UTF-8 in the envelope: replaced, as the SDK path does
                message = _incoming.decode(line.decode("utf-8", errors="replace").encode())
            except msgspec.DecodeError:
                return False
        if message.method == "notifications/message" and self.on_log is not None and message.id is None:
            try:
                params = mcp_types.LoggingMessageNotificationParams.model_validate_json(bytes(message.params))
            except ValidationError:
                return False  # the SDK says what is wrong with it
            await self.on_log(params)
            return True
        if message.method is not None:
            if message.method != "notifications/progress" or not message.params:
                return False
            try:
                progress = _progress.decode(message.params)
            except msgspec.DecodeError:
                return False
            call = self._calls.get(progress.progressToken) if isinstance(progress.progressToken, str) else None
            if not isinstance(call, _Call):
                return False
            if call.progress is not None:
                await call.progress(progress.progress, progress.total, progress.message)
            return True
        return self._end(message.id, message)

    def _plain_answer(self, line: bytes) -> tuple[str, RawResult] | None:
        """The id and result of an answer written as the SDK writes one (`{"jsonrpc":"2.0","id":`
        one of ours`,"result":` the result`}`), read in one pass over the result; None: decode it.

        Decoding the envelope first would scan a large result twice (the envelope's decoder skips
        it, then `read_result` reads it): a third of a millisecond per MiB. The head and the last
        brace are compared as bytes, and `read_result` vouches that what lies between is one whole
        result object, so the line is that answer and nothing else.
        """
        head = self._head
        if not line.startswith(head) or not line.endswith(b"}"):
            return None
        start = len(head)
        end = line.find(_AFTER_ID, start, start + _ID_DIGITS + len(_AFTER_ID))
        if end <= start or not line[start:end].isdigit():
            return None
        kept = read_result(line[end + len(_AFTER_ID) : -1])
        if kept is None:
            return None
        return line[len(_HEAD) : end].decode("ascii"), kept

    def _end(self, request_id: object, answer: _Incoming | RawResult | mcp_types.ErrorData) -> bool:
        """End the call `request_id` with `answer`: a sent call gets its outcome (what `call` would
        return or raise), an awaited one is woken to read it; False: no such call waits for it."""
        if not isinstance(request_id, str):  # the channel's ids are strings
            return False
        call = self._calls.get(request_id)
        if isinstance(call, Sent):
            del self._calls[request_id]
            try:
                outcome: RawResult | mcp_types.CallToolResult | MCPError | ValidationError = self._settle(answer)
            except (MCPError, ValidationError) as exc:
                outcome = exc
            call.then(outcome)
            return True
        if call is None or call.done.done():
            return False
        call.answer = answer
        call.done.set_result(None)
        return True

    def fail(self, request_id: object, error: mcp_types.ErrorData) -> bool:
        """End the call `request_id` with `error` (its answer could not be read); False: not ours."""
        return self._end(request_id, error)

    def close(self) -> None:
        """The connection ended: every call in flight fails as the SDK's own would."""
        self._closed = True
        for request_id, call in list(self._calls.items()):
            if isinstance(call, Sent):
                del self._calls[request_id]
                call.then(_lost(self._server))
            elif not call.done.done():
                call.done.set_result(None)

    async def call(
        self, tool: str, arguments: Arguments, *, progress: ProgressFn | None
    ) -> RawResult | mcp_types.CallToolResult:
        """Send `tools/call` and wait for the answer.

        Raises:
            MCPError: the server answered with a JSON-RPC error, or the connection closed
                (`CONNECTION_CLOSED`), as `ClientSession.send_request` raises them.
            pydantic.ValidationError: the result is not a valid `CallToolResult`.
        """
        if self._closed:
            raise _lost(self._server)
        request_id = f"{self._prefix}{self._ids()}"
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        if progress is not None:
            params["_meta"] = {"progressToken": request_id}
        line = _encode({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})
        call = self._calls[request_id] = _Call(progress)
        try:
            await self._writer.write(line, b"\n")
            if self._writer.closed:
                raise _lost(self._server)
            await call.done
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_WRITE_SECONDS):
                await self._cancel(request_id)
            raise
        finally:
            del self._calls[request_id]
        answer = call.answer
        if answer is None:
            raise _lost(self._server)
        return self._settle(answer)

    def send(self, tool: str, arguments: Arguments, sent: Sent) -> str | None:
        """Send `tools/call` now, without waiting, and return its id: `sent` gets the answer (no progress).

        None: nothing was sent, as the pipe could not take the request whole at once (it is full,
        another line is being written, the request is long) or the connection is gone; `call`
        is the way then. The caller ends a call it no longer waits for with `withdraw`.
        """
        if self._closed or self._writer.closed:
            return None
        request_id = f"{self._prefix}{self._ids()}"
        message = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }
        if not self._writer.write_now(_encode(message) + b"\n"):
            return None
        self._calls[request_id] = sent  # nothing was awaited: the answer cannot have come yet
        return request_id

    async def withdraw(self, request_id: str) -> bool:
        """Stop waiting for a sent call and tell the server (`notifications/cancelled`); False: it
        had already ended."""
        if self._calls.pop(request_id, None) is None:
            return False
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_WRITE_SECONDS):
            await self._cancel(request_id)
        return True

    async def _cancel(self, request_id: str) -> None:
        notice = {"requestId": request_id, "reason": "cancelled by the gateway"}
        await self._writer.write(
            _encode({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": notice}), b"\n"
        )

    def _settle(self, answer: _Incoming | RawResult | mcp_types.ErrorData) -> RawResult | mcp_types.CallToolResult:
        """A call's answer as `call` returns it.

        Raises:
            MCPError: a JSON-RPC error.
            pydantic.ValidationError: the result is not a valid `CallToolResult`.
        """
        if isinstance(answer, RawResult):
            return answer
        if isinstance(answer, mcp_types.ErrorData):  # the answer could not be read (`fail`)
            raise MCPError.from_error_data(answer)
        if answer.error is not None:
            error = answer.error
            raise MCPError(code=error.code, message=error.message, data=error.data)
        data = bytes(answer.result)
        kept = read_result(data)
        if kept is not None:
            return kept
        return mcp_types.CallToolResult.model_validate_json(data.decode("utf-8", errors="replace"))
