"""The `toolscore` command as users run it: real processes, real stdio and HTTP fronts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import fixture_entry, free_port, wait_for

pytestmark = pytest.mark.e2e

TOOLSCORE = str(Path(sys.executable).parent / "toolscore")


def write_config(tmp_path: Path, servers: dict[str, Any], **sections: Any) -> Path:
    path = tmp_path / "servers.json"
    sections.setdefault(
        "toolscore", {"audit": {"path": str(tmp_path / "audit.jsonl")}, "log_dir": str(tmp_path / "logs")}
    )
    path.write_text(json.dumps({"mcpServers": servers, **sections}))
    return path


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TOOLSCORE, *args], capture_output=True, text=True, timeout=timeout, check=False)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_an_invalid_config_exits_2_naming_file_and_field_without_a_traceback(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"a": {"command": "x", "timeout": "soon"}})
    proc = run("check", "--config", str(path))
    assert proc.returncode == 2
    assert f"{path}: mcpServers.a.timeout:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_check_prints_a_table_and_fails_when_a_server_is_down(tmp_path: Path) -> None:
    path = write_config(
        tmp_path, {"fx": fixture_entry(tmp_path), "gone": {"command": "/nonexistent/server", "connect_timeout": 5}}
    )
    proc = run("check", "--config", str(path))
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["SERVER", "TRANSPORT", "STATE", "TOOLS", "START", "ERROR"]
    assert lines[1].split()[:4] == ["fx", "stdio", "up", "18"]
    assert lines[2].split()[:3] == ["gone", "stdio", "down"]
    assert "not found" in lines[2]


def test_tools_and_call_go_through_the_engine(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    tools = run("tools", "--config", str(path))
    assert tools.returncode == 0
    assert "fx__add  Add two integers; structured output." in tools.stdout
    call = run("call", "fx__add", "--args", '{"a": 20, "b": 22}', "--config", str(path))
    assert (call.returncode, call.stdout.strip()) == (0, '{"sum": 42}')
    bad = run("call", "fx__add", "--args", '{"a": "x"}', "--config", str(path))
    assert bad.returncode == 1
    assert "Invalid arguments for tool 'fx__add'" in bad.stdout
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(r["tool"], r["success"]) for r in audit] == [("fx__add", True), ("fx__add", False)]


def _rpc(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(message) + "\n").encode())
    proc.stdin.flush()


def _read(proc: subprocess.Popen[bytes], msg_id: int) -> dict[str, Any]:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        assert line, "the gateway closed stdout"
        message = json.loads(line)  # every stdout line must be one JSON-RPC message
        assert message["jsonrpc"] == "2.0"
        if message.get("id") == msg_id:
            return message


@pytest.fixture
def stdio_gateway(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    path = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    # The bare environment MCP hosts give their servers, and cwd "/".
    env = {k: os.environ[k] for k in ("HOME", "PATH") if k in os.environ}
    proc = subprocess.Popen(
        [TOOLSCORE, "serve", "--config", str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd="/",
    )
    _rpc(
        proc,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        },
    )
    assert _read(proc, 1)["result"]["serverInfo"]["name"] == "toolscore"
    _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None and not pipe.closed:
            pipe.close()


def test_stdio_carries_only_json_rpc_and_exits_on_stdin_eof(stdio_gateway: subprocess.Popen[bytes]) -> None:
    proc = stdio_gateway
    _rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert len(_read(proc, 2)["result"]["tools"]) == 1 + 18  # orchestrate + the fixture's
    _rpc(proc, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "fx__pid", "arguments": {}}})
    child = int(_read(proc, 3)["result"]["content"][0]["text"])
    size = 200_000
    _rpc(
        proc,
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "fx__large", "arguments": {"size": size}},
        },
    )
    assert len(_read(proc, 4)["result"]["content"][0]["text"]) == size  # one line, whole
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=15) == 0
    assert not alive(child)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_gateway_and_leaves_no_child(stdio_gateway: subprocess.Popen[bytes], signum: int) -> None:
    proc = stdio_gateway
    _rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "fx__pid", "arguments": {}}})
    child = int(_read(proc, 2)["result"]["content"][0]["text"])
    assert alive(child)
    proc.send_signal(signum)
    proc.wait(timeout=15)
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_real_stdio_client_in_both_eras(tmp_path: Path, mode: str) -> None:
    path = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    params = StdioServerParameters(command=TOOLSCORE, args=["serve", "--config", str(path)])
    async with Client(params, mode=mode) as client:
        assert len((await client.list_tools()).tools) == 1 + 18  # orchestrate + the fixture's
        result = await client.call_tool("fx__add", {"a": 1, "b": 2})
        assert result.structured_content == {"sum": 3}


@pytest.fixture
def http_gateway(tmp_path: Path) -> Iterator[str]:
    path = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    port = free_port()
    proc = subprocess.Popen(
        [TOOLSCORE, "serve", "--transport", "http", "--port", str(port), "--config", str(path)],
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx2.get(f"http://127.0.0.1:{port}/", timeout=1)
            break
        except httpx2.TransportError:
            time.sleep(0.1)
    yield url
    proc.terminate()
    assert proc.wait(timeout=15) == 0


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_streamable_http_front_in_both_eras(http_gateway: str, mode: str) -> None:
    async with Client(http_gateway, mode=mode) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert "fx__echo" in names
        result = await client.call_tool("fx__echo", {"text": "via http"})
        assert result.content == [mcp_types.TextContent(text="via http")]
        with anyio.fail_after(10):
            result = await client.call_tool("fx__nope", {})
        assert result.is_error

        seen: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        await client.call_tool("fx__progress", {"steps": 3}, progress_callback=on_progress)
        await wait_for(lambda: len(seen) == 3)
        assert seen == [1, 2, 3]


def test_http_front_answers_oauth_probes_with_a_clean_4xx(http_gateway: str) -> None:
    base = http_gateway.removesuffix("/mcp")
    for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-authorization-server"):
        response = httpx2.get(base + path, timeout=5)
        assert 400 <= response.status_code < 500


def test_python_m_toolscore_runs_the_cli() -> None:
    proc = subprocess.run([sys.executable, "-m", "toolscore", "--version"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0
    assert proc.stdout.startswith("toolscore ")
