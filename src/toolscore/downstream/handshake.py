"""A handshake-era client connection: the SDK's `ClientSession` over a transport's streams.

This is what `mcp.Client(transport, mode="legacy", cache=None)` does (a JSON-RPC dispatcher on
the streams, a session on it, `initialize`), without importing `mcp.Client`: its module imports
the `MCPServer` framework, both HTTP clients and the in-memory transport, whatever the
transport, which a gateway of stdio servers would carry for nothing (docs/performance.md#cold-start-part-two).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, AsyncExitStack
from types import TracebackType
from typing import Any, Self

import mcp_types
from mcp.client.session import (
    ClientSession,
    ElicitationFnT,
    ListRootsFnT,
    LoggingFnT,
    MessageHandlerFnT,
    SamplingFnT,
)
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

from toolscore._sdk import ReadStream, WriteStream

__all__ = ["HandshakeClient"]


class HandshakeClient:
    """One handshake-era connection, open inside `async with`: `session` is the SDK's session.

    Args:
        streams: The transport's connection (entered here, closed on exit).
        The rest: as `ClientSession`'s; a callback given declares its capability to the server.
    """

    def __init__(
        self,
        streams: AbstractAsyncContextManager[tuple[ReadStream[Any], WriteStream[Any]]],
        *,
        client_info: mcp_types.Implementation,
        message_handler: MessageHandlerFnT | None = None,
        sampling_callback: SamplingFnT | None = None,
        elicitation_callback: ElicitationFnT | None = None,
        list_roots_callback: ListRootsFnT | None = None,
        logging_callback: LoggingFnT | None = None,
    ) -> None:
        self._streams = streams
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

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._streams)
            session = ClientSession(dispatcher=JSONRPCDispatcher(read, write), **self._options)
            await stack.enter_async_context(session)
            await session.initialize()
            # Published once the handshake is done: `server_capabilities` is set from here on.
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
        assert version is not None  # set by `initialize`
        return version

    @property
    def server_capabilities(self) -> mcp_types.ServerCapabilities:
        """What the server declared in the handshake."""
        capabilities = self.session.server_capabilities
        assert capabilities is not None  # set by `initialize`
        return capabilities
