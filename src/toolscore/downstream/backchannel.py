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

A 2026-07-28 client has no back-channel: on a connection in the handshake era, its call's peer is
`Peer.by_input`, which asks through the input-required rounds of an `InputChannel`
(`toolscore.downstream.bridge`) under the same rules (capabilities declared, the `sampling` option).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import mcp_types

from toolscore.scope import CallScope

if TYPE_CHECKING:
    from toolscore.downstream.modern import FrontCall

__all__ = ["InputChannel", "Peer", "attribute", "no_peer_error", "on_behalf_of", "unattributable_error"]

_AnswerT = TypeVar("_AnswerT")


class InputChannel(Protocol):
    """How a server's request reaches a client without a back-channel: as one of the input
    requests of an input-required result, answered by the client's retry (`toolscore.downstream.bridge`)."""

    async def ask(self, request: Any, result_type: type[_AnswerT]) -> _AnswerT | mcp_types.ErrorData:
        """`request` (sampling, elicitation or roots) to the client; its answer, or an `ErrorData`."""
        ...

    async def log(self, server: str, params: mcp_types.LoggingMessageNotificationParams) -> None:
        """A log message of the server's, to the client request waiting now, if any."""
        ...

    @property
    def parked(self) -> bool:
        """Whether the call waits on the client: its round went out, every question of it unanswered."""
        ...


class Peer(Protocol):
    """The front client a downstream request is being made for."""

    client: object
    """Who the client is: the peers of one client's requests hold equal values (a reference to its
    channel or session); a stateless request is a client of its own."""

    @property
    def parked(self) -> bool:
        """Whether this peer's call is parked on the client (`InputChannel.parked`): the server's
        requests wait for the client's next retry, so a new one comes from another call."""
        ...

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

    async def list_roots(
        self, server: str, params: mcp_types.RequestParams | None = None
    ) -> mcp_types.ListRootsResult | mcp_types.ErrorData:
        """Ask the client for its roots (`roots/list`, with the server's `params`); an `ErrorData` if it cannot."""
        ...

    async def log(self, server: str, params: mcp_types.LoggingMessageNotificationParams) -> None:
        """Pass a log message on, if the client's level lets it through."""
        ...

    def detach(self) -> None:
        """The front request is over: answer later requests with an error and let go of the client."""
        ...

    def by_input(self, channel: InputChannel) -> Peer:
        """This client as a peer that asks through `channel` rather than a back-channel (a 2026-07-28
        client's call on a handshake-era connection), under the same rules; it outlives this request."""
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
    A parked call (`Peer.parked`) is left out while some call is not: its server is waiting for
    that call's client, whose answers have not come back yet.
    """
    if not peers:
        return None
    running = [peer for peer in peers if not peer.parked]
    if running and len(running) < len(peers):
        peers = running
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
