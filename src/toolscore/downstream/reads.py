"""A resource read as the gateway makes it, for a client's `resources/read` and a plan's read step
alike: sent to the server that owns the URI, as the pseudo-tool `resources/read` of that server
(whose route the engine runs it under: policy, deadlines, the audit log), a skill file checked
against its listing (`downstream/skillbook.py`), and answered as a tool result of embedded
resources under their public URIs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mcp_types
from jsonschema.validators import validator_for
from mcp import MCPError

from toolscore.downstream.registry import Route
from toolscore.errors import DownstreamProtocolError
from toolscore.plan.nodes import READ_TOOL
from toolscore.scope import CallScope

if TYPE_CHECKING:
    from toolscore.downstream.hub import DownstreamHub

__all__ = ["READ_TOOL", "ResourceReads"]

_READ_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"uri": {"type": "string"}}, "required": ["uri"]}
_READ_VALIDATOR = validator_for(_READ_SCHEMA)(_READ_SCHEMA)


class ResourceReads:
    """Reads of the hub's resources (a plan's `ResourceReader`): `READ_TOOL`, the pseudo-tool a
    resource read is audited and checked by policy as, per server."""

    def __init__(self, hub: DownstreamHub) -> None:
        self._hub = hub

    def owner(self, uri: str) -> tuple[str, str] | None:
        """The server a public URI belongs to and its own URI for it (`Catalog.route_uri`)."""
        return self._hub.catalog.route_uri(uri)

    def route(self, server: str) -> Route | None:
        """The pseudo-tool `resources/read` of `server`; None where it serves no resources."""
        catalog = self._hub.catalog
        if server not in catalog.namespaced and server not in catalog.plain:
            return None
        return read_route(self._hub, server)

    async def read(self, server: str, uri: str, what: str, scope: CallScope) -> mcp_types.CallToolResult:
        """Read `uri` (the server's own) from `server`, shaped as a tool result for the engine's post
        hooks: one embedded resource per contents item, under its public URI.

        Raises:
            Rejected: The file lies in a skill that is held (changed since pinned, quarantined).
            DownstreamProtocolError: The server's error; or a skill file not the one listed.
        """
        hub = self._hub
        await hub.skills.admit(server, uri, scope)
        request = mcp_types.ReadResourceRequest(params=mcp_types.ReadResourceRequestParams(uri=uri))
        try:
            result: mcp_types.ReadResourceResult = await hub.request(
                server, request, mcp_types.ReadResourceResult, what, scope=scope
            )
        except MCPError as exc:
            raise DownstreamProtocolError.answered(server, what, exc.error) from None
        await hub.skills.verify(server, uri, result, what, scope)
        blocks: list[mcp_types.ContentBlock] = [
            mcp_types.EmbeddedResource(
                type="resource",
                resource=contents.model_copy(update={"uri": hub.catalog.public_uri(server, str(contents.uri))}),
            )
            for contents in result.contents
        ]
        return mcp_types.CallToolResult(content=blocks, _meta=result.meta)


def read_route(hub: DownstreamHub, server: str) -> Route:
    """The route a read of `server`'s resources runs under, as the pseudo-tool `resources/read`."""
    separator = hub.config.settings.separator
    tool = mcp_types.Tool(name=READ_TOOL, input_schema=_READ_SCHEMA)
    return Route(
        READ_TOOL,
        server,
        READ_TOOL,
        tool,
        _READ_VALIDATOR,
        canonical=f"{server}{separator}{READ_TOOL}",
        local_name=READ_TOOL,
    )
