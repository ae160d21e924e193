"""Test helpers for code that runs on or behind toolscore: servers in this process, captured audit, a
recording hook. Plugin authors and toolscore's own tests use them.

    fake = FakeDownstream()

    @fake.tool(schema={"type": "object", "properties": {"text": {"type": "string"}}})
    async def echo(text: str) -> str:
        return text

    async with running_gateway({"fx": fake}) as (gateway, audit), Client(gateway.server) as client:
        await client.call_tool("fx__echo", {"text": "hi"})
    assert audit.records[0].success

Every server here is a real MCP server reached over real (in-memory) MCP traffic: the gateway
cannot tell it from a subprocess, except that it cannot be killed with a signal.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp_types
import structlog
from mcp.server import Server, ServerRequestContext
from structlog.testing import LogCapture

from toolscore._engine import CallNext, ExecutionContext, PostExecutionHook, PreExecutionHook, WrapHook
from toolscore._gateway import Gateway, open_gateway
from toolscore.audit.sinks import MemoryAuditSink
from toolscore.config import Config, parse_config
from toolscore.plan.encoding import encode

__all__ = ["FakeDownstream", "RecordingHook", "captured_logs", "memory_config", "running_gateway"]

ToolFn = Callable[..., Awaitable[Any] | Any]
_ANY_OBJECT: dict[str, Any] = {"type": "object"}


@dataclass
class _FakeTool:
    tool: mcp_types.Tool
    fn: ToolFn


class FakeDownstream:
    """An MCP server in this process whose tools are plain functions of their arguments.

    A tool function gets the call's arguments as keyword arguments and returns a string (one text
    block), a dict (structured content, mirrored as JSON text; values that are not JSON, such as
    bytes or NaN, in `toolscore.plan.encoding`'s encoding), or a `CallToolResult` as it is;
    an exception becomes a JSON-RPC error, as in a real server. `calls` records every call.
    """

    def __init__(self, name: str = "fake") -> None:
        self.name = name
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._tools: dict[str, _FakeTool] = {}
        self._server: Server[Any] | None = None

    def tool(
        self,
        name: str | None = None,
        *,
        schema: Mapping[str, Any] | None = None,
        description: str | None = None,
        annotations: mcp_types.ToolAnnotations | None = None,
        output_schema: Mapping[str, Any] | None = None,
    ) -> Callable[[ToolFn], ToolFn]:
        """Register the decorated function as a tool (`schema` defaults to any object)."""

        def register(fn: ToolFn) -> ToolFn:
            tool = mcp_types.Tool(
                name=name or fn.__name__,
                description=description if description is not None else inspect.getdoc(fn),
                input_schema=dict(schema or _ANY_OBJECT),
                output_schema=dict(output_schema) if output_schema is not None else None,
                annotations=annotations,
            )
            self._tools[tool.name] = _FakeTool(tool, fn)
            return fn

        return register

    @property
    def server(self) -> Server[Any]:
        """The SDK server (one per fake: calls from every connection reach the same functions)."""
        if self._server is None:
            self._server = Server(self.name, on_list_tools=self._list, on_call_tool=self._call)
        return self._server

    async def _list(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=[t.tool for t in self._tools.values()])

    async def _call(
        self, ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        arguments = dict(params.arguments or {})
        self.calls.append((params.name, arguments))
        value = self._tools[params.name].fn(**arguments)
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, mcp_types.CallToolResult):
            return value
        if isinstance(value, dict):
            value = encode(value)  # bytes, NaN, integer keys: in the documented encoding
            text = json.dumps(value)
            return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=text)], structured_content=value)
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=str(value))])


@dataclass
class RecordingHook:
    """A hook for every phase that records what it saw, in order: `(phase, tool)` pairs.

    Pass the same object as a pre, wrap and post hook to see the phase order of each call.
    """

    name: str = "recorder"
    events: list[tuple[str, str]] = field(default_factory=list)

    async def __call__(
        self, ctx: ExecutionContext, result: mcp_types.CallToolResult | None = None, call_next: CallNext | None = None
    ) -> mcp_types.CallToolResult | None:
        self.events.append((ctx.phase.value, ctx.tool))
        if call_next is not None:  # wrap
            answer = await call_next(ctx)
            self.events.append(("returned", ctx.tool))
            return answer
        return result  # post: the result unchanged; pre: None, the call goes on


Serverlike = Server[Any] | FakeDownstream


def memory_config(servers: Mapping[str, Mapping[str, Any]] | Sequence[str], **sections: Any) -> Config:
    """A config whose servers are all in-process (`type: memory`); `sections` as in servers.json.

    `servers` maps each name to its entry's options (prefix, tools, constraints, timeout...), or
    is just the names.
    """
    entries = {name: {} for name in servers} if not isinstance(servers, Mapping) else servers
    return parse_config({"mcpServers": {n: {**e, "type": "memory"} for n, e in entries.items()}, **sections})


@asynccontextmanager
async def running_gateway(
    servers: Mapping[str, Serverlike],
    *,
    config: Config | None = None,
    log_dir: Path | None = None,
    pre_hooks: Sequence[PreExecutionHook] = (),
    wrap_hooks: Sequence[WrapHook] = (),
    post_hooks: Sequence[PostExecutionHook] = (),
    **sections: Any,
) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    """A gateway over in-process servers, its audit records kept in memory.

    Args:
        servers: Server name -> an SDK `Server` or a `FakeDownstream`.
        config: The config to use (its entries for these names are served in process); default:
            `memory_config(servers, **sections)`.
        log_dir: Where stdio servers of `config` log (none here by default).
        pre_hooks, wrap_hooks, post_hooks: Engine hooks of your own (pre hooks run only when
            `constraints.enabled`).
        sections: servers.json sections (`constraints`, `toolscore`) for the default config.
    """
    memory = {name: s.server if isinstance(s, FakeDownstream) else s for name, s in servers.items()}
    sink = MemoryAuditSink()
    async with open_gateway(
        config if config is not None else memory_config(list(memory), **sections),
        audit=sink,
        log_dir=log_dir,
        pre_hooks=pre_hooks,
        wrap_hooks=wrap_hooks,
        post_hooks=post_hooks,
        memory_servers=memory,
    ) as gateway:
        await gateway.hub.wait_started()  # stdio servers of `config` too, past the start-up grace
        yield gateway, sink


@contextmanager
def captured_logs() -> Iterator[list[MutableMapping[str, Any]]]:
    """Every event the gateway logs inside the block, as dicts (`event`, `log_level`, the fields).

    `structlog.testing.capture_logs` configures a new processor list, which a logger already used
    (the gateway caches its loggers on first use) never sees, so what it captures depends on which
    test ran first. This swaps the contents of the list in force, which every logger shares.
    """
    processors = structlog.get_config()["processors"]
    saved = list(processors)
    capture = LogCapture()
    processors[:] = [capture]
    try:
        yield capture.entries
    finally:
        processors[:] = saved
