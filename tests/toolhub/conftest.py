"""Routes and configs for the ToolHub's pure tests, built with the real registry."""

from __future__ import annotations

from typing import Any

import mcp_types
import pytest

from toolscore.config import Config, parse_config
from toolscore.downstream.registry import Route, build_registry


def tool(name: str, description: str = "", props: dict[str, Any] | None = None, **extra: Any) -> mcp_types.Tool:
    schema = {"type": "object", "properties": props if props is not None else {"query": {"type": "string"}}}
    if "required" in extra:
        schema["required"] = extra.pop("required")
    return mcp_types.Tool(name=name, description=description, input_schema=schema, **extra)


def routes(server_tools: dict[str, list[mcp_types.Tool]], **entries: dict[str, Any]) -> tuple[list[Route], Config]:
    """The routes the real registry builds for `server_tools`, under a config with `entries`."""
    config = parse_config({"mcpServers": {s: {"type": "memory", **entries.get(s, {})} for s in server_tools}})
    registry = build_registry(server_tools, config)
    return list(registry.routes.values()), config


@pytest.fixture
def search_pair() -> tuple[list[Route], Config]:
    return routes(
        {
            "alpha": [tool("web_search", "Search the web."), tool("calculate", "Add numbers.", {"expression": {}})],
            "beta": [
                tool("web_search", "Search the web too.", {"q": {}}),
                tool("calculate", "Sum.", {"expression": {}}),
            ],
        }
    )
