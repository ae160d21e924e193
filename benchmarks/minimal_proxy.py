"""The floor for any proxy built on the SDK: a lowlevel front forwarding to one stdio server.

No registry, validation, engine or audit; used by passthrough.py as a same-run reference.
    python minimal_proxy.py COMMAND [ARGS...]
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server


def main() -> None:
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:])

    @asynccontextmanager
    async def lifespan(_: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        async with Client(params, mode="legacy", cache=None) as client:
            yield {"client": client}

    async def list_tools(ctx: ServerRequestContext[Any], _: Any) -> types.ListToolsResult:
        return await ctx.lifespan_context["client"].list_tools()

    async def call_tool(ctx: ServerRequestContext[Any], p: types.CallToolRequestParams) -> types.CallToolResult:
        request = types.CallToolRequest(params=types.CallToolRequestParams(name=p.name, arguments=p.arguments))
        return await ctx.lifespan_context["client"].session.send_request(request, types.CallToolResult)

    server = Server("minimal", lifespan=lifespan, on_list_tools=list_tools, on_call_tool=call_tool)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


if __name__ == "__main__":
    main()
