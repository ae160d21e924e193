"""`tools/call` on the streamable HTTP front without the SDK's per-message models: the hot path.

Theory of operation. The SDK's HTTP app validates each POSTed message into a model, hands it to
the session's message loop, which validates it again per protocol version, and dumps the answer
back through an SSE response; the gateway's downstream side does the same again. `HttpCalls` sits
in front of that app (behind `HttpGuard`, which checks Host, Origin, the token and the content
type). A POST to `/mcp` whose body is one `tools/call` for a downstream tool, on a live
handshake-era session whose client completed the handshake at the latest handshake-era version, is
decoded in one msgspec pass and run through the same engine call as the SDK path (`front.fast`
shares the decoding and the answer with the stdio front).

What the server sends for the call (progress, log messages, sampling, elicitation and roots
requests, all tied to the call's id) reaches the client as with the SDK: before the call runs, a
request stream is registered in the session's SDK transport under the call's id, where the
transport routes those messages and stores them in the event store. If the answer is ready within
`JSON_WINDOW` seconds and before any message was sent for the call, the response is
`application/json`: the downstream's result bytes spliced into the envelope. If a message comes
first, or the call runs longer, the response becomes an SSE stream written as the SDK writes one
(priming event, event ids from the store), and the answer goes through the transport too, so it
is stored and comes after every message sent before it; its event carries the spliced bytes. A
long call so stays resumable, as on the SDK path: a client that loses the stream reconnects with
the last event id it saw and gets the answer from the store.

A `notifications/cancelled` naming a running hot call cancels it (answered, as the SDK answers a
cancelled request on this era's wire, with error -32800). A client that disconnects does not
cancel its call (the spec: disconnection is not cancellation): it runs on, and its answer is
stored for a resume. A 2026-07-28 POST (no session; that era's version header) goes to its own hot path
(`front.http_modern`), which takes its passthrough `tools/call` and leaves the rest to the SDK.
Everything else goes to the SDK unchanged: other methods and notifications, batches, unknown
or ended sessions (the SDK's 404), an older handshake version, an Accept
header the SDK would refuse, a body over the size limit or one the decoder does not fully read
(`front.fast`), and all calls while tracing is on. The SDK internals this needs are reached in
`toolscore._sdk` only; if they move, every request goes to the SDK.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import mcp_types
import structlog
from mcp.server import ServerRequestContext
from mcp.server.streamable_http import (
    MCP_SESSION_ID_HEADER,
    REQUEST_CANCELLED,
    EventMessage,
    check_accept_headers,
)
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types.version import LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS
from sse_starlette import EventSourceResponse
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolscore._sdk import HttpSession, RequestStream, connection_of, http_session
from toolscore.front.fast import HotCall, Job, answer, cancelled_id, decode_call
from toolscore.front.http_modern import ModernCalls
from toolscore.telemetry import tracing

__all__ = ["HttpCalls"]

log = structlog.get_logger("toolscore.http_fast")

_SESSION = MCP_SESSION_ID_HEADER.encode()
_VERSION = b"mcp-protocol-version"
_READY = mcp_types.JSONRPCNotification(jsonrpc="2.0", method="toolscore/ready")
"""Put on a call's own stream when its answer is ready and nothing was sent for it before."""
_TERMINATED = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Not Found: Session has been terminated"}}'
"""The SDK's answer to a request of a session that has ended."""
JSON_WINDOW = 0.1
"""Seconds a call may take and still be answered with one JSON body; a longer one gets a resumable stream."""
_SSE_HEADERS = {
    "Cache-Control": "no-cache, no-transform",
    "Connection": "keep-alive",
    "Content-Type": "text/event-stream",
}


class HttpCalls:
    """ASGI middleware: the hot path for passthrough `tools/call` POSTs (see the module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        call: HotCall,
        serves: Callable[[str], bool],
        manager: StreamableHTTPSessionManager,
        max_body: int,
        modern: ModernCalls | None = None,
    ) -> None:
        """Args:
        app: The SDK's streamable HTTP app.
        call: The front server's call for the hot path (`front.fast.HotCall`).
        serves: Whether the hot path takes a tool: a downstream tool, or `orchestrate`.
        manager: The app's session manager.
        max_body: The largest request body; a larger one goes to the SDK, which refuses it.
        modern: The hot path for 2026-07-28 calls (`front.http_modern`), if they may take one.
        """
        self._app = app
        self._modern = modern
        self._call = call
        self._serves = serves
        self._manager = manager
        self._max_body = max_body
        self._templates: dict[str, ServerRequestContext[Any]] = {}
        self._running: dict[tuple[str, str], anyio.CancelScope] = {}
        self.served = 0
        """How many calls the hot path has taken."""

    @property
    def sessions(self) -> int:
        """How many sessions' calls may take the hot path now."""
        return len(self._templates)

    @property
    def running(self) -> int:
        """How many hot calls are running now."""
        return len(self._running)

    def attach(self, ctx: ServerRequestContext[Any]) -> None:
        """A client finished the handshake (`ctx`: its `notifications/initialized`): its session's
        calls may take the hot path, with `ctx` as their contexts' template, until the session ends."""
        if ctx.protocol_version != LATEST_HANDSHAKE_VERSION:
            return
        connection = connection_of(ctx.session)
        session_id = connection.session_id
        if session_id is None:
            return
        self._templates[session_id] = ctx
        connection.exit_stack.callback(self._templates.pop, session_id, None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/mcp":
            await self._app(scope, receive, send)
            return
        session_id = version = None
        for key, value in scope["headers"]:
            if key == _SESSION:
                session_id = value.decode("latin-1")
            elif key == _VERSION:
                version = value.decode("latin-1")
        modern = self._modern
        if session_id is None and modern is not None and version in MODERN_PROTOCOL_VERSIONS and tracing.tracer is None:
            await self._modern_call(modern, scope, receive, send)
            return
        template = self._templates.get(session_id) if session_id is not None else None
        if template is None or session_id is None:
            await self._app(scope, receive, send)
            return
        messages, body = await _read_body(receive, self._max_body)

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        if body is not None:
            if self._running and (cancelled := cancelled_id(body)) is not None:
                running = self._running.get((session_id, str(cancelled)))
                if running is not None:
                    running.cancel()  # and the SDK answers the notification (202) as ever
            elif (
                (version is None or version == template.protocol_version)
                and tracing.tracer is None
                and (job := decode_call(body)) is not None
                and self._serves(job.params.name)
                and (session_id, str(job.id)) not in self._running
                and _accepts_both(scope)
                and (session := http_session(self._manager, session_id)) is not None
                and (streams := session.open(str(job.id))) is not None
            ):
                key = str(job.id)
                self.served += 1
                try:
                    with session.busy():
                        await self._serve(session, streams, template, job, version, scope, receive, send)
                finally:
                    session.close(key, streams)
                return
        await self._app(scope, replay, send)

    async def _modern_call(self, modern: ModernCalls, scope: Scope, receive: Receive, send: Send) -> None:
        """A 2026-07-28 POST: its `tools/call` on the hot path if it takes it (`front.http_modern`), else the SDK's."""
        messages, body = await _read_body(receive, self._max_body)
        call = modern.take(scope, body) if body is not None else None
        if call is not None:
            await modern.serve(call, receive, send)
            return

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self._app(scope, replay, send)

    async def _serve(
        self,
        session: HttpSession,
        streams: RequestStream,
        template: ServerRequestContext[Any],
        job: Job,
        version: str | None,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        session_id = connection_of(template.session).session_id or ""
        key = str(job.id)
        sent_first = False  # a message for the call went out before its answer
        streaming = False  # the response is an SSE stream: the answer goes through the transport
        answered = False
        result = b""

        def note() -> None:
            nonlocal sent_first
            sent_first = True

        async def call() -> None:
            nonlocal result
            with anyio.CancelScope() as cancel:
                self._running[(session_id, key)] = cancel
                try:
                    result = await answer(self._call, template, job, on_send=note)
                finally:
                    del self._running[(session_id, key)]
            if cancel.cancelled_caught:  # the client's notifications/cancelled
                result = _cancelled(job.id)
            try:
                if sent_first or streaming:  # ordered after what was sent for the call, and stored
                    await session.send_last(_message(result, job.id))
                else:
                    streams[0].send_nowait(EventMessage(_READY))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.WouldBlock):
                log.debug("answer not delivered: the session ended", id=job.id)

        # Minted before the call runs, as the SDK does, so it precedes the call's events in the store.
        priming = await session.priming_event(key, version or mcp_types.DEFAULT_NEGOTIATED_VERSION)
        watching = anyio.CancelScope()
        gone = False  # the client disconnected before its answer
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                # The only reader of `receive` from here on. Disconnection is not cancellation (the
                # spec says so; a client cancels with notifications/cancelled): the call runs on to
                # its answer, which the event store keeps for a client that resumes its stream.
                nonlocal gone
                with watching:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    if not answered:
                        gone = True
                        session.close(key, streams)  # what the call sends now goes to the store only

            tg.start_soon(watch)
            tg.start_soon(call)
            first: EventMessage | None = _WAITING
            with anyio.move_on_after(JSON_WINDOW):
                try:
                    first = await streams[1].receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    first = None  # the session ended (DELETE, idle, stop) while the call ran
            headers = [(_SESSION, session_id.encode())]
            if first is None:
                if gone:
                    streaming = True  # the answer is stored: the client may resume
                else:
                    answered = True
                    tg.cancel_scope.cancel()  # the session ended: nobody can have the answer
                    await _send_json(send, 404, _TERMINATED, headers)
            elif first.message is _READY:
                answered = True
                await _send_json(send, 200, result, headers)
            else:
                streaming = True  # from here `call` sends the answer through the transport

                async def events() -> AsyncIterator[dict[str, Any]]:
                    nonlocal answered
                    if priming is not None:
                        yield priming
                    event: EventMessage | None = first
                    if event is _WAITING:
                        event = await _next(streams)
                    while event is not None:
                        message = event.message
                        if message is _READY:
                            # Ready in the instant the window closed: stored, then read back in order.
                            await session.send_last(_message(result, job.id))
                            event = await _next(streams)
                            continue
                        if (
                            isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError)
                            and str(message.id) == key
                        ):
                            answered = True
                            yield _event(result.decode(), event.event_id)
                            return
                        yield _event(message.model_dump_json(by_alias=True, exclude_unset=True), event.event_id)
                        event = await _next(streams)

                response = EventSourceResponse(
                    content=events(), headers={**_SSE_HEADERS, MCP_SESSION_ID_HEADER: session_id}
                )
                await response(scope, _never, send)  # `watch` reads `receive`
            watching.cancel()
            if not answered and not gone:
                tg.cancel_scope.cancel()  # the session ended under the stream: nobody can have the answer
            # else the call, if its client left, runs on to its answer (stored for a resume)


_WAITING = EventMessage(mcp_types.JSONRPCNotification(jsonrpc="2.0", method="toolscore/waiting"))
"""Nothing was sent for the call within `JSON_WINDOW`: the stream opens without a first message."""


async def _next(streams: RequestStream) -> EventMessage | None:
    """The next message sent for the call; None: the session ended."""
    try:
        return await streams[1].receive()
    except (anyio.EndOfStream, anyio.ClosedResourceError):
        return None


def _accepts_both(scope: Scope) -> bool:
    has_json, has_sse = check_accept_headers(Request(scope))
    return has_json and has_sse


def _message(answer: bytes, request_id: int | str) -> mcp_types.JSONRPCMessage:
    """The answer as a model, for the event store (a resumed stream replays it)."""
    try:
        return mcp_types.jsonrpc_message_adapter.validate_json(answer, by_name=False)
    except ValueError:  # not expected (the engine checked the result): still end the stream with it
        log.exception("an answer could not be read back", id=request_id)
        return mcp_types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result={})


def _cancelled(request_id: int | str) -> bytes:
    error = mcp_types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=mcp_types.ErrorData(code=REQUEST_CANCELLED, message="Request cancelled")
    )
    return error.model_dump_json(by_alias=True, exclude_unset=True).encode()


def _event(data: str, event_id: str | None) -> dict[str, Any]:
    # As the SDK's transport writes a message event.
    return {"event": "message", "data": data, "id": event_id} if event_id else {"event": "message", "data": data}


async def _send_json(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _never() -> Message:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


async def _read_body(receive: Receive, limit: int) -> tuple[list[Message], bytes | None]:
    """The request's ASGI messages as read, and its body (None: over `limit`, or the client left)."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, None
        size += len(message.get("body", b""))
        if size > limit:
            return messages, None
        if not message.get("more_body", False):
            break
    if len(messages) == 1:
        return messages, messages[0].get("body", b"")
    return messages, b"".join(m.get("body", b"") for m in messages)
