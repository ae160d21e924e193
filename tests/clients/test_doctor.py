"""`toolscore doctor`: toolscore started as the client's entry says, a real MCP client, each server's state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clients.conftest import write
from tests.conftest import TOOLSCORE, fixture_entry, free_port, http_gateway_process, write_config
from toolscore.cli import main

pytestmark = pytest.mark.e2e

CLAUDE = Path(".config") / "Claude" / "claude_desktop_config.json"


def _claude(home: Path, entry: dict[str, object]) -> Path:
    return write(home / CLAUDE, {"mcpServers": {"toolscore": entry}})


def test_doctor_follows_the_entrys_command_folder_and_environment_and_names_the_server_that_is_down(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gateway = tmp_path / "gateway"
    gateway.mkdir()
    # servers.json needs a variable only the client's entry sets, and is named relative to the entry's cwd.
    write_config(
        gateway,
        {
            "fx": fixture_entry(gateway, env={"FIXTURE_STATE_DIR": "${DOCTOR_STATE}"}),
            "gone": {"command": "/nonexistent/server", "connect_timeout": 5},
        },
    )
    _claude(
        home,
        {
            "command": TOOLSCORE,
            "args": ["serve", "--config", "servers.json"],
            "cwd": str(gateway),
            "env": {"DOCTOR_STATE": str(gateway)},
        },
    )
    assert main(["doctor", "--client", "claude-desktop"]) == 1
    out = capsys.readouterr().out
    assert f"Claude Desktop ({home / CLAUDE}):" in out
    assert "connected: 19 tools" in out  # the fixture's 18 and orchestrate
    rows = {
        line.split()[0]: line.split()[1:3]
        for line in out.splitlines()
        if line.startswith("  ") and len(line.split()) > 2
    }
    assert rows["fx"] == ["up", "18"]
    assert rows["gone"][0] == "down"
    assert "first problem: server 'gone' is down:" in out
    assert "not found" in out.split("first problem:")[1]


def test_a_servers_json_toolscore_cannot_load_is_the_first_problem(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path / "servers.json", {"mcpServers": {"a": {"command": "a", "timeout": "soon"}}})
    _claude(home, {"command": TOOLSCORE, "args": ["serve", "--config", str(config)]})
    assert main(["doctor", "--client", "claude-desktop"]) == 1
    problem = capsys.readouterr().out.split("first problem:")[1]
    assert "toolscore did not start as Claude Desktop starts it" in problem
    assert "mcpServers.a.timeout" in problem


def test_every_registered_client_is_checked_and_a_missing_program_is_named(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _claude(home, {"command": "/nowhere/toolscore", "args": ["serve"]})
    write(home / ".cursor" / "mcp.json", {"mcpServers": {"other": {"command": "x"}}})  # not registered: skipped
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "Cursor" not in out
    assert "first problem: Claude Desktop cannot run '/nowhere/toolscore': no such program" in out
    assert "toolscore register --client claude-desktop" in out


def test_a_client_without_toolscore_or_without_a_file(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(home / ".cursor" / "mcp.json", json.dumps({"mcpServers": {}}))
    assert main(["doctor", "--client", "cursor"]) == 1
    assert "Cursor does not start toolscore: run `toolscore register --client cursor`" in capsys.readouterr().out
    assert main(["doctor", "--client", "windsurf"]) == 2
    assert f"{home / '.codeium' / 'windsurf' / 'mcp_config.json'}: Windsurf's file does not exist" in (
        capsys.readouterr().err
    )


def test_an_http_entry_is_reached_at_its_address_and_a_dead_address_is_named(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    with http_gateway_process(config) as base:
        url = base + "/mcp"
        args = ["--client", "cursor", "--config", str(config), "--transport", "http", "--url", url]
        assert main(["register", *args]) == 0
        capsys.readouterr()
        assert main(["doctor", "--client", "cursor"]) == 0
        out = capsys.readouterr().out
        assert f"connects to: {url}" in out
        assert "connected: 19 tools" in out
        assert "no problem found" in out
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    assert main(["register", "--client", "cursor", "--config", str(config), "--transport", "http", "--url", dead]) == 0
    assert main(["doctor", "--client", "cursor", "--timeout", "30"]) == 1
    assert f"first problem: nothing answers as an MCP server at {dead}" in capsys.readouterr().out
