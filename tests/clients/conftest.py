"""A home folder of the test's own for every client test: no test reads or writes the real one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`$HOME` (and the XDG/Codex/Claude variables) inside tmp_path; the current folder is `<tmp>/project`."""
    home = tmp_path / "home"
    project = tmp_path / "project"
    home.mkdir()
    project.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    for name in ("CODEX_HOME", "CLAUDE_CONFIG_DIR", "APPDATA", "TOOLSCORE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(project)
    return home


def write(path: Path, content: str | dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content, indent=2))
    return path
