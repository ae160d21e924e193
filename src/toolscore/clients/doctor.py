"""`toolscore doctor`: start toolscore the way a client would, connect, and say what is wrong.

It reads toolscore's entry from the client's file and follows it as the client does: the command
line, working folder and environment the entry gives (over the small environment MCP clients
pass to a server), then a real MCP client lists the tools. Each server's state comes from the
same command line with `serve` turned into `check --json`, so it is the gateway's own report.
The first problem found is said in words a person can act on.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio

from toolscore.clients.documents import read_document
from toolscore.clients.entries import is_toolscore, normalized
from toolscore.clients.locations import CLIENTS, Client, client_files
from toolscore.clients.register import target_file
from toolscore.errors import ConfigError

__all__ = ["Diagnosis", "diagnose", "diagnose_all"]

_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_SERVE_OPTIONS_KEPT = ("--config", "--log-level")
"""What `check` takes over from the entry's `serve` arguments."""


@dataclass(slots=True)
class Diagnosis:
    """What doctor found for one client."""

    client: Client
    path: Path
    lines: list[str] = field(default_factory=list)
    problem: str | None = None
    registered: bool = True
    """Whether the client's file has an entry for toolscore at all."""

    def fail(self, problem: str) -> Diagnosis:
        if self.problem is None:
            self.problem = problem
        return self


def _expanded(value: Any, env: Mapping[str, str], missing: set[str]) -> Any:
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is None:
                missing.add(name)
            return default or ""

        return _REF.sub(sub, value)
    if isinstance(value, list):
        return [_expanded(v, env, missing) for v in value]
    if isinstance(value, dict):
        return {k: _expanded(v, env, missing) for k, v in value.items()}
    return value


def _child_env(entry_env: Mapping[str, str]) -> dict[str, str]:
    # What an SDK-based client gives a server: a few variables of its own, then the entry's.
    from mcp.client.stdio import get_default_environment

    return {**get_default_environment(), **entry_env}


def _first_problem(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower():
            return line[:400]
    return lines[-1][:400] if lines else "it wrote nothing on stderr"


def _check_argv(command: str, args: list[str]) -> list[str] | None:
    """The entry's command line with `serve …` turned into `check --json`, or None without `serve`."""
    if "serve" not in args:
        return None
    at = args.index("serve")
    kept: list[str] = []
    rest = args[at + 1 :]
    for i, arg in enumerate(rest):
        name = arg.split("=", 1)[0]
        if name in _SERVE_OPTIONS_KEPT:
            kept += [arg] if "=" in arg else rest[i : i + 2]
    return [command, *args[:at], "check", "--json", *kept]


async def _connect_stdio(
    command: str, args: list[str], env: dict[str, str], cwd: str | None, timeout: float, errlog: TextIO
) -> int:
    """Start the entry as a client would and list the tools; their count."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=command, args=args, env=env, cwd=cwd)
    with anyio.fail_after(timeout):
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            result = await client.list_tools()
            count = len(result.tools)
            while result.next_cursor is not None:
                result = await client.list_tools(cursor=result.next_cursor)
                count += len(result.tools)
            return count


async def _connect_http(url: str, headers: dict[str, str], timeout: float) -> int:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    with anyio.fail_after(timeout):
        http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout))
        async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            return len((await client.list_tools()).tools)


async def _server_states(
    argv: list[str], env: dict[str, str], cwd: str | None, found: Diagnosis, timeout: float
) -> None:
    try:
        with anyio.fail_after(timeout * 2):
            proc = await anyio.run_process(argv, env=env, cwd=cwd, check=False)
    except (OSError, TimeoutError) as exc:
        found.fail(f"`toolscore check` did not finish: {exc}")
        return
    try:
        rows = json.loads(proc.stdout)
    except ValueError:
        found.fail(f"`toolscore check` failed: {_first_problem(proc.stderr.decode('utf-8', 'replace'))}")
        return
    table = [("SERVER", "STATE", "TOOLS", "PROBLEM")]
    for row in rows:
        error = (row.get("error") or "").splitlines()
        table.append((str(row.get("name")), str(row.get("state")), str(row.get("tools", 0)), error[0] if error else ""))
        if row.get("state") != "up":
            found.fail(
                f"server '{row.get('name')}' is {row.get('state')}: {error[0] if error else 'no reason given'}"
                " (fix its entry in servers.json; `toolscore check` shows the same)"
            )
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    found.lines.extend("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table)
    if not rows:
        found.lines.append("  servers.json lists no server")


def _startable(found: Diagnosis, command: str, cwd: str | None, path: str | None) -> bool:
    """Whether the working folder and the program are there (said as the finding when not)."""
    title = found.client.title
    if cwd and not os.path.isdir(cwd):
        found.fail(f"its working folder {cwd} does not exist")
        return False
    resolved = command if os.path.isabs(command) else shutil.which(command, path=path)
    if resolved is None or not os.access(resolved, os.X_OK):
        found.fail(
            f"{title} cannot run '{command}': no such program"
            + ("" if os.path.isabs(command) else " on its PATH")
            + f"; run `toolscore register --client {found.client.name}` to write this installation's full path"
        )
        return False
    if not os.path.isabs(command):
        found.lines.append(f"  note: '{command}' is found through PATH; {title} may start servers with a shorter one")
    return True


async def _diagnose_entry(
    found: Diagnosis, name: str, raw: Mapping[str, Any], env: Mapping[str, str], timeout: float
) -> None:
    title = found.client.title
    item = normalized(found.client, name, raw)
    if item.entry.get("disabled") is True:
        found.fail(f"toolscore's entry '{name}' is disabled in {title}: enable it there")
        return
    missing: set[str] = set()
    entry = _expanded(item.entry, env, missing)
    if missing:
        found.fail(f"the entry refers to {', '.join('$' + m for m in sorted(missing))}, which is not set")
        return
    if entry.get("url"):
        url = str(entry["url"])
        found.lines.append(f"  connects to: {url}")
        try:
            count = await _connect_http(url, dict(entry.get("headers") or {}), timeout)
        except Exception as exc:  # any failure to connect is the finding, said in words
            found.fail(
                f"nothing answers as an MCP server at {url} ({_summary(exc)}): start it with "
                "`toolscore serve --transport http`, or check the URL and token"
            )
            return
        found.lines.append(f"  connected: {count} tools")
        return
    command, args = str(entry.get("command")), [str(a) for a in entry.get("args") or []]
    child_env = _child_env({str(k): str(v) for k, v in (entry.get("env") or {}).items()})
    cwd = entry.get("cwd")
    found.lines.append(f"  starts: {' '.join([command, *args])}" + (f" (in {cwd})" if cwd else ""))
    if not _startable(found, command, cwd, child_env.get("PATH")):
        return
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        try:
            count = await _connect_stdio(command, args, child_env, cwd, timeout, errlog)
        except Exception as exc:  # any failure to start is the finding, said in words
            errlog.seek(0)
            stderr = errlog.read()
            why = _first_problem(stderr) if stderr.strip() else _summary(exc)
            found.fail(f"toolscore did not start as {title} starts it: {why}")
            return
    found.lines.append(f"  connected: {count} tools")
    argv = _check_argv(command, args)
    if argv is not None:
        await _server_states(argv, child_env, cwd, found, timeout)


def _summary(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _summary(exc.exceptions[0])
    text = str(exc).splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


async def diagnose(
    client_name: str, *, file: Path | None, env: Mapping[str, str], platform: str, cwd: Path, timeout: float
) -> Diagnosis:
    """Check one client's toolscore entry, end to end.

    Raises:
        ConfigError: naming the file, when the client's file is missing, unreadable or malformed.
    """
    client = CLIENTS[client_name]
    path = target_file(client_name, file, env=env, platform=platform, cwd=cwd)
    document = read_document(path, client)
    found = Diagnosis(client, path, [f"{client.title} ({path}):"])
    ours = [(name, raw) for name, raw in document.servers.items() if is_toolscore(name, raw)]
    if not ours:
        found.registered = False
        return found.fail(
            f"{client.title} does not start toolscore: run `toolscore register --client {client_name}`, then restart it"
        )
    for name, raw in ours:
        await _diagnose_entry(found, name, raw, env, timeout)
    return found


async def diagnose_all(*, env: Mapping[str, str], platform: str, cwd: Path, timeout: float) -> list[Diagnosis]:
    """Check every client whose user file is there; a client without one is skipped."""
    found: list[Diagnosis] = []
    for name in CLIENTS:
        path = client_files(name, env=env, platform=platform, cwd=cwd)[0].path
        if not path.exists():
            continue
        try:
            found.append(await diagnose(name, file=None, env=env, platform=platform, cwd=cwd, timeout=timeout))
        except ConfigError as exc:
            found.append(Diagnosis(CLIENTS[name], path, [f"{CLIENTS[name].title} ({path}):"]).fail(str(exc)))
    return found
