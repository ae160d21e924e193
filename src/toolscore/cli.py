"""The `toolscore` command: serve, check, tools, call, install, audit, trajectories, import, register, doctor.

Start-up time matters here (a client spawns `toolscore serve` and waits for it): this module
imports only what parsing the command line and the config needs. `serve` starts the stdio
servers (`spawn.start_early`) before it imports the SDK and the gateway, so their start-up
overlaps the gateway's; each command imports what it uses when it runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolscore._gc import release as release_collector
from toolscore._malloc import keep_freed_memory
from toolscore._sdk_packages import lazy_sdk_packages
from toolscore._version import __version__
from toolscore.config import (
    TOKEN_ENV,
    Config,
    audit_path,
    config_candidates,
    default_config_path,
    load_config,
    server_log_dir,
    trajectory_path,
)
from toolscore.downstream import spawn
from toolscore.errors import ConfigError

if TYPE_CHECKING:
    import mcp_types

    from toolscore._gateway import Gateway
    from toolscore.audit.sinks import AuditRecord
    from toolscore.front.http import HttpExposure

__all__ = ["main"]

EXIT_CONFIG = 2
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
"""What a shell reports for a command killed by SIGPIPE (`toolscore tools | head -1`)."""
ONE_SHOT = ("check", "tools", "call")
"""Commands that start the servers, report once and stop."""
GATEWAY_COMMANDS = ("serve", *ONE_SHOT)
"""Commands that open the gateway: the collector stays held (`toolscore._gc`) until its hub waits for the servers."""
CLIENT_COMMANDS = ("import", "register", "doctor")
"""Commands about the MCP clients' own configuration files (`toolscore.clients`)."""
UVLOOP_ENV = "TOOLSCORE_UVLOOP"
"""`0`: `serve` runs on the standard asyncio loop even where uvloop is installed."""


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def _log_level(value: str) -> str:
    """A --log-level value, lowercased; anything else is a usage error listing the valid ones."""
    if value.lower() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"unknown log level '{value}' (choose from {', '.join(LOG_LEVELS)})")
    return value.lower()


def _common_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """--config and --log-level, accepted before the subcommand and after it.

    The subcommands' copies default to SUPPRESS, so an option given before the subcommand is not
    overwritten by the subcommand's default (given in both places, the later one wins).
    """
    parser.add_argument(
        "--config",
        type=Path,
        default=None if defaults else argparse.SUPPRESS,
        help="servers.json (default: ./servers.json, then the user config)",
    )
    parser.add_argument(
        "--log-level",
        type=_log_level,
        default="warning" if defaults else argparse.SUPPRESS,
        help="debug, info, warning, error or critical (default: warning)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toolscore", description="An MCP gateway in front of many MCP servers.")
    parser.add_argument("--version", action="version", version=f"toolscore {__version__}")
    _common_options(parser, defaults=True)
    common = argparse.ArgumentParser(add_help=False)
    _common_options(common, defaults=False)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", parents=[common], help="run the gateway as an MCP server")
    serve.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument(
        "--token-file",
        metavar="PATH",
        help=f"HTTP: file (mode 600) holding the bearer token clients must send (default: ${TOKEN_ENV}, "
        "then toolscore.http.token_file); required unless --host is loopback",
    )
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="HTTP: also accept this Host header, e.g. mcp.example.com or mcp.example.com:* (repeatable)",
    )
    serve.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="HTTP: also accept this Origin header, e.g. https://app.example.com (repeatable)",
    )
    serve.add_argument("--tls-cert", metavar="PATH", help="HTTP: serve HTTPS with this PEM certificate")
    serve.add_argument("--tls-key", metavar="PATH", help="HTTP: the certificate's PEM private key")

    check = sub.add_parser("check", parents=[common], help="connect to every server and report its state")
    check.add_argument("--json", action="store_true", help="print JSON instead of a table")

    tools = sub.add_parser("tools", parents=[common], help="list the exposed tools")
    tools.add_argument("--json", action="store_true", help="print the full tool definitions as JSON")
    tools.add_argument(
        "--capability", metavar="TAG", help="only the tools with this capability tag, best first, with their tags"
    )

    call = sub.add_parser("call", parents=[common], help="call one tool through the engine")
    call.add_argument("tool", help="the exposed tool name, e.g. files__read_file, or orchestrate")
    call.add_argument("--args", default="{}", help="the arguments as a JSON object")

    install = sub.add_parser("install", parents=[common], help="install the servers from their install hints")
    install.add_argument("servers", nargs="*", help="only these servers (default: all enabled)")
    install.add_argument("--force", action="store_true", help="reinstall even if up to date")

    audit = sub.add_parser("audit", parents=[common], help="read the audit log")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True)
    stats = audit_sub.add_parser("stats", parents=[common], help="calls, TPST, slow tools, token waste")
    stats.add_argument("--since", help="1h, 30m, 2d or an ISO time")
    stats.add_argument("--server", help="only this server's calls")
    stats.add_argument("--principal", help="only this principal's calls (a token file's name, a token's subject)")
    stats.add_argument("--slow-ms", type=float, help="slow-tool threshold (default: the config's slow_call_seconds)")
    stats.add_argument("--json", action="store_true")
    stats.add_argument("--file", type=Path, help="the audit file (default: from the config)")
    stats.add_argument(
        "--shared", action="store_true", help="read every replica's records: the Redis stream of toolscore.state"
    )
    verify = audit_sub.add_parser("verify", parents=[common], help="check the audit log's hash chain")
    verify.add_argument("file", nargs="?", type=Path, help="the audit file (default: from the config)")
    verify.add_argument(
        "--shared", action="store_true", help="check the Redis stream of toolscore.state instead of a file"
    )
    tail = audit_sub.add_parser("tail", parents=[common], help="the latest records")
    tail.add_argument("-n", type=int, default=20, help="how many (default 20)")
    tail.add_argument("-f", "--follow", action="store_true", help="keep printing new records")
    tail.add_argument("--file", type=Path, help="the audit file (default: from the config)")
    stats.add_argument("--trajectories", type=Path, help="the agent loop's trajectory file (default: from the config)")

    pins = sub.add_parser("pins", parents=[common], help='pinned tool definitions (servers with "pinning" on)')
    pins_sub = pins.add_subparsers(dest="pins_command", required=True)
    for name, what in (
        ("list", "the pins, and which changed since"),
        ("diff", "what changed in a held definition"),
        ("approve", "make the changed definitions the pins"),
        ("reset", "forget pins: the next definition seen is pinned"),
    ):
        command = pins_sub.add_parser(name, parents=[common], help=what)
        command.add_argument("selector", nargs="?", help="SERVER or SERVER/TOOL (default: all)")
        command.add_argument("--shared", action="store_true", help="the pins in the Redis of toolscore.state")

    trajectories = sub.add_parser("trajectories", parents=[common], help="the agent loop's (S, A, O) records")
    traj_sub = trajectories.add_subparsers(dest="trajectories_command", required=True)
    export = traj_sub.add_parser("export", parents=[common], help="finished episodes as training conversations")
    export.add_argument("--format", choices=["chat-jsonl"], default="chat-jsonl", help="one {messages: [...]} a line")
    export.add_argument("--solved-only", action="store_true", help="only episodes that ended with an answer")
    export.add_argument("--file", type=Path, help="the trajectory file (default: from the config)")
    export.add_argument("-o", "--output", type=Path, help="write here (default: stdout)")

    from toolscore.clients.commands import add_parsers

    add_parsers(sub, common)  # import, register, doctor
    return parser


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _exposed_tools(gw: Gateway) -> list[mcp_types.Tool]:
    """What `tools/list` answers."""
    from toolscore.front.server import exposed_tools

    return exposed_tools(gw.hub, gw.orchestrator, gw.toolhub)


def _exposed_per_server(gw: Gateway) -> dict[str, int]:
    """How many tools each server has in `tools/list`: after allow/deny, renames and skipped schemas."""
    return gw.hub.registry.listed_per_server()  # the figure /metrics and the console show too


_TERMINAL_SAFE = {
    code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    for code in (*range(0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A))
    if code != 0x0A  # a line of the table may be a block of lines
}
"""Control characters (C0 but newline, DEL, C1) and the bidirectional overrides, shown as escapes."""


async def _list_skills(gw: Gateway) -> dict[str, list[str]]:
    """List the skills of every server that declares them, as a client's first listing would: they
    are judged (pinned, scanned) then, so `check` reports them with the tools. Per server, what
    was found (a listing that failed among it)."""
    from toolscore.scope import NO_CLIENT

    found: dict[str, list[str]] = {}
    for server in gw.hub.skills.capable():
        try:
            await gw.hub.skills.list_server(server, NO_CLIENT)
            found[server] = gw.hub.skills.problems(server)
        except Exception as exc:  # a server's failure to list is a finding, not the end of the check
            found[server] = [f"server '{server}' did not list its skills: {exc}"]
    return found


def _check(gw: Gateway, as_json: bool, out: list[str], skills: Mapping[str, list[str]] | None = None) -> int:
    """The `check` report (`skills`: what `_list_skills` found, per server)."""
    skills = skills or {}
    statuses = gw.hub.statuses()
    suspects = [*gw.hub.registry.suspects, *gw.hub.catalog.suspects]
    exposed = _exposed_per_server(gw)
    if as_json:
        rows = [
            {
                **dataclasses.asdict(s),
                "state": s.state.value,
                "tools": exposed.get(s.name, 0),
                "downstream_tools": s.tools,
                "poisoning": [p.as_dict() for p in suspects if p.server == s.name],
                "skills": skills.get(s.name, []),
            }
            for s in statuses
        ]
        out.append(json.dumps(rows, indent=2))
    else:
        table = [["SERVER", "TRANSPORT", "STATE", "TOOLS", "START", "ERROR"]]
        for s in statuses:
            start = f"{s.start_seconds:.2f}s" if s.start_seconds is not None else "-"
            error = (s.error or "").splitlines()
            table.append(
                [s.name, s.transport, s.state.value, str(exposed.get(s.name, 0)), start, error[0] if error else ""]
            )
        out.append(_table(table))
        out.extend(f"warning: {problem}" for problem in gw.hub.registry.problems)
        out.extend(f"warning: {p.problem(p.server)}" for p in gw.hub.catalog.suspects)
        out.extend(f"warning: {problem}" for s in statuses for problem in skills.get(s.name, ()))
    return 0 if all(s.state.value == "up" for s in statuses) else 1


def _tools(gw: Gateway, as_json: bool, out: list[str], capability: str | None = None) -> int:
    if capability is None or gw.toolhub is None:
        tools = _exposed_tools(gw)
    else:
        # Every routed tool with the tag, whatever the catalog mode lists, in the order calls try them.
        ranked = gw.toolhub.ranked(capability)
        if not ranked:
            known = ", ".join(tag for tag, _ in gw.toolhub.capabilities.summary(30)) or "none"
            print(f"toolscore: no tool has capability '{capability}' (capabilities: {known})", file=sys.stderr)
            return 1
        if not as_json:
            out.extend(f"{t.route.public_name}  [{', '.join(sorted(t.tags))}]" for t in ranked)
            return 0
        tools = [t.route.tool for t in ranked]
    if as_json:
        out.append(json.dumps([t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in tools], indent=2))
    else:
        for tool in tools:
            first_line = (tool.description or "").strip().splitlines()
            out.append(f"{tool.name}  {first_line[0] if first_line else ''}".rstrip())
    return 0


async def _call(gw: Gateway, tool: str, raw_args: str, out: list[str]) -> int:
    import mcp_types

    from toolscore.plan.tool import ORCHESTRATE

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
        out.append(block.text if isinstance(block, mcp_types.TextContent) else block.model_dump_json(by_alias=True))
    if result.structured_content is not None and not result.content:
        out.append(json.dumps(result.structured_content, indent=2))
    return 1 if result.is_error else 0


def _http_exposure(args: argparse.Namespace, config: Config) -> HttpExposure | None:
    """The HTTP front's checked token, allow-lists and TLS for `serve --transport http` (else None)."""
    if args.command != "serve" or args.transport != "http":
        return None
    from toolscore.front.http import resolve_exposure

    return resolve_exposure(
        config.settings.http,
        host=args.host,
        port=args.port,
        token_file=args.token_file,
        allow_hosts=args.allow_host,
        allow_origins=args.allow_origin,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
    )


async def _run(
    args: argparse.Namespace,
    config: Config,
    exposure: HttpExposure | None,
    sockets: list[socket.socket] | None,
    out: list[str],
) -> int:
    """Run one command with the gateway open; what it prints goes to `out`, written once the servers are stopped."""
    from toolscore._gateway import open_gateway

    if exposure is None:
        async with open_gateway(config) as gw:
            if args.command == "serve":
                from toolscore._reload import watching
                from toolscore.front.serve import serve_stdio

                async with watching(gw):
                    await serve_stdio(gw.server, max_request_bytes=config.settings.max_request_bytes)
                return 0
            return await _one_shot(args, gw, out)
    # Metrics are counted and the console is fed only when the HTTP front can serve them.
    from toolscore._gateway import http_pages
    from toolscore._reload import watching
    from toolscore.front.console import ConsoleFeed
    from toolscore.front.serve import serve_http
    from toolscore.telemetry.metrics import CallMetrics

    async with open_gateway(config, metrics=CallMetrics(), console=ConsoleFeed()) as gw, watching(gw):
        await serve_http(
            gw.server,
            host=args.host,
            port=args.port,
            exposure=exposure,
            max_request_bytes=config.settings.max_request_bytes,
            banner=f"{len(_exposed_tools(gw))} tools from {len(gw.hub.registry.servers)} server(s)",
            sockets=sockets,
            pages=http_pages(gw),
            subjects=gw.hub.subjects,  # access tokens for token exchange (downstream credentials)
        )
        return 0


async def _one_shot(args: argparse.Namespace, gw: Gateway, out: list[str]) -> int:
    """`check`, `tools` or `call`: they report on every server, so past the start-up grace they wait for the rest."""
    await gw.hub.wait_started()
    if args.command == "check":
        return _check(gw, args.json, out, await _list_skills(gw))
    if args.command == "tools":
        return _tools(gw, args.json, out, args.capability)
    return await _call(gw, args.tool, args.args, out)


def _record_line(r: AuditRecord) -> str:
    # The tool as clients see it (`everything__echo`), the name `stats` reports it under too.
    status = "ok" if r.success else (r.error_kind or "failed")
    extra = f" plan={r.plan_id}" if r.plan_id else ""
    if r.outcome:
        extra += " " + ",".join(f"{k}={v}" for k, v in sorted(r.outcome.items()))
    tokens = f" tokens={r.actual_tokens}" if r.actual_tokens else ""
    return f"{r.time.isoformat(timespec='seconds')} {r.tool} {status} {r.duration_ms:.1f}ms{tokens}{extra}"


def _verify(path: Path, shared: Config | None) -> int:
    """`audit verify`: the first broken link of the chain (exit 1), or that it is whole (0)."""
    from toolscore.audit.chain import GENESIS, verify
    from toolscore.audit.sinks import audit_lines

    if shared is not None:
        from toolscore.state.redis_store import stream_entries  # imports the Redis client: only when asked

        assert shared.settings.state is not None  # the config requires it with audit.stream
        what = f"the stream {shared.settings.state_prefix}audit"
        try:
            report = verify(stream_entries(shared.settings.state, prefix=shared.settings.state_prefix))
        except ConfigError as exc:
            print(f"toolscore: error: {exc}", file=sys.stderr)
            return 1
    else:
        what = str(path)
        report = verify(audit_lines(path))
    if not report.whole:
        print(f"toolscore: audit chain broken at {report.broken_at}: {report.problem}", file=sys.stderr)
        print(f"{report.records} records verified before it", file=sys.stderr)
        return 1
    if report.head is None:
        print(f"toolscore: no chained record in {what} ({report.unchained} records before the chain began)")
        return 1
    start = "its first record" if report.starts_at == GENESIS else f"a record no longer kept ({report.starts_at})"
    print(f"audit chain whole: {report.records} records in {what}, from {start}")
    if report.unchained:
        print(f"{report.unchained} older records before the chain began are not covered")
    print(f"head {report.head}")
    return 0


def _audit(args: argparse.Namespace, config: Config) -> int:
    from toolscore.audit.sinks import audit_files, read_audit
    from toolscore.audit.stats import compute_stats, parse_since
    from toolscore.loop.trajectory import loop_stats, read_trajectories

    path = args.file or audit_path(config)
    shared = getattr(args, "shared", False)
    if shared and not config.settings.audit.stream:
        print("toolscore: error: --shared needs toolscore.audit.stream (and toolscore.state)", file=sys.stderr)
        return EXIT_CONFIG
    if not shared and not audit_files(path):
        print(f"toolscore: no audit file at {path}", file=sys.stderr)
        return 1

    def warn(message: str) -> None:
        print(f"toolscore: warning: {message}", file=sys.stderr)

    if args.audit_command == "verify":
        return _verify(path, config if shared else None)
    if args.audit_command == "tail":
        for record in read_audit(path, warn=warn)[-args.n :] if args.n > 0 else []:
            print(_record_line(record))
        if args.follow:
            return _follow(Path(path))
        return 0
    try:
        since = parse_since(args.since) if args.since else None
    except ValueError:
        print(f"toolscore: error: --since {args.since!r}: use 1h, 30m, 2d or an ISO time", file=sys.stderr)
        return EXIT_CONFIG
    slow_ms = args.slow_ms if args.slow_ms is not None else config.settings.slow_call_seconds * 1000
    if shared:
        from toolscore.state.redis_store import read_stream  # imports the Redis client: only when asked

        assert config.settings.state is not None  # the config requires it with audit.stream
        try:
            records = list(read_stream(config.settings.state, prefix=config.settings.state_prefix, warn=warn))
        except ConfigError as exc:
            print(f"toolscore: error: {exc}", file=sys.stderr)
            return 1
    else:
        records = read_audit(path, warn=warn)
    stats = compute_stats(records, slow_ms=slow_ms, since=since, server=args.server, principal=args.principal)
    # Zeros for a misspelt name would read as "that server (or principal) did nothing".
    for flag, value, seen, what in (
        ("--principal", args.principal, list(stats.principals), "no call of that principal"),
        ("--server", args.server, stats.servers, "no call to that server"),
    ):
        if value is not None and value not in seen:
            print(
                f"toolscore: error: {flag} {value!r}: {what} in the audit log"
                f"{' since ' + args.since if args.since else ''}; {flag[2:]}s seen: {', '.join(seen) or 'none'}",
                file=sys.stderr,
            )
            return 1
    traj = args.trajectories or trajectory_path(config)
    loop = (
        loop_stats(read_trajectories(traj), since=since.timestamp() if since is not None else None, server=args.server)
        if traj is not None and traj.is_file()
        else None
    )
    if args.json:
        print(json.dumps({**stats.as_dict(), **({"loop": loop} if loop is not None else {})}, indent=2))
        return 0
    tpst = f"{stats.tpst:g}" if stats.tpst is not None else "-"
    print(
        f"calls {stats.calls}  ok {stats.successes}  failed {stats.failures}  tasks {stats.tasks} "
        f"(solved {stats.solved_tasks}, plans {stats.plans})\n"
        f"tokens {stats.tokens}  TPST {tpst}  violations {stats.violations}  batched {stats.batched}"
    )
    if stats.principals and args.principal is None:
        print("calls by principal: " + ", ".join(f"{who} {n}" for who, n in list(stats.principals.items())[:20]))
    if stats.failures_by_kind:
        print("failures by kind: " + ", ".join(f"{kind} {n}" for kind, n in stats.failures_by_kind.items()))
    if stats.wasteful_estimates:
        print(
            f"token estimates: {stats.wasteful_estimates} of {stats.calls} calls used over 20 % more or fewer "
            f"tokens than predicted before the call (arguments + the tool's average result so far), "
            f"{stats.wasted_tokens} tokens off in all: those tools' results vary in size; give them a size "
            f"limit (max_length, a page size) where they take one"
        )
    if loop is not None:
        turns = loop["turns_per_task"]
        causes = ", ".join(f"{k} {v}" for k, v in loop["failure_causes"].items()) or "none"
        print(
            f"agent loop: tasks {loop['tasks']} (solved {loop['solved']})  turns/task mean {turns['mean']:g} "
            f"median {turns['median']:g} max {turns['max']}  TPST {loop['tpst'] if loop['tpst'] is not None else '-'}\n"
            f"agent loop failures: {causes}"
        )
    if stats.tools:
        rows = [["TOOL", "CALLS", "FAILED", "AVG MS", "P95 MS", "TOKENS", ""]]
        for t in stats.tools:
            slow = "slow" if t.tool in stats.slow_tools else ""
            rows.append(
                [t.tool, str(t.calls), str(t.failures), f"{t.avg_ms:.1f}", f"{t.p95_ms:.1f}", str(t.tokens), slow]
            )
        print("\n" + _table(rows))
    return 0


def _trajectories(args: argparse.Namespace, config: Config) -> int:
    from toolscore.loop.trajectory import chat_records, read_trajectories

    path = args.file or trajectory_path(config)
    if path is None or not path.is_file():
        print(
            f"toolscore: no trajectory file at {path or '(off: toolscore.loop.trajectories is empty)'}", file=sys.stderr
        )
        return 1
    lines = (
        json.dumps(c, ensure_ascii=False) + "\n"
        for c in chat_records(read_trajectories(path), solved_only=args.solved_only)
    )
    if args.output is None:
        sys.stdout.writelines(lines)
    else:
        with args.output.open("w", encoding="utf-8") as f:
            f.writelines(lines)
    return 0


def _install(args: argparse.Namespace, config: Config) -> int:
    from toolscore._install import install_servers

    unknown = [name for name in args.servers if name not in config.servers]
    if unknown:
        print(f"toolscore: error: not in the config: {', '.join(unknown)}", file=sys.stderr)
        return EXIT_CONFIG
    outcomes = install_servers(config, only=args.servers, force=args.force, log=lambda m: print(m, file=sys.stderr))
    rows = [["SERVER", "STATUS", "TIME", "SIZE", ""]]
    for o in outcomes:
        time_s = f"{o.seconds:.1f}s" if o.seconds else "-"
        size = f"{o.megabytes:.0f} MB" if o.megabytes else "-"
        rows.append([o.server, o.status, time_s, size, o.message])
    print(_table(rows))
    print(f"prefix: {config.servers_prefix}")
    return 1 if any(o.status == "failed" for o in outcomes) else 0


def _follow(path: Path) -> int:
    """Print records appended to `path` until interrupted (a rotation starts over on the new file)."""
    from toolscore.audit.sinks import AuditRecord

    position = path.stat().st_size
    try:
        sys.stdout.flush()  # the lines printed so far, before waiting (stdout may be a pipe)
        while True:
            size = path.stat().st_size if path.exists() else 0
            if size < position:
                position = 0
            if size > position:
                with path.open("rb") as fh:  # bytes: the position must count what is in the file
                    fh.seek(position)
                    chunk = fh.read()
                complete = chunk[: chunk.rfind(b"\n") + 1]
                position += len(complete)
                for line in complete.decode("utf-8", errors="replace").splitlines():
                    try:
                        print(_record_line(AuditRecord.model_validate_json(line)), flush=True)
                    except ValueError:
                        continue
            time.sleep(0.5)
    except KeyboardInterrupt:
        return 0


class _OnceEach:
    """structlog processor: a downstream's repeated warning is written once (`check` of a non-MCP command).

    A command that is not an MCP server (`ls -la`) gives one warning per line it prints; its row
    in the `check` table already says it is down, so one line of the kind is enough.
    """

    def __init__(self) -> None:
        self._seen: set[tuple[str, str]] = set()

    def __call__(self, logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        server = event.get("server")
        if isinstance(server, str):
            key = (server, str(event.get("event")))
            if key in self._seen:
                import structlog

                raise structlog.DropEvent
            self._seen.add(key)
        return event


class _NoTraceback(logging.Filter):
    """The SDK's log records on one line: the exception's first line instead of its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            summary = (str(exc).splitlines() or [""])[0]
            record.msg = f"{record.getMessage()} ({type(exc).__name__}: {summary})"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


def _quiet_start_up() -> None:
    """Below debug level, a one-shot command reports each server's problems in one line, no traceback."""
    import structlog

    structlog.get_config()["processors"].insert(0, _OnceEach())  # in place: cached loggers share the list
    for handler in logging.getLogger().handlers:
        handler.addFilter(_NoTraceback())


def _load(args: argparse.Namespace) -> Config | None:
    """The config, or None after saying on stderr why there is none."""
    path: Path | None = args.config
    candidates = config_candidates()
    if path is None and not any(candidate.is_file() for candidate in candidates):
        if args.command in ("audit", "trajectories") and args.file is not None:
            return Config()  # reading a given audit or trajectory file needs no servers.json
        looked = " and ".join(str(candidate) for candidate in candidates)
        print(
            f"toolscore: config error: no servers.json found (looked at {looked}); pass --config PATH", file=sys.stderr
        )
        return None
    try:
        return load_config(path or default_config_path())
    except ConfigError as exc:
        if args.command in ("audit", "trajectories") and args.file is not None and path is None:
            return Config()
        print(f"toolscore: config error: {exc}", file=sys.stderr)
        return None


def _listen(args: argparse.Namespace) -> list[socket.socket] | None:
    """`serve --transport http`: the listening sockets, bound before any server starts."""
    from toolscore.front.serve import listen_sockets

    where = f"[{args.host}]:{args.port}" if ":" in args.host else f"{args.host}:{args.port}"
    try:
        return listen_sockets(args.host, args.port)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        print(f"toolscore: error: cannot listen on {where}: {reason[:1].lower()}{reason[1:]}", file=sys.stderr)
        return None


def _configure_logging(args: argparse.Namespace) -> None:
    """Logs to stderr at --log-level; set up once the servers have started (structlog's import can wait)."""
    from toolscore._logging import configure_logging

    configure_logging(args.log_level)
    if args.command in ONE_SHOT and logging.getLevelName(args.log_level.upper()) != logging.DEBUG:
        _quiet_start_up()


def _pins(args: argparse.Namespace) -> int:
    """`pins list|diff|approve|reset [SERVER[/TOOL]]` on `<state dir>/pins.json`."""
    from toolscore.config import state_dir
    from toolscore.trust.pins import PinBook

    try:
        if args.shared:
            config = _load(args)
            if config is None:
                return EXIT_CONFIG
            if config.settings.state is None:
                print("toolscore: error: --shared needs toolscore.state (a Redis URL)", file=sys.stderr)
                return EXIT_CONFIG
            from toolscore.state.redis_store import RedisPinBook

            book: PinBook = RedisPinBook(config.settings.state, prefix=config.settings.state_prefix)
            book.refresh()  # the constructor only logs a Redis that does not answer; here it is an error
        else:
            book = PinBook(state_dir() / "pins.json")
    except ConfigError as exc:
        print(f"toolscore: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    selector = args.selector
    if args.pins_command == "list":
        for key in book.select(selector):
            pin, waiting = book.pinned[key], book.pending.get(key)
            changed = f"  CHANGED to {waiting.digest} at {waiting.seen}" if waiting is not None else ""
            print(f"{key}  {pin.digest}  pinned {pin.seen}{changed}")
        return 0
    if args.pins_command == "diff":
        keys = book.select(selector, pending=True)
        for key in keys:
            print(book.diff(key))
        if not keys:
            print(f"toolscore: nothing changed since pinned{' in ' + selector if selector else ''}", file=sys.stderr)
        return 0
    keys = book.approve(selector) if args.pins_command == "approve" else book.reset(selector)
    if not keys:
        print(f"toolscore: no pin to {args.pins_command}{' in ' + selector if selector else ''}", file=sys.stderr)
        return 1
    try:
        book.save()
    except OSError as exc:
        print(f"toolscore: error: cannot write {book.path}: {exc}", file=sys.stderr)
        return 1
    done = "approved" if args.pins_command == "approve" else "reset"
    print("\n".join(f"{done} {key}" for key in keys))
    print("a running gateway takes it at its next list change or restart")
    return 0


def _command(args: argparse.Namespace) -> int:
    if args.command not in GATEWAY_COMMANDS:  # no gateway to import: the collector runs from here on
        release_collector()
    if args.command == "pins":  # the state directory's file; servers.json need not exist
        return _pins(args)
    if args.command in CLIENT_COMMANDS:  # they read the clients' files; servers.json may not exist yet
        from toolscore.clients.commands import run

        _configure_logging(args)
        return run(args, out=print, err=lambda line: print(line, file=sys.stderr))
    config = _load(args)
    if config is None:
        return EXIT_CONFIG
    if args.command in ("audit", "trajectories", "install"):
        lazy_sdk_packages()  # they read files: the few SDK names they touch, not the whole SDK
        _configure_logging(args)
        if args.command == "audit":
            return _audit(args, config)
        if args.command == "trajectories":
            return _trajectories(args, config)
        return _install(args, config)
    from toolscore.telemetry import tracing

    sockets: list[socket.socket] | None = None
    out: list[str] = []
    try:
        exposure = _http_exposure(args, config)  # checked before any server starts
        tracing.enable_from_env(os.environ)  # OTLP export only when OTEL_EXPORTER_OTLP_ENDPOINT is set
        if exposure is not None and (sockets := _listen(args)) is None:
            return EXIT_CONFIG
        # The servers start now and import their SDK while this process imports the gateway.
        spawn.start_early(config.enabled_servers, server_log_dir(config))
        lazy_sdk_packages()  # before the SDK's first import: only what this gateway uses is loaded
        keep_freed_memory()
        _configure_logging(args)
        import anyio

        code = anyio.run(_run, args, config, exposure, sockets, out, backend_options=_loop_options())
    except ConfigError as exc:  # found while starting: a plugin that is not installed, say
        print(f"toolscore: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 130
    finally:
        spawn.abandon_early()  # servers the gateway stopped before connecting to
        for sock in sockets or []:
            sock.close()
    # A table or list shows what servers wrote (names, descriptions, errors): never their control
    # characters, which a terminal would act on (a hostile server's escape sequences).
    shown = (lambda line: line.translate(_TERMINAL_SAFE)) if args.command in ("check", "tools") else str
    for line in out:
        print(shown(line))
    return code


def _loop_options() -> dict[str, bool]:
    """The event loop `serve` runs on: uvloop where it is installed (Linux, macOS).

    It takes about a third of the gateway's CPU per relayed call off (docs/performance.md).
    `TOOLSCORE_UVLOOP=0` keeps the standard asyncio loop.
    """
    if os.environ.get(UVLOOP_ENV, "1") == "0":
        return {}
    try:
        import uvloop  # noqa: F401 (only whether it is there)
    except ImportError:
        return {}
    return {"use_uvloop": True}


def _stdout_gone() -> int:
    """The reader of stdout went away (`| head -1`): stop quietly, as a SIGPIPE'd command would."""
    # Python flushes stdout again at exit: point it at /dev/null so that flush cannot fail too.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `toolscore` console script."""
    args = _parser().parse_args(argv)
    try:
        code = _command(args)
        sys.stdout.flush()
    except BrokenPipeError:
        return _stdout_gone()
    return code


if __name__ == "__main__":
    sys.exit(main())
