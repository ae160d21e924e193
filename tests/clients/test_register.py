"""`toolscore register` and `--undo`: the client's file changed in place, after a backup (in process)."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from tests.clients.conftest import write
from tests.conftest import TOOLSCORE
from toolscore.cli import main
from toolscore.clients import jsonc

CLAUDE = Path(".config") / "Claude" / "claude_desktop_config.json"


@pytest.fixture
def servers_json(home: Path) -> Path:
    return write(Path("servers.json").absolute(), {"mcpServers": {"files": {"command": "fs-server", "args": ["/srv"]}}})


def _register(*args: str) -> int:
    return main(["register", *args])


def _backups(path: Path) -> list[str]:
    return sorted(n for n in os.listdir(path.parent) if n.endswith(".toolscore-backup"))


def test_claude_desktop_gets_the_absolute_command_and_config_and_other_keys_stay(
    home: Path, servers_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(home / CLAUDE, {"globalShortcut": "Ctrl+Space", "mcpServers": {"files": {"command": "fs-server"}}})
    assert _register("--client", "claude-desktop", "--config", "servers.json") == 0
    data = json.loads(path.read_text())
    assert data["globalShortcut"] == "Ctrl+Space"
    assert data["mcpServers"]["files"] == {"command": "fs-server"}
    assert data["mcpServers"]["toolscore"] == {"command": TOOLSCORE, "args": ["serve", "--config", str(servers_json)]}
    out = capsys.readouterr().out
    assert out.rstrip().endswith(
        "Next: restart Claude Desktop (quit it fully, then open it again) so it starts toolscore."
    )
    assert len(_backups(path)) == 1


def test_replace_imported_removes_only_what_servers_json_holds(
    home: Path, servers_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        home / CLAUDE,
        {"mcpServers": {"files": {"command": "fs-server", "args": ["/srv"]}, "notes": {"command": "notes-server"}}},
    )
    assert _register("--client", "claude-desktop", "--config", "servers.json", "--replace-imported") == 0
    assert sorted(json.loads(path.read_text())["mcpServers"]) == ["notes", "toolscore"]
    out = capsys.readouterr().out
    assert "files: removed from Claude Desktop, toolscore serves it now" in out
    assert "notes: kept, it is not in servers.json (toolscore import --from claude-desktop first)" in out


def test_undo_restores_the_file_byte_for_byte_then_has_nothing_left(
    home: Path, servers_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = '{\n    // mine\n    "mcpServers": {"a": {"command": "a"}}\n}\n'
    path = write(home / ".cursor" / "mcp.json", original)
    assert _register("--client", "cursor", "--config", "servers.json") == 0
    assert path.read_text() != original
    assert _register("--client", "cursor", "--undo") == 0
    assert path.read_text() == original
    assert _backups(path) == []
    assert f"restored {path}" in capsys.readouterr().out
    assert _register("--client", "cursor", "--undo") == 2
    err = capsys.readouterr().err
    assert f"{path}: no backup of this file to restore" in err


def test_each_undo_goes_one_write_further_back(home: Path, servers_json: Path, tmp_path: Path) -> None:
    path = write(home / ".cursor" / "mcp.json", {"mcpServers": {}})
    first = path.read_text()
    assert _register("--client", "cursor", "--config", "servers.json") == 0
    second = path.read_text()
    other = write(tmp_path / "other.json", {"mcpServers": {}})
    assert _register("--client", "cursor", "--config", str(other)) == 0
    assert _register("--client", "cursor", "--undo") == 0
    assert path.read_text() == second
    assert _register("--client", "cursor", "--undo") == 0
    assert path.read_text() == first


def test_vscode_comments_and_formatting_survive_and_http_sends_the_token_in_its_syntax(
    home: Path, servers_json: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLSCORE_TOKEN", "t" * 32)
    text = """{
\t// keep me
\t"inputs": [],
\t"servers": {
\t\t"old": {"command": "old"}, /* and me */
\t},
}
"""
    path = write(home / ".config" / "Code" / "User" / "mcp.json", text)
    assert _register("--client", "vscode", "--config", "servers.json", "--transport", "http") == 0
    new = path.read_text()
    assert new.startswith(
        '{\n\t// keep me\n\t"inputs": [],\n\t"servers": {\n\t\t"old": {"command": "old"}, /* and me */'
    )
    assert jsonc.loads(new)["servers"]["toolscore"] == {
        "type": "http",
        "url": "http://127.0.0.1:8765/mcp",
        "headers": {"Authorization": "Bearer ${env:TOOLSCORE_TOKEN}"},
    }


def test_codex_toml_keeps_every_other_line_and_gets_one_table(home: Path, servers_json: Path) -> None:
    text = '# my codex\nmodel = "o3"  # pinned\n\n[mcp_servers.gh]\ncommand = "gh-mcp"\n\n'
    text += '[profiles.fast]\nmodel = "mini"\n'
    path = write(home / ".codex" / "config.toml", text)
    assert _register("--client", "codex", "--config", "servers.json") == 0
    new = path.read_text()
    assert new.startswith(text.rstrip("\n"))
    assert tomllib.loads(new)["mcp_servers"]["toolscore"] == {
        "command": TOOLSCORE,
        "args": ["serve", "--config", str(servers_json)],
    }
    assert tomllib.loads(new)["profiles"] == {"fast": {"model": "mini"}}


def test_codex_replace_imported_cuts_the_servers_tables_and_their_subtables(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("T", "x")
    write(Path("servers.json"), {"mcpServers": {"gh": {"command": "gh-mcp", "env": {"T": "${T}"}}}})
    text = (
        '[mcp_servers.gh]\ncommand = "gh-mcp"\n\n[mcp_servers.gh.env]\nT = "x"\n\n[mcp_servers.mine]\ncommand = "m"\n'
    )
    path = write(home / ".codex" / "config.toml", text)
    assert _register("--client", "codex", "--config", "servers.json", "--replace-imported") == 0
    assert sorted(tomllib.loads(path.read_text())["mcp_servers"]) == ["mine", "toolscore"]
    assert '[mcp_servers.mine]\ncommand = "m"\n' in path.read_text()


@pytest.mark.parametrize(
    ("client", "key", "entry"),
    [
        ("claude-code", "mcpServers", {"type": "http", "url": "http://h:1/mcp"}),
        ("cursor", "mcpServers", {"url": "http://h:1/mcp"}),
        ("windsurf", "mcpServers", {"serverUrl": "http://h:1/mcp"}),
        ("gemini", "mcpServers", {"httpUrl": "http://h:1/mcp"}),
    ],
)
def test_http_entries_use_each_clients_own_keys(
    home: Path, servers_json: Path, client: str, key: str, entry: dict[str, str]
) -> None:
    assert (
        _register("--client", client, "--config", "servers.json", "--transport", "http", "--url", "http://h:1/mcp") == 0
    )
    files = {
        "claude-code": home / ".claude.json",
        "cursor": home / ".cursor" / "mcp.json",
        "windsurf": home / ".codeium" / "windsurf" / "mcp_config.json",
        "gemini": home / ".gemini" / "settings.json",
    }
    assert json.loads(files[client].read_text())[key]["toolscore"] == entry


def test_claude_desktops_file_cannot_take_http_and_nothing_is_written(
    home: Path, servers_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _register("--client", "claude-desktop", "--config", "servers.json", "--transport", "http") == 2
    assert "takes only stdio servers" in capsys.readouterr().err
    assert not (home / CLAUDE).exists()


def test_dry_run_prints_the_diff_and_writes_nothing(
    home: Path, servers_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(home / ".cursor" / "mcp.json", {"mcpServers": {}})
    before = path.read_text()
    assert _register("--client", "cursor", "--config", "servers.json", "--dry-run") == 0
    out = capsys.readouterr().out
    assert f'+      "command": "{TOOLSCORE}",' in out
    assert path.read_text() == before
    assert _backups(path) == []


def test_registering_twice_changes_nothing_the_second_time(
    home: Path, servers_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(home / ".cursor" / "mcp.json", {"mcpServers": {}})
    assert _register("--client", "cursor", "--config", "servers.json") == 0
    assert _register("--client", "cursor", "--config", "servers.json") == 0
    assert "already starts toolscore this way" in capsys.readouterr().out
    assert len(_backups(path)) == 1


@pytest.mark.parametrize(
    ("servers", "client_text", "says"),
    [
        (None, '{"mcpServers": {}}', "there is no servers.json here for Cursor to start"),
        ({"mcpServers": {"a": {"command": "a", "timeout": "soon"}}}, '{"mcpServers": {}}', "mcpServers.a.timeout"),
        ({"mcpServers": {}}, '{"mcpServers": ', "not valid JSON"),
    ],
    ids=["no-servers-json", "invalid-servers-json", "malformed-client-file"],
)
def test_a_bad_file_exits_2_naming_it_and_the_client_file_is_untouched(
    home: Path, capsys: pytest.CaptureFixture[str], servers: dict[str, object] | None, client_text: str, says: str
) -> None:
    if servers is not None:
        write(Path("servers.json"), servers)
    path = write(home / ".cursor" / "mcp.json", client_text)
    assert _register("--client", "cursor", "--config", "servers.json") == 2
    err = capsys.readouterr().err
    assert says in err
    assert "Traceback" not in err
    assert path.read_text() == client_text
    assert _backups(path) == []


def test_a_symlinked_client_file_is_written_through_to_its_target(
    home: Path, servers_json: Path, tmp_path: Path
) -> None:
    target = write(tmp_path / "dotfiles" / "cursor-mcp.json", {"mcpServers": {}})
    link = home / ".cursor" / "mcp.json"
    link.parent.mkdir()
    link.symlink_to(target)
    assert _register("--client", "cursor", "--config", "servers.json") == 0
    assert link.is_symlink()
    assert "toolscore" in json.loads(target.read_text())["mcpServers"]
    assert _backups(target) != []


def test_registering_again_keeps_the_earlier_entrys_environment_and_folder(
    home: Path, servers_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    earlier = {"command": "/old/toolscore", "args": ["serve"], "env": {"TOOLSCORE_SEARCH_ROOT": "/src"}, "cwd": "/w"}
    path = write(home / CLAUDE, {"mcpServers": {"my-gateway": earlier}})
    assert _register("--client", "claude-desktop", "--config", "servers.json") == 0
    assert json.loads(path.read_text())["mcpServers"] == {
        "toolscore": {
            "command": TOOLSCORE,
            "args": ["serve", "--config", str(servers_json)],
            "env": {"TOOLSCORE_SEARCH_ROOT": "/src"},
            "cwd": "/w",
        }
    }
