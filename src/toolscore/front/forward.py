"""What a downstream asks of the front client during a request: sampling, elicitation, roots, logs.

Handshake era (up to 2025-11-25): each is sent to the client that made the request, tied to that
request (`related_request_id`), only if the client declared the capability; otherwise the
downstream gets a JSON-RPC error saying why. A 2026-07-28 client has no back-channel: a request
that reaches the server over the main (handshake-era) connection gets the same kind of error;
one relayed in that era (`downstream.modern`) gets input-required results instead. Log messages
are tagged with the server (`logger: "<server>/<logger>"`) and filtered by the client's own
`logging/setLevel`; the downstreams are asked for the level a client set last.

A client's `notifications/roots/list_changed` goes to the servers it may use (every shared one,
and its own per-client instances); a `roots/list` a server sends back within a few seconds is
answered by that client, even outside its requests.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import mcp_types
import structlog
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from toolscore._sdk import connection_of
from toolscore.downstream.backchannel import InputChannel, Peer, no_peer_error
from toolscore.downstream.connection import ServerState
from toolscore.downstream.hub import DownstreamHub
from toolscore.scope import NO_CLIENT

__all__ = ["FrontPeer", "FrontPeers", "InputPeer", "LogLevels", "LoggingHandlers", "RootsHandlers"]

log = structlog.get_logger("toolscore.forward")

LEVELS: tuple[mcp_types.LoggingLevel, ...] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)
_SAMPLING = mcp_types.ClientCapabilities(sampling=mcp_types.SamplingCapability())
_ELICITATION = mcp_types.ClientCapabilities(elicitation=mcp_types.ElicitationCapability())
_ROOTS = mcp_types.ClientCapabilities(roots=mcp_types.RootsCapability())
_DECLARED = {"elicitation": _ELICITATION, "roots": _ROOTS}


class LogLevels:
    """Each front connection's `logging/setLevel`, forgotten when the connection closes."""

    def __init__(self) -> None:
        self._levels: dict[int, mcp_types.LoggingLevel] = {}

    def set(self, ctx: ServerRequestContext[Any], level: mcp_types.LoggingLevel) -> None:
        """Remember `level` for the connection of `ctx`."""
        connection = connection_of(ctx.session)
        if id(connection) not in self._levels:
            connection.exit_stack.callback(self._levels.pop, id(connection), None)
        self._levels[id(connection)] = level

    def allows(self, ctx: ServerRequestContext[Any], level: str) -> bool:
        """Whether a message at `level` reaches the client of `ctx`.

        Handshake era: all do before a `logging/setLevel`. 2026-07-28: only requests that opt in
        with `_meta["io.modelcontextprotocol/logLevel"]` get logs, at or above that level.
        """
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            wanted = (ctx.meta or {}).get(mcp_types.LOG_LEVEL_META_KEY)
            if wanted not in LEVELS:
                return False
        else:
            wanted = self._levels.get(id(connection_of(ctx.session)))
        if wanted is None or level not in LEVELS:
            return True
        return LEVELS.index(level) >= LEVELS.index(wanted)


SamplingPolicy = Callable[[str], str]
"""A server's `sampling` option: `allow`, `deny` or `confirm`."""
_CONFIRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "title": "Allow this request"}},
    "required": ["confirm"],
}
_PREVIEW_CHARS = 200


def _preview(params: mcp_types.CreateMessageRequestParams) -> str:
    """The last text the server wants sent to the model, shortened, for the user to judge."""
    for message in reversed(params.messages):
        blocks = message.content if isinstance(message.content, list) else [message.content]
        for block in blocks:
            if isinstance(block, mcp_types.TextContent):
                text = block.text
                return text if len(text) <= _PREVIEW_CHARS else text[:_PREVIEW_CHARS] + "…"
    return "(no text)"


class FrontPeer(Peer):
    """The front client of one request, as the downstreams serving it see it."""

    def __init__(
        self, ctx: ServerRequestContext[Any], levels: LogLevels, sampling: SamplingPolicy | None = None
    ) -> None:
        self._ctx: ServerRequestContext[Any] | None = ctx
        self._levels = levels
        self._sampling = sampling
        connection = connection_of(ctx.session)
        # One client: the channel that outlives its requests (stdio in either era, a handshake
        # session); a stateless 2026-07-28 HTTP request is a client of its own. Held weakly, as
        # the request context is (`detach`).
        self.client: object = weakref.ref(connection.outbound if connection.has_standalone_channel else connection)

    def detach(self) -> None:
        """The front request ended: later downstream requests get an error, and the client is not kept alive.

        (asyncio keeps a cancelled deadline's timer, and with it the request's context and this
        peer, until the deadline would have passed; the session must not live that long.)
        """
        self._ctx = None

    @property
    def parked(self) -> bool:
        """Never: a back-channel request is answered within the client's request."""
        return False

    def by_input(self, channel: InputChannel) -> Peer:
        """This client, asked through `channel`'s input-required rounds (`InputPeer`)."""
        ctx = self._ctx
        declared = ctx.session.client_capabilities if ctx is not None else None
        return InputPeer(self, channel, declared or mcp_types.ClientCapabilities())

    def _refusal(self, server: str, what: str, capability: str) -> mcp_types.ErrorData:
        required = mcp_types.ClientCapabilities.model_validate({capability: {}})
        data = mcp_types.MissingRequiredClientCapabilityErrorData(required_capabilities=required)
        return mcp_types.ErrorData(
            code=mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY,
            message=f"the client using server '{server}' through toolscore cannot answer {what}: it did not "
            f"declare the '{capability}' capability",
            data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
        )

    def _live(self) -> bool:
        """Whether the client can still be asked (its request is on)."""
        return self._ctx is not None

    def _declares(self, capability: mcp_types.ClientCapabilities) -> bool:
        ctx = self._ctx
        return ctx is not None and ctx.session.check_client_capability(capability)

    async def _ask(self, server: str, request: Any, result_type: type[Any]) -> Any:
        """`request` to the client, tied to its request; its answer or the error it got."""
        ctx = self._ctx
        if ctx is None:
            return no_peer_error(server, request.method)
        try:
            return await ctx.session.send_request(
                request, result_type, metadata=ServerMessageMetadata(related_request_id=ctx.request_id)
            )
        except MCPError as exc:  # the client refused, failed, or has no back-channel (2026-07-28)
            return exc.error

    async def sample(
        self, server: str, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult | mcp_types.CreateMessageResultWithTools | mcp_types.ErrorData:
        """Forward a sampling request to the client, if it declared sampling."""
        if not self._live():
            return no_peer_error(server, "a sampling request")
        policy = self._sampling(server) if self._sampling is not None else "allow"
        if policy == "deny":
            return mcp_types.ErrorData(
                code=mcp_types.INVALID_REQUEST,
                message=f"sampling by server '{server}' is denied by the gateway's configuration",
            )
        if not self._declares(_SAMPLING):
            return self._refusal(server, "a sampling request", "sampling")
        if policy == "confirm" and not await self._confirmed(server, params):
            return mcp_types.ErrorData(
                code=mcp_types.INVALID_REQUEST,
                message=f"the user did not allow the sampling request of server '{server}'",
            )
        result_type = mcp_types.CreateMessageResultWithTools if params.tools else mcp_types.CreateMessageResult
        answer: mcp_types.CreateMessageResult | mcp_types.CreateMessageResultWithTools | mcp_types.ErrorData
        answer = await self._ask(server, mcp_types.CreateMessageRequest(params=params), result_type)
        return answer

    async def _confirmed(self, server: str, params: mcp_types.CreateMessageRequestParams) -> bool:
        """Whether the user lets `server` use their model for this request (no, if it cannot be asked)."""
        if not self._declares(_ELICITATION):
            return False
        question = mcp_types.ElicitRequestFormParams(
            message=f"Server '{server}' asks to use your model (up to {params.max_tokens} tokens) with: "
            f"{_preview(params)}",
            requested_schema=_CONFIRM_SCHEMA,
        )
        answer = await self._ask(server, mcp_types.ElicitRequest(params=question), mcp_types.ElicitResult)
        return (
            isinstance(answer, mcp_types.ElicitResult)
            and answer.action == "accept"
            and (answer.content or {}).get("confirm") is True
        )

    async def elicit(
        self, server: str, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        """Forward an elicitation to the client, if it declared elicitation."""
        request = mcp_types.ElicitRequest(params=params)
        answer: mcp_types.ElicitResult | mcp_types.ErrorData
        answer = await self._forward(server, "an elicitation", "elicitation", request, mcp_types.ElicitResult)
        return answer

    async def list_roots(
        self, server: str, params: mcp_types.RequestParams | None = None
    ) -> mcp_types.ListRootsResult | mcp_types.ErrorData:
        """Ask the client for its roots, if it declared roots."""
        request = mcp_types.ListRootsRequest(params=params)
        answer: mcp_types.ListRootsResult | mcp_types.ErrorData
        answer = await self._forward(server, "a roots request", "roots", request, mcp_types.ListRootsResult)
        return answer

    async def _forward(self, server: str, what: str, capability: str, request: Any, result_type: type[Any]) -> Any:
        """`request` to the client of this request, if it is still on and declared `capability`."""
        if not self._live():
            return no_peer_error(server, what)
        if not self._declares(_DECLARED[capability]):
            return self._refusal(server, what, capability)
        return await self._ask(server, request, result_type)

    async def log(self, server: str, params: mcp_types.LoggingMessageNotificationParams) -> None:
        """Forward a log message, tagged with its server, if the client's level lets it through."""
        ctx = self._ctx
        if ctx is None or not self._levels.allows(ctx, params.level):
            return
        logger = server if not params.logger else f"{server}/{params.logger}"
        notification = mcp_types.LoggingMessageNotification(
            params=mcp_types.LoggingMessageNotificationParams(level=params.level, logger=logger, data=params.data)
        )
        try:
            await ctx.session.send_notification(notification, related_request_id=ctx.request_id)
        except Exception as exc:  # a client gone or without a back-channel: the log is not worth an error
            log.debug("log message not delivered", server=server, error=str(exc))


class InputPeer(FrontPeer):
    """A 2026-07-28 client asked through input-required rounds, for a call of its on a handshake-era
    connection (`toolscore.downstream.bridge`): the same rules as by back-channel (the capabilities
    it declared, the server's `sampling` option, the confirmation that asks first), each question
    one of a round's input requests. It lasts as long as the call, over several of the client's
    requests, and holds none of them."""

    def __init__(self, of: FrontPeer, channel: InputChannel, declared: mcp_types.ClientCapabilities) -> None:
        """Args:
        of: The peer of the request that started the call (its client and rules).
        channel: The call's rounds (`toolscore.downstream.bridge.Exchange`).
        declared: The client's capabilities, as that request declared them.
        """
        self._ctx = None
        self._levels = of._levels
        self._sampling = of._sampling
        self.client = of.client
        self._channel = channel
        self._declared = declared
        self._open = True

    def detach(self) -> None:
        """The call is over: later requests of the server's get an error."""
        self._open = False

    def by_input(self, channel: InputChannel) -> Peer:
        return InputPeer(self, channel, self._declared)

    @property
    def parked(self) -> bool:
        return self._channel.parked

    def _live(self) -> bool:
        return self._open

    def _declares(self, capability: mcp_types.ClientCapabilities) -> bool:
        declared = self._declared
        return all(
            getattr(declared, name) is not None
            for name in ("sampling", "elicitation", "roots")
            if getattr(capability, name) is not None
        )

    async def _ask(self, server: str, request: Any, result_type: type[Any]) -> Any:
        if not self._open:
            return no_peer_error(server, request.method)
        return await self._channel.ask(request, result_type)

    async def log(self, server: str, params: mcp_types.LoggingMessageNotificationParams) -> None:
        """To the client's request waiting now, if any (`InputChannel.log`)."""
        await self._channel.log(server, params)


class FrontPeers:
    """The back-channel peer of each front request, over the clients' log levels and each server's
    `sampling` option."""

    def __init__(self, hub: DownstreamHub, levels: LogLevels) -> None:
        """Args:
        hub: Holds the config, read at each request for the server's `sampling` option.
        levels: Each client's `logging/setLevel` (`LoggingHandlers` sets them).
        """
        self._hub = hub
        self.levels = levels
        self._sampling: SamplingPolicy = self.sampling  # bound once: `peer` runs on every call

    def sampling(self, server: str) -> str:
        """The `sampling` option of `server` (`deny` for a server not configured)."""
        found = self._hub.config.servers.get(server)
        return found.sampling if found is not None else "deny"

    def peer(self, ctx: ServerRequestContext[Any]) -> FrontPeer:
        """The client of the request `ctx`, as the downstreams serving it see it."""
        return FrontPeer(ctx, self.levels, self._sampling)


class LoggingHandlers:
    """`logging/setLevel` (the front declares `logging`): remembered per client, passed downstream."""

    def __init__(self, hub: DownstreamHub, levels: LogLevels) -> None:
        self._hub = hub
        self._levels = levels

    def register(self, server: Server[Any]) -> None:
        """Serve `logging/setLevel` on `server`."""
        server.add_request_handler("logging/setLevel", mcp_types.SetLevelRequestParams, self.set_level)

    async def set_level(
        self, ctx: ServerRequestContext[Any], params: mcp_types.SetLevelRequestParams
    ) -> mcp_types.EmptyResult:
        """Remember the client's level, and ask every server that is up and logs for it."""
        self._levels.set(ctx, params.level)
        for downstream in self._hub.downstreams.values():
            downstream.log_level = params.level
            caps = downstream.capabilities
            if caps is None or caps.logging is None or downstream.state is not ServerState.UP:
                continue
            request = mcp_types.SetLevelRequest(params=mcp_types.SetLevelRequestParams(level=params.level))
            try:
                what = "logging/setLevel"
                await downstream.request(request, mcp_types.EmptyResult, what, scope=NO_CLIENT, gated=False)
            except Exception as exc:  # one server's refusal must not fail the client's request
                log.info("logging/setLevel not passed on", server=downstream.name, error=str(exc))
        return mcp_types.EmptyResult()


ROOTS_ANSWER_WINDOW = 5.0
"""Seconds after a client's roots change during which a server's `roots/list` goes to that client."""


class RootsHandlers:
    """A client's `notifications/roots/list_changed`, passed on to the servers it may use."""

    def __init__(
        self,
        hub: DownstreamHub,
        identify: Callable[[ServerRequestContext[Any]], str],
        peer_for: Callable[[ServerRequestContext[Any]], FrontPeer],
    ) -> None:
        self._hub = hub
        self._identify = identify
        self._peer_for = peer_for

    def register(self, server: Server[Any]) -> None:
        """Take `notifications/roots/list_changed` on `server`."""
        server.add_notification_handler(
            "notifications/roots/list_changed", mcp_types.NotificationParams, self.roots_changed
        )

    async def roots_changed(self, ctx: ServerRequestContext[Any], params: mcp_types.NotificationParams) -> None:
        """Tell the client's servers; a `roots/list` they send back soon is answered by this client."""
        peer = self._peer_for(ctx)
        # In the background: the servers ask back at once, and that must not hold up this client.
        self._hub.roots_changed(self._identify(ctx), peer, ROOTS_ANSWER_WINDOW)
