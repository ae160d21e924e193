"""The `toolscore` command: serve, check, tools, call."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import mcp_types

from toolscore._gateway import Gateway, open_gateway, serve_http, serve_stdio
from toolscore._logging import configure_logging
from toolscore._plan_tool import ORCHESTRATE
from toolscore._version import __version__
from toolscore.config import Config, default_config_path, load_config
from toolscore.errors import ConfigError

__all__ = ["main"]

EXIT_CONFIG = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toolscore", description="An MCP gateway in front of many MCP servers.")
    parser.add_argument("--version", action="version", version=f"toolscore {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", type=Path, help="servers.json (default: ./servers.json, then the user config)")
    common.add_argument("--log-level", default="warning", help="debug, info, warning or error (default: warning)")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", parents=[common], help="run the gateway as an MCP server")
    serve.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)

    check = sub.add_parser("check", parents=[common], help="connect to every server and report its state")
    check.add_argument("--json", action="store_true", help="print JSON instead of a table")

    tools = sub.add_parser("tools", parents=[common], help="list the exposed tools")
    tools.add_argument("--json", action="store_true", help="print the full tool definitions as JSON")

    call = sub.add_parser("call", parents=[common], help="call one tool through the engine")
    call.add_argument("tool", help="the exposed tool name, e.g. files__read_file, or orchestrate")
    call.add_argument("--args", default="{}", help="the arguments as a JSON object")
    return parser


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


async def _check(gw: Gateway, as_json: bool) -> int:
    statuses = gw.hub.statuses()
    if as_json:
        print(json.dumps([{**s.__dict__, "state": s.state.value} for s in statuses], indent=2))
    else:
        rows = [["SERVER", "TRANSPORT", "STATE", "TOOLS", "START", "ERROR"]]
        for s in statuses:
            start = f"{s.start_seconds:.2f}s" if s.start_seconds is not None else "-"
            rows.append([s.name, s.transport, s.state.value, str(s.tools), start, s.error or ""])
        print(_table(rows))
        for problem in gw.hub.registry.problems:
            print(f"warning: {problem}")
    return 0 if all(s.state.value == "up" for s in statuses) else 1


async def _tools(gw: Gateway, as_json: bool) -> int:
    tools = gw.hub.registry.tools()
    if as_json:
        print(json.dumps([t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in tools], indent=2))
    else:
        for tool in tools:
            first_line = (tool.description or "").strip().splitlines()
            print(f"{tool.name}  {first_line[0] if first_line else ''}".rstrip())
    return 0


async def _call(gw: Gateway, tool: str, raw_args: str) -> int:
    try:
        arguments: Any = json.loads(raw_args)
    except json.JSONDecodeError as exc:
        print(f"toolscore: error: --args is not JSON: {exc.msg}", file=sys.stderr)
        return EXIT_CONFIG
    if not isinstance(arguments, dict):
        print("toolscore: error: --args must be a JSON object", file=sys.stderr)
        return EXIT_CONFIG
    if tool == ORCHESTRATE:
        result = await gw.orchestrator(arguments)
    else:
        result = (await gw.engine.execute(tool, arguments)).result
    assert result is not None
    for block in result.content:
        print(block.text if isinstance(block, mcp_types.TextContent) else block.model_dump_json(by_alias=True))
    if result.structured_content is not None and not result.content:
        print(json.dumps(result.structured_content, indent=2))
    return 1 if result.is_error else 0


async def _run(args: argparse.Namespace, config: Config) -> int:
    async with open_gateway(config) as gw:
        if args.command == "serve":
            if args.transport == "http":
                await serve_http(gw, host=args.host, port=args.port)
            else:
                await serve_stdio(gw)
            return 0
        if args.command == "check":
            return await _check(gw, args.json)
        if args.command == "tools":
            return await _tools(gw, args.json)
        return await _call(gw, args.tool, args.args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `toolscore` console script."""
    args = _parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        config = load_config(args.config or default_config_path())
    except ConfigError as exc:
        print(f"toolscore: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        return anyio.run(_run, args, config)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
