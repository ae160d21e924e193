"""The front's skills (SEP-2640): `skills/list` and `skills/get` of every server that declares the
extension, and the check of each skill file read through the gateway.

`skills/list` asks every connected server that declares `io.modelcontextprotocol/skills`, in
servers.json order, for all its pages, and answers with one page of every entry, its URIs made
public (`downstream/catalog.py`); on a clash (two unprefixed servers serving one URI) the first
server keeps it. A server that fails is left out of that answer, not the others. `skills/get`
goes to the server that owns the URI, and its error (-32602 for an unknown skill) reaches the
client unchanged.

Every entry is judged as it passes (`downstream/skillbook.py`: pinned and scanned as tools are;
a held one is left out, or refused to `skills/get`), and remembered as the manifest of that
server's files, against which a read of one of them (`resources/read`, by a client or a plan) is
checked.
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
from toolscore.downstream.hub import DownstreamHub
from toolscore.downstream.skills import public_entry
from toolscore.errors import DownstreamProtocolError, ToolscoreError
from toolscore.front.callers import Callers

__all__ = ["SkillHandlers", "skills_capable"]

log = structlog.get_logger("toolscore.skills")

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
    return hub.skills.capable()


def _failure(exc: ToolscoreError) -> MCPError:
    if isinstance(exc, DownstreamProtocolError) and exc.error is not None:
        return MCPError.from_error_data(exc.error)
    return MCPError(mcp_types.INTERNAL_ERROR, str(exc))


class SkillHandlers:
    """`skills/list` and `skills/get` (the hub's `SkillBook` judges and remembers every entry)."""

    def __init__(
        self, hub: DownstreamHub, callers: Callers, peer_for: Callable[[ServerRequestContext[Any]], Peer]
    ) -> None:
        self._hub = hub
        self._callers = callers
        self._peer_for = peer_for

    def register(self, server: Server[Any]) -> None:
        server.add_request_handler("skills/list", _ListParams, self.list_skills)
        server.add_request_handler("skills/get", _GetParams, self.get_skill)

    def _answer(self, ctx: ServerRequestContext[Any], fields: dict[str, Any], hints: list[ListHint | None]) -> _Answer:
        if str(ctx.protocol_version or "") >= _MODERN:  # the caching hints exist from 2026-07-28 on
            fields["ttlMs"], fields["cacheScope"] = combined(hints, 0.0)  # each answered just now
        return _Answer.model_validate(fields)

    async def list_skills(self, ctx: ServerRequestContext[Any], params: _ListParams) -> _Answer:
        """Every skill of every server that declares the extension, in one page."""
        catalog = self._hub.catalog
        skills: dict[str, dict[str, Any]] = {}
        hints: list[ListHint | None] = []
        with on_behalf_of(self._callers.identify(ctx), self._peer_for(ctx), ctx.protocol_version) as scope:
            for server in skills_capable(self._hub):
                try:
                    entries, hint = await self._hub.skills.list_server(server, scope)
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
        if found is None and (lister := self._hub.skills.lister(params.uri)) is not None:
            found = (lister, params.uri)  # an unprefixed server's skill, not among its resources: its lister's
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
        entry = self._hub.skills.take(server, entry)  # judged: raises where the skill is held
        public = public_entry(entry, lambda uri: self._hub.catalog.public_uri(server, uri))
        return self._answer(ctx, {"skill": public}, [hint_of(raw, 0.0)])
