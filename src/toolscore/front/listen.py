"""`subscriptions/listen` (2026-07-28): one stream per request, fed by every downstream.

The SDK's `ListenHandler` serves the stream over the front's bus, which every server's
`list_changed` (after the gateway re-lists it) and `resources/updated` (with the URI as the
client sees it) reach, and filters each event by the stream's own request. A handshake-era
server only sends `resources/updated` for a URI it was asked to watch, so the resource URIs a
stream names are subscribed downstream for as long as the stream is open, counted with the
handshake-era clients' `resources/subscribe` (`CatalogHandlers.hold`): the first subscriber
subscribes the server, the last to leave unsubscribes it. A URI no server owns is acknowledged,
as the spec has it, and never fires.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types
import structlog
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler

from toolscore.front.catalog import MAX_SUBSCRIPTIONS, CatalogHandlers

__all__ = ["ListenHandlers"]

log = structlog.get_logger("toolscore.listen")

_RELEASE_TIMEOUT_S = 10.0
"""How long a closed stream's downstream unsubscribes may take before they are given up."""


class ListenHandlers:
    """The front's `subscriptions/listen`: the SDK's stream, plus the downstream subscriptions it needs."""

    def __init__(self, bus: InMemorySubscriptionBus, catalog: CatalogHandlers) -> None:
        """Args:
        bus: The front's subscription bus, which the tool and catalog handlers publish on.
        catalog: Holds resource subscriptions and passes them on to their servers.
        """
        self._streams = ListenHandler(bus)
        self._catalog = catalog

    def register(self, server: Server[Any]) -> None:
        """Serve `subscriptions/listen` on `server`."""
        server.add_request_handler("subscriptions/listen", mcp_types.SubscriptionsListenRequestParams, self.listen)

    async def listen(
        self, ctx: ServerRequestContext[Any], params: mcp_types.SubscriptionsListenRequestParams
    ) -> mcp_types.SubscriptionsListenResult:
        """One listen stream, until the client ends it or the gateway stops."""
        uris = list(dict.fromkeys(params.notifications.resource_subscriptions or ()))
        if len(uris) > MAX_SUBSCRIPTIONS:
            raise MCPError(
                mcp_types.INVALID_PARAMS, f"at most {MAX_SUBSCRIPTIONS} resource subscriptions per listen request"
            )
        stream = object()  # this stream's key among the subscribers of each URI
        held: list[str] = []
        try:
            for uri in uris:
                if await self._catalog.hold(uri, id(stream)):
                    held.append(uri)
            return await self._streams(ctx, params)
        finally:
            # The stream ends by the client going away too (a cancellation): leave regardless.
            with anyio.CancelScope(shield=True), anyio.move_on_after(_RELEASE_TIMEOUT_S):
                for uri in held:
                    try:
                        await self._catalog.release(uri, id(stream))
                    except Exception as exc:  # one server's failure must not keep the others subscribed
                        log.debug("resource unsubscription failed", uri=uri, error=str(exc))
