"""Tests of toolscore.policy: pure rules as unit tests, the hooks over real MCP traffic in process.

Helpers shared by the modules here: a client of a gateway whose constraints are on, and routes
of the fixture server's tools for unit tests of the rules.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types
from mcp import Client

from tests.conftest import memory_gateway, text
from tests.fixtures.fixture_server import BASE_TOOLS
from toolscore import Config, ExecutionContext, MemoryAuditSink
from toolscore.downstream.registry import Registry, Route, build_registry
from toolscore.scope import CallScope
from toolscore.testing import memory_config


@asynccontextmanager
async def policy_client(
    tmp_path: Path, constraints: dict[str, Any], server: dict[str, Any] | None = None, **client: Any
) -> AsyncIterator[tuple[Client, MemoryAuditSink]]:
    """A client of a gateway over the fixture server `fx` (entry options `server`), with `constraints` on.

    Audit records keep argument values, so tests can see what redaction did to them.
    """
    async with (
        memory_gateway(
            tmp_path,
            {"fx": server or {}},
            constraints={"enabled": True, **constraints},
            toolscore={"audit": {"include_arguments": True}},
        ) as (gw, sink),
        Client(gw.server, mode="legacy", **client) as c,
    ):
        yield c, sink


def refused(result: mcp_types.CallToolResult, rule: str) -> bool:
    """Whether the gateway refused the call by `rule`."""
    return bool(result.is_error) and f"Call rejected by policy '{rule}'" in text(result)


def config(constraints: dict[str, Any], **servers: dict[str, Any]) -> Config:
    """A config with constraints on over in-process fixture servers (default: one, `fx`)."""
    return memory_config(servers or {"fx": {}}, constraints={"enabled": True, **constraints})


def registry(cfg: Config) -> Registry:
    """The tools every server of `cfg` would expose if it were the fixture server."""
    return build_registry(dict.fromkeys(cfg.servers, BASE_TOOLS), cfg)


def route(cfg: Config, name: str) -> Route:
    """The route of one exposed tool of `cfg`'s fixture servers."""
    found = registry(cfg).get(name)
    assert found is not None, name
    return found


def context(route: Route, arguments: dict[str, Any] | None = None, *, session: str | None = None) -> ExecutionContext:
    """A call to `route` as the engine hands it to hooks, after validation."""
    return ExecutionContext(
        call_id="test", tool=route.public_name, arguments=arguments or {}, route=route, scope=CallScope(session)
    )
