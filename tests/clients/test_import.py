"""`toolscore import`: every client's documented format, merged into servers.json (in process, no server started)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.clients.conftest import write
from toolscore.cli import main
from toolscore.clients.files import MAX_CLIENT_FILE_BYTES
from toolscore.config import load_config

GITHUB_PAT = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


def _servers(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data["mcpServers"]


def _import(*args: str) -> int:
    return main(["import", *args])


def test_claude_desktop_servers_are_merged_with_secrets_in_a_mode_600_env_file(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(
        home / ".config" / "Claude" / "claude_desktop_config.json",
        {
            "globalShortcut": "Ctrl+Space",
            "mcpServers": {
                "github": {
                    "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-github"],
                    "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": GITHUB_PAT, "LOG": "info"},
                },
                "files": {"command": "mcp-server-filesystem", "args": ["/srv"], "alwaysAllow": ["read_file"]},
            },
        },
    )
    assert _import("--from", "claude-desktop", "--into", "servers.json") == 0
    out = capsys.readouterr().out
    servers = _servers(Path("servers.json"))
    assert servers["github"]["env"] == {
        "GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_PERSONAL_ACCESS_TOKEN}",
        "LOG": "info",
    }
    assert servers["files"] == {"command": "mcp-server-filesystem", "args": ["/srv"]}
    assert "files: left out what toolscore does not use: alwaysAllow" in out
    env_file = Path("servers.env")
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert f"GITHUB_PERSONAL_ACCESS_TOKEN={GITHUB_PAT}" in env_file.read_text().splitlines()
    assert GITHUB_PAT not in Path("servers.json").read_text()
    assert GITHUB_PAT not in out
    assert f"1 secret(s) stored in {env_file.absolute()} (mode 600)" in out
    assert "Next: toolscore register --client claude-desktop --replace-imported" in out
    # The gateway reads the reference back from the env file.
    config = load_config("servers.json", env={})
    assert config.servers["github"].env["GITHUB_PERSONAL_ACCESS_TOKEN"] == GITHUB_PAT


def test_a_clash_gets_the_clients_name_as_suffix_and_the_same_server_is_not_imported_twice(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(
        Path("servers.json"), {"mcpServers": {"search": {"command": "other-search"}}, "toolscore": {"separator": "__"}}
    )
    write(
        home / ".cursor" / "mcp.json",
        {"mcpServers": {"search": {"command": "brave-search"}, "web": {"url": "https://example.com/mcp"}}},
    )
    assert _import("--from", "cursor") == 0
    out = capsys.readouterr().out
    servers = _servers(Path("servers.json"))
    assert servers["search"] == {"command": "other-search"}
    assert servers["search-cursor"] == {"command": "brave-search"}
    assert "search: servers.json has another server of that name, imported as search-cursor" in out
    assert json.loads(Path("servers.json").read_text())["toolscore"] == {"separator": "__"}
    before = Path("servers.json").read_text()
    assert _import("--from", "cursor") == 0
    assert Path("servers.json").read_text() == before
    out = capsys.readouterr().out
    assert "search: already in servers.json as search-cursor, skipped" in out
    assert "nothing to import" in out


def test_toolscores_own_entry_is_never_imported_and_disabled_entries_stay_disabled(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(
        home / ".codeium" / "windsurf" / "mcp_config.json",
        {
            "mcpServers": {
                "gateway": {"command": "/opt/ts/.venv/bin/toolscore", "args": ["serve"]},
                "also-us": {"command": "python3", "args": ["-m", "toolscore", "serve"]},
                "old": {"command": "old-server", "disabled": True},
                "remote": {"serverUrl": "https://example.com/mcp", "headers": {"X-Team": "blue"}},
            }
        },
    )
    assert _import("--from", "windsurf") == 0  # no ./servers.json: the user's servers.json
    user_config = home / ".config" / "toolscore" / "servers.json"
    servers = _servers(user_config)
    assert sorted(servers) == ["old", "remote"]
    assert servers["old"] == {"command": "old-server", "disabled": True}
    assert servers["remote"] == {"url": "https://example.com/mcp", "headers": {"X-Team": "blue"}, "type": "http"}
    out = capsys.readouterr().out
    assert "gateway: toolscore's own entry, not imported" in out
    assert "old: disabled in Windsurf, imported disabled" in out
    assert load_config(user_config).servers["old"].disabled


def test_vscode_user_and_workspace_files_with_comments_and_the_servers_key(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(
        home / ".config" / "Code" / "User" / "mcp.json",
        """// VS Code user MCP servers
{
  "inputs": [{"type": "promptString", "id": "api-key", "password": true}],
  "servers": {
    /* a remote one */
    "docs": {"type": "http", "url": "https://docs.example.com/mcp",
             "headers": {"Authorization": "Bearer ${input:api-key}"}},
    "local": {"type": "stdio", "command": "node", "args": ["${env:HOME}/srv/index.js",],}, // trailing commas
  },
}
""",
    )
    write(
        Path(".vscode") / "mcp.json", '{"servers": {"proj": {"command": "proj-server", "cwd": "${workspaceFolder}"}}}'
    )
    assert _import("--from", "vscode", "--into", "servers.json") == 0
    servers = _servers(Path("servers.json"))
    assert servers["local"] == {"type": "stdio", "command": "node", "args": ["${HOME}/srv/index.js"]}
    assert servers["proj"] == {"command": "proj-server", "cwd": str(Path.cwd())}
    # VS Code asks the person for the key; toolscore cannot, so it waits for a variable.
    assert servers["docs"]["headers"] == {"Authorization": "Bearer ${API_KEY}"}
    assert servers["docs"]["disabled"] is True
    out = capsys.readouterr().out
    assert "docs: imported disabled, it needs $API_KEY" in out


def test_codex_toml_servers_with_env_tables_bearer_tokens_and_enabled_false(home: Path) -> None:
    write(
        home / ".codex" / "config.toml",
        """model = "o3"

[mcp_servers.github]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-github"]
startup_timeout_sec = 20

[mcp_servers.github.env]
GITHUB_TOKEN = "PAT"

[mcp_servers.local]
command = "local-server"
env = { PORT = 8080, DEBUG = true }


[mcp_servers.linear]
url = "https://mcp.linear.app/mcp"
bearer_token_env_var = "LINEAR_TOKEN"
enabled = false
""".replace("PAT", GITHUB_PAT),
    )
    assert _import("--from", "codex", "--into", "servers.json") == 0
    servers = _servers(Path("servers.json"))
    assert servers["github"] == {
        "command": "npx",
        "args": ["-y", "@modelcontextprotocol/server-github"],
        "env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}"},
        "connect_timeout": 20,
    }
    assert servers["local"] == {"command": "local-server", "env": {"PORT": "8080", "DEBUG": "true"}}
    assert servers["linear"] == {
        "url": "https://mcp.linear.app/mcp",
        "headers": {"Authorization": "Bearer ${LINEAR_TOKEN}"},
        "disabled": True,
        "type": "http",
    }
    assert f"GITHUB_TOKEN={GITHUB_PAT}" in Path("servers.env").read_text()


def test_gemini_http_and_sse_addresses_millisecond_timeouts_tool_lists_and_exclusions(home: Path) -> None:
    write(
        home / ".gemini" / "settings.json",
        {
            "theme": "GitHub",
            "mcp": {"excluded": ["noisy"]},
            "mcpServers": {
                "api": {"httpUrl": "https://api.example.com/mcp", "timeout": 30000, "excludeTools": ["drop_table"]},
                "events": {"url": "https://events.example.com/sse"},
                "noisy": {"command": "noisy-server", "args": ["--dir", "$HOME/x"]},
            },
        },
    )
    assert _import("--from", "gemini", "--into", "servers.json") == 0
    servers = _servers(Path("servers.json"))
    assert servers["api"] == {
        "url": "https://api.example.com/mcp",
        "type": "http",
        "timeout": 30.0,
        "tools": {"deny": ["drop_table"]},
    }
    assert servers["events"] == {"url": "https://events.example.com/sse", "type": "sse"}
    assert servers["noisy"] == {"command": "noisy-server", "args": ["--dir", "${HOME}/x"], "disabled": True}
    config = load_config("servers.json")
    assert config.servers["events"].transport == "sse"


def test_claude_code_user_local_and_project_scopes_all_count(home: Path) -> None:
    local = {"mcpServers": {"db": {"command": "db-server"}}}
    elsewhere = {"mcpServers": {"not-here": {"command": "other-project-server"}}}
    write(
        home / ".claude.json",
        {
            "numStartups": 3,
            "mcpServers": {"mem": {"type": "stdio", "command": "mem-server"}},
            "projects": {str(Path.cwd()): local, "/some/other/project": elsewhere},
        },
    )
    write(Path(".mcp.json"), {"mcpServers": {"api": {"type": "http", "url": "https://x.example/mcp"}}})
    assert _import("--from", "claude-code", "--into", "servers.json") == 0
    assert sorted(_servers(Path("servers.json"))) == ["api", "db", "mem"]


def test_a_file_path_is_read_in_its_clients_format(home: Path, tmp_path: Path) -> None:
    source = write(tmp_path / "elsewhere" / "config.toml", '[mcp_servers.t]\ncommand = "t-server"\n')
    assert _import("--from", str(source), "--into", "servers.json") == 0
    assert _servers(Path("servers.json")) == {"t": {"command": "t-server"}}


def test_dry_run_prints_a_diff_and_writes_nothing(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(home / ".cursor" / "mcp.json", {"mcpServers": {"gh": {"command": "gh-mcp", "env": {"GH_TOKEN": GITHUB_PAT}}}})
    write(Path("servers.json"), {"mcpServers": {}})
    before = Path("servers.json").read_text()
    assert _import("--from", "cursor", "--dry-run") == 0
    out = capsys.readouterr().out
    assert Path("servers.json").read_text() == before
    assert not Path("servers.env").exists()
    assert sorted(os.listdir(".")) == ["servers.json"]  # no backup either
    assert '+      "command": "gh-mcp",' in out
    assert "+GH_TOKEN=***" in out
    assert GITHUB_PAT not in out
    assert out.rstrip().endswith("dry run: nothing written")


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "Cursor has no configuration file here"),
        ('{"mcpServers": {"a": {"command": "x"},,}}', "not valid JSON"),
        (b'{"mcpServers": {"a": {"command": "\xff"}}}', "not UTF-8 text"),
        ('{"mcpServers": ["a"]}', "mcpServers: must be an object mapping server names to entries"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"mcpServers": {"a": {"command": "x", "args": ' + "[" * 600 + "]" * 600 + "}}}", "nested too deeply"),
    ],
    ids=["missing", "malformed", "not-utf8", "wrong-shape", "deeply-nested", "nested-in-an-entry"],
)
def test_a_bad_client_file_exits_2_naming_it_and_nothing_is_written(
    home: Path, capsys: pytest.CaptureFixture[str], content: str | bytes | None, says: str
) -> None:
    path = home / ".cursor" / "mcp.json"
    if isinstance(content, bytes):
        path.parent.mkdir(parents=True)
        path.write_bytes(content)
    elif content is not None:
        write(path, content)
    assert _import("--from", "cursor") == 2
    err = capsys.readouterr().err
    assert str(path) in err
    assert says in err
    assert "Traceback" not in err
    assert os.listdir(".") == []
    assert not (home / ".config" / "toolscore").exists()


def test_a_client_file_that_is_a_folder_is_refused(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / ".gemini" / "settings.json").mkdir(parents=True)
    assert _import("--from", "gemini") == 2
    assert "not a regular file" in capsys.readouterr().err
    assert os.listdir(".") == []


def test_an_invalid_servers_json_is_not_overwritten(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(home / ".cursor" / "mcp.json", {"mcpServers": {"a": {"command": "a"}}})
    write(Path("servers.json"), '{"mcpServers": {')
    assert _import("--from", "cursor") == 2
    assert f"{Path('servers.json').absolute()}: not valid JSON" in capsys.readouterr().err
    assert Path("servers.json").read_text() == '{"mcpServers": {'


def test_an_entry_servers_json_would_refuse_is_left_out_with_the_reason(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(
        home / ".cursor" / "mcp.json",
        {"mcpServers": {"both": {"command": "x", "url": "https://x"}, "ok": {"command": "y"}}},
    )
    assert _import("--from", "cursor", "--into", "servers.json") == 0
    assert sorted(_servers(Path("servers.json"))) == ["ok"]
    assert "both: not imported, servers.json would not take it" in capsys.readouterr().out


def test_a_secret_name_already_used_with_another_value_gets_the_server_prefix(home: Path) -> None:
    write(Path("servers.json"), {"mcpServers": {}})
    write(Path("servers.env"), "API_KEY=old-value\n").chmod(0o600)
    write(home / ".cursor" / "mcp.json", {"mcpServers": {"maps": {"command": "maps", "env": {"API_KEY": "new-value"}}}})
    assert _import("--from", "cursor") == 0
    assert _servers(Path("servers.json"))["maps"]["env"] == {"API_KEY": "${MAPS_API_KEY}"}
    assert Path("servers.env").read_text().splitlines()[-2:] == ["API_KEY=old-value", "MAPS_API_KEY=new-value"]
    assert load_config("servers.json", env={}).servers["maps"].env == {"API_KEY": "new-value"}


def test_a_huge_client_file_is_refused_before_it_is_read(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = home / ".cursor" / "mcp.json"
    path.parent.mkdir()
    with path.open("wb") as fh:
        fh.truncate(MAX_CLIENT_FILE_BYTES + 1)  # sparse: nothing is written to disk
    assert _import("--from", "cursor") == 2
    assert f"{path}: Cursor's file is larger than" in capsys.readouterr().err
    assert os.listdir(".") == []


def test_an_unknown_client_name_lists_the_known_ones(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _import("--from", "claude") == 2
    assert "'claude' is neither a known client (claude-desktop, claude-code, cursor," in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_a_file_without_read_permission_is_named(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(home / ".cursor" / "mcp.json", {"mcpServers": {}})
    path.chmod(0)
    assert _import("--from", "cursor") == 2
    assert f"{path}: cannot read Cursor's file (Permission denied)" in capsys.readouterr().err


def test_secret_names_are_valid_variable_names_whatever_the_server_and_key(home: Path) -> None:
    write(
        home / ".cursor" / "mcp.json", {"mcpServers": {"1password": {"command": "op", "env": {"2FA_TOKEN": "x" * 20}}}}
    )
    assert _import("--from", "cursor", "--into", "servers.json") == 0
    imported = _servers(Path("servers.json"))
    assert imported["1password"]["env"] == {"2FA_TOKEN": "${_1PASSWORD_2FA_TOKEN}"}
    config = load_config("servers.json", env={})
    assert config.servers["1password"].env == {"2FA_TOKEN": "x" * 20}
