"""The few places where toolscore needs more of the mcp SDK than its public API offers.

Each function here reaches one private attribute of mcp 2.3, so an SDK upgrade that moves it
breaks here, in one module, and `tests/test_sdk_adapter.py` says so loudly; nothing else in
toolscore touches a private SDK name.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import mcp_types
from mcp.client.session import ClientSession
from mcp.server import ServerRequestContext
from mcp.server.connection import Connection
from mcp.server.session import ServerSession
from mcp.shared._stream_protocols import ReadStream as ReadStream
from mcp.shared._stream_protocols import WriteStream as WriteStream
from mcp.shared.dispatcher import CallOptions, ProgressFnT
from mcp.shared.message import SessionMessage

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from mcp.server.streamable_http import EventMessage, StreamableHTTPServerTransport
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

__all__ = [
    "HasSession",
    "HttpSession",
    "ReadStream",
    "WriteStream",
    "connection_of",
    "http_session",
    "request_context",
    "send_raw_request",
    "send_session_raw_request",
    "session_closed",
]


class HasSession(Protocol):
    """A client connection: `mcp.Client`, or the gateway's own (`downstream.handshake`)."""

    @property
    def session(self) -> ClientSession: ...


def session_closed(session: ClientSession) -> bool:
    """Whether the client session's dispatcher has seen its transport end (EOF or shutdown).

    The SDK reports a lost connection as `MCPError` -32000, a code any server may also send as its
    own answer; this tells the two apart.
    """
    dispatcher = getattr(session, "_dispatcher", None)
    return bool(getattr(dispatcher, "_closed", False))


def connection_of(session: ServerSession) -> Connection:
    """The `Connection` behind a front request's session.

    `ServerSession` is a per-request proxy; its connection holds what lives as long as the
    client's connection: the outbound channel, the teardown stack, the negotiated version.
    """
    return session._connection  # pyright: ignore[reportPrivateUsage] - no public accessor in mcp 2.3


async def send_raw_request(client: HasSession, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Send a request and return the raw result, skipping the SDK's whole-result validation.

    `ClientSession.send_request` validates a result against the protocol surface as a whole, so
    one malformed tool in a `tools/list` page would hide every good tool of that server.
    """
    return await send_session_raw_request(client.session, method, params)


async def send_session_raw_request(
    session: ClientSession, method: str, params: Mapping[str, Any] | None, progress: ProgressFnT | None = None
) -> dict[str, Any]:
    """`send_raw_request` on a client session: also for results the SDK has no model of (tasks).

    Stamped as the session stamps its own requests: the version header, and on a 2026-07-28
    connection the era's `_meta` envelope, without which the server refuses the request.
    """
    data: dict[str, Any] = {"method": method, "params": dict(params) if params else {}}
    opts: CallOptions = {}
    session._stamp(data, opts)  # pyright: ignore[reportPrivateUsage] - see `send_as_client`
    if progress is not None:
        opts["on_progress"] = progress
    dispatcher = session._dispatcher  # pyright: ignore[reportPrivateUsage] - see above
    raw: dict[str, Any] = await dispatcher.send_raw_request(method, data["params"] or None, opts)
    return raw


async def send_as_client(
    client: HasSession,
    method: str,
    params: dict[str, Any],
    *,
    capabilities: dict[str, Any],
    log_level: str | None,
    progress: ProgressFnT | None = None,
) -> dict[str, Any]:
    """Send a request on a 2026-07-28 connection as if from another client, and return the raw result.

    The session stamps every request's `_meta` (protocol version, client info, capabilities) and
    its headers; here the stamp is kept but the capabilities and log level are the ones given:
    those of the front client the request is made for. The raw result is returned unvalidated,
    since it may be an input-required result instead of the method's own.
    """
    session = client.session
    data: dict[str, Any] = {"method": method, "params": params}
    opts: CallOptions = {}
    session._stamp(data, opts)  # pyright: ignore[reportPrivateUsage] - the era's envelope and headers
    meta: dict[str, Any] = data["params"].setdefault("_meta", {})
    meta[mcp_types.CLIENT_CAPABILITIES_META_KEY] = capabilities
    meta.pop(mcp_types.LOG_LEVEL_META_KEY, None)
    if log_level is not None:
        meta[mcp_types.LOG_LEVEL_META_KEY] = log_level
    if progress is not None:
        opts["on_progress"] = progress
    dispatcher = session._dispatcher  # pyright: ignore[reportPrivateUsage] - see above
    raw: dict[str, Any] = await dispatcher.send_raw_request(method, data["params"], opts)
    return raw


def request_context(
    template: ServerRequestContext[Any],
    request_id: mcp_types.RequestId,
    method: str,
    params: Mapping[str, Any],
    meta: mcp_types.RequestParamsMeta | None,
    *,
    on_send: Callable[[], None] | None = None,
) -> ServerRequestContext[Any]:
    """A context for a request the gateway read itself (`front.fast`), as the SDK's runner builds one.

    `template` is the context of an earlier message on the same JSON-RPC connection; its dispatch
    context is copied with this request's id and progress token, so server-to-client requests,
    progress and logs made for this request are tied to it exactly as for one the SDK read.
    `on_send` is called before each message sent to the client for this request.
    """
    # The JSON-RPC dispatcher's concrete context is a dataclass (typed as its protocol).
    outbound: Any = template.session._request_outbound  # pyright: ignore[reportPrivateUsage] - see above
    token = meta.get("progress_token") if meta else None
    dispatch = dataclasses.replace(
        outbound,
        _request_id=request_id,
        _progress_token=token,
        _closed=False,
        cancel_requested=anyio.Event(),
        message_metadata=None,
    )
    if on_send is not None:
        dispatch._dispatcher = _Noting(dispatch._dispatcher, on_send)  # pyright: ignore[reportPrivateUsage]
    session = ServerSession(dispatch, connection_of(template.session), request_meta=meta)
    return ServerRequestContext(
        session=session,
        lifespan_context=template.lifespan_context,
        protocol_version=template.protocol_version,
        method=method,
        params=params,
        request_id=request_id,
        meta=meta,
        # The HTTP request of the template (a session's `notifications/initialized`): what the front
        # learned of its client there (the principal, `toolscore.front.callers`) holds for the session.
        request=template.request,
    )


class _Noting:
    """A connection's dispatcher as one request's context uses it, calling `on_send` before each
    message that request sends (its context reaches the dispatcher through these two methods only)."""

    def __init__(self, dispatcher: Any, on_send: Callable[[], None]) -> None:
        self._dispatcher = dispatcher
        self._on_send = on_send

    async def notify(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        opts: CallOptions | None = None,
        *,
        _related_request_id: mcp_types.RequestId | None = None,
    ) -> None:
        self._on_send()
        await self._dispatcher.notify(method, params, opts, _related_request_id=_related_request_id)

    async def send_raw_request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        opts: CallOptions | None = None,
        *,
        _related_request_id: mcp_types.RequestId | None = None,
    ) -> dict[str, Any]:
        self._on_send()
        result: dict[str, Any] = await self._dispatcher.send_raw_request(
            method, params, opts, _related_request_id=_related_request_id
        )
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dispatcher, name)


RequestStream = tuple["MemoryObjectSendStream[EventMessage]", "MemoryObjectReceiveStream[EventMessage]"]


class HttpSession:
    """One live stateful streamable-HTTP session, as the HTTP hot path (`front.http_fast`) answers a
    request of it outside the SDK's transport.

    The transport routes what the server sends for a request (progress, logs, server-to-client
    requests, the answer) to that request's stream by id, stores it in the event store, and keeps
    the session from idling out while a request is in flight; none of that has a public entry.
    """

    def __init__(self, transport: StreamableHTTPServerTransport) -> None:
        self._transport = transport

    def open(self, key: str) -> RequestStream | None:
        """Register the stream that receives what is sent for request `key` (None: one is open already)."""
        from mcp.server.streamable_http import REQUEST_STREAM_BUFFER_SIZE, EventMessage

        streams = self._transport._request_streams  # pyright: ignore[reportPrivateUsage]
        if key in streams:
            return None
        pair = anyio.create_memory_object_stream[EventMessage](REQUEST_STREAM_BUFFER_SIZE)
        streams[key] = pair
        return pair

    def close(self, key: str, pair: RequestStream) -> None:
        """Unregister and close the stream `open` gave."""
        streams = self._transport._request_streams  # pyright: ignore[reportPrivateUsage]
        if streams.get(key) is pair:
            del streams[key]
        pair[0].close()
        pair[1].close()

    async def send_last(self, message: mcp_types.JSONRPCMessage) -> None:
        """Send a request's answer the way the server's own answers go: stored, and after every
        message sent for the request before it."""
        stream = self._transport._write_stream  # pyright: ignore[reportPrivateUsage]
        if stream is None:
            raise anyio.ClosedResourceError
        await stream.send(SessionMessage(message))

    async def priming_event(self, key: str, protocol_version: str) -> dict[str, Any] | None:
        """The SSE event that opens a resumable response stream, if the SDK would send one."""
        event: dict[str, Any] | None = await self._transport._mint_priming_event(  # pyright: ignore[reportPrivateUsage]
            key, protocol_version
        )
        return event

    @contextmanager
    def busy(self) -> Iterator[None]:
        """Inside: a request is in flight, so the session does not idle out (as the transport counts its own)."""
        transport = self._transport
        idle = transport.idle_scope
        timeout = transport._idle_timeout  # pyright: ignore[reportPrivateUsage]
        if idle is None or timeout is None:
            yield
            return
        transport._requests_in_flight += 1  # pyright: ignore[reportPrivateUsage]
        idle.deadline = math.inf
        try:
            yield
        finally:
            transport._requests_in_flight -= 1  # pyright: ignore[reportPrivateUsage]
            if not transport._requests_in_flight:  # pyright: ignore[reportPrivateUsage]
                idle.deadline = anyio.current_time() + timeout


def http_session(manager: StreamableHTTPSessionManager, session_id: str) -> HttpSession | None:
    """The live session `session_id` of `manager`, or None: unknown, ending, bound to an SDK-authenticated
    user, or the SDK's internals are not where this module expects them (the SDK then answers)."""
    try:
        transport = manager._server_instances.get(session_id)  # pyright: ignore[reportPrivateUsage]
        if transport is None or transport.is_terminated:
            return None
        if manager._session_owners.get(session_id) is not None:  # pyright: ignore[reportPrivateUsage]
            return None
        idle = transport.idle_scope
        if (idle is not None and idle.cancel_called) or transport._write_stream is None:  # pyright: ignore[reportPrivateUsage]
            return None
        for name in ("_request_streams", "_idle_timeout", "_requests_in_flight", "_mint_priming_event"):
            getattr(transport, name)
    except AttributeError:
        return None
    return HttpSession(transport)


def modern_request_context(
    request: Any,
    request_id: mcp_types.RequestId,
    params: Mapping[str, Any],
    meta: mcp_types.RequestParamsMeta | None,
    *,
    version: str,
    client_info: Any,
    client_capabilities: Any,
    lifespan_state: Any,
) -> ServerRequestContext[Any]:
    """The context of a 2026-07-28 HTTP `tools/call` the gateway read itself (`front.http_modern`),
    as the SDK's single-exchange entry and its runner build one: a born-ready connection from the
    request's envelope, no back-channel, and nothing to stream (the request asked for no progress
    and no logs, so the entry's notification sink stays empty)."""
    dispatch_context, metadata, transport = _modern_entry()
    dispatch = dispatch_context(
        transport=transport(kind="streamable-http", can_send_request=False, headers=request.headers),
        request_id=request_id,
        message_metadata=metadata(request_context=request),
    )
    connection = Connection.from_envelope(version, client_info, client_capabilities)
    return ServerRequestContext(
        session=ServerSession(dispatch, connection, request_meta=meta),
        lifespan_context=lifespan_state,
        protocol_version=version,
        method="tools/call",
        params=params,
        request_id=request_id,
        meta=meta,
        request=request,
    )


@functools.cache
def _modern_entry() -> tuple[Any, Any, Any]:
    """The SDK's single-exchange dispatch context, message metadata and transport context: looked
    up on the first 2026-07-28 HTTP call, so a stdio gateway never imports the HTTP entry."""
    from mcp.server._streamable_http_modern import _SingleExchangeDispatchContext
    from mcp.shared.message import ServerMessageMetadata
    from mcp.shared.transport_context import TransportContext

    return _SingleExchangeDispatchContext, ServerMessageMetadata, TransportContext


def lifespan_state(manager: StreamableHTTPSessionManager) -> Any:
    """The server's lifespan state that `manager` hands each request it serves (None before it runs)."""
    return getattr(manager, "_lifespan_state", None)
