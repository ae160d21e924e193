"""`subscriptions/listen` (2026-07-28): one stream per request, fed by every downstream.

The SDK's `ListenHandler` serves the stream over the front's bus, which every server's
`list_changed` (after the gateway re-lists it) and `resources/updated` (with the URI as the
client sees it) reach, and filters each event by the stream's own request. A handshake-era
server only sends `resources/updated` for a URI it was asked to watch, so the resource URIs a
stream names are subscribed downstream for as long as the stream is open, counted with the
handshake-era clients' `resources/subscribe` (`CatalogHandlers.hold`): the first subscriber
subscribes the server, the last to leave unsubscribes it. A URI no server owns when the stream
opens is acknowledged, as the spec has it, and subscribed once a server that owns it is listed
(a server that starts late, or one a reload adds): the stream then gets its updates too.
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
        self._listed = anyio.Event()
        """Set (and replaced) whenever the exposed resources change: a URI waiting may be served now."""

    def register(self, server: Server[Any]) -> None:
        """Serve `subscriptions/listen` on `server`."""
        server.add_request_handler("subscriptions/listen", mcp_types.SubscriptionsListenRequestParams, self.listen)
        self._catalog.on_catalog_change(self._changed)

    async def _changed(self, kinds: frozenset[str]) -> None:
        if "resources" in kinds:
            listed, self._listed = self._listed, anyio.Event()
            listed.set()  # only this: the streams' own tasks subscribe, not the hub's rebuild

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
            waiting = [uri for uri in uris if not await self._hold(uri, id(stream), held)]
            if not waiting:
                return await self._streams(ctx, params)
            result: mcp_types.SubscriptionsListenResult | None = None
            error: Exception | None = None
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._hold_when_listed, waiting, id(stream), held)
                try:
                    result = await self._streams(ctx, params)
                except Exception as exc:  # raised as it is, not inside the task group's exception group
                    error = exc
                finally:
                    tg.cancel_scope.cancel()
            if error is not None:
                raise error
            assert result is not None  # the task group ends only once the stream did
            return result
        finally:
            # The stream ends by the client going away too (a cancellation): leave regardless.
            with anyio.CancelScope(shield=True), anyio.move_on_after(_RELEASE_TIMEOUT_S):
                for uri in held:
                    try:
                        await self._catalog.release(uri, id(stream))
                    except Exception as exc:  # one server's failure must not keep the others subscribed
                        log.debug("resource unsubscription failed", uri=uri, error=str(exc))

    async def _hold(self, uri: str, key: int, held: list[str]) -> bool:
        """Subscribe stream `key` to `uri` (noted in `held`, which the stream releases); False: no
        server owns it now, or its server refused."""
        with anyio.CancelScope(shield=True):  # a subscription made is always noted, to be released
            if taken := await self._catalog.hold(uri, key):
                held.append(uri)
        return taken

    async def _hold_when_listed(self, waiting: list[str], key: int, held: list[str]) -> None:
        """While the stream is open: each time the resources change, subscribe what now has a server."""
        while waiting:
            listed = self._listed
            for uri in list(waiting):
                if await self._hold(uri, key, held):
                    waiting.remove(uri)
            if waiting:
                await listed.wait()
