"""A client's server entries in servers.json's shape, and toolscore's own entry in the client's; pure.

Each client spells a few things its own way: VS Code and Cursor write `${env:NAME}`, Gemini
`$NAME`; Windsurf puts an HTTP address under `serverUrl`, Gemini under `httpUrl` (its `url` is
SSE) and counts timeouts in milliseconds; Codex writes `enabled = false`, its bearer token as the
name of a variable, its timeouts as `*_sec`. Reading turns all of these into servers.json's keys
and `${NAME}` references; a key toolscore has no use for is left out and named in a note.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from toolscore.clients.locations import Client
from toolscore.config import ServerConfig

__all__ = ["Imported", "Where", "is_toolscore", "normalized", "read_entries", "references", "toolscore_entry"]

TOOLSCORE = "toolscore"
"""The name `register` gives toolscore's entry in a client's file."""
TOKEN_VAR = "TOOLSCORE_TOKEN"

_KNOWN = frozenset(ServerConfig.model_fields) - {"name"}
_ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
_BARE_REF = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_INPUT_REF = re.compile(r"\$\{input:([^}]*)\}")
_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-[^}]*)?\}")


@dataclass(slots=True)
class Imported:
    """One server read from a client's file, in servers.json's shape."""

    name: str
    entry: dict[str, Any]
    notes: list[str] = field(default_factory=list)


_EDITOR_REF = re.compile(r"\$\{(workspaceFolder|workspaceFolderBasename|userHome)\}")
"""The editors' (VS Code, Cursor) own variables, which name folders rather than the environment."""


@dataclass(frozen=True, slots=True)
class Where:
    """What the editors' own variables stand for where the entry is read."""

    folder: str
    """`${workspaceFolder}`: the project folder."""
    home: str
    """`${userHome}`."""

    def value(self, name: str) -> str:
        if name == "userHome":
            return self.home
        return PurePath(self.folder).name if name == "workspaceFolderBasename" else self.folder


def _references(client: Client, text: str, item: Imported, where: Where | None) -> str:
    """One string with the client's variable syntax written as `${NAME}`."""
    text = _ENV_REF.sub(r"${\1}", text)
    if client.name == "gemini":
        text = _BARE_REF.sub(r"${\1}", text)
    if where is not None:
        text = _EDITOR_REF.sub(lambda m: where.value(m.group(1)), text)

    def input_ref(match: re.Match[str]) -> str:
        var = re.sub(r"[^A-Za-z0-9_]", "_", match.group(1)).upper() or "INPUT"
        item.notes.append(
            f"{item.name}: VS Code asks for '{match.group(1)}' at start; toolscore reads ${{{var}}} instead"
        )
        return "${" + var + "}"

    return _INPUT_REF.sub(input_ref, text)


def _strings(client: Client, value: Any, item: Imported, where: Where | None) -> Any:
    if isinstance(value, str):
        return _references(client, value, item, where)
    if isinstance(value, list):
        return [_strings(client, v, item, where) for v in value]
    if isinstance(value, dict):
        return {k: _strings(client, v, item, where) for k, v in value.items()}
    return value


def _codex(raw: dict[str, Any]) -> dict[str, Any]:
    entry = dict(raw)
    if entry.pop("enabled", True) is False:
        entry["disabled"] = True
    headers = dict(entry.pop("http_headers", None) or {})
    for header, var in (entry.pop("env_http_headers", None) or {}).items():
        headers[header] = "${" + str(var) + "}"
    if token := entry.pop("bearer_token_env_var", None):
        headers["Authorization"] = "Bearer ${" + str(token) + "}"
    if headers:
        entry["headers"] = headers
    env = dict(entry.get("env") or {})
    for var in entry.pop("env_vars", None) or []:
        env.setdefault(str(var), "${" + str(var) + "}")  # passed through from Codex's environment
    if env:
        entry["env"] = env
    if (seconds := entry.pop("startup_timeout_sec", None)) is not None:
        entry["connect_timeout"] = seconds
    if (seconds := entry.pop("tool_timeout_sec", None)) is not None:
        entry["timeout"] = seconds
    allow, deny = entry.pop("enabled_tools", None), entry.pop("disabled_tools", None)
    if allow is not None or deny is not None:
        entry["tools"] = {**({"allow": allow} if allow is not None else {}), **({"deny": deny} if deny else {})}
    if "url" in entry:
        entry["type"] = "http"
    return entry


def _gemini(raw: dict[str, Any]) -> dict[str, Any]:
    entry = dict(raw)
    if "httpUrl" in entry:
        entry["url"], entry["type"] = entry.pop("httpUrl"), "http"
    elif "url" in entry:
        entry.setdefault("type", "sse")  # Gemini's `url` is an SSE endpoint
    if isinstance(ms := entry.pop("timeout", None), int | float) and ms > 0:
        entry["timeout"] = ms / 1000  # milliseconds there, seconds here
    allow, deny = entry.pop("includeTools", None), entry.pop("excludeTools", None)
    if allow is not None or deny is not None:
        entry["tools"] = {**({"allow": allow} if allow is not None else {}), **({"deny": deny} if deny else {})}
    return entry


def _common(client: Client, raw: dict[str, Any]) -> dict[str, Any]:
    entry = dict(raw)
    if client.url_key != "url" and client.url_key in entry:
        entry["url"] = entry.pop(client.url_key)
        entry.setdefault("type", "http")
    if entry.pop("enabled", True) is False:
        entry["disabled"] = True
    return entry


def _text(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, int | float) else value


def read_entries(
    client: Client, document: Mapping[str, Any], where: Where | None = None
) -> tuple[list[Imported], list[str]]:
    """The servers of a client's decoded file, toolscore's own left out, and notes on the file as a whole.

    `where` gives the editors' `${workspaceFolder}` and `${userHome}` their values.

    Raises:
        ValueError: the servers key holds something other than an object of objects.
    """
    servers = document.get(client.servers_key, {})
    if not isinstance(servers, Mapping):
        raise ValueError(f"'{client.servers_key}' is not an object")
    excluded: set[str] = set()
    if client.name == "gemini" and isinstance(mcp := document.get("mcp"), Mapping):
        excluded = {str(n) for n in mcp.get("excluded") or [] if isinstance(n, str)}
    imported: list[Imported] = []
    notes: list[str] = []
    for name, raw in servers.items():
        if not isinstance(raw, Mapping):
            raise ValueError(f"'{client.servers_key}.{name}' is not an object")
        if is_toolscore(name, raw):
            notes.append(f"{name}: toolscore's own entry, not imported")
            continue
        imported.append(normalized(client, str(name), raw, disabled=name in excluded, where=where))
    return imported, notes


def normalized(
    client: Client, name: str, raw: Mapping[str, Any], *, disabled: bool = False, where: Where | None = None
) -> Imported:
    """One entry of a client's file in servers.json's shape."""
    entry = dict(raw)
    if client.name == "codex":
        entry = _codex(entry)
    elif client.name == "gemini":
        entry = _gemini(entry)
    else:
        entry = _common(client, entry)
    if disabled:
        entry["disabled"] = True
    for key in ("env", "headers"):
        if isinstance(values := entry.get(key), Mapping):
            # Clients hand these to a process or a request as text: `8080` and `true` are meant as such.
            entry[key] = {k: _text(v) for k, v in values.items()}
    item = Imported(name, {}, [])
    dropped = sorted(k for k in entry if k not in _KNOWN)
    item.entry = {k: _strings(client, v, item, where) for k, v in entry.items() if k in _KNOWN}
    if dropped:
        item.notes.append(f"{name}: left out what toolscore does not use: {', '.join(dropped)}")
    if item.entry.get("disabled") is True:
        item.notes.append(f"{name}: disabled in {client.title}, imported disabled")
    return item


def references(value: Any) -> set[str]:
    """The variable names `${NAME}` references in every string of a JSON value."""
    if isinstance(value, str):
        return {m.group(1) for m in _REF.finditer(value) if "${" + m.group(1) + "}" in value}
    if isinstance(value, list):
        return set().union(*(references(v) for v in value)) if value else set()
    if isinstance(value, Mapping):
        return set().union(*(references(v) for v in value.values())) if value else set()
    return set()


def is_toolscore(name: str, entry: Mapping[str, Any]) -> bool:
    """Whether a client's entry starts (or reaches) toolscore itself."""
    if name.casefold() == TOOLSCORE:
        return True
    command = entry.get("command")
    if isinstance(command, str) and command.strip():
        stem = PurePath(command.replace("\\", "/")).name.casefold().removesuffix(".exe")
        if stem == TOOLSCORE:
            return True
        args = [a for a in entry.get("args") or [] if isinstance(a, str)]
        return any(a == "-m" and b == TOOLSCORE for a, b in itertools.pairwise(args))
    return False


def toolscore_entry(client: Client, *, command: list[str], config: str, url: str | None, token: bool) -> dict[str, Any]:
    """toolscore's entry in the client's own spelling.

    Args:
        client: Whose file it goes in.
        command: The program and arguments that start this installation (`serve` comes after).
        config: The absolute path of servers.json.
        url: The HTTP front's address, for an HTTP entry; None for stdio.
        token: Whether the entry sends the bearer token from `$TOOLSCORE_TOKEN`.

    Raises:
        ValueError: the client's file cannot hold an HTTP server.
    """
    if url is None:
        entry: dict[str, Any] = {"type": "stdio"} if client.http_type else {}
        return {**entry, "command": command[0], "args": [*command[1:], "serve", "--config", config]}
    if client.stdio_only:
        raise ValueError(
            f"{client.title}'s file takes only stdio servers: register with --transport stdio, "
            f"or add {url} as a custom connector in {client.title}'s settings"
        )
    if client.name == "codex":
        return {"url": url, **({"bearer_token_env_var": TOKEN_VAR} if token else {})}
    entry = {"type": client.http_type} if client.http_type else {}
    entry[client.url_key] = url
    if token:
        entry["headers"] = {"Authorization": "Bearer " + client.env_reference.format(TOKEN_VAR)}
    return entry
