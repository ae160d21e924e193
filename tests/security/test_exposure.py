"""The HTTP front as others can reach it: bearer token, Host/Origin allow-lists, TLS, body cap.

Real `toolscore serve --transport http` processes, driven by the SDK's client and raw requests;
a start that must be refused exits before anything runs, so `toolscore.cli.main` is called here.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import ssl
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.conftest import TOOLSCORE, fixture_entry, free_port, wait_until_answering
from toolscore.cli import main
from toolscore.config import HttpSettings
from toolscore.front.http import is_loopback, resolve_exposure

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024
CAP = 1 * MiB
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


@dataclass
class Gateway:
    proc: subprocess.Popen[bytes]
    port: int
    url: str
    token: str
    stderr: Path
    verify: ssl.SSLContext | bool = True

    def auth(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.token}"}

    def post(self, headers: Mapping[str, str], **kwargs: Any) -> httpx2.Response:
        return httpx2.post(self.url, headers={**MCP_HEADERS, **headers}, verify=self.verify, timeout=30, **kwargs)

    def rss_kib(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without a token the developer may have exported, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k != "TOOLSCORE_TOKEN"}
    return {**env, **extra}


def write_config(tmp_path: Path, http: dict[str, Any] | None = None) -> Path:
    # No start-up grace: a test's first tools/list sees the fixture server however loaded the machine.
    section: dict[str, Any] = {"audit": {"path": ""}, "log_dir": str(tmp_path / "logs"), "startup_grace_seconds": None}
    if http is not None:
        # The request size cap is gateway-wide (stdio too), so it sits beside `http`.
        if "max_request_bytes" in http:
            http = dict(http)
            section["max_request_bytes"] = http.pop("max_request_bytes")
        section["http"] = http
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"fx": fixture_entry(tmp_path)}, "toolscore": section}))
    return path


def serve(tmp_path: Path, *flags: str, http: dict[str, Any] | None = None) -> list[str]:
    return [TOOLSCORE, "serve", "--transport", "http", "--config", str(write_config(tmp_path, http)), *flags]


Spawn = Callable[..., Gateway]


@pytest.fixture(scope="module")
def spawn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Spawn]:
    """Start gateways with `spawn(args, token=..., ...)`; all are stopped (and must exit 0) after the module."""
    started: list[subprocess.Popen[bytes]] = []

    def start(
        args: list[str],
        *,
        token: str,
        env: dict[str, str],
        port: int,
        scheme: str = "http",
        verify: ssl.SSLContext | bool = True,
    ) -> Gateway:
        stderr = tmp_path_factory.mktemp("stderr") / "stderr.txt"
        with stderr.open("wb") as sink:
            proc = subprocess.Popen([*args, "--port", str(port)], stderr=sink, env=env)
        started.append(proc)
        base = f"{scheme}://127.0.0.1:{port}"
        wait_until_answering(base + "/", proc, errlog=stderr, verify=verify)
        return Gateway(proc, port, base + "/mcp", token, stderr, verify)

    yield start
    for proc in started:
        proc.terminate()
        assert proc.wait(timeout=60) == 0


async def tool_names(gw: Gateway, mode: str, token: str | None = None) -> list[str]:
    async with (
        httpx2.AsyncClient(headers=gw.auth(token), verify=gw.verify, timeout=30) as http,
        Client(streamable_http_client(gw.url, http_client=http), mode=mode) as client,
    ):
        return [t.name for t in (await client.list_tools()).tools]


# --- resolving the settings (no process) ---------------------------------------------------------


def test_which_binds_count_as_loopback() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "::ffff:127.0.0.1"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "192.168.1.10", "gateway.example.test"):
        assert not is_loopback(host), host


def test_defaults_name_the_bind_address_and_loopback_and_no_repr_holds_the_token() -> None:
    token = secrets.token_urlsafe(32)
    exposure = resolve_exposure(HttpSettings(), host="0.0.0.0", port=8765, env={"TOOLSCORE_TOKEN": token})
    assert exposure.security.allowed_hosts == ["0.0.0.0:8765", "127.0.0.1:8765", "localhost:8765", "[::1]:8765"]
    assert "http://localhost:8765" in exposure.security.allowed_origins
    assert token not in repr(exposure)
    assert exposure.token is not None and token not in repr(exposure.token)


# --- refusing to start ---------------------------------------------------------------------------


def refused_start(
    tmp_path: Path, host: str, flags: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> str:
    """`toolscore serve --host HOST FLAGS` must refuse to start: exit 2 and one line on stderr, returned.

    The refusal comes before any server or socket is started, so `toolscore.cli.main` runs here
    (as the console script runs it) with no token the developer may have exported. Its port is
    already listened on at `host`: a `serve` that did not refuse would stop there, saying it
    cannot listen, so a missing refusal fails the test instead of serving inside it.
    """
    monkeypatch.delenv("TOOLSCORE_TOKEN", raising=False)
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as taken:
        taken.bind((host, 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        config = str(write_config(tmp_path))
        assert main(["serve", "--transport", "http", "--config", config, "--host", host, *flags, "--port", port]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert "cannot listen" not in err
    return err


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_a_non_loopback_bind_without_a_token_exits_2_with_one_line(
    tmp_path: Path, host: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr = refused_start(tmp_path, host, [], capsys, monkeypatch)
    assert "not a loopback address" in stderr
    assert "TOOLSCORE_TOKEN" in stderr
    assert "--token-file" in stderr
    assert not (tmp_path / "logs").exists()  # no server was started


def test_a_token_file_others_can_read_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(secrets.token_urlsafe(32))
    token_file.chmod(0o644)
    stderr = refused_start(tmp_path, "0.0.0.0", ["--token-file", str(token_file)], capsys, monkeypatch)
    assert "chmod 600" in stderr
    assert token_file.read_text() not in stderr


# --- a token on a loopback bind, with extra hosts and origins --------------------------------------


@pytest.fixture(scope="module")
def loopback(tmp_path_factory: pytest.TempPathFactory, spawn: Spawn) -> Gateway:
    """127.0.0.1 with $TOOLSCORE_TOKEN, a host and an origin from flags, a host and the body cap from config.

    One process for the module's tests (each start spawns the fixture server too).
    """
    token = secrets.token_urlsafe(32)
    args = serve(
        tmp_path_factory.mktemp("loopback"),
        "--allow-host",
        "flag.example.test",
        "--allow-origin",
        "https://app.example.test",
        "--log-level",
        "debug",
        http={"allowed_hosts": ["config.example.test:*"], "max_request_bytes": CAP},
    )
    return spawn(args, token=token, env=clean_env(TOOLSCORE_TOKEN=token), port=free_port())


@pytest.mark.e2e
def test_requests_without_the_right_token_get_401_and_no_session(loopback: Gateway) -> None:
    for headers in ({}, loopback.auth("x" * 43), {"Authorization": f"Basic {loopback.token}"}):
        response = loopback.post(headers, json=INITIALIZE)
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert response.json()["error"] == "unauthorized"
        assert "mcp-session-id" not in response.headers
    assert loopback.post(loopback.auth(), json=INITIALIZE).status_code == 200


@pytest.mark.e2e
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_real_client_with_the_token_lists_tools(loopback: Gateway, mode: str) -> None:
    assert "fx__echo" in await tool_names(loopback, mode)


@pytest.mark.e2e
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_real_client_with_a_wrong_token_is_refused(loopback: Gateway, mode: str) -> None:
    with pytest.raises(ExceptionGroup) as info:
        await tool_names(loopback, mode, token=secrets.token_urlsafe(32))
    assert info.group_contains(MCPError)


@pytest.mark.e2e
def test_a_foreign_host_or_origin_is_refused_even_with_the_token(loopback: Gateway) -> None:
    auth = loopback.auth()
    assert loopback.post({**auth, "Host": "evil.com"}, json=INITIALIZE).status_code == 421
    assert loopback.post({**auth, "Host": "evil.com"}, json=INITIALIZE).text == "Invalid Host header"
    assert loopback.post({**auth, "Origin": "http://evil.com"}, json=INITIALIZE).status_code == 403
    # ...and before the token is even looked at: a rebinding page learns nothing.
    assert loopback.post({"Host": "evil.com"}, json=INITIALIZE).status_code == 421


@pytest.mark.e2e
def test_hosts_and_origins_allowed_by_flag_and_config_get_through(loopback: Gateway) -> None:
    auth = loopback.auth()
    for host in ("flag.example.test", "config.example.test:8443", f"localhost:{loopback.port}"):
        assert loopback.post({**auth, "Host": host}, json=INITIALIZE).status_code == 200, host
    assert loopback.post({**auth, "Origin": "https://app.example.test"}, json=INITIALIZE).status_code == 200


@pytest.mark.e2e
def test_oauth_discovery_probes_get_a_clean_404_without_a_token(loopback: Gateway) -> None:
    base = loopback.url.removesuffix("/mcp")
    for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/openid-configuration"):
        assert httpx2.get(base + path, timeout=60).status_code == 404


@pytest.mark.e2e
def test_an_oversized_body_gets_413_without_being_buffered(loopback: Gateway) -> None:
    auth = loopback.auth()
    assert loopback.post(auth, json=INITIALIZE).status_code == 200  # warm up before measuring
    before = loopback.rss_kib()
    # Twice the configured cap: the SDK's own 4 MiB default would have let this through.
    response = loopback.post(auth, content=b" " * (2 * CAP))
    assert response.status_code == 413
    assert "too large" in response.text
    big = b" " * (50 * 1000 * 1000)
    assert loopback.post(auth, content=big).status_code == 413  # declared in Content-Length

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(big), MiB):
            yield big[start : start + MiB]

    assert loopback.post(auth, content=chunks()).status_code == 413  # chunked: counted as it comes
    grown_mib = (loopback.rss_kib() - before) / 1024
    assert grown_mib < 8, f"RSS grew by {grown_mib:.1f} MiB"
    assert loopback.proc.poll() is None
    assert loopback.post(auth, json=INITIALIZE).status_code == 200


@pytest.mark.e2e
def test_the_token_never_reaches_the_log(loopback: Gateway) -> None:
    assert loopback.post(loopback.auth(), json=INITIALIZE).status_code == 200
    assert loopback.post({**loopback.auth(), "Host": "evil.com"}, json=INITIALIZE).status_code == 421
    assert loopback.token not in loopback.stderr.read_text()


# --- every interface: 0.0.0.0 ---------------------------------------------------------------------


@pytest.mark.e2e
async def test_an_exposed_bind_warns_needs_the_token_and_checks_the_host(tmp_path: Path, spawn: Spawn) -> None:
    token = secrets.token_urlsafe(32)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    args = serve(tmp_path, "--host", "0.0.0.0", "--token-file", str(token_file))
    gw = spawn(args, token=token, env=clean_env(), port=free_port())

    warnings = [line for line in gw.stderr.read_text().splitlines() if "warning" in line]
    assert len(warnings) == 1
    assert "bearer token" in warnings[0]
    assert "--tls-cert" in warnings[0]
    assert gw.post({}, json=INITIALIZE).status_code == 401
    assert gw.post({**gw.auth(), "Host": "evil.com"}, json=INITIALIZE).status_code == 421
    for mode in ("legacy", "auto"):
        assert "fx__echo" in await tool_names(gw, mode)


# --- TLS -----------------------------------------------------------------------------------------


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for localhost and 127.0.0.1 and its key, made with the openssl command."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
            *("-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost"),
            *("-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.mark.e2e
async def test_tls_with_a_self_signed_certificate(tmp_path: Path, spawn: Spawn, self_signed: tuple[Path, Path]) -> None:
    cert, key = self_signed
    trust = ssl.create_default_context(cafile=str(cert))
    token = secrets.token_urlsafe(32)
    args = serve(tmp_path, "--tls-cert", str(cert), "--tls-key", str(key))
    gw = spawn(args, token=token, env=clean_env(TOOLSCORE_TOKEN=token), port=free_port(), scheme="https", verify=trust)

    assert "https://127.0.0.1:" in gw.stderr.read_text()
    for mode in ("legacy", "auto"):
        assert "fx__echo" in await tool_names(gw, mode)
    with pytest.raises(httpx2.TransportError):
        httpx2.post(gw.url.replace("https:", "http:"), json=INITIALIZE, headers=gw.auth(), timeout=60)
    with pytest.raises(httpx2.ConnectError):  # a client that does not trust it
        httpx2.post(gw.url, json=INITIALIZE, headers=gw.auth(), timeout=60)
