"""The `toolscore` commands: arguments, output and exit codes (in process; the fronts' processes are
tested in tests/front/)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TOOLSCORE, fixture_entry, write_config
from toolscore.cli import _parser, main

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


def test_check_json_reports_each_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path, {"fx": fixture_entry(tmp_path, tools={"deny": ["add"]})})
    assert main(["check", "--json", "--config", str(path)]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["name"], row["transport"], row["state"], row["error"]) == ("fx", "stdio", "up", None)
    assert row["tools"] == row["downstream_tools"] - 1  # the exposed tools, after the deny rule


def test_counts_are_of_the_tools_exposed_orchestrate_included(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(tmp_path, {"fx": fixture_entry(tmp_path, tools={"deny": ["add", "echo"]})})
    assert main(["check", "--config", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:4] == ["fx", "stdio", "up", "16"]
    assert main(["tools", "--config", str(path)]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert names[0] == "orchestrate"
    assert len(names) == 17
    assert "fx__add" not in names


def test_common_options_are_accepted_before_and_after_the_subcommand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    assert main(["--config", str(path), "check"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:3] == ["fx", "stdio", "up"]
    assert main(["--log-level", "debug", "tools", "--config", str(path)]) == 0
    assert "fx__add  Add two integers; structured output." in capsys.readouterr().out
    # Given in both places, the later one wins; given before only, the subcommand's default does not override it.
    assert main(["--config", str(tmp_path / "nope.json"), "tools", "--config", str(path)]) == 0
    assert _parser().parse_args(["--log-level", "debug", "tools"]).log_level == "debug"
    assert _parser().parse_args(["tools"]).log_level == "warning"
    assert _parser().parse_args(["--log-level", "debug", "audit", "tail", "--log-level", "error"]).log_level == "error"


def test_an_unknown_log_level_is_refused_with_the_valid_ones(capsys: pytest.CaptureFixture[str]) -> None:
    """`--log-level verbose` was accepted without a word."""
    for argv in (["--log-level", "verbose", "tools"], ["tools", "--log-level", "verbose"]):
        with pytest.raises(SystemExit) as exited:
            _parser().parse_args(argv)
        assert exited.value.code == 2
        assert (
            "unknown log level 'verbose' (choose from debug, info, warning, error, critical)" in capsys.readouterr().err
        )
    assert _parser().parse_args(["--log-level", "INFO", "tools"]).log_level == "info"


def test_a_missing_config_names_every_place_looked_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert main(["check"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert str(tmp_path / "servers.json") in err
    assert str(tmp_path / "xdg" / "toolscore" / "servers.json") in err
    assert len(err.splitlines()) == 1


def test_a_command_that_is_not_an_mcp_server_is_down_in_one_line_without_tracebacks(tmp_path: Path) -> None:
    script = tmp_path / "not_mcp.py"
    script.write_text(
        "import json, sys\n"
        "for i in range(5):\n"
        "    print(f'total {i}', flush=True)\n"
        'print(json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"x": 1}}), flush=True)\n'
        "request = json.loads(sys.stdin.readline())\n"
        'print(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {"hello": 1}}), flush=True)\n'
        "sys.stdin.read()\n"
    )
    path = write_config(tmp_path, {"ls": {"command": sys.executable, "args": [str(script)], "connect_timeout": 10}})
    proc = subprocess.run([TOOLSCORE, "check", "--config", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    row = proc.stdout.splitlines()[1]
    assert row.split()[:3] == ["ls", "stdio", "down"]
    assert "InitializeResult" in row
    assert "Traceback" not in proc.stderr
    # One line per kind of problem: the first stray line, the failed start, the bad notification.
    assert len(proc.stderr.splitlines()) <= 3, proc.stderr


def test_a_closed_stdout_ends_quietly(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| head -1` that has already exited: every write fails with EPIPE
    try:
        proc = subprocess.run(
            [TOOLSCORE, "tools", "--config", str(path)], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 141  # as a shell reports a command ended by SIGPIPE
    assert proc.stderr == ""


def test_serve_on_a_port_in_use_says_so_in_one_line_before_starting_servers(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [TOOLSCORE, "serve", "--transport", "http", "--port", str(port), "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2
    assert proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert f"127.0.0.1:{port}" in line
    assert "in use" in line
    assert not (tmp_path / "logs" / "fx.log").exists()  # no downstream server was started


_HOSTILE_SERVER = """
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "h", "version": "1"}}
    elif msg["method"] == "tools/list":
        text = "Reads.\\x1b[2J\\x1b]0;owned\\x07 \\u202eevil\\r done"
        result = {"tools": [{"name": "read", "description": text, "inputSchema": {"type": "object"}}]}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"""


def test_tables_show_a_servers_control_characters_as_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A terminal acts on escape sequences (clear the screen, retitle the window, reorder text):
    # a hostile server's description or stderr must reach it as visible text.
    script = tmp_path / "hostile.py"
    script.write_text(_HOSTILE_SERVER)
    crash = "import sys; sys.stderr.write('\\x1b[31mboom\\x1b[0m\\n'); sys.exit(3)"
    path = write_config(
        tmp_path,
        {
            "h": {"command": sys.executable, "args": [str(script)]},
            "gone": {"command": sys.executable, "args": ["-c", crash]},
        },
    )
    assert main(["tools", "--config", str(path)]) == 0
    listed = capsys.readouterr().out
    assert "h__read  Reads.\\x1b[2J\\x1b]0;owned\\x07 \\u202eevil\n" in listed  # its first line
    assert main(["check", "--config", str(path)]) == 1
    table = capsys.readouterr().out
    assert "gone" in table and "boom" in table
    for out in (listed, table):
        assert not any(ch in out for ch in "\x1b\x07\r\u202e")
