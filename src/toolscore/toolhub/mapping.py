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


def map_arguments(arguments: Mapping[str, Any], route: Route, amap: Mapping[str, str]) -> Mapped:
    """Rename by `amap`, keep what the schema declares, and check the result against the schema."""
    renamed = {amap.get(key, key): value for key, value in arguments.items()}
    schema = route.tool.input_schema
    declared = schema.get("properties")
    dropped: tuple[str, ...] = ()
    if isinstance(declared, dict):
        dropped = tuple(k for k in renamed if k not in declared)
        renamed = {k: v for k, v in renamed.items() if k in declared}
    required = schema.get("required")
    missing = [r for r in required if r not in renamed] if isinstance(required, list) else []
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
