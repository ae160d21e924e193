"""A downstream's main client connection: the SDK's `ClientSession` over a transport's streams.

This is what `mcp.Client(transport, mode="legacy", cache=None)` does (a JSON-RPC dispatcher on
the streams, a session on it, `initialize`), without importing `mcp.Client`: its module imports
the `MCPServer` framework, both HTTP clients and the in-memory transport, whatever the
transport, which a gateway of stdio servers would carry for nothing (docs/performance.md#cold-start-part-two).

The connection opens in the handshake era, except where the server speaks only 2026-07-28 (it
answers `initialize` with -32022 naming no handshake-era version) or the server's entry asks for
that era (`"era": "2026-07-28"`): then it is a 2026-07-28 connection (`server/discover`, each
request stamped with the era's `_meta` envelope by the session).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, AsyncExitStack
from types import TracebackType
from typing import Any, Self

import mcp_types
from mcp import MCPError
from mcp.client.session import (
    ClientSession,
    ElicitationFnT,
    ListRootsFnT,
    LoggingFnT,
    MessageHandlerFnT,
    SamplingFnT,
)
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from toolscore._sdk import ReadStream, WriteStream
from toolscore.errors import DownstreamProtocolError

__all__ = ["HandshakeClient", "modern_only"]


def modern_only(error: MCPError) -> str | None:
    """The newest version a server that refused `initialize` serves and the gateway speaks, where all
    it serves are 2026-07-28-era ones (-32022 with a `supported` list); None for any other refusal."""
    if error.code != mcp_types.UNSUPPORTED_PROTOCOL_VERSION or not isinstance(error.error.data, dict):
        return None
    supported = error.error.data.get("supported")
    if not isinstance(supported, list) or not supported or any(v in HANDSHAKE_PROTOCOL_VERSIONS for v in supported):
        return None
    mutual = [v for v in MODERN_PROTOCOL_VERSIONS if v in supported]
    return mutual[-1] if mutual else None


class HandshakeClient:
    """One connection to a server, open inside `async with`: `session` is the SDK's session.

    Args:
        streams: The transport's connection (entered here, closed on exit).
        era: `"handshake"`: `initialize` only; a 2026-07-28 version: that era only; None: the
            handshake, or that era where the server speaks only it.
        The rest: as `ClientSession`'s; a callback given declares its capability to the server.
    """

    def __init__(
        self,
        streams: AbstractAsyncContextManager[tuple[ReadStream[Any], WriteStream[Any]]],
        *,
        era: str | None = None,
        server: str = "",
        client_info: mcp_types.Implementation,
        message_handler: MessageHandlerFnT | None = None,
        sampling_callback: SamplingFnT | None = None,
        elicitation_callback: ElicitationFnT | None = None,
        list_roots_callback: ListRootsFnT | None = None,
        logging_callback: LoggingFnT | None = None,
    ) -> None:
        self._streams = streams
        self._era = era
        self._server = server
        self._options: dict[str, Any] = {
            "client_info": client_info,
            "message_handler": message_handler,
            "sampling_callback": sampling_callback,
            "elicitation_callback": elicitation_callback,
            "list_roots_callback": list_roots_callback,
            "logging_callback": logging_callback,
        }
        self._session: ClientSession | None = None
        self._stack: AsyncExitStack | None = None
        self.modern = False
        """Whether the connection is in the 2026-07-28 era (known once it is open; read per call)."""

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._streams)
            session = ClientSession(dispatcher=JSONRPCDispatcher(read, write), **self._options)
            await stack.enter_async_context(session)
            if self._era in MODERN_PROTOCOL_VERSIONS:
                await _discover(session, self._era, self._server)
            else:
                try:
                    await session.initialize()
                except MCPError as exc:
                    if self._era is not None or (version := modern_only(exc)) is None:
                        raise
                    await _discover(session, version, self._server)
            # Published once the handshake is done: `server_capabilities` is set from here on.
            self.modern = session.protocol_version in MODERN_PROTOCOL_VERSIONS
            self._session = session
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack = self._stack, None
        try:
            if stack is not None:
                await stack.__aexit__(exc_type, exc, tb)
        finally:
            self._session = None

    @property
    def session(self) -> ClientSession:
        """The session (only inside `async with`)."""
        if self._session is None:
            raise RuntimeError("the connection is not open")
        return self._session

    @property
    def protocol_version(self) -> str:
        """The version the handshake agreed on."""
        version = self.session.protocol_version
        assert version is not None  # set by `initialize` or `server/discover`
        return version

    @property
    def server_capabilities(self) -> mcp_types.ServerCapabilities:
        """What the server declared in the handshake."""
        capabilities = self.session.server_capabilities
        assert capabilities is not None  # set by `initialize` or `server/discover`
        return capabilities


async def _discover(session: ClientSession, version: str, server: str) -> None:
    """Open the connection in the 2026-07-28 era, proposing `version`."""
    raw = await session.send_discover(version)
    try:
        result = mcp_types.DiscoverResult.model_validate(raw)
        session.adopt(result)  # raises where the server's versions and the gateway's have none in common
    except (ValidationError, RuntimeError) as exc:
        raise DownstreamProtocolError(
            f"Server '{server}' answered server/discover with nothing the gateway can use: {exc}", server=server
        ) from None
