"""Codex's config.toml: its `[mcp_servers.NAME]` tables read, written and removed in place; pure.

Reading is the standard library's `tomllib`. Writing touches only the tables of the servers it
changes: a removed server's `[mcp_servers.NAME]` and `[mcp_servers.NAME.*]` blocks (each from its
header to the next header) are cut out, a written one is appended as one table with inline
sub-tables; every other line of the file is kept byte for byte. The result is decoded and
compared with what was meant before it is returned, so a layout this editor does not handle (a
server defined with dotted keys under the root table, say) is an error, never a damaged file.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from typing import Any

from toolscore._json import nested_deeper_than
from toolscore.clients.jsonc import MAX_DEPTH

__all__ = ["TomlError", "dumps_value", "edit_servers", "loads"]

SERVERS_KEY = "mcp_servers"


class TomlError(ValueError):
    """The text is not TOML, or an edit did not give what was meant."""


def loads(text: str) -> dict[str, Any]:
    """Decode TOML.

    Raises:
        TomlError: the text is not TOML, with the decoder's line and column.
    """
    try:
        value = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlError(f"not valid TOML: {exc}") from None
    except RecursionError:
        raise TomlError(f"nested too deeply (more than {MAX_DEPTH} levels)") from None
    if nested_deeper_than(value, MAX_DEPTH):
        raise TomlError(f"nested too deeply (more than {MAX_DEPTH} levels)")
    return value


_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _key(key: str) -> str:
    return key if _BARE.fullmatch(key) else _string(key)


def _string(value: str) -> str:
    # JSON's escapes are TOML's basic-string escapes; DEL must be escaped in TOML too.
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def dumps_value(value: Any) -> str:
    """One TOML value: a string, boolean, number, array or inline table."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(dumps_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {dumps_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    raise TomlError(f"cannot write a {type(value).__name__} in TOML")


def _table(name: str, entry: Mapping[str, Any]) -> str:
    lines = [f"[{SERVERS_KEY}.{_key(name)}]"]
    lines += [f"{_key(k)} = {dumps_value(v)}" for k, v in entry.items()]
    return "\n".join(lines) + "\n"


_HEADER = re.compile(r"\s*\[\[?[^\[\]]")


def _header_path(line: str) -> tuple[str, ...] | None:
    """The key path of a table header line (`[a."b c"]` -> ("a", "b c")), or None for another line."""
    if _HEADER.match(line) is None:
        return None
    try:
        decoded: Any = tomllib.loads(line.replace("[[", "[", 1).replace("]]", "]", 1))
    except tomllib.TOMLDecodeError:
        return None
    path: list[str] = []
    while isinstance(decoded, dict) and len(decoded) == 1:
        key, decoded = next(iter(decoded.items()))
        path.append(key)
    return tuple(path)


def _without(text: str, names: set[str]) -> str:
    kept: list[str] = []
    dropping = False
    for line in text.splitlines(keepends=True):
        path = _header_path(line)
        if path is not None:
            dropping = len(path) >= 2 and path[0] == SERVERS_KEY and path[1] in names
        if not dropping:
            kept.append(line)
    return "".join(kept)


def edit_servers(text: str, changes: Mapping[str, Mapping[str, Any] | None]) -> str:
    """`text` with servers set (name -> entry) or removed (name -> None) under `[mcp_servers]`.

    Raises:
        TomlError: the text is not TOML, or the edit would not give the intended value.
    """
    document = loads(text)
    intended: dict[str, Any] = json.loads(json.dumps(document, default=str))
    servers = document.get(SERVERS_KEY, {})
    if not isinstance(servers, dict):
        raise TomlError(f"'{SERVERS_KEY}' is not a table")
    result = _without(text, set(changes))
    for name, entry in changes.items():
        if entry is not None:
            result = result.rstrip("\n") + ("\n\n" if result.strip() else "") + _table(name, entry)
    intended_servers = intended.setdefault(SERVERS_KEY, {})
    for name, entry in changes.items():
        if entry is None:
            intended_servers.pop(name, None)
        else:
            intended_servers[name] = json.loads(json.dumps(entry))
    got = json.loads(json.dumps(loads(result), default=str))
    for decoded in (got, intended):
        if decoded.get(SERVERS_KEY) == {}:
            decoded.pop(SERVERS_KEY)  # an empty [mcp_servers] and none at all mean the same
    if got != intended:
        raise TomlError("editing this file in place would change more than meant; edit it by hand")
    return result
