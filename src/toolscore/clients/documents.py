"""A client's file as text and decoded document, its edits, and the diffs `--dry-run` prints.

Every problem with a file becomes a `ConfigError` naming it, which the command line reports with
exit status 2 before anything is written.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolscore.clients import jsonc, toml_tables
from toolscore.clients.files import read_client_file
from toolscore.clients.locations import CLIENTS, Client
from toolscore.errors import ConfigError

__all__ = ["Document", "client_for_file", "diff", "edit_servers", "parse_document", "read_document"]


@dataclass(frozen=True, slots=True)
class Document:
    """One client file: where, whose, its text (empty for a file not there yet) and decoded content."""

    path: Path
    client: Client
    text: str
    data: dict[str, Any]

    @property
    def servers(self) -> Mapping[str, Any]:
        value = self.data.get(self.client.servers_key, {})
        return value if isinstance(value, Mapping) else {}


def parse_document(path: Path, client: Client, text: str) -> Document:
    """Decode a client's file text.

    Raises:
        ConfigError: naming the file: not JSON (with comments) / TOML, or not an object at the top.
    """
    try:
        data: Any = toml_tables.loads(text) if client.format == "toml" else (jsonc.loads(text) if text.strip() else {})
    except (jsonc.JsoncError, toml_tables.TomlError) as exc:
        raise ConfigError(str(exc), path=str(path)) from None
    if not isinstance(data, dict):
        raise ConfigError("the top level must be an object", path=str(path))
    servers = data.get(client.servers_key, {})
    if not isinstance(servers, dict) or not all(isinstance(v, dict) for v in servers.values()):
        raise ConfigError("must be an object mapping server names to entries", path=str(path), field=client.servers_key)
    return Document(path, client, text, data)


def read_document(path: Path, client: Client, *, missing_ok: bool = False) -> Document:
    """Read and decode a client's file; with `missing_ok`, a file not there yet is an empty one.

    Raises:
        ConfigError: naming the file, when it cannot be read or decoded.
    """
    if missing_ok and not path.exists() and not path.is_symlink():
        return Document(path, client, "", {})
    return parse_document(path, client, read_client_file(path, title=client.title))


def client_for_file(path: Path, text: str) -> Client:
    """Whose format a file given by path is in, from its name and content."""
    name = path.name.lower()
    if name.endswith(".toml"):
        return CLIENTS["codex"]
    if name == "mcp_config.json":
        return CLIENTS["windsurf"]
    if name == "settings.json" and path.parent.name == ".gemini":
        return CLIENTS["gemini"]
    if name == "mcp.json" and path.parent.name in (".vscode", "User"):
        return CLIENTS["vscode"]
    if name == "mcp.json" and path.parent.name == ".cursor":
        return CLIENTS["cursor"]
    try:
        data = jsonc.loads(text) if text.strip() else {}
    except jsonc.JsoncError:
        data = {}
    if isinstance(data, dict) and "servers" in data and "mcpServers" not in data:
        return CLIENTS["vscode"]
    return CLIENTS["claude-desktop"]  # the plain `mcpServers` shape most clients share


def edit_servers(document: Document, changes: dict[str, Any | None]) -> str:
    """The file's text with servers set (name -> entry) or removed (name -> None), the rest kept.

    Raises:
        ConfigError: naming the file, when it cannot be edited in place safely.
    """
    try:
        if document.client.format == "toml":
            return toml_tables.edit_servers(document.text, changes)
        return jsonc.edit_object(document.text, (document.client.servers_key,), changes)
    except (jsonc.JsoncError, toml_tables.TomlError) as exc:
        raise ConfigError(str(exc), path=str(document.path)) from None


def diff(path: Path, old: str, new: str) -> list[str]:
    """A unified diff of one file's change, as lines."""
    return [
        line.rstrip("\n")
        for line in difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), f"{path} (now)", f"{path} (after)"
        )
    ]
