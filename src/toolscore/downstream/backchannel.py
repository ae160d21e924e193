"""Who a downstream's own requests and logs go to: the front client whose request is in flight.

A downstream's sampling, elicitation and roots requests and its log messages carry no reference
to the request that caused them (a stdio server's never do; the SDK's streamable-HTTP client does
not say which request's stream one came on). The front makes a `CallScope` holding its client's
peer for each request it forwards (`on_behalf_of`) and passes it down with the request; the
connection keeps the peers of its requests in flight and hands a downstream request to them only
when they all speak for one client (`attribute`). With calls
from two or more clients in flight on a shared instance the request cannot be attributed: it is
refused with an error that says so, and a log message stays in the gateway's own log. It is never
guessed: a guess would show one client's data to another, or take one client's answer (an
approval, a model's text) as another's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

import mcp_types

from toolscore.scope import CallScope

if TYPE_CHECKING:
    from toolscore.downstream.modern import FrontCall

__all__ = ["Peer", "attribute", "no_peer_error", "on_behalf_of", "unattributable_error"]


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


@contextmanager
def on_behalf_of(
    caller: str | None, peer: Peer, version: str | None = None, front: FrontCall | None = None
) -> Iterator[CallScope]:
    """The scope of one front request of `caller`'s, passed down with its calls; `peer` is detached after."""
    try:
        yield CallScope(caller, peer, version, front=front)
    finally:
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
