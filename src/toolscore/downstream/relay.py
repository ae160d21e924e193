"""Who a downstream's own requests and logs go to: the front client whose request is in flight.

A downstream's sampling, elicitation and roots requests and its log messages carry no reference
to the request that caused them (a stdio server's never do). The front sets `calling_peer` around
each request it forwards; the connection keeps the peers of its requests in flight and hands a
downstream request to them only when they all speak for one client (`attribute`). With calls
from two or more clients in flight on a shared instance the request cannot be attributed: it is
refused with an error that says so, and a log message stays in the gateway's own log. It is never
guessed: a guess would show one client's data to another, or take one client's answer (an
approval, a model's text) as another's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

import mcp_types

__all__ = ["Peer", "attribute", "calling_peer", "no_peer_error", "on_behalf_of", "unattributable_error"]


class Peer(Protocol):
    """The front client a downstream request is being made for."""

    client: object
    """Who the client is: the peers of one client's requests hold equal values (a reference to its
    channel or session); a stateless request is a client of its own."""

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


def attribute(peers: Sequence[Peer]) -> Peer | None:
    """The peer a downstream's request or log goes to, given the peers of its requests in flight.

    The newest, when every one of them speaks for the same client; None when there is none, or
    when they speak for several clients (`unattributable_error`: which one caused it is unknown).
    """
    if not peers:
        return None
    newest = peers[-1]
    client = newest.client
    for peer in peers:
        if peer.client != client:
            return None
    return newest


def unattributable_error(server: str, what: str) -> mcp_types.ErrorData:
    """The downstream's answer when requests of several clients are in flight on its instance."""
    return mcp_types.ErrorData(
        code=mcp_types.INVALID_REQUEST,
        message=f"toolscore cannot forward {what} from server '{server}': calls from several clients are "
        "in flight on this shared server and nothing in the request says which one it is for; give the "
        'server `isolation: "session"` in servers.json to run one instance per client',
    )
