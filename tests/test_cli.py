"""The `toolscore` commands: arguments, output and exit codes (in process; the fronts' processes are
tested in tests/front/)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import fixture_entry, write_config
from toolscore.cli import main

pytestmark = pytest.mark.e2e


def test_an_invalid_config_exits_2_naming_file_and_field_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(tmp_path, {"a": {"command": "x", "timeout": "soon"}})
    assert main(["check", "--config", str(path)]) == 2
    out, err = capsys.readouterr()
    assert f"{path}: mcpServers.a.timeout:" in err
    assert "Traceback" not in err
    assert out == ""


def test_check_prints_a_table_and_fails_when_a_server_is_down(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(
        tmp_path, {"fx": fixture_entry(tmp_path), "gone": {"command": "/nonexistent/server", "connect_timeout": 5}}
    )
    assert main(["check", "--config", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["SERVER", "TRANSPORT", "STATE", "TOOLS", "START", "ERROR"]
    assert lines[1].split()[:4] == ["fx", "stdio", "up", "18"]
    assert lines[2].split()[:3] == ["gone", "stdio", "down"]
    assert "not found" in lines[2]


def test_tools_and_call_go_through_the_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    assert main(["tools", "--config", str(path)]) == 0
    assert "fx__add  Add two integers; structured output." in capsys.readouterr().out
    assert main(["call", "fx__add", "--args", '{"a": 20, "b": 22}', "--config", str(path)]) == 0
    assert capsys.readouterr().out.strip() == '{"sum": 42}'
    assert main(["call", "fx__add", "--args", '{"a": "x"}', "--config", str(path)]) == 1
    assert "Invalid arguments for tool 'fx__add'" in capsys.readouterr().out
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(r["tool"], r["success"]) for r in audit] == [("fx__add", True), ("fx__add", False)]


def test_python_m_toolscore_runs_the_cli() -> None:
    proc = subprocess.run([sys.executable, "-m", "toolscore", "--version"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0
    assert proc.stdout.startswith("toolscore ")
