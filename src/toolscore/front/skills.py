"""The front's skills (SEP-2640): `skills/list` and `skills/get` of every server that declares the
extension, and the check of each skill file read through the gateway.

`skills/list` asks every connected server that declares `io.modelcontextprotocol/skills`, in
servers.json order, for all its pages, and answers with one page of every entry, its URIs made
public (`downstream/catalog.py`); on a clash (two unprefixed servers serving one URI) the first
server keeps it. A server that fails is left out of that answer, not the others. `skills/get`
goes to the server that owns the URI, and its error (-32602 for an unknown skill) reaches the
client unchanged.

Every entry the gateway passes on is remembered as the manifest of that server's files. A read of
one of those files (`resources/read`, `front/catalog.py`) is checked against it: bytes that are not
the ones listed are read once more after the server is asked for its skills again (it may have
changed them since), and refused if they still differ, so a client never gets a skill file
other than the one its server listed. A file the server never listed (`"resources": "dynamic"`,
or a read before any listing and not in the server's list) passes unchecked.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import mcp_types
import structlog
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from pydantic import ConfigDict

from toolscore.downstream.backchannel import Peer, on_behalf_of
from toolscore.downstream.caching import ListHint, combined, hint_of
from toolscore.downstream.catalog import SKILL_SCHEME
from toolscore.downstream.connection import ServerState
from toolscore.downstream.hub import DownstreamHub
from toolscore.downstream.skills import SKILLS_EXTENSION, Listed, check, manifest_of, public_entry
from toolscore.errors import DownstreamProtocolError, ToolscoreError
from toolscore.front.callers import Callers
from toolscore.scope import CallScope

__all__ = ["SkillHandlers", "skills_capable"]

log = structlog.get_logger("toolscore.skills")

_PAGES_MAX = 100
"""Pages of one server's `skills/list` read at most (a paginator that never ends cannot hang a list)."""
_MODERN = "2026-07-28"


class _ListParams(mcp_types.RequestParams):
    cursor: str | None = None


class _GetParams(mcp_types.RequestParams):
    uri: str


class _Answer(mcp_types.Result):
    """A result of a method the SDK has no model of: its fields as given."""

    model_config = ConfigDict(extra="allow")


def skills_capable(hub: DownstreamHub) -> list[str]:
    """The connected servers that declare the skills extension, in servers.json order."""
    found = []
    for name, downstream in hub.downstreams.items():
        caps = downstream.capabilities
        if caps is not None and downstream.state is ServerState.UP and SKILLS_EXTENSION in (caps.extensions or {}):
            found.append(name)
    return found


def _failure(exc: ToolscoreError) -> MCPError:
    if isinstance(exc, DownstreamProtocolError) and exc.error is not None:
        return MCPError.from_error_data(exc.error)
    return MCPError(mcp_types.INTERNAL_ERROR, str(exc))


class SkillHandlers:
    """`skills/list`, `skills/get`, and the check of skill files read (`verify`)."""

    def __init__(
        self, hub: DownstreamHub, callers: Callers, peer_for: Callable[[ServerRequestContext[Any]], Peer]
    ) -> None:
        self._hub = hub
        self._callers = callers
        self._peer_for = peer_for
        self._manifests: dict[str, dict[str, Listed]] = {}
        """Per server: its files (its own URIs) as its entries last listed them."""

    def register(self, server: Server[Any]) -> None:
        server.add_request_handler("skills/list", _ListParams, self.list_skills)
        server.add_request_handler("skills/get", _GetParams, self.get_skill)

    def _answer(self, ctx: ServerRequestContext[Any], fields: dict[str, Any], hints: list[ListHint | None]) -> _Answer:
        if str(ctx.protocol_version or "") >= _MODERN:  # the caching hints exist from 2026-07-28 on
            fields["ttlMs"], fields["cacheScope"] = combined(hints, 0.0)  # each answered just now
        return _Answer.model_validate(fields)

    def _remember(self, server: str, entry: dict[str, Any]) -> None:
        self._manifests.setdefault(server, {}).update(manifest_of(entry))

    async def _list_server(self, server: str, scope: CallScope) -> tuple[list[dict[str, Any]], ListHint]:
        """Every entry of one server (its own URIs), and the hint of its first page."""
        entries: list[dict[str, Any]] = []
        cursor: str | None = None
        hint: ListHint | None = None
        for _ in range(_PAGES_MAX):
            raw = await self._hub.request_raw(
                server, "skills/list", {"cursor": cursor} if cursor else None, "skills/list", scope=scope
            )
            hint = hint or hint_of(raw, 0.0)
            entries.extend(e for e in raw.get("skills") or () if isinstance(e, dict))
            cursor = raw.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
        manifest: dict[str, Listed] = {}
        for entry in entries:
            manifest.update(manifest_of(entry))
        self._manifests[server] = manifest  # what it lists now, whole
        return entries, hint or hint_of({}, 0.0)

    async def list_skills(self, ctx: ServerRequestContext[Any], params: _ListParams) -> _Answer:
        """Every skill of every server that declares the extension, in one page."""
        catalog = self._hub.catalog
        skills: dict[str, dict[str, Any]] = {}
        hints: list[ListHint | None] = []
        with on_behalf_of(self._callers.identify(ctx), self._peer_for(ctx), ctx.protocol_version) as scope:
            for server in skills_capable(self._hub):
                try:
                    entries, hint = await self._list_server(server, scope)
                except (ToolscoreError, MCPError) as exc:  # one server failing hides none of the others' skills
                    log.warning("skills not listed", server=server, error=str(exc))
                    continue
                hints.append(hint)
                for entry in entries:
                    public = public_entry(entry, partial(catalog.public_uri, server))
                    key = str(public.get("uri"))
                    if key in skills:
                        log.warning("skill already listed by another server; the first kept", uri=key, server=server)
                        continue
                    skills[key] = public
        return self._answer(ctx, {"skills": list(skills.values())}, hints)

    async def get_skill(self, ctx: ServerRequestContext[Any], params: _GetParams) -> _Answer:
        """One skill, from the server that owns its URI."""
        found = self._hub.catalog.route_uri(params.uri)
        if found is None:  # an unprefixed server's skill its resources do not list: the one that listed it
            owners = [s for s, files in self._manifests.items() if params.uri in files]
            found = (owners[0], params.uri) if len(owners) == 1 else None
        if found is None or found[0] not in skills_capable(self._hub):
            raise MCPError(mcp_types.INVALID_PARAMS, f"Unknown skill: {params.uri}", data={"uri": params.uri})
        server, original = found
        try:
            with on_behalf_of(self._callers.identify(ctx), self._peer_for(ctx), ctx.protocol_version) as scope:
                raw = await self._hub.request_raw(server, "skills/get", {"uri": original}, "skills/get", scope=scope)
        except MCPError:
            raise  # the server's own error (-32602 for a skill it does not serve), unchanged
        except ToolscoreError as exc:
            raise _failure(exc) from None
        entry = raw.get("skill")
        if not isinstance(entry, dict):
            raise MCPError(mcp_types.INTERNAL_ERROR, f"Server '{server}' answered skills/get without a skill entry")
        self._remember(server, entry)
        public = public_entry(entry, lambda uri: self._hub.catalog.public_uri(server, uri))
        return self._answer(ctx, {"skill": public}, [hint_of(raw, 0.0)])

    async def verify(
        self, server: str, uri: str, result: mcp_types.ReadResourceResult, what: str, scope: CallScope
    ) -> None:
        """Check a read of `server`'s `uri` against the digest and size it listed; raise if it differs.

        A server whose files were never listed through the gateway is asked for its skills first.
        """
        if not uri.startswith(SKILL_SCHEME) or server not in skills_capable(self._hub):
            return
        contents = [c.model_dump(by_alias=True, mode="json") for c in result.contents]
        if server not in self._manifests:
            await self._relist(server, scope)
        listed = self._manifests.get(server, {}).get(uri)
        if listed is None:
            return  # not a listed file: nothing to check it against
        problem = check(uri, listed, contents)
        if problem is not None:
            await self._relist(server, scope)  # the server may have changed the skill since
            listed = self._manifests.get(server, {}).get(uri)
            problem = None if listed is None else check(uri, listed, contents)
        if problem is not None:
            log.warning("skill file refused: not the one listed", server=server, uri=uri, problem=problem)
            error = mcp_types.ErrorData(
                code=mcp_types.INTERNAL_ERROR,
                message=f"{what}: the file is not the one its server listed ({problem}); not passed on",
                data={"uri": uri, "listed": {"digest": listed[0], "size": listed[1]} if listed else None},
            )
            raise DownstreamProtocolError(error.message, server=server, error=error)

    async def _relist(self, server: str, scope: CallScope) -> None:
        try:
            await self._list_server(server, scope)
        except (ToolscoreError, MCPError) as exc:
            log.warning("skills not listed", server=server, error=str(exc))
