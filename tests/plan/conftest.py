"""Shared by the plan tests: a registry of fake tools for the pure modules, and a gateway in process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client

from tests.conftest import make_config, memory_gateway, text
from toolscore import Gateway, MemoryAuditSink
from toolscore.config import PlanSettings, Shorthand
from toolscore.downstream.registry import build_registry
from toolscore.errors import PlanCheckError, PlanSyntaxError
from toolscore.plan.check import check_plan, shorthand_table
from toolscore.plan.nodes import CheckedPlan
from toolscore.plan.parse import parse_turn


def tool(
    name: str, props: dict[str, Any] | None = None, required: list[str] | None = None, **kw: Any
) -> mcp_types.Tool:
    return mcp_types.Tool(
        name=name, input_schema={"type": "object", "properties": props or {}, "required": required or []}, **kw
    )


REGISTRY = build_registry(
    {
        "search": [
            tool("find_files", {"pattern": {"type": "string"}}, ["pattern"]),
            tool("grep", {"q": {"type": "string"}}),
        ],
        "fetch": [
            tool(
                "fetch",
                {"url": {"type": "string"}, "max_length": {"type": "integer"}},
                ["url"],
                annotations=mcp_types.ToolAnnotations(read_only_hint=True),
            ),
        ],
        "sandbox": [tool("run", {"params": {"type": "object"}})],
    },
    make_config({"search": {"command": "x"}, "fetch": {"command": "x"}, "sandbox": {"command": "x"}}),
)
SHORTHANDS = shorthand_table(
    [
        ("search", (Shorthand(tag="search", tool="find_files", primary="pattern"),)),
        ("sandbox", (Shorthand(tag="microsandbox", tool="run", primary="params.code"),)),
    ]
)


def check(text: str, **kw: Any) -> CheckedPlan:
    """`text` parsed and checked against `REGISTRY`; `kw` goes to `check_plan`."""
    return check_plan(parse_turn(text), REGISTRY, shorthands=SHORTHANDS, limits=PlanSettings(), **kw)


def codes(text: str, **kw: Any) -> list[str]:
    """The problem codes of `text`, [] when it passes."""
    try:
        check(text, **kw)
    except (PlanSyntaxError, PlanCheckError) as exc:
        return [p.code for p in exc.problems]
    return []


# -- through a gateway --------------------------------------------------------------------------

SAY = {"tag": "say", "tool": "echo", "primary": "text"}
"""`<say>text</say>` calls the fixture's echo."""


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    """A gateway over the fixture server `fx`, in this process, with the `<say>` shorthand."""
    async with memory_gateway(tmp_path, {"fx": {"shorthand": SAY}}) as pair:
        yield pair


async def run(gateway: Gateway, plan: str, **extra: Any) -> mcp_types.CallToolResult:
    """`orchestrate` called by a real client."""
    async with Client(gateway.server, mode="legacy") as client:
        return await client.call_tool("orchestrate", {"plan": plan, **extra})


def statuses(result: mcp_types.CallToolResult) -> dict[int, str]:
    assert result.structured_content is not None, text(result)
    return {s["step"]: s["status"] for s in result.structured_content["steps"]}


def step(result: mcp_types.CallToolResult, n: int) -> dict[str, Any]:
    assert result.structured_content is not None
    return next(s for s in result.structured_content["steps"] if s["step"] == n)
