"""The README's moving-in commands, run as a person runs them: the installed `toolscore`, a home of the test's own."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.clients.conftest import write
from tests.conftest import TOOLSCORE, fixture_entry

pytestmark = pytest.mark.e2e


def _run(*args: str, home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    return subprocess.run(
        [TOOLSCORE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_import_then_register_then_doctor_as_the_readme_shows(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    claude = write(
        home / ".config" / "Claude" / "claude_desktop_config.json",
        {"globalShortcut": "Ctrl+Space", "mcpServers": {"fx": fixture_entry(tmp_path)}},
    )
    original = claude.read_text()
    moved = _run("import", "--from", "claude-desktop", home=home, cwd=project)
    assert moved.returncode == 0, moved.stderr
    registered = _run("register", "--client", "claude-desktop", "--replace-imported", home=home, cwd=project)
    assert registered.returncode == 0, registered.stderr
    assert "Next: restart Claude Desktop" in registered.stdout

    servers_json = home / ".config" / "toolscore" / "servers.json"
    assert json.loads(servers_json.read_text())["mcpServers"]["fx"] == fixture_entry(tmp_path)
    client = json.loads(claude.read_text())
    assert client == {
        "globalShortcut": "Ctrl+Space",
        "mcpServers": {"toolscore": {"command": TOOLSCORE, "args": ["serve", "--config", str(servers_json)]}},
    }

    checked = _run("doctor", home=home, cwd=project)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "no problem found" in checked.stdout

    undone = _run("register", "--undo", "--client", "claude-desktop", home=home, cwd=project)
    assert undone.returncode == 0, undone.stderr
    assert claude.read_text() == original
