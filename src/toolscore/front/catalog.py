"""The front's resources, resource templates, prompts and completion, from every downstream.

Lists come from the hub's catalog (`downstream/catalog.py` says how URIs and names are
namespaced). A read, a prompt and a completion go to the server that owns the URI, prompt or
template, with the front client as the peer its server's requests and logs go to. A read goes
through the engine as the pseudo-tool `resources/read` of its server, so policy, deadlines and
the audit log apply to it as to a tool call. A downstream's JSON-RPC error reaches the client
unchanged; a gateway failure is a JSON-RPC error naming the server.

Subscriptions are counted per public URI and front connection: the first subscriber subscribes
downstream, the last to leave (or to disconnect) unsubscribes, and the connection renews them
when its server restarts. A 2026-07-28 listen stream counts as one more subscriber of each URI it
names (`front/listen.py`). `resources/updated` goes to the connections subscribed to that URI and to
the listen streams; `list_changed` goes to every handshake-era connection and to the listen streams.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

import mcp_types
import structlog
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, PromptsListChanged, ResourcesListChanged, ResourceUpdated

from toolscore._engine import ToolExecutionEngine
from toolscore._sdk import connection_of
from toolscore.downstream.backchannel import Peer, on_behalf_of
from toolscore.downstream.hub import DownstreamHub
from toolscore.downstream.modern import FrontCall
from toolscore.downstream.reads import READ_TOOL, ResourceReads, read_route
from toolscore.errors import DownstreamProtocolError, DownstreamUnavailable, Rejected, ToolscoreError
from toolscore.front.callers import Callers
from toolscore.front.relaying import front_call_of
from toolscore.scope import NO_CLIENT
from toolscore.spill import RESULTS_PREFIX, ResultStore, owner_of_caller

__all__ = ["READ_TOOL", "CatalogHandlers", "PeerFor"]

log = structlog.get_logger("toolscore.catalog")

PeerFor = Callable[[ServerRequestContext[Any]], Peer]
MAX_SUBSCRIPTIONS = 1024
"""Resource subscriptions one client connection may hold: each is a downstream request and state."""


def _not_found(uri: str) -> MCPError:
    return MCPError(mcp_types.INVALID_PARAMS, "Resource not found", data={"uri": uri})


def _failure(exc: ToolscoreError) -> MCPError:
    """A JSON-RPC error for a gateway-side failure: the server's own error where it sent one."""
    if isinstance(exc, DownstreamProtocolError) and exc.error is not None:
        return MCPError.from_error_data(exc.error)
    if isinstance(exc, Rejected):
        return MCPError(mcp_types.INVALID_REQUEST, str(exc))
    return MCPError(mcp_types.INTERNAL_ERROR, str(exc))


class _Subscriptions:
    """Which front connections subscribed to which public URI."""

    def __init__(self) -> None:
        self.by_uri: dict[str, dict[int, ServerSession | None]] = {}
        """Per URI, its subscribers: a handshake-era connection's session, or None for a listen stream
        (whose `resources/updated` goes by the bus)."""
        self.held: dict[int, int] = {}
        """Subscriptions per connection."""

    def add(self, uri: str, key: int, session: ServerSession | None) -> tuple[bool, bool]:
        """Record a subscription of `key` (a connection, a listen stream); whether it is the URI's
        first, and this key's first to it."""
        subscribers = self.by_uri.setdefault(uri, {})
        first = not subscribers
        new = key not in subscribers
        if new and self.held.get(key, 0) >= MAX_SUBSCRIPTIONS:
            if first:
                del self.by_uri[uri]
            raise MCPError(mcp_types.INVALID_REQUEST, f"at most {MAX_SUBSCRIPTIONS} resource subscriptions per client")
        subscribers[key] = session
        if new:
            self.held[key] = self.held.get(key, 0) + 1
        return first, new

    def remove(self, uri: str, key: int) -> bool:
        """Drop a subscription; True if it was the URI's last."""
        subscribers = self.by_uri.get(uri)
        if subscribers is None or key not in subscribers:
            return False
        del subscribers[key]
        if (held := self.held.get(key, 1) - 1) > 0:
            self.held[key] = held
        else:
            self.held.pop(key, None)
        if not subscribers:
            del self.by_uri[uri]
            return True
        return False


class CatalogHandlers:
    """The front's resource, prompt and completion handlers, over the hub's catalog."""

    def __init__(
        self,
        hub: DownstreamHub,
        engine: ToolExecutionEngine,
        callers: Callers,
        sessions: Mapping[int, ServerSession],
        bus: InMemorySubscriptionBus,
        peer_for: PeerFor,
        *,
        results: ResultStore | None = None,
    ) -> None:
        """Args:
        hub: The downstreams, their catalog, and the requests sent to them.
        engine: Runs a read as the pseudo-tool `resources/read` (policy, deadline, audit).
        callers: Who is calling.
        sessions: The handshake-era front connections, told when the lists change.
        bus: The 2026-07-28 listeners' subscription bus.
        peer_for: The client of a request, for its server's requests and logs.
        results: The results kept by reference (`toolscore://results/<id>`), read here by their owner.
        """
        self._reads = ResourceReads(hub)
        self._results = results
        self._hub = hub
        self._engine = engine
        self._sessions = sessions
        self._bus = bus
        self._subscriptions = _Subscriptions()
        self._callers = callers
        self._peer_for = peer_for

    def register(self, server: Server[Any]) -> None:
        """Register the resource, prompt and completion handlers on `server`, and the hub listeners."""
        server.add_request_handler("resources/list", mcp_types.PaginatedRequestParams, self.list_resources)
        server.add_request_handler("resources/templates/list", mcp_types.PaginatedRequestParams, self.list_templates)
        server.add_request_handler("resources/read", mcp_types.ReadResourceRequestParams, self.read_resource)
        server.add_request_handler("resources/subscribe", mcp_types.SubscribeRequestParams, self.subscribe)
        server.add_request_handler("resources/unsubscribe", mcp_types.UnsubscribeRequestParams, self.unsubscribe)
        server.add_request_handler("prompts/list", mcp_types.PaginatedRequestParams, self.list_prompts)
        server.add_request_handler("prompts/get", mcp_types.GetPromptRequestParams, self.get_prompt)
        server.add_request_handler("completion/complete", mcp_types.CompleteRequestParams, self.complete)
        self._hub.add_update_listener(self.updated)
        self._hub.add_catalog_listener(self.changed)

    def on_catalog_change(self, listener: Callable[[frozenset[str]], Awaitable[None]]) -> None:
        """Call `listener(kinds)` whenever the exposed resources or prompts change (a server came
        up or went, listed something new); it runs inside the hub's rebuild, so it must not wait
        on a server."""
        self._hub.add_catalog_listener(listener)

    def _owner(self, uri: str) -> tuple[str, str]:
        found = self._hub.catalog.route_uri(uri)
        if found is None:
            raise _not_found(uri)
        return found

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListResourcesResult:
        ttl_ms, scope = self._hub.list_hints("resources")
        catalog, skills = self._hub.catalog, self._hub.skills
        if skills.holding():  # the files of a held skill are not listed, as a held prompt is not
            resources = [
                r.resource
                for r in catalog.resources.values()
                if r.server not in catalog.down and skills.held(r.server, r.uri) is None
            ]
        else:
            resources = catalog.listed_resources()
        return mcp_types.ListResourcesResult(resources=resources, ttl_ms=ttl_ms, cache_scope=scope)

    async def list_templates(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListResourceTemplatesResult:
        ttl_ms, scope = self._hub.list_hints("resource_templates")
        return mcp_types.ListResourceTemplatesResult(
            resource_templates=self._hub.catalog.listed_templates(), ttl_ms=ttl_ms, cache_scope=scope
        )

    def _kept(self, ctx: ServerRequestContext[Any], uri: str) -> mcp_types.ReadResourceResult:
        """A kept result, whole; "not found" for an unknown, expired or another caller's id alike."""
        owner = owner_of_caller(self._callers.identify(ctx))
        body = self._results.get(owner, uri) if self._results is not None else None
        if body is None:
            raise _not_found(uri)
        contents = mcp_types.TextResourceContents(uri=uri, mime_type="application/json", text=body)
        return mcp_types.ReadResourceResult(contents=[contents])

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: mcp_types.ReadResourceRequestParams
    ) -> mcp_types.ReadResourceResult:
        """A read from the server that owns the URI, through the engine as `resources/read`; or a
        result the gateway kept (`toolscore.spill`), for the principal or client it was kept for."""
        uri = str(params.uri)
        if uri.startswith(RESULTS_PREFIX):
            return self._kept(ctx, uri)
        name, original = self._owner(uri)
        caller = self._callers.identify(ctx)
        what = f"the read of '{uri}'"

        with on_behalf_of(caller, self._peer_for(ctx), ctx.protocol_version) as scope:
            outcome = await self._engine.execute(
                READ_TOOL,
                {"uri": original},
                request_id=ctx.request_id,
                route=read_route(self._hub, name),
                invoke=partial(self._reads.read, name, original, what, scope),
                scope=scope,
            )
        if outcome.error is not None:
            raise _failure(outcome.error)
        if outcome.result.is_error:  # a post hook answered in the read's place
            text = " ".join(b.text for b in outcome.result.content if isinstance(b, mcp_types.TextContent))
            raise MCPError(mcp_types.INTERNAL_ERROR, text or f"{what} failed")
        contents = [b.resource for b in outcome.result.content if isinstance(b, mcp_types.EmbeddedResource)]
        return mcp_types.ReadResourceResult(contents=contents, _meta=outcome.result.meta)

    async def subscribe(
        self, ctx: ServerRequestContext[Any], params: mcp_types.SubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        """The URI's first subscriber subscribes downstream; a client that disconnects leaves."""
        uri = str(params.uri)
        name, original = self._owner(uri)
        downstream = self._hub.shared(name)
        if downstream is None:  # pragma: no cover - the catalog only routes to configured servers
            raise _not_found(uri)
        connection = connection_of(ctx.session)
        first, new = self._subscriptions.add(uri, id(connection), ctx.session)
        if new:  # a client that disconnects leaves its subscriptions
            connection.exit_stack.push_async_callback(self._leave, uri, id(connection))
        if first:
            try:
                await self._pass_on(name, original, subscribe=True)
            except MCPError:
                self._subscriptions.remove(uri, id(connection))
                raise
        return mcp_types.EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any], params: mcp_types.UnsubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        await self._leave(str(params.uri), id(connection_of(ctx.session)))
        return mcp_types.EmptyResult()

    async def hold(self, uri: str, key: int) -> bool:
        """Subscribe a listen stream (`key`) to `uri`, downstream if it is the URI's first subscriber;
        False, and nothing held, where no server owns the URI or its server refused."""
        found = self._hub.catalog.route_uri(uri)
        if found is None:
            return False
        first, _ = self._subscriptions.add(uri, key, None)
        if first:
            try:
                await self._pass_on(*found, subscribe=True)
            except MCPError as exc:
                self._subscriptions.remove(uri, key)
                log.debug("resource subscription refused", uri=uri, error=str(exc))
                return False
        return True

    async def release(self, uri: str, key: int) -> None:
        """Drop `key`'s subscription to `uri`; the last to leave unsubscribes downstream."""
        await self._leave(uri, key)

    async def _leave(self, uri: str, key: int) -> None:
        if self._subscriptions.remove(uri, key) and (found := self._hub.catalog.route_uri(uri)) is not None:
            await self._pass_on(*found, subscribe=False)

    async def _pass_on(self, name: str, original: str, *, subscribe: bool) -> None:
        downstream = self._hub.shared(name)
        assert downstream is not None
        if subscribe:
            downstream.subscriptions.add(original)
            request: Any = mcp_types.SubscribeRequest(params=mcp_types.SubscribeRequestParams(uri=original))
        else:
            downstream.subscriptions.discard(original)
            request = mcp_types.UnsubscribeRequest(params=mcp_types.UnsubscribeRequestParams(uri=original))
        try:
            await downstream.request(request, mcp_types.EmptyResult, request.method, scope=NO_CLIENT, gated=False)
        except DownstreamUnavailable:
            pass  # renewed when the server is back
        except MCPError:
            if subscribe:
                downstream.subscriptions.discard(original)
                raise

    async def updated(self, uri: str) -> None:
        """`resources/updated` to the connections subscribed to `uri`, and to the listeners."""
        for session in list(self._subscriptions.by_uri.get(uri, {}).values()):
            if session is None:  # a listen stream: the bus below
                continue
            try:
                await session.send_resource_updated(uri)
            except Exception as exc:  # a peer that went away must not stop the others
                log.debug("resources/updated not delivered", error=str(exc))
        await self._bus.publish(ResourceUpdated(uri=uri))

    async def changed(self, kinds: frozenset[str]) -> None:
        """`list_changed` of the resources and/or prompts to every connection and listener."""
        for session in list(self._sessions.values()):
            try:
                if "resources" in kinds:
                    await session.send_resource_list_changed()
                if "prompts" in kinds:
                    await session.send_prompt_list_changed()
            except Exception as exc:
                log.debug("list_changed not delivered", error=str(exc))
        if "resources" in kinds:
            await self._bus.publish(ResourcesListChanged())
        if "prompts" in kinds:
            await self._bus.publish(PromptsListChanged())

    async def list_prompts(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListPromptsResult:
        ttl_ms, scope = self._hub.list_hints("prompts")
        return mcp_types.ListPromptsResult(prompts=self._hub.catalog.listed_prompts(), ttl_ms=ttl_ms, cache_scope=scope)

    async def get_prompt(
        self, ctx: ServerRequestContext[Any], params: mcp_types.GetPromptRequestParams
    ) -> mcp_types.GetPromptResult | mcp_types.InputRequiredResult:
        """The prompt from its server, its required arguments checked here first."""
        route = self._hub.catalog.prompts.get(params.name)
        if route is None:
            raise MCPError(mcp_types.INVALID_PARAMS, f"Unknown prompt: {params.name}")
        given = params.arguments or {}
        missing = [a.name for a in route.prompt.arguments or () if a.required and a.name not in given]
        if missing:
            raise MCPError(
                mcp_types.INVALID_PARAMS, f"Prompt '{params.name}' is missing required arguments: {', '.join(missing)}"
            )
        request = mcp_types.GetPromptRequest(
            params=mcp_types.GetPromptRequestParams(name=route.remote_name, arguments=params.arguments)
        )
        # A 2026-07-28 client's input-required rounds pass through: its answers down, the server's questions up.
        front = front_call_of(ctx, params.input_responses, params.request_state)
        result: mcp_types.GetPromptResult | mcp_types.InputRequiredResult = await self._forward(
            ctx, route.server, request, mcp_types.GetPromptResult, f"prompt '{params.name}'", front
        )
        return result

    async def complete(
        self, ctx: ServerRequestContext[Any], params: mcp_types.CompleteRequestParams
    ) -> mcp_types.CompleteResult:
        """A completion from the server of the prompt or template, its reference in the server's names."""
        catalog = self._hub.catalog
        ref = params.ref
        new_ref: mcp_types.PromptReference | mcp_types.ResourceTemplateReference
        if isinstance(ref, mcp_types.PromptReference):
            prompt = catalog.prompts.get(ref.name)
            if prompt is None:
                raise MCPError(mcp_types.INVALID_PARAMS, f"Unknown prompt: {ref.name}")
            name, new_ref = prompt.server, ref.model_copy(update={"name": prompt.remote_name})
        else:
            found = catalog.route_template(ref.uri) or catalog.route_uri(ref.uri)
            if found is None:
                raise MCPError(mcp_types.INVALID_PARAMS, f"Unknown resource template: {ref.uri}")
            name, new_ref = found[0], ref.model_copy(update={"uri": found[1]})
        request = mcp_types.CompleteRequest(params=params.model_copy(update={"ref": new_ref, "meta": None}))
        result: mcp_types.CompleteResult = await self._forward(
            ctx, name, request, mcp_types.CompleteResult, "a completion"
        )
        return result

    async def _forward(
        self,
        ctx: ServerRequestContext[Any],
        name: str,
        request: Any,
        result_type: type[Any],
        what: str,
        front: FrontCall | None = None,
    ) -> Any:
        try:
            with on_behalf_of(self._callers.identify(ctx), self._peer_for(ctx), ctx.protocol_version, front) as scope:
                return await self._hub.request(name, request, result_type, what, scope=scope)
        except ToolscoreError as exc:
            raise _failure(exc) from None
