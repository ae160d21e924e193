"""The `import`, `register` and `doctor` commands: arguments in, lines out, an exit status.

A problem with a file (a client's, servers.json, the env file) is a `ConfigError` naming it:
printed on stderr with exit status 2, and nothing is written.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from toolscore.errors import ConfigError

__all__ = ["EXIT_FILE", "add_parsers", "run"]

Say = Callable[[str], None]

EXIT_FILE = 2
"""A missing, unreadable or malformed file: the same status as a servers.json error."""
DOCTOR_TIMEOUT = 60.0
"""Seconds doctor gives toolscore to start and list its tools (a hang detector, not a speed check)."""


def _import(args: argparse.Namespace, out: Say) -> int:
    from toolscore.clients.importing import default_into, import_servers

    cwd = Path.cwd()
    outcome = import_servers(
        args.source,
        into=(args.into or default_into(args.config, cwd)).absolute(),
        dry_run=args.dry_run,
        env=os.environ,
        platform=sys.platform,
        cwd=cwd,
    )
    for line in outcome.lines:
        out(line)
    if outcome.added and not args.dry_run and args.source in _clients():
        out(f"Next: toolscore register --client {args.source} --replace-imported")
    return 0


def _register(args: argparse.Namespace, out: Say) -> int:
    from toolscore.clients.register import register, undo
    from toolscore.config import default_config_path

    cwd = Path.cwd()
    if args.undo:
        outcome = undo(args.client, file=args.file, env=os.environ, platform=sys.platform, cwd=cwd)
    else:
        outcome = register(
            args.client,
            config=args.config or default_config_path(cwd),
            transport=args.transport,
            url=args.url,
            replace_imported=args.replace_imported,
            dry_run=args.dry_run,
            file=args.file,
            env=os.environ,
            platform=sys.platform,
            cwd=cwd,
        )
    for line in outcome.lines:
        out(line)
    return 0


def _doctor(args: argparse.Namespace, out: Say) -> int:
    import anyio

    from toolscore.clients.doctor import diagnose, diagnose_all

    cwd = Path.cwd()
    if args.client is not None:
        found = [
            anyio.run(
                lambda: diagnose(
                    args.client, file=args.file, env=os.environ, platform=sys.platform, cwd=cwd, timeout=args.timeout
                )
            )
        ]
    else:
        found = anyio.run(lambda: diagnose_all(env=os.environ, platform=sys.platform, cwd=cwd, timeout=args.timeout))
        if not any(f.registered for f in found):
            out("no client here starts toolscore: run `toolscore register --client CLIENT`")
            return 1
        found = [f for f in found if f.registered]
    for diagnosis in found:
        out("\n".join(diagnosis.lines))
        out(f"  first problem: {diagnosis.problem}" if diagnosis.problem else "  no problem found")
    return 1 if any(f.problem for f in found) else 0


def _clients() -> tuple[str, ...]:
    from toolscore.clients.locations import CLIENTS

    return tuple(CLIENTS)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    """The three commands' arguments, added to the `toolscore` parser."""
    clients = _clients()
    known = ", ".join(clients)
    imp = sub.add_parser("import", parents=[common], help="copy a client's MCP servers into servers.json")
    imp.add_argument(
        "--from", dest="source", required=True, metavar="CLIENT|FILE", help=f"a client ({known}) or its file"
    )
    imp.add_argument(
        "--into", type=Path, help="the servers.json to merge into (default: --config, ./servers.json, the user's)"
    )
    imp.add_argument("--dry-run", action="store_true", help="print what would change as a diff; write nothing")

    reg = sub.add_parser("register", parents=[common], help="make a client start toolscore (a backup first)")
    reg.add_argument("--client", required=True, choices=clients)
    reg.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    reg.add_argument("--url", help="with --transport http: the gateway's address (default: http://127.0.0.1:8765/mcp)")
    reg.add_argument(
        "--replace-imported", action="store_true", help="also remove the client's entries servers.json now holds"
    )
    reg.add_argument("--dry-run", action="store_true", help="print what would change as a diff; write nothing")
    reg.add_argument("--undo", action="store_true", help="put the client's file back as it was before the last write")
    reg.add_argument("--file", type=Path, help="the client's file (default: its user file)")

    doc = sub.add_parser("doctor", parents=[common], help="start toolscore as a client would and say what is wrong")
    doc.add_argument("--client", choices=clients, help="only this client (default: every client that starts toolscore)")
    doc.add_argument("--file", type=Path, help="with --client: the client's file (default: its user file)")
    doc.add_argument("--timeout", type=float, default=DOCTOR_TIMEOUT, help=argparse.SUPPRESS)


def run(args: argparse.Namespace, *, out: Say, err: Say) -> int:
    """Run `import`, `register` or `doctor`; `out` and `err` write a line to stdout and stderr."""
    try:
        if args.command == "import":
            return _import(args, out)
        if args.command == "register":
            return _register(args, out)
        return _doctor(args, out)
    except ConfigError as exc:
        err(f"toolscore: error: {exc}")
        return EXIT_FILE
