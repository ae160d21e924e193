"""Results by reference: a result too large for the model kept by the gateway, a preview sent instead.

A passthrough result over its server's `spill_bytes` is kept here as `toolscore://results/<id>`
(128 random bits), for its caller's principal (or its connection, without one), for `ttl` seconds,
within a total size cap (the oldest go first). The client gets a preview (the first and last lines
of the text, the JSON shape of structured content with array lengths) and a `resource_link`;
`resources/read` of the link returns the whole result. Pure apart from the clock.
"""

from __future__ import annotations

import json
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mcp_types

from toolscore.scope import principal_of

__all__ = ["RESULTS_PREFIX", "ResultStore", "owner_of_caller", "preview"]

RESULTS_PREFIX = "toolscore://results/"
_PREVIEW_LINES = 10
_PREVIEW_LINE_CHARS = 200
_SHAPE_DEPTH = 4
_SHAPE_KEYS = 12


def owner_of_caller(caller: str | None) -> str:
    """Whose a kept result is: the caller's principal (any of its sessions may read it), else the caller."""
    principal = principal_of(caller)
    return f"principal:{principal}" if principal is not None else caller or "anonymous"


@dataclass(frozen=True, slots=True)
class _Kept:
    owner: str
    body: str
    """The whole result, as JSON (`CallToolResult` by alias)."""
    expires: float


class ResultStore:
    """Kept results by id, per owner, with a time to live and a total size cap (in memory)."""

    def __init__(
        self, *, ttl_seconds: float = 3600.0, max_bytes: int = 256 * 1024 * 1024, clock: Callable[[], float] = time.time
    ) -> None:
        self._ttl = ttl_seconds
        self._max_bytes = max_bytes
        self._clock = clock
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._bytes = 0

    def put(self, owner: str, body: str) -> str | None:
        """Keep `body` for `owner`; its URI, or None where it alone is over the cap."""
        size = len(body)
        if size > self._max_bytes:
            return None
        self._expire()
        while self._bytes + size > self._max_bytes:
            _, oldest = self._kept.popitem(last=False)
            self._bytes -= len(oldest.body)
        ident = secrets.token_hex(16)
        self._kept[ident] = _Kept(owner, body, self._clock() + self._ttl)
        self._bytes += size
        return RESULTS_PREFIX + ident

    def get(self, owner: str, uri: str) -> str | None:
        """The kept result at `uri` when it is `owner`'s and has not expired, else None."""
        kept = self._kept.get(uri.removeprefix(RESULTS_PREFIX)) if uri.startswith(RESULTS_PREFIX) else None
        if kept is None or kept.owner != owner or kept.expires <= self._clock():
            return None
        return kept.body

    def _expire(self) -> None:
        now = self._clock()
        while self._kept:
            ident, first = next(iter(self._kept.items()))
            if first.expires > now:
                break
            del self._kept[ident]
            self._bytes -= len(first.body)


def preview(result: mcp_types.CallToolResult, uri: str, size: int) -> mcp_types.CallToolResult:
    """What the client gets in place of a kept result: its shape and ends, and a link to the whole."""
    parts = [f"This result is {size} bytes, kept by the gateway: read {uri} (resources/read) for all of it."]
    if result.structured_content is not None:
        parts.append("Structured content, its shape: " + json.dumps(_shape(result.structured_content, 0)))
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(_ends(block.text))
        else:
            parts.append(f"[a {block.type} block]")
    link = mcp_types.ResourceLink(
        type="resource_link",
        uri=uri,
        name=uri.removeprefix(RESULTS_PREFIX),
        description="the whole result of this call",
        mime_type="application/json",
        size=size,
    )
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text="\n\n".join(parts)), link], is_error=result.is_error
    )


def _ends(text: str) -> str:
    lines = text.splitlines()
    cut = [line if len(line) <= _PREVIEW_LINE_CHARS else line[:_PREVIEW_LINE_CHARS] + "…" for line in lines]
    if len(cut) <= 2 * _PREVIEW_LINES:
        return "\n".join(cut)
    hidden = len(cut) - 2 * _PREVIEW_LINES
    return "\n".join([*cut[:_PREVIEW_LINES], f"… {hidden} more lines …", *cut[-_PREVIEW_LINES:]])


def _shape(value: Any, depth: int) -> Any:
    """The JSON shape of `value`: types, object keys, array lengths (bounded in depth and width)."""
    if depth >= _SHAPE_DEPTH:
        return "…"
    if isinstance(value, dict):
        keys = list(value)[:_SHAPE_KEYS]
        shape = {str(k): _shape(value[k], depth + 1) for k in keys}
        if len(value) > _SHAPE_KEYS:
            shape["…"] = f"{len(value) - _SHAPE_KEYS} more keys"
        return shape
    if isinstance(value, list):
        return [f"array of {len(value)}", _shape(value[0], depth + 1)] if value else "array of 0"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if value is None:
        return "null"
    return "string"
