"""One supervised MCP client connection per downstream server: stdio, streamable HTTP or SSE.

Theory of operation. `Downstream.run()` is a supervisor loop owned by the hub's task group. Each
round opens a transport and a handshake-era client (`handshake`; the era keeps `list_changed`
pushes), lists every page of tools and marks the server up. The transport's read stream is
wrapped so that its end (a dead child, a closed socket) sets the `lost` event; the SDK has no
"disconnected" callback of its own. On loss the server is marked down, every call in flight gets
an error at once (the SDK fails them with CONNECTION_CLOSED), and the loop reconnects with
backoff (0.5 s doubling to 10 s; 0.5 s again after a connection that stayed up
`backoff_reset_seconds`). The error kept for calls and `toolscore check` ends with how a stdio
child ended: its exit status and its last lines on stderr. A `tools/list_changed` push re-lists
the tools in the connection's own task. Whatever a downstream does, the exception stays in its
supervisor: one failing server never breaks the others or the gateway.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from types import TracebackType
from typing import Any, Self, TypeVar

import anyio
import anyio.abc
import mcp_types
import structlog
from mcp import MCPError
from mcp.client.session import ClientSession, IncomingMessage
from mcp.shared.message import SessionMessage
from mcp_types.version import LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field, ValidationError

from toolscore._sdk import (
    HasSession,
    ReadStream,
    WriteStream,
    send_as_client,
    send_raw_request,
    send_session_raw_request,
    session_closed,
)
from toolscore._version import __version__
from toolscore.config import ServerConfig
from toolscore.downstream import spawn
from toolscore.downstream.asking import answered
from toolscore.downstream.backchannel import Peer, attribute, no_peer_error, unattributable_error
from toolscore.downstream.breaker import Breaker, BreakerState
from toolscore.downstream.bridge import ANSWER_SECONDS, Bridge
from toolscore.downstream.caching import ListHint, hint_of
from toolscore.downstream.catalog import ServerLists
from toolscore.downstream.handshake import HandshakeClient
from toolscore.downstream.modern import ModernLink, RelayedError, listen_for_changes
from toolscore.downstream.raw import ConnectionLost, RawChannel, RawResult, Sent
from toolscore.downstream.transports import Transport
from toolscore.errors import DownstreamProtocolError, DownstreamUnavailable, InputRequired, TaskStarted
from toolscore.scope import CallScope
from toolscore.telemetry import tracing
from toolscore.types import Arguments, ProgressFn

__all__ = ["Downstream", "SentCall", "ServerState", "ServerStatus", "Settled"]

log = structlog.get_logger("toolscore.downstream")

BACKOFF_INITIAL = 0.5
BACKOFF_MAX = 10.0
_LIST_PAGES_MAX = 100
_CLIENT_INFO = mcp_types.Implementation(name="toolscore", version=__version__)
_LOST_ERRORS = (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError)


def _http_errors(name: str = "TransportError") -> tuple[type[BaseException], ...]:
    """httpx2's exception class `name` where httpx2 is loaded (an HTTP connection loads it); else
    none, as nothing can raise one: a gateway with only stdio servers never imports httpx2."""
    httpx2 = sys.modules.get("httpx2")
    return (getattr(httpx2, name),) if httpx2 is not None else ()


def _lost(*more: type[BaseException]) -> tuple[type[BaseException], ...]:
    """`more`, and the errors of a lost connection: anyio's, and httpx2's transport errors."""
    return (*more, *_LOST_ERRORS, *_http_errors())


_LIST_CHANGES = (
    mcp_types.ToolListChangedNotification,
    mcp_types.ResourceListChangedNotification,
    mcp_types.PromptListChangedNotification,
)
_RELAYED_METHODS = frozenset({"prompts/get"})
"""Requests other than `tools/call` that a 2026-07-28 client's input-required rounds may answer."""
_HELD_METHODS = frozenset({"logging/setLevel", "resources/subscribe", "resources/unsubscribe"})
"""Handshake-era requests a 2026-07-28 main connection carries otherwise (`Downstream.request`)."""
_ASKING_METHODS = frozenset({"prompts/get", "resources/read"})
"""Requests other than `tools/call` that a server on a 2026-07-28 connection may answer with an
input-required result (SEP-2322)."""
_ResultT = TypeVar("_ResultT", bound=BaseModel)
Streams = tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]
ResourceUpdatedFn = Callable[[str, str], Awaitable[None]]
"""Told (server, the server's own URI) when a subscribed resource changes."""
_CALL_CLOSED_NOTE = " The call may or may not have taken effect."


class ServerState(StrEnum):
    """Connection state of a downstream server."""

    STARTING = "starting"
    UP = "up"
    DOWN = "down"


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """A snapshot for `toolscore check` and logs."""

    name: str
    transport: str
    state: ServerState
    tools: int
    start_seconds: float | None
    error: str | None
    connects: int
    protocol_version: str | None = None
    """The main connection's version while up: a handshake-era one, or 2026-07-28."""


class _LenientToolsPage(BaseModel):
    """A tools/list page with each tool left as raw JSON."""

    tools: list[dict[str, Any]] = Field(default_factory=list)
    next_cursor: str | None = Field(default=None, alias="nextCursor")


def _connection_lost(exc: MCPError, client: HasSession | None, lost: anyio.Event | None) -> bool:
    """Whether `exc` says the connection ended rather than that the server answered with an error.

    The SDK reports a closed connection as -32000 (CONNECTION_CLOSED), a code servers also send as
    their own "server error": taking those for a lost connection would restart a server, and fail
    every sibling call in flight, whenever a tool answered -32000. So the code alone never decides:
    the gateway's raw channel says so with its own exception, and the SDK's session is asked
    whether its transport ended (or the watched read stream saw the end).
    """
    if isinstance(exc, ConnectionLost):
        return True
    if exc.code != mcp_types.CONNECTION_CLOSED:
        return False
    return (lost is not None and lost.is_set()) or (client is not None and session_closed(client.session))


class _WatchedReadStream:
    """Delegates to a transport's read stream and sets `lost` when the stream ends."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], lost: anyio.Event) -> None:
        self._inner = inner
        self._lost = lost

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except _LOST_ERRORS:
            self._lost.set()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc_val: BaseException | None, exc_tb: TracebackType | None
    ) -> bool | None:
        await self.aclose()
        return None


@asynccontextmanager
async def _watched(
    transport: AbstractAsyncContextManager[tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]],
    lost: anyio.Event,
) -> AsyncIterator[tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]]:
    try:
        async with transport as (read, write):
            yield _WatchedReadStream(read, lost), write
    finally:
        lost.set()


def _nothing() -> None:
    """What `Downstream._attending` returns for a call with no client to release."""


Settled = Callable[[RawResult | mcp_types.CallToolResult | DownstreamUnavailable | DownstreamProtocolError], None]
"""Receives a sent call's outcome (`Downstream.send`): the result, or the error `Downstream.call`
would raise for it."""


@dataclass(slots=True, eq=False)
class SentCall:
    """A call sent on a connection's raw channel and not yet settled (`Downstream.send`)."""

    channel: RawChannel
    attended: Callable[[], None]
    """Ends the client's turn as the server's peer (`release`)."""
    sent_id: str = ""
    """The id the request went to the server with."""

    def release(self) -> None:
        """The client is no longer this call's peer (once; the call settled, ended or was withdrawn)."""
        attended, self.attended = self.attended, _nothing
        attended()

    async def withdraw(self) -> None:
        """Stop waiting for the call, and tell the server (`notifications/cancelled`)."""
        self.release()
        await self.channel.withdraw(self.sent_id)


def _describe(exc: BaseException) -> str:
    """One line for an exception, unwrapping the groups task groups raise."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return f"MCP error {exc.code}: {exc.message}"
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    if isinstance(exc, _http_errors("HTTPError")):
        return f"{type(exc).__name__}: {exc}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class Downstream:
    """A supervised connection to one server, and the calls made over it."""

    def __init__(
        self,
        config: ServerConfig,
        transport: Transport,
        *,
        connect_timeout: float,
        on_tools_changed: Callable[[], Awaitable[None]],
        label: str | None = None,
    ) -> None:
        """Args:
        transport: How each connection is opened.
        label: How logs name this connection (default: the server name).
        """
        self.config = config
        self.name = config.name
        self.label = label or config.name
        self.transport = transport
        self._connect_timeout = connect_timeout
        self._on_tools_changed = on_tools_changed
        self._probing = False
        self._calls = 0
        """Tool calls in flight through `_call_exchange`: each still inside its deadline."""
        self._restarting = False
        """A connection that was up was lost, and the attempt after it has not ended: calls wait."""
        self._attempted = anyio.Event()
        """Set (then replaced) when a connection attempt ends, up or not."""
        self.state = ServerState.STARTING
        self.tools: tuple[mcp_types.Tool, ...] = ()
        self.error: str | None = None
        self.start_seconds: float | None = None
        self.connects = 0
        self.retry_delay: float | None = None
        self.retry_at: float | None = None
        """When the supervisor next tries to connect (`anyio.current_time()`), while it is down."""
        """The wait before the latest reconnection attempt (None before the first)."""
        self.first_attempt = anyio.Event()
        self._up_since: float | None = None
        self._client: HandshakeClient | None = None
        self._lost = anyio.Event()
        self._relist = anyio.Event()
        self.announced: dict[str, int] = {}
        """How many `<kind>/list_changed` the server sent, per kind: the hub passes each on even when
        the lists it re-reads are unchanged (a tool added and removed again)."""
        self.breaker = Breaker(config.breaker_failures, config.breaker_cooldown, config.health_failures)
        """Failed health checks in a row (`toolscore.downstream.hub` runs them); open: calls fail fast."""
        self.capabilities: mcp_types.ServerCapabilities | None = None
        """What the server declared at its latest connection (None before the first)."""
        self.lists = ServerLists()
        """Its resources, resource templates and prompts, as last listed."""
        self.list_hints: dict[str, ListHint] = {}
        """The caching hints of its lists as last listed (`tools`, `resources`, `resource_templates`,
        `prompts`; `toolscore.downstream.caching`), where it gave any."""
        self.subscriptions: set[str] = set()
        """Resource URIs (the server's own) subscribed to; renewed on every reconnection."""
        self.log_level: mcp_types.LoggingLevel | None = None
        """The level last asked of the server with `logging/setLevel`; renewed on reconnection."""
        self._resubscribe = anyio.Event()
        """Set when `subscriptions` changed, for a 2026-07-28 main connection's listen stream."""
        self._speaks_only: str | None = None
        """The 2026-07-28 version of a server found to speak only that era, while it stays up."""
        self.on_resource_updated: ResourceUpdatedFn | None = None
        self._peers: list[Peer] = []
        self.bridge = Bridge(self.label, answer_seconds=config.timeout or ANSWER_SECONDS)
        """The 2026-07-28 clients' calls on the handshake-era connection (`toolscore.downstream.bridge`)."""
        self._modern: ModernLink | None = None
        """The 2026-07-28 connection for 2026-07-28 clients (`toolscore.downstream.modern`), per connection."""
        self._task_group: anyio.abc.TaskGroup | None = None
        self._serving = anyio.Event()
        """Set while `_task_group` is (the connection is up and served); replaced when it ends."""
        self._roots_peer: Peer | None = None
        """The client that announced a roots change, for the server's next `roots/list` (one answer)."""
        self.opened_for: Peer | None = None
        """The client whose call started this connection (a per-client instance), for a `roots/list`
        the server sends while no call is in flight on it (as it starts)."""

    # -- status ---------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The process id of a connected stdio server (None for HTTP, or while down)."""
        return self.transport.pid

    def status(self) -> ServerStatus:
        """A snapshot of this server's state."""
        return ServerStatus(
            self.name,
            self.transport.kind,
            self.state,
            len(self.tools),
            self.start_seconds,
            self.error,
            self.connects,
            self.protocol_version,
        )

    def unavailable_reason(self) -> str | None:
        """Why calls cannot go to this server now, or None."""
        if self._client is not None:
            return self._refusal()
        if self.state is ServerState.STARTING:
            return "still starting"
        reason = f"down: {self.error}" if self.error else "down"
        if self.state is ServerState.DOWN:
            wait = BACKOFF_MAX if self.retry_at is None else max(0.0, self.retry_at - anyio.current_time())
            reason = f"{reason}; restarting, retry in {wait:.1f} s"
        return reason

    def call_refusal(self) -> str | None:
        """Why a tool call must fail now, or None: `unavailable_reason`, but a call that arrives while
        a server that was up restarts waits for it (`_call_exchange`), within its own deadline."""
        return None if self._going_back_up() else self.unavailable_reason()

    def _going_back_up(self) -> bool:
        """The connection that was up is being restarted (lost, or down with its next attempt due)."""
        return self._restarting or (self._client is not None and self._lost.is_set())

    def busy(self) -> bool:
        """Whether a tool call is in flight on the connection; each is inside its deadline (the engine
        ends one at its deadline), so a server that does not answer a ping meanwhile may be busy with
        it, not wedged."""
        channel = self.transport.raw
        return self._calls > 0 or (channel is not None and channel.busy)

    # -- calls ----------------------------------------------------------------------------------

    @asynccontextmanager
    async def _exchange(
        self, what: str, scope: CallScope, *, gated: bool = True, closed_note: str = ""
    ) -> AsyncIterator[ClientSession]:
        """The session for one request (`what` names it in errors), with its scope's peer registered.

        Refused while not connected (and, if `gated`, while the breaker is open); a connection lost
        or a malformed result during the request becomes `DownstreamUnavailable` /
        `DownstreamProtocolError`; the server's own JSON-RPC errors come out as `MCPError`.
        """
        client = self._client
        if client is None or (gated and self._refusal() is not None):
            raise DownstreamUnavailable(
                f"Server '{self.name}' is not available ({self.unavailable_reason()}).", server=self.name
            )
        release = self._attending(scope)
        lost = self._lost
        try:
            yield client.session
        except MCPError as exc:
            if not _connection_lost(exc, client, lost):
                raise
            raise self._closed_during(what, closed_note) from None
        except _lost() as exc:
            self._lost.set()
            raise DownstreamUnavailable(
                f"Server '{self.name}' became unreachable during {what}: {_describe(exc)}.", server=self.name
            ) from None
        except ValidationError:
            raise self._malformed(what) from None
        finally:
            release()

    def _closed_during(self, what: str, closed_note: str = "") -> DownstreamUnavailable:
        self._lost.set()  # the connection is restarted
        return DownstreamUnavailable(
            f"Server '{self.name}' closed the connection during {what}; it is being restarted.{closed_note}",
            server=self.name,
        )

    def _malformed(self, what: str) -> DownstreamProtocolError:
        return DownstreamProtocolError(f"Server '{self.name}' sent a malformed result for {what}.", server=self.name)

    async def call(
        self,
        tool: str,
        arguments: Arguments,
        *,
        progress: ProgressFn | None,
        scope: CallScope,
        keep_bytes: bool = False,
    ) -> RawResult | mcp_types.CallToolResult:
        """Send `tools/call` for `scope`'s client and return the downstream's result verbatim: the
        awaiting driver of the connection's one call seam (`send` is its callback driver).

        `keep_bytes`: the result may stay the bytes the server wrote (`RawResult`), where they mean
        the same to the client: a stdio connection that negotiated the client's version
        (`scope.version`), or a bridged 2026-07-28 client's call on one at the latest handshake
        version (`_bridged_bytes`: the front adds what that era's result has more). Otherwise, and
        for whatever the fast reading cannot vouch for (`toolscore.downstream.raw`), it is the
        SDK's model. `send_request` rather than `Client.call_tool`: the latter validates structured
        output client-side and may re-list tools; the gateway passes results through untouched.

        Raises:
            DownstreamUnavailable: not connected, or the connection broke during the call.
            DownstreamProtocolError: the server answered with a JSON-RPC error or a bad result.
        """
        if keep_bytes and not self._lost.is_set():  # a restarting server: the model path waits for it
            channel = self._raw_channel_for(scope.version)
            if channel is not None:
                async with self._call_exchange(tool, scope):
                    answer = await channel.call(tool, arguments, progress=progress)
                return answer if isinstance(answer, RawResult) else self._without_stamp(answer)
        what = f"the call to '{tool}'"
        raw = await self._relay("tools/call", {"name": tool, "arguments": arguments}, what, scope, progress)
        if raw is not None:
            return self._without_stamp(self._parse(raw, mcp_types.CallToolResult, what))
        task_group = await self._bridged(scope)
        if task_group is not None:
            # A 2026-07-28 client on the handshake-era connection: what the server asks it by
            # back-channel becomes input-required rounds (`toolscore.downstream.bridge`). The call
            # keeps its result's bytes where they mean the same to the client (`_bridged_bytes`);
            # whichever round ends it, a caller that did not ask for bytes gets the model.
            call = partial(self._main_call, tool, arguments, keep_bytes=self._bridged_bytes())
            answer = await self.bridge.run(task_group, tool, arguments, what, scope, progress, call)
            if isinstance(answer, RawResult) and not keep_bytes:
                return self._without_stamp(answer.model())
            return answer
        return await self._main_call(tool, arguments, scope, progress)

    def _bridged_bytes(self) -> bool:
        """Whether a bridged call may keep its result's bytes: a connection at the latest handshake
        version, whose `CallToolResult` is a 2026-07-28 one but for `resultType` and the `serverInfo`
        stamp, which the front adds (`toolscore.front.http_modern`)."""
        return self.protocol_version == LATEST_HANDSHAKE_VERSION

    async def _bridged(self, scope: CallScope) -> anyio.abc.TaskGroup | None:
        """The connection's task group, where `scope`'s request is a 2026-07-28 client's to bridge
        (the bridge runs the call there); None where it goes the plain way."""
        if scope.front is None:
            return None
        if self._going_back_up():
            await self._attempted.wait()  # as `_call_exchange` does
        if self._task_group is None and self._client is not None:  # up, and about to be served
            with anyio.move_on_after(self._connect_timeout):
                await self._serving.wait()
        return self._task_group

    async def _main_call(
        self,
        tool: str,
        arguments: Arguments,
        scope: CallScope,
        progress: ProgressFn | None,
        *,
        keep_bytes: bool = False,
    ) -> RawResult | mcp_types.CallToolResult:
        """`tools/call` on the main connection, its result as the SDK's model (`keep_bytes`: as the
        bytes the server wrote, where the gateway's own channel carried them and they stayed whole)."""
        async with self._call_exchange(tool, scope) as session:
            if self._main_modern:  # input-required rounds asked of the caller by back-channel
                what = f"the call to '{tool}'"
                raw = await self._asked(session, "tools/call", {"name": tool, "arguments": arguments}, scope, progress)
                # A task the request did not ask for (the gateway declares no extension) is malformed.
                return self._without_stamp(self._parse(raw, mcp_types.CallToolResult, what, relayed=False))
            channel = self._raw_channel()  # the connection's, once `_call_exchange` has one
            if channel is not None:  # stdio: the gateway's own request line, one decoding of the answer
                answer = await channel.call(tool, arguments, progress=progress)
                if isinstance(answer, RawResult):
                    return answer if keep_bytes else self._without_stamp(answer.model())
                return self._without_stamp(answer)
            request = mcp_types.CallToolRequest(params=mcp_types.CallToolRequestParams(name=tool, arguments=arguments))
            result = await session.send_request(request, mcp_types.CallToolResult, progress_callback=progress)
        return self._without_stamp(result)

    def send(self, tool: str, arguments: Arguments, scope: CallScope, then: Settled) -> SentCall | None:
        """`call` with `keep_bytes`, driven by callbacks: the request is written now, and `then` gets
        its outcome (the result, or the error `call` would raise) from the connection's reader.

        None: nothing was sent, as the call cannot go this way now (not a stdio connection at the
        client's version, a breaker that is not closed, a restarting server, a pipe that cannot take
        the request whole at once); `call` is the way then. While the call is out, `scope`'s client
        is this server's peer (`attribute`); a caller that stops waiting ends it with
        `SentCall.withdraw`, and a settled or withdrawn call releases the peer.
        """
        channel = self._sendable(scope.version)
        if channel is None:
            return None
        sent = SentCall(channel, self._attending(scope))
        sent_id = channel.send(tool, arguments, Sent(partial(self._settle_sent, tool, sent, then)))
        if sent_id is None:
            sent.release()
            return None
        sent.sent_id = sent_id
        return sent

    def _settle_sent(
        self,
        tool: str,
        sent: SentCall,
        then: Settled,
        outcome: RawResult | mcp_types.CallToolResult | MCPError | ValidationError,
    ) -> None:
        """A sent call's outcome, from the reader, as `call` would end it (a lost connection is restarted)."""
        sent.release()
        if isinstance(outcome, RawResult):
            then(outcome)
        elif isinstance(outcome, mcp_types.CallToolResult):
            then(self._without_stamp(outcome))
        elif isinstance(outcome, ValidationError):
            then(self._malformed(f"the call to '{tool}'"))
        elif isinstance(outcome, ConnectionLost):
            then(self._closed_during(f"the call to '{tool}'", _CALL_CLOSED_NOTE))
        else:
            then(self._answered(tool, outcome))

    @property
    def modern_version(self) -> str | None:
        """The version of the 2026-07-28 connection, while open (`toolscore.downstream.modern`)."""
        return self._modern.version if self._modern is not None else None

    def era_for(self, front_version: str | None) -> str | None:
        """The protocol version a call for a client speaking `front_version` goes out in (None: not connected).

        A 2026-07-28 client's passthrough call goes out in that era where the server offers it
        (known after its first such call); every other call in the main connection's era.
        """
        modern = self.modern_version
        if modern is not None and front_version in MODERN_PROTOCOL_VERSIONS:
            return modern
        return self.protocol_version

    async def _relay(
        self, method: str, params: dict[str, Any], what: str, scope: CallScope, progress: ProgressFn | None = None
    ) -> dict[str, Any] | None:
        """Send a 2026-07-28 client's request on the 2026-07-28 connection, and return the raw result.

        None where it does not go that way: not such a request (the scope has no `front`), the server is
        kept to the handshake era, or it does not offer the 2026-07-28 era.

        Raises:
            RelayedError: the server's JSON-RPC error, for the client as it is.
            DownstreamUnavailable: not connected, or the connection broke during the request.
        """
        front = scope.front
        if front is None:
            return None
        client: HasSession | None
        link: ModernLink | None = None
        if self._main_modern:  # the one connection is in that era: the request goes on it as it is
            client = self._client
        else:
            link, task_group = self._modern, self._task_group
            if link is None or task_group is None:
                return None
            client = await link.client(task_group)
        if client is None:
            return None
        async with self._exchange(what, scope):  # availability, breaker, and the peer for log messages
            try:
                return await send_as_client(
                    client,
                    method,
                    front.params(params),
                    capabilities=front.capabilities,
                    log_level=front.log_level,
                    progress=progress,
                )
            except MCPError as exc:
                if not _connection_lost(exc, client, None):
                    raise RelayedError.answered(self.name, what, exc.error) from None
                if link is None:
                    raise  # the main connection: `_exchange` restarts it
                link.lost(client)
            except _lost():
                if link is None:
                    raise
                link.lost(client)
        raise DownstreamUnavailable(
            f"Server '{self.name}' closed its 2026-07-28 connection during {what}; the call may or may not "
            "have taken effect.",
            server=self.name,
        )

    def _parse(self, raw: dict[str, Any], result_type: type[_ResultT], what: str, *, relayed: bool = True) -> _ResultT:
        """A request's raw result: an input-required result, or (`relayed`: a 2026-07-28 client's
        own call) a task of the tasks extension, is raised for the front to pass on."""
        meta = raw.get("_meta")
        if isinstance(meta, dict) and mcp_types.SERVER_INFO_META_KEY in meta:
            # The server's identity stamp: passed on, it would stand for the gateway's own.
            raw = {**raw, "_meta": {k: v for k, v in meta.items() if k != mcp_types.SERVER_INFO_META_KEY} or None}
            if raw["_meta"] is None:
                del raw["_meta"]
        kind = raw.get("resultType")
        if kind == "task":
            if relayed and result_type is mcp_types.CallToolResult and isinstance(raw.get("taskId"), str):
                raise TaskStarted(self.name, raw)  # the tasks extension: the client polls the server's task
            raise DownstreamProtocolError(
                f"Server '{self.name}' answered {what} with a task, which the request did not ask for.",
                server=self.name,
            )
        try:
            if kind == "input_required":
                raise InputRequired.passing(mcp_types.InputRequiredResult.model_validate(raw, by_name=False))
            return result_type.model_validate(raw, by_name=False)
        except ValidationError:
            raise DownstreamProtocolError(
                f"Server '{self.name}' sent a malformed result for {what}.", server=self.name
            ) from None

    def _attending(self, scope: CallScope) -> Callable[[], None]:
        """A call of `scope`'s is in flight on this connection until the returned function is called:
        its client may receive this server's requests and logs meanwhile (`attribute`). Every call
        registers so: those awaited (`_exchange`) and those sent (`send`)."""
        peer = scope.peer
        if peer is None:  # no client to ask: the call does not take part in attribution
            return _nothing
        peers = self._peers
        peers.append(peer)
        return partial(peers.remove, peer)

    def _refusal(self) -> str | None:
        """The breaker's refusal; the clock is read (through anyio's backend lookup) only when it is not closed."""
        breaker = self.breaker
        return None if breaker.state is BreakerState.CLOSED else breaker.refusal(anyio.current_time())

    def _answered(self, tool: str, exc: MCPError) -> DownstreamProtocolError:
        """The server's JSON-RPC error answering a call to `tool`, as the gateway reports it."""
        return DownstreamProtocolError.answered(self.name, f"the call to '{tool}'", exc.error)

    def keeps_bytes(self, protocol_version: str) -> bool:
        """Whether a call for a client speaking `protocol_version` can be sent now with its result
        kept as bytes (`send`, `call` with `keep_bytes`): a stdio connection at that version, up,
        its breaker closed. The route of a call reads it (`toolscore.front.lanes`)."""
        return self._sendable(protocol_version) is not None

    def _sendable(self, protocol_version: str | None) -> RawChannel | None:
        """The raw channel at `protocol_version` while calls may be sent on it now (`keeps_bytes`)."""
        if self._lost.is_set() or self._refusal() is not None:
            return None
        return self._raw_channel_for(protocol_version)

    def _raw_channel_for(self, protocol_version: str | None) -> RawChannel | None:
        """The raw channel, where the bytes of a result mean the same to a client speaking
        `protocol_version`: the connection negotiated that version."""
        return self._raw_channel() if self.protocol_version == protocol_version else None

    def _raw_channel(self) -> RawChannel | None:
        """The gateway's own channel for `tools/call` (stdio), unless tracing is on: the SDK's client
        span carries the trace to the server in the request's `_meta`."""
        if tracing.tracer is not None or self._main_modern:  # its lines are handshake-era requests
            return None
        return self.transport.raw

    @property
    def protocol_version(self) -> str | None:
        """The version negotiated on the current connection (None while not connected)."""
        client = self._client
        return None if client is None else client.protocol_version

    @asynccontextmanager
    async def _call_exchange(self, tool: str, scope: CallScope) -> AsyncIterator[ClientSession]:
        """`_exchange` for `tools/call`: the server's JSON-RPC errors become `DownstreamProtocolError`.

        A call that arrives while a server that was up restarts (a health check's or a timeout's
        restart, a crash, an OOM kill) waits for the next connection attempt, bounded by the call's
        deadline, rather than failing though it was never sent.
        """
        if self._going_back_up():
            await self._attempted.wait()
        async with self._exchange(f"the call to '{tool}'", scope, closed_note=_CALL_CLOSED_NOTE) as session:
            self._calls += 1
            try:
                yield session
            except MCPError as exc:
                if _connection_lost(exc, self._client, self._lost):
                    raise  # `_exchange` says the server is being restarted
                raise self._answered(tool, exc) from None
            finally:
                self._calls -= 1

    @staticmethod
    def _without_stamp(result: mcp_types.CallToolResult) -> mcp_types.CallToolResult:
        if result.meta and mcp_types.SERVER_INFO_META_KEY in result.meta:
            # A 2026-era downstream stamps its identity here; passed on, it would override ours.
            meta = {k: v for k, v in result.meta.items() if k != mcp_types.SERVER_INFO_META_KEY}
            result = result.model_copy(update={"meta": meta or None})
        return result

    async def request(
        self, request: Any, result_type: type[Any], what: str, *, scope: CallScope, gated: bool = True
    ) -> Any:
        """Send any request but `tools/call` to the server for `scope`'s client and return its result.

        `gated`: refused, like calls, while the circuit breaker is open; subscriptions and log levels
        are not (they are state the server must hold whatever its health).

        The server's JSON-RPC errors are raised as they came (`MCPError`), so the front passes them
        on unchanged; the scope's client receives the server's requests and logs meanwhile.

        Raises:
            DownstreamUnavailable: not connected, or the connection broke during the request.
            MCPError: the server answered with an error.
            DownstreamProtocolError: the server sent a malformed result.
        """
        if request.method in _HELD_METHODS and self._main_modern:
            # The era has no such request: the level goes with each request (`_asked`), the
            # subscriptions on the listen stream, which is opened anew with the caller's change.
            self._resubscribe.set()
            return mcp_types.EmptyResult()
        if request.method in _RELAYED_METHODS or (request.method in _ASKING_METHODS and self._main_modern):
            params = request.params.model_dump(by_alias=True, mode="json", exclude_none=True)
            try:
                raw = await self._relay(request.method, params, what, scope)
            except RelayedError as exc:
                raise MCPError.from_error_data(exc.error) from None
            if raw is not None:
                try:
                    return self._parse(raw, result_type, what)
                except InputRequired as asked:
                    return asked.answer()
            task_group = await self._bridged(scope)
            if task_group is not None:  # as `call` does

                async def main(inner: CallScope, progress: ProgressFn | None) -> Any:
                    return await self._main_request(request, result_type, what, inner, gated)

                try:
                    name = f"{request.method} {request.params.name}"
                    return await self.bridge.run(task_group, name, request.params.arguments, what, scope, None, main)
                except RelayedError as exc:
                    raise MCPError.from_error_data(exc.error) from None
                except InputRequired as asked:
                    return asked.answer()
        return await self._main_request(request, result_type, what, scope, gated)

    async def _main_request(
        self, request: Any, result_type: type[Any], what: str, scope: CallScope, gated: bool
    ) -> Any:
        async with self._exchange(what, scope, gated=gated) as session:
            if request.method in _ASKING_METHODS and self._main_modern:
                params = request.params.model_dump(by_alias=True, mode="json", exclude_none=True)
                return self._parse(await self._asked(session, request.method, params, scope, None), result_type, what)
            return await session.send_request(request, result_type)

    async def _asked(
        self,
        session: ClientSession,
        method: str,
        params: dict[str, Any],
        scope: CallScope,
        progress: ProgressFn | None,
    ) -> dict[str, Any]:
        """`method` sent on the 2026-07-28 main connection for a client with a back-channel (or none):
        its raw result, every input-required round answered by `scope`'s client (`downstream.asking`)."""

        if self.log_level is not None:  # what clients asked by `logging/setLevel`, this era's way
            params = {**params, "_meta": {**params.get("_meta", {}), mcp_types.LOG_LEVEL_META_KEY: self.log_level}}

        async def send(responses: dict[str, Any] | None, state: str | None) -> dict[str, Any]:
            again = dict(params)
            if responses is not None:
                again["inputResponses"] = responses
            if state is not None:
                again["requestState"] = state
            return await send_session_raw_request(session, method, again, progress)

        return await answered(await send(None, None), peer=scope.peer, server=self.name, send=send)

    @property
    def _main_modern(self) -> bool:
        """Whether the main connection is in the 2026-07-28 era (the server speaks only it, or its
        entry asks for it): no second connection, no bridge, no raw channel."""
        client = self._client
        return client is not None and client.modern

    async def request_raw(
        self, method: str, params: dict[str, Any] | None, what: str, *, scope: CallScope
    ) -> dict[str, Any]:
        """Send a request whose result the SDK has no model for (a task-augmented call, `tasks/*`),
        and return the raw result; raises what `request` raises.

        A 2026-07-28 client's goes where its calls go (the tasks extension's methods reach the
        connection, and for stdio the process, that runs the task), as its own."""
        try:
            raw = await self._relay(method, dict(params or {}), what, scope)
        except RelayedError as exc:
            raise MCPError.from_error_data(exc.error) from None
        if raw is not None:
            return raw
        async with self._exchange(what, scope) as session:
            return await send_session_raw_request(session, method, params)

    async def roots_changed(self, peer: Peer, window: float) -> None:
        """Tell the server the client of `peer` changed its roots; a `roots/list` the server sends
        back within `window` seconds goes to that client (outside any call of it)."""
        client = self._client
        if client is None or client.modern:  # the era has no client-to-server notifications
            return
        self._roots_peer = peer
        try:
            await client.session.send_notification(mcp_types.RootsListChangedNotification())
            await anyio.sleep(window)
        except _lost(MCPError) as exc:
            log.debug("roots/list_changed not delivered", server=self.label, error=_describe(exc))
        finally:
            if self._roots_peer is peer:
                self._roots_peer = None

    async def ping(self) -> str | None:
        """A health check: None if the server answered within `ping_timeout` (or is not connected;
        the supervisor handles that), else what went wrong."""
        client = self._client
        if client is None:
            return None
        with anyio.move_on_after(self.config.ping_timeout):
            try:
                if client.modern:  # 2026-07-28 removed `ping`; `server/discover` is always answered
                    await client.session.send_discover(client.protocol_version)
                else:
                    # The session's ping: `Client.send_ping` sends the same request, and also warns
                    # on the gateway's stderr that 2026-07-28 removed the method.
                    await client.session.send_ping()
            except MCPError as exc:  # an error answer is an answer, unless the connection closed
                if _connection_lost(exc, client, self._lost):
                    self._lost.set()
            except _lost():
                self._lost.set()
            return None
        return f"no answer to ping within {self.config.ping_timeout:g} s"

    def relist(self) -> None:
        """List the server again soon (a list whose `ttlMs` ran out), in the connection's own task."""
        self._relist.set()

    def restart(self, reason: str) -> None:
        """Drop the connection now (a stdio child is killed at once); the supervisor reconnects."""
        if self._client is None:
            return
        log.warning("restarting server", server=self.label, reason=reason)
        self.error = reason
        self.transport.kill()
        self._lost.set()

    async def check_after_timeout(self) -> None:
        """A call timed out: restart a server that is wedged (or, by config, any such server).

        With `on_timeout: "ping"` the server is pinged with its own deadline, and restarted only
        if it does not answer: a slow tool is not a dead server. Nor is one still running another
        call inside that call's deadline: restarting would end it; its own deadline comes.
        """
        client = self._client
        if client is None or self._probing:
            return
        if self.config.on_timeout == "restart":
            self.restart("a call timed out (on_timeout: restart)")
            return
        self._probing = True
        try:
            with anyio.move_on_after(self.config.ping_timeout) as scope:
                try:
                    await client.session.send_ping()  # not `Client.send_ping`: see `ping`
                except _lost(MCPError):
                    return  # the connection is already going; the supervisor handles it
            if scope.cancelled_caught and self._client is client and not self.busy():
                self.restart(f"no answer to ping within {self.config.ping_timeout:g} s after a call timed out")
        finally:
            self._probing = False

    # -- supervision ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Connect, serve, and reconnect with backoff; returns only when cancelled."""
        delay = BACKOFF_INITIAL
        try:
            while True:
                self._up_since = None
                await self._connect_once()
                up = time.monotonic() - self._up_since if self._up_since is not None else 0.0
                if up >= self.config.backoff_reset_seconds:
                    delay = BACKOFF_INITIAL  # it had been up a while: this is a fresh failure
                self.retry_delay = delay
                self.retry_at = anyio.current_time() + delay
                log.warning("server down", server=self.label, error=self.error, retry_in_s=delay)
                await anyio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)
        finally:
            self._attempt_ended()  # no more attempts: calls waiting for one fail now
            self.transport.close()

    def _attempt_ended(self) -> None:
        """A connection attempt ended, up or not: wake the calls that waited for it."""
        self._restarting = False
        attempted, self._attempted = self._attempted, anyio.Event()
        attempted.set()

    async def _connect_once(self) -> None:
        ready = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._session, ready)
            with anyio.move_on_after(self._connect_timeout):
                await ready.wait()
            if not ready.is_set():
                self.error = f"no answer within {self._connect_timeout:g} s"
                tg.cancel_scope.cancel()
            self.first_attempt.set()

    async def _session(self, ready: anyio.Event) -> None:
        self._lost = lost = anyio.Event()
        began = time.perf_counter()
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(
                    HandshakeClient(
                        _watched(self.transport.connect(), lost),
                        era=self._asked_era(),
                        server=self.label,
                        client_info=_CLIENT_INFO,
                        message_handler=self._on_message,
                        # Setting these is what declares sampling and elicitation to the server.
                        sampling_callback=self._on_sampling,
                        elicitation_callback=self._on_elicitation,
                        list_roots_callback=self._on_list_roots,  # declares roots (docs/conformance.md)
                        logging_callback=self._on_log,
                    )
                )
                self.capabilities = client.server_capabilities
                # A server found in the 2026-07-28 era is asked in it first next time (`_asked_era`).
                self._speaks_only = client.protocol_version if client.modern else None
                if (channel := self.transport.raw) is not None:
                    channel.on_log = self._on_log  # in line order with the answers it reads itself
                await self._learn_headers(client)
                self.tools = await self._list_tools(client)
                self.lists = await self._list_others(client)
                await self._renew(client)
                self._client = client
                self.state = ServerState.UP
                self.breaker.reset()
                self.error = None
                # From the process's start where the gateway started it (early, maybe, while it
                # imported), so the figure is the same whichever command started it.
                if (pid := self.transport.pid) is not None and (spawned := spawn.take_started_at(pid)) is not None:
                    began = min(began, spawned)
                self.start_seconds = time.perf_counter() - began
                self.connects += 1
                self._up_since = time.monotonic()
                ready.set()
                self._attempt_ended()
                log.info("server up", server=self.label, tools=len(self.tools), start_s=round(self.start_seconds, 3))
                await self._on_tools_changed()
                await self._serve(client, lost)
        except Exception as exc:  # the supervisor is this server's error boundary
            self._speaks_only = None  # the server may have changed: the next attempt asks again
            self.error = _describe(exc)
        finally:
            was_up = self._client is not None
            self._client = None
            self.state = ServerState.DOWN
            if ended := self.transport.last_exit():  # the exit status and stderr say why, often
                self.error = f"{self.error}; {ended}" if self.error else ended
            ready.set()
            if was_up:
                self._restarting = True  # calls wait for the next attempt
            else:
                self._attempt_ended()
            if was_up:
                with anyio.CancelScope(shield=True):
                    await self._on_tools_changed()

    async def _serve(self, client: HandshakeClient, lost: anyio.Event) -> None:
        """Keep the connection until it is lost, re-listing tools when the server says so."""
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                await lost.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            self._task_group = tg  # the 2026-07-28 connection, if opened, lives and ends with this one
            self._serving.set()
            # One process holds one state: a stdio server gets a second only when its entry asks.
            era = self.config.era or ("handshake" if self.transport.kind == "stdio" else "auto")
            if client.modern:  # one connection, in the era both kinds of client are served in
                tg.start_soon(self._listen, client)
            elif era != "handshake" and self.transport.kind != "sse":
                self._modern = ModernLink(
                    self.label,
                    self._connect_another,
                    timeout=self._connect_timeout,
                    on_log=self._on_log,
                    on_lists_changed=lambda: self._relist.set(),  # the event is replaced after each re-listing
                )
            try:
                while True:
                    await self._relist.wait()
                    self._relist = anyio.Event()
                    try:
                        await self._learn_headers(client)  # a new tool's headers, too
                        self.tools = await self._list_tools(client)
                        self.lists = await self._list_others(client)
                    except MCPError as exc:
                        log.warning("re-listing tools failed", server=self.name, error=_describe(exc))
                        continue
                    await self._on_tools_changed()
            finally:
                self._task_group = self._modern = None
                self._serving = anyio.Event()
        if lost.is_set() and self.error is None:
            self.error = "connection closed"

    async def _listen(self, client: HandshakeClient) -> None:
        """On a 2026-07-28 main connection: the server's list changes re-list it, and updates of the
        resources clients subscribed to reach them, over a `subscriptions/listen` stream opened
        anew whenever the subscribed URIs change (`resources/subscribe` does not exist in the era)."""

        async def updated(uri: str) -> None:
            if self.on_resource_updated is not None:
                await self.on_resource_updated(self.name, uri)

        while True:
            resubscribe = self._resubscribe = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    partial(
                        listen_for_changes,
                        client.session,
                        self.label,
                        lambda: self._relist.set(),  # the event is replaced after each re-listing
                        uris=sorted(self.subscriptions),
                        on_updated=updated,
                    )
                )
                await resubscribe.wait()
                tg.cancel_scope.cancel()

    def _asked_era(self) -> str | None:
        """The era the main connection opens in (`HandshakeClient`'s `era`): the entry's, else the
        2026-07-28 version a server that refused the handshake last time speaks, else None (the
        handshake, falling back to 2026-07-28 where the server refuses it)."""
        era = self.config.era
        return self._speaks_only if era in (None, "auto") else era

    def _connect_another(self, lost: anyio.Event) -> AbstractAsyncContextManager[Streams]:
        """A second connection to the server (a second process, for stdio), alongside the main one."""
        # A transport opens one connection at a time; a copy of it opens another, its own.
        return _watched(copy.copy(self.transport).connect(), lost)

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, _LIST_CHANGES):
            kind = message.method.split("/")[1]  # notifications/<kind>/list_changed
            self.announced[kind] = self.announced.get(kind, 0) + 1
            self._relist.set()  # re-list in the connection's task, not inside the message loop
        elif isinstance(message, mcp_types.ResourceUpdatedNotification):
            if self.on_resource_updated is not None:
                await self.on_resource_updated(self.name, str(message.params.uri))
        elif isinstance(message, Exception):
            log.debug("transport error", server=self.name, error=_describe(message))

    async def _list_tools(self, client: HandshakeClient) -> tuple[mcp_types.Tool, ...]:
        """Every page of tools; a tool that does not parse is skipped, not the whole list.

        `Client.list_tools` validates the page as a whole, so one tool with, say, a non-object
        inputSchema would make the server look broken. Pages are read leniently here and each
        tool is parsed on its own; the registry then checks each against both protocol eras.
        """
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(_LIST_PAGES_MAX):
            # `ClientSession.send_request` validates the page against the protocol surface as a
            # whole before any result type sees it; the dispatcher hands back the raw page.
            raw_page = await send_raw_request(client, "tools/list", {"cursor": cursor} if cursor else None)
            page = _LenientToolsPage.model_validate(raw_page)
            if cursor is None:
                self.list_hints["tools"] = hint_of(raw_page, time.monotonic())
            for raw in page.tools:
                try:
                    tools.append(mcp_types.Tool.model_validate(raw))
                except ValidationError as exc:
                    log.warning("tool skipped", server=self.name, tool=raw.get("name"), error=str(exc).splitlines()[0])
            cursor = page.next_cursor
            if cursor is None:
                break
        return tuple(tools)

    # -- what the server asks of the client, and its logs ----------------------------------------

    def _peer(self, what: str) -> Peer | mcp_types.ErrorData:
        """The client a request of this server's goes to, or the error it is answered with."""
        peer = attribute(self._peers)
        if peer is not None:
            return peer
        return unattributable_error(self.name, what) if self._peers else no_peer_error(self.name, what)

    async def _on_sampling(
        self, context: Any, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult | mcp_types.CreateMessageResultWithTools | mcp_types.ErrorData:
        peer = self._peer("a sampling request")
        return peer if isinstance(peer, mcp_types.ErrorData) else await peer.sample(self.name, params)

    async def _on_elicitation(
        self, context: Any, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        peer = self._peer("an elicitation")
        return peer if isinstance(peer, mcp_types.ErrorData) else await peer.elicit(self.name, params)

    async def _on_list_roots(self, context: Any) -> mcp_types.ListRootsResult | mcp_types.ErrorData:
        # Last, the peer of the request this connection was opened in: a per-client instance is
        # started by its client's first call, and a server may ask for roots as it starts.
        peer: Peer | mcp_types.ErrorData | None
        peer, self._roots_peer = self._roots_peer, None
        if peer is None:
            peer = self._peer("a roots request")
            if isinstance(peer, mcp_types.ErrorData) and not self._peers:
                peer = self.opened_for or peer
        if isinstance(peer, mcp_types.ErrorData):
            return peer
        meta = getattr(context, "meta", None)  # the server's `_meta` (`bridge.INPUT_KEY_META`, say)
        return await peer.list_roots(self.name, mcp_types.RequestParams(_meta=meta) if meta else None)

    async def _on_log(self, params: mcp_types.LoggingMessageNotificationParams) -> None:
        peer = attribute(self._peers)
        if peer is None:  # no client request to tie it to (or several): the gateway's own log keeps it
            why = "calls of several clients in flight" if self._peers else "no client call in flight"
            log.info(
                "server log", server=self.label, level=params.level, logger=params.logger, data=params.data, kept=why
            )
            return
        await peer.log(self.name, params)

    # -- resources, templates and prompts ------------------------------------------------------

    async def _list_others(self, client: HandshakeClient) -> ServerLists:
        """Every page of resources, templates and prompts the server declared; a failing list is empty."""
        caps = client.server_capabilities
        resources: list[mcp_types.Resource] = []
        templates: list[mcp_types.ResourceTemplate] = []
        prompts: list[mcp_types.Prompt] = []
        if caps.resources is not None:
            resources = await self._pages(
                client, "resources", mcp_types.ListResourcesRequest, mcp_types.ListResourcesResult
            )
            templates = await self._pages(
                client,
                "resource_templates",
                mcp_types.ListResourceTemplatesRequest,
                mcp_types.ListResourceTemplatesResult,
            )
        if caps.prompts is not None:
            prompts = await self._pages(client, "prompts", mcp_types.ListPromptsRequest, mcp_types.ListPromptsResult)
        return ServerLists(
            tuple(resources), tuple(templates), tuple(prompts), serves_resources=caps.resources is not None
        )

    async def _pages(self, client: HandshakeClient, key: str, request_type: Any, result_type: Any) -> list[Any]:
        found: list[Any] = []
        cursor: str | None = None
        try:
            for _ in range(_LIST_PAGES_MAX):
                params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
                # Raw, then parsed: the SDK's own parsing per era would drop a hint a server sent anyway.
                request = request_type(params=params).model_dump(by_alias=True, mode="json", exclude_none=True)
                raw_page = await send_raw_request(client, request["method"], request.get("params"))
                page = result_type.model_validate(raw_page)
                if cursor is None:
                    self.list_hints[key] = hint_of(raw_page, time.monotonic())
                found.extend(getattr(page, key))
                cursor = page.next_cursor
                if cursor is None:
                    break
        except (MCPError, ValidationError) as exc:
            log.warning("listing failed", server=self.label, what=key, error=_describe(exc))
        return found

    async def _learn_headers(self, client: HandshakeClient) -> None:
        """The session's own listing of the tools, on a 2026-07-28 connection over HTTP: it tells the
        session which arguments a `tools/call` carries in `Mcp-Param` headers, which a server checks."""
        if not client.modern or self.transport.kind == "stdio":
            return
        try:
            await client.session.list_tools()
        except (MCPError, ValidationError) as exc:
            log.info("listing tools for their headers failed", server=self.label, error=_describe(exc))

    async def _renew(self, client: HandshakeClient) -> None:
        """After a (re)connection: the log level and subscriptions asked of the previous one."""
        if client.modern:  # the era has neither: log levels go with each request, changes on `listen`
            return
        try:
            if self.log_level is not None and client.server_capabilities.logging is not None:
                await client.session.send_request(
                    mcp_types.SetLevelRequest(params=mcp_types.SetLevelRequestParams(level=self.log_level)),
                    mcp_types.EmptyResult,
                )
            for uri in sorted(self.subscriptions):
                await client.session.send_request(
                    mcp_types.SubscribeRequest(params=mcp_types.SubscribeRequestParams(uri=uri)), mcp_types.EmptyResult
                )
        except (MCPError, ValidationError) as exc:
            log.warning("renewing subscriptions failed", server=self.label, error=_describe(exc))
