"""Who a downstream's own requests and logs go to: the front client whose request is in flight.

A downstream's sampling, elicitation and roots requests and its log messages carry no reference
to the request that caused them. The front sets `calling_peer` around each request it forwards;
the connection keeps the peers of its requests in flight and hands a downstream request to the
newest one (sdk-notes: "route them to the newest in-flight front call for that downstream").
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

import mcp_types

__all__ = ["Peer", "calling_peer", "no_peer_error", "on_behalf_of"]


class Peer(Protocol):
    """The front client a downstream request is being made for."""

    async def sample(
        self, server: str, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult | mcp_types.CreateMessageResultWithTools | mcp_types.ErrorData:
        """Ask the client's model (`sampling/createMessage`); an `ErrorData` if it cannot."""
        ...

    async def elicit(
        self, server: str, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        """Ask the client's user (`elicitation/create`); an `ErrorData` if it cannot."""
        ...

    async def list_roots(self, server: str) -> mcp_types.ListRootsResult | mcp_types.ErrorData:
        """Ask the client for its roots (`roots/list`); an `ErrorData` if it cannot."""
        ...

    async def log(self, server: str, params: mcp_types.LoggingMessageNotificationParams) -> None:
        """Pass a log message on, if the client's level lets it through."""
        ...

    def detach(self) -> None:
        """The front request is over: answer later requests with an error and let go of the client."""
        ...


calling_peer: ContextVar[Peer | None] = ContextVar("toolscore_calling_peer", default=None)
"""The front client of the request being handled in this task (None outside a front request)."""


@contextmanager
def on_behalf_of(peer: Peer) -> Iterator[None]:
    """The block serves `peer`'s request: downstream requests and logs go to it; it is detached after."""
    token = calling_peer.set(peer)
    try:
        yield
    finally:
        calling_peer.reset(token)
        peer.detach()  # the request is over: the peer must not outlive it


def no_peer_error(server: str, what: str) -> mcp_types.ErrorData:
    """The downstream's answer when no front client request is in flight to forward `what` to."""
    return mcp_types.ErrorData(
        code=mcp_types.INVALID_REQUEST,
        message=f"toolscore cannot forward {what} from server '{server}': no client request of "
        "this server is in flight through the gateway",
    )
