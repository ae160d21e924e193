"""A capability call's arguments, mapped onto one candidate tool's inputSchema; pure.

`{"query": "mcp"}` reaches a tool whose parameter is `q` through that tool's argument map in
servers.json (`"argument_maps": {"web_search": {"query": "q"}}`). Arguments the schema does not
declare are left out (each candidate takes what it understands); a candidate whose schema still
cannot be met is skipped, with the reason, rather than called to fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolscore._json import format_path
from toolscore.downstream.registry import Route

__all__ = ["Mapped", "map_arguments"]


@dataclass(frozen=True, slots=True)
class Mapped:
    """The arguments for one candidate, or why it cannot take the call."""

    arguments: dict[str, Any] | None
    skipped: str | None = None
    """Why the candidate is skipped (None when `arguments` is set)."""
    dropped: tuple[str, ...] = ()
    """Capability arguments this tool's schema does not declare."""


# Names a search tool gives its one query parameter; `{"query": …}` reaches such a parameter when it
# is the tool's only required string nothing else fills (code-index-mcp's `pattern`, a `topic`).
_QUERY_NAMES = frozenset(
    ("q", "query", "search", "search_query", "search_term", "term", "terms", "keyword", "keywords",
     "pattern", "topic", "question", "text")
)  # fmt: skip


def _query_slot(missing: list[Any], declared: Mapping[str, Any]) -> str | None:
    """The one missing required parameter a `query` can fill, or None."""
    if len(missing) != 1 or not isinstance(missing[0], str) or missing[0].lower() not in _QUERY_NAMES:
        return None
    spec = declared.get(missing[0])
    return missing[0] if isinstance(spec, dict) and spec.get("type") == "string" else None


def map_arguments(arguments: Mapping[str, Any], route: Route, amap: Mapping[str, str]) -> Mapped:
    """Rename by `amap`, keep what the schema declares, and check the result against the schema.

    A `query` the schema does not declare fills its sole missing required string parameter when
    that parameter is named like a query (`pattern`, `topic`, `q`, …).
    """
    renamed = {amap.get(key, key): value for key, value in arguments.items()}
    schema = route.tool.input_schema
    declared = schema.get("properties")
    dropped: tuple[str, ...] = ()
    query = renamed.get("query")
    if isinstance(declared, dict):
        dropped = tuple(k for k in renamed if k not in declared)
        renamed = {k: v for k, v in renamed.items() if k in declared}
    required = schema.get("required")
    # A required parameter with a default may be left out: the server fills it in.
    has_default = (
        {k for k, v in declared.items() if isinstance(v, dict) and "default" in v}
        if isinstance(declared, dict)
        else set()
    )
    missing = [r for r in required if r not in renamed and r not in has_default] if isinstance(required, list) else []
    if "query" in dropped and isinstance(declared, dict) and (slot := _query_slot(missing, declared)) is not None:
        renamed[slot] = query
        dropped = tuple(k for k in dropped if k != "query")
        missing = []
    if missing:
        hint = ", ".join(f"'{m}'" for m in missing[:4])
        return Mapped(None, f"needs {hint}, which no argument maps to (map one in 'argument_maps')", dropped)
    error = next(iter(route.validator.iter_errors(renamed)), None)
    if error is not None:
        return Mapped(
            None,
            f"arguments do not fit its schema: {format_path(list(error.absolute_path))}: {error.message[:200]}",
            dropped,
        )
    return Mapped(renamed, None, dropped)
