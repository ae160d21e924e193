"""Where each MCP client keeps its server list, per operating system, and how it spells it; pure.

Every path is derived from the environment passed in (`HOME`/`USERPROFILE`, `APPDATA`,
`XDG_CONFIG_HOME`, `CODEX_HOME`, `CLAUDE_CONFIG_DIR`), never from the real home directory
directly, so tests and other machines resolve them the same way. docs/configuration.md lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath
from typing import Literal

from toolscore.errors import ConfigError

__all__ = ["CLIENTS", "Client", "ClientFile", "client_files", "home_dir"]

Format = Literal["json", "toml"]
Scope = Literal["user", "project"]


@dataclass(frozen=True, slots=True)
class Client:
    """One MCP client: its name on the command line, the shape of its file, how it writes references."""

    name: str
    title: str
    """As the person knows it: `Claude Desktop`."""
    format: Format
    servers_key: str
    """`mcpServers`, VS Code's `servers`, Codex's `mcp_servers`."""
    env_reference: str
    """How the client's file refers to an environment variable, `{}` standing for the name."""
    url_key: str = "url"
    """The key of a streamable HTTP server's address (Windsurf: `serverUrl`, Gemini: `httpUrl`)."""
    http_type: str | None = None
    """The `type` value an HTTP entry carries, where the client wants one."""
    stdio_only: bool = False
    """The file takes only stdio servers (Claude Desktop adds remote ones in its settings)."""


CLIENTS: dict[str, Client] = {
    c.name: c
    for c in (
        Client("claude-desktop", "Claude Desktop", "json", "mcpServers", "${{{}}}", stdio_only=True),
        Client("claude-code", "Claude Code", "json", "mcpServers", "${{{}}}", http_type="http"),
        Client("cursor", "Cursor", "json", "mcpServers", "${{env:{}}}"),
        Client("vscode", "VS Code", "json", "servers", "${{env:{}}}", http_type="http"),
        Client("windsurf", "Windsurf", "json", "mcpServers", "${{env:{}}}", url_key="serverUrl"),
        Client("codex", "Codex", "toml", "mcp_servers", "${{{}}}"),
        Client("gemini", "Gemini CLI", "json", "mcpServers", "${{{}}}", url_key="httpUrl"),
    )
}
"""Every client `import`, `register` and `doctor` know, by command-line name."""


@dataclass(frozen=True, slots=True)
class ClientFile:
    """One configuration file of a client."""

    client: Client
    path: Path
    scope: Scope


def _path(platform: str, raw: str | PurePath) -> PurePath:
    return PureWindowsPath(raw) if platform == "win32" else PurePosixPath(raw)


def home_dir(env: Mapping[str, str], platform: str) -> PurePath:
    """The user's home folder as the environment gives it.

    Raises:
        ConfigError: the environment names no home folder.
    """
    key = "USERPROFILE" if platform == "win32" else "HOME"
    home = env.get(key) or (env.get("HOME") if platform == "win32" else None)
    if not home:
        raise ConfigError(f"${key} is not set: cannot tell where the clients keep their files (pass --file FILE)")
    return _path(platform, home)


def _user_file(client: str, env: Mapping[str, str], platform: str) -> PurePath:
    home = home_dir(env, platform)
    appdata = _path(platform, env["APPDATA"]) if env.get("APPDATA") else home / "AppData" / "Roaming"
    mac_support = home / "Library" / "Application Support"
    xdg = _path(platform, env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
    # Per-OS application-data folder: Claude Desktop's and VS Code's files live under it.
    app = {"win32": appdata, "darwin": mac_support}.get(platform, xdg)
    if client == "claude-desktop":
        return app / "Claude" / "claude_desktop_config.json"
    if client == "claude-code":
        base = _path(platform, env["CLAUDE_CONFIG_DIR"]) if env.get("CLAUDE_CONFIG_DIR") else home
        return base / ".claude.json"
    if client == "cursor":
        return home / ".cursor" / "mcp.json"
    if client == "vscode":
        return app / "Code" / "User" / "mcp.json"
    if client == "windsurf":
        return home / ".codeium" / "windsurf" / "mcp_config.json"
    if client == "codex":
        return (_path(platform, env["CODEX_HOME"]) if env.get("CODEX_HOME") else home / ".codex") / "config.toml"
    if client == "gemini":
        return home / ".gemini" / "settings.json"
    raise ConfigError(f"unknown client '{client}' (known: {', '.join(CLIENTS)})")


_PROJECT_FILES = {
    "claude-code": (".mcp.json",),
    "cursor": (".cursor", "mcp.json"),
    "vscode": (".vscode", "mcp.json"),
    "gemini": (".gemini", "settings.json"),
    "codex": (".codex", "config.toml"),  # read by Codex in a project it trusts
}
"""The file a project (the current folder) may hold, for the clients that read one."""


def client_files(name: str, *, env: Mapping[str, str], platform: str, cwd: Path) -> list[ClientFile]:
    """The client's files: its user file first, then the current folder's project file if it reads one.

    Raises:
        ConfigError: an unknown client, or no home folder in `env`.
    """
    client = CLIENTS.get(name)
    if client is None:
        raise ConfigError(f"unknown client '{name}' (known: {', '.join(CLIENTS)}), or pass a file path")
    files = [ClientFile(client, Path(_user_file(name, env, platform)), "user")]
    if name in _PROJECT_FILES:
        files.append(ClientFile(client, cwd.joinpath(*_PROJECT_FILES[name]), "project"))
    return files
