"""Editing JSON with comments and Codex's TOML in place: only the changed members' text changes (pure)."""

from __future__ import annotations

import tomllib
from pathlib import Path, PureWindowsPath

import pytest

from toolscore.clients import jsonc, toml_tables
from toolscore.clients.locations import client_files
from toolscore.errors import ConfigError


def test_comments_and_trailing_commas_are_read_and_slashes_in_strings_are_not_comments() -> None:
    text = '{\n  // a\n  "url": "http://x//y", /* b */ "s": "a\\"//b",\n  "list": [1, 2,],\n}\n'
    assert jsonc.loads(text) == {"url": "http://x//y", "s": 'a"//b', "list": [1, 2]}
    assert len(jsonc.clean(text)) == len(text)


@pytest.mark.parametrize(
    ("text", "says"),
    [('{"a": 1 /* open', "not closed"), ('{"a": "open', "not closed"), ("[" * 50_000, "nested too deeply")],
)
def test_broken_text_is_an_error_not_a_traceback(text: str, says: str) -> None:
    with pytest.raises(jsonc.JsoncError, match=says):
        jsonc.loads(text)


def test_removing_a_member_keeps_the_neighbours_text() -> None:
    text = '{\n  "mcpServers": {\n    "a": {"command": "a"}, // first\n    "b": {"command": "b"},\n    "c": 3\n  }\n}\n'
    assert jsonc.edit_object(text, ("mcpServers",), {"b": None}) == (
        '{\n  "mcpServers": {\n    "a": {"command": "a"}, // first\n    "c": 3\n  }\n}\n'
    )
    assert jsonc.edit_object(text, ("mcpServers",), {"c": None}) == (
        '{\n  "mcpServers": {\n    "a": {"command": "a"}, // first\n    "b": {"command": "b"}\n  }\n}\n'
    )


def test_a_missing_servers_object_is_added_in_the_files_indent() -> None:
    assert jsonc.edit_object('{\n    "x": 1\n}\n', ("mcpServers",), {"t": {"command": "c"}}) == (
        '{\n    "x": 1,\n    "mcpServers": {\n        "t": {\n            "command": "c"\n        }\n    }\n}\n'
    )
    assert jsonc.edit_object('{"x": 1}', ("s",), {"t": 1}) == '{"x": 1, "s": {"t": 1}}'
    assert jsonc.edit_object("", ("s",), {"t": 1}) == '{\n  "s": {\n    "t": 1\n  }\n}\n'


def test_an_edit_that_would_not_give_the_intended_value_is_refused() -> None:
    # A duplicate key: the decoder keeps the last one; removing it would uncover the first.
    with pytest.raises(jsonc.JsoncError, match="edit it by hand"):
        jsonc.edit_object('{"s": {"a": 1, "a": 2}}', ("s",), {"a": None})
    with pytest.raises(jsonc.JsoncError, match="'s' is not an object"):
        jsonc.edit_object('{"s": [1]}', ("s",), {"a": 1})


def test_toml_tables_are_cut_with_their_subtables_and_appended_as_one() -> None:
    text = (
        '# top\nmodel = "o3"\n\n[mcp_servers.a]\ncommand = "a"\n\n[mcp_servers.a.env]\nK = "v"\n\n'
        '[mcp_servers."b c"]\ncommand = "b"\n\n[other]\nx = 1\n'
    )
    new = toml_tables.edit_servers(text, {"a": None, "t": {"command": "/t", "args": ["serve"], "env": {"K": 'q"\x7f'}}})
    assert new.startswith('# top\nmodel = "o3"\n\n[mcp_servers."b c"]\ncommand = "b"\n\n[other]\nx = 1\n')
    decoded = tomllib.loads(new)
    assert decoded["mcp_servers"] == {
        "b c": {"command": "b"},
        "t": {"command": "/t", "args": ["serve"], "env": {"K": 'q"\x7f'}},
    }


def test_a_toml_layout_the_editor_does_not_handle_is_refused_not_damaged() -> None:
    dotted = 'mcp_servers.a.command = "a"\n'
    with pytest.raises(toml_tables.TomlError, match="edit it by hand"):
        toml_tables.edit_servers(dotted, {"a": None})
    with pytest.raises(toml_tables.TomlError, match="not valid TOML"):
        toml_tables.loads("[mcp_servers\n")
    with pytest.raises(toml_tables.TomlError, match="nested too deeply"):
        toml_tables.loads("a = " + "[" * 500 + "]" * 500 + "\n")


def test_each_client_file_per_operating_system() -> None:
    env = {"HOME": "/h", "USERPROFILE": "C:\\Users\\u", "APPDATA": "C:\\Users\\u\\AppData\\Roaming"}
    cwd = Path("/p")

    def user(client: str, platform: str) -> str:
        return str(client_files(client, env=env, platform=platform, cwd=cwd)[0].path)

    assert user("claude-desktop", "darwin") == "/h/Library/Application Support/Claude/claude_desktop_config.json"
    assert user("claude-desktop", "linux") == "/h/.config/Claude/claude_desktop_config.json"
    assert PureWindowsPath(user("claude-desktop", "win32")) == PureWindowsPath(
        "C:\\Users\\u\\AppData\\Roaming\\Claude\\claude_desktop_config.json"
    )
    assert user("vscode", "darwin") == "/h/Library/Application Support/Code/User/mcp.json"
    assert user("codex", "linux") == "/h/.codex/config.toml"
    assert user("codex", "linux") != str(
        client_files("codex", env={**env, "CODEX_HOME": "/c"}, platform="linux", cwd=cwd)[0].path.parent
    )
    assert [str(f.path) for f in client_files("claude-code", env=env, platform="linux", cwd=cwd)] == [
        "/h/.claude.json",
        "/p/.mcp.json",
    ]
    with pytest.raises(ConfigError, match="HOME is not set"):
        client_files("cursor", env={}, platform="linux", cwd=cwd)
    with pytest.raises(ConfigError, match="unknown client 'zed'"):
        client_files("zed", env=env, platform="linux", cwd=cwd)
