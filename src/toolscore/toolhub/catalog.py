"""What the front lists in each catalog mode, and the three ToolHub tools' definitions; pure.

In `search` mode `tools/list` holds `orchestrate`, `search_tools` and `call_tool` only, whatever
the number of tools behind them: a model finds the tools it needs by searching, gets their full
schemas then, and calls them by name. `auto` is `search` once the full list would be large.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

import mcp_types

from toolscore.config import ToolHubSettings
from toolscore.toolhub.capabilities import Capabilities

__all__ = [
    "CALL_CAPABILITY",
    "CALL_TOOL",
    "OWN_TOOLS",
    "SEARCH_TOOLS",
    "call_capability_tool",
    "call_tool_tool",
    "catalog_mode",
    "listing_bytes",
    "search_mode_orchestrate",
    "search_tools_tool",
]

SEARCH_TOOLS = "search_tools"
CALL_TOOL = "call_tool"
CALL_CAPABILITY = "call_capability"
OWN_TOOLS = frozenset({SEARCH_TOOLS, CALL_TOOL, CALL_CAPABILITY})
_LISTED_CAPABILITIES = 12
"""Capabilities named in `orchestrate`'s description in search mode (the most common ones)."""
_LISTED_SERVERS = 20
_MAX_K = 20


def search_tools_tool() -> mcp_types.Tool:
    """`search_tools`: keywords in, the best tools' full definitions out."""
    return mcp_types.Tool(
        name=SEARCH_TOOLS,
        description=(
            "Find tools by what they do, as an action and its object ('delete file'): the top k with full "
            "input schemas, score and matched words; server/capability narrow it. Call one with call_tool or "
            "in an orchestrate plan."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "query": {"type": "string", "maxLength": 1000},
                "k": {"type": "integer", "minimum": 1, "maximum": _MAX_K, "default": 5},
                "server": {"type": "string", "maxLength": 128},
                "capability": {"type": "string", "maxLength": 64},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        annotations=mcp_types.ToolAnnotations(read_only_hint=True),
    )


def call_tool_tool() -> mcp_types.Tool:
    """`call_tool`: any exposed tool by name, policy and audit as a direct call."""
    return mcp_types.Tool(
        name=CALL_TOOL,
        description="Call a tool found with search_tools: its name and its arguments.",
        input_schema={
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 128}, "arguments": {"type": "object"}},
            "required": ["name"],
            "additionalProperties": False,
        },
        annotations=mcp_types.ToolAnnotations(open_world_hint=True),
    )


def call_capability_tool(capabilities: Capabilities) -> mcp_types.Tool:
    """`call_capability`: every tool with a capability tag, raced, merged or in order."""
    listed = ", ".join(tag for tag, _ in capabilities.summary(_LISTED_CAPABILITIES))
    return mcp_types.Tool(
        name=CALL_CAPABILITY,
        description=(
            "Call every server that offers a capability (e.g. two search engines) with one set of arguments; "
            "the gateway maps them onto each tool, and races, merges or falls back as configured. "
            f"Capabilities: {listed or 'none'}."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "capability": {"type": "string", "maxLength": 64},
                "arguments": {"type": "object"},
                "strategy": {"type": "string", "enum": ["first_success", "all", "fallback"]},
            },
            "required": ["capability"],
            "additionalProperties": False,
        },
        annotations=mcp_types.ToolAnnotations(open_world_hint=True),
    )


def search_mode_orchestrate(tool: mcp_types.Tool, servers: Sequence[str], capabilities: Capabilities) -> mcp_types.Tool:
    """`orchestrate` as search mode lists it: servers and capabilities, its full contract deferred."""
    shown = ", ".join(servers[:_LISTED_SERVERS]) + (
        f" (+{len(servers) - _LISTED_SERVERS})" if len(servers) > _LISTED_SERVERS else ""
    )
    listed = ", ".join(f"{tag} ({n})" for tag, n in capabilities.summary(_LISTED_CAPABILITIES))
    description = (
        "Run several tool calls in one turn as an XML plan; toolscore checks it, runs it and answers one "
        'result per call. Before your first plan, call search_tools {"query": "orchestrate"} for the plan '
        "language. Tools are not listed here: find them with search_tools. "
        f"Servers: {shown or 'none'}. Capabilities (tools; call_capability calls all of one's tools at once): "
        f"{listed or 'none'}."
    )
    return tool.model_copy(update={"description": description})


def listing_bytes(tools: Sequence[mcp_types.Tool]) -> int:
    """The size of a `tools/list` result holding `tools`, as compact JSON."""
    dump: dict[str, Any] = mcp_types.ListToolsResult(tools=list(tools)).model_dump(
        by_alias=True, mode="json", exclude_none=True
    )
    return len(json.dumps(dump, separators=(",", ":")).encode())


def catalog_mode(
    mode: Literal["full", "search", "auto"], settings: ToolHubSettings, tools: Sequence[mcp_types.Tool]
) -> Literal["full", "search"]:
    """The mode in force: `auto` is `search` past the tool-count or byte threshold."""
    if mode != "auto":
        return mode
    if len(tools) > settings.search_above_tools or listing_bytes(tools) > settings.search_above_bytes:
        return "search"
    return "full"
