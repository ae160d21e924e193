"""Third-party MCP clients reach the OAuth-protected HTTP front with a token from the test issuer.

The gateway, the issuer (its own keys and JWK Set file) and the tokens are those of
tests/security/test_oauth.py; the clients are the TypeScript SDK's `StreamableHTTPClientTransport`
(a small script run with node, the token in `requestInit.headers`) and the MCP Inspector's CLI
(`--header "Authorization: Bearer …"`). Both are pinned and installed once per checkout into the
git-ignored `.toolscore/clients/` (as scripts/conformance installs its suite), under a file lock so
that parallel workers install once. The tests need node and npm and skip without them.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.security.test_oauth import Issuer, oauth_gateway

pytestmark = pytest.mark.e2e

__all__ = ["oauth_gateway"]  # the module-scoped gateway of test_oauth.py, used here as a fixture

ROOT = Path(__file__).resolve().parents[2]
PREFIX = ROOT / ".toolscore" / "clients"
PACKAGES = {"@modelcontextprotocol/sdk": "1.32.2", "@modelcontextprotocol/inspector": "2.12.0"}
INSPECTOR = PREFIX / "node_modules" / ".bin" / "mcp-inspector"
SDK = PREFIX / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"

# Node's HTTP stack in the Inspector fails every HTTP run when a proxy is set (docs: clients.md),
# and the gateway is on loopback anyway.
_PROXIES = {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"}

TS_CLIENT = """\
import { createRequire } from 'node:module';
const [prefix, url, token] = process.argv.slice(2);
const require = createRequire(prefix + '/package.json');
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: 'toolscore-oauth-test', version: '0.1.0' }, { capabilities: {} });
try {
  await client.connect(transport, { timeout: 60000 });
  const { tools } = await client.listTools();
  const result = await client.callTool({ name: 'fx__echo', arguments: { text: 'hello from node' } });
  console.log(JSON.stringify({ tools: tools.map((tool) => tool.name), result }));
  await transport.terminateSession();
  await client.close();
} catch (error) {
  const { name, code, message } = error;
  console.log(JSON.stringify({ error: { name, code: code ?? null, message: String(message) } }));
  process.exitCode = 1;
}
"""


@pytest.fixture(scope="session")
def clients() -> Path:
    """The pinned TypeScript SDK and Inspector in `.toolscore/clients/`, installed at most once."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed to install the TypeScript SDK and the MCP Inspector")
    PREFIX.mkdir(parents=True, exist_ok=True)
    want = json.dumps(PACKAGES, sort_keys=True)
    stamp = PREFIX / ".installed"
    with (PREFIX.parent / "clients.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker installing: wait for it, then find it done
        if stamp.exists() and stamp.read_text() == want and INSPECTOR.exists() and SDK.exists():
            return PREFIX
        manifest = {"name": "toolscore-clients", "private": True, "version": "0.0.0", "dependencies": PACKAGES}
        (PREFIX / "package.json").write_text(json.dumps(manifest, indent=1))
        started = time.monotonic()
        npm = subprocess.run(
            ["npm", "install", "--no-fund", "--no-audit", "--loglevel=error"],
            cwd=PREFIX,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert npm.returncode == 0, f"npm install in .toolscore/clients failed:\n{npm.stdout}{npm.stderr}"
        assert INSPECTOR.exists() and SDK.exists(), "npm install left no Inspector or SDK"
        stamp.write_text(want)
        print(f"installed {want} in {time.monotonic() - started:.0f} s")
    return PREFIX


def _env(home: Path) -> dict[str, str]:
    """No proxies; a home of the test's own, so the Inspector neither reads a stored login of the
    user's nor writes its storage folder into the user's home."""
    env = {k: v for k, v in os.environ.items() if k not in _PROXIES}
    env["HOME"] = str(home)
    env["MCP_INSPECTOR_SECRET_STORE"] = "memory"  # no keychain notices
    return env


def _ts_client(prefix: Path, tmp_path: Path, url: str, token: str) -> tuple[int, dict[str, Any]]:
    script = tmp_path / "client.mjs"
    script.write_text(TS_CLIENT)
    run = subprocess.run(
        ["node", str(script), str(prefix), url, token],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(tmp_path),
        stdin=subprocess.DEVNULL,
        check=False,
    )
    lines = run.stdout.strip().splitlines()
    assert lines, f"the client printed nothing (rc {run.returncode}):\n{run.stderr}"
    return run.returncode, json.loads(lines[-1])


def _inspector(home: Path, url: str, token: str, *method: str) -> tuple[int, str, str]:
    # --stored-auth-only: on a 401 the Inspector would start its own OAuth login (the gateway's
    # WWW-Authenticate points at the issuer); never here, whatever stdin is.
    argv = [str(INSPECTOR), "--cli", "--server-url", url, "--header", f"Authorization: Bearer {token}"]
    run = subprocess.run(
        [*argv, *method, "--stored-auth-only", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(home),
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return run.returncode, run.stdout, run.stderr


def _bad_tokens(issuer: Issuer, url: str) -> list[tuple[str, str]]:
    """(token, what the gateway says about it): expired beyond the leeway, and for another resource."""
    return [
        (issuer.token(aud=url, exp=int(time.time()) - 3600), "expired"),
        (issuer.token(aud="https://other.example.com/mcp"), "not for this resource"),
    ]


def test_the_typescript_sdk_lists_and_calls_a_tool_with_an_access_token(
    clients: Path, oauth_gateway: tuple[str, Issuer], tmp_path: Path
) -> None:
    url, issuer = oauth_gateway
    rc, out = _ts_client(clients, tmp_path, url, issuer.token(aud=url))
    assert rc == 0, out
    assert "fx__echo" in out["tools"], out
    assert out["result"]["content"] == [{"type": "text", "text": "hello from node"}], out
    assert not out["result"].get("isError"), out


def test_the_typescript_sdk_is_refused_with_401_for_an_expired_or_foreign_token(
    clients: Path, oauth_gateway: tuple[str, Issuer], tmp_path: Path
) -> None:
    url, issuer = oauth_gateway
    for token, says in _bad_tokens(issuer, url):
        rc, out = _ts_client(clients, tmp_path, url, token)
        assert rc == 1, out
        assert out["error"]["code"] == 401, out
        assert "invalid_token" in out["error"]["message"] and says in out["error"]["message"], out


def test_the_inspector_cli_lists_and_calls_tools_with_an_access_token(
    clients: Path, oauth_gateway: tuple[str, Issuer], tmp_path: Path
) -> None:
    url, issuer = oauth_gateway
    token = issuer.token(aud=url)
    rc, stdout, stderr = _inspector(tmp_path, url, token, "--method", "tools/list")
    assert rc == 0, stderr
    tools = json.loads(stdout.strip().splitlines()[-1])["result"]["tools"]
    assert "fx__echo" in [tool["name"] for tool in tools], stdout
    call = (
        "--method",
        "tools/call",
        "--tool-name",
        "fx__echo",
        "--tool-args-json",
        '{"text": "hello from the inspector"}',
    )
    rc, stdout, stderr = _inspector(tmp_path, url, token, *call)
    assert rc == 0, stderr
    result = json.loads(stdout.strip().splitlines()[-1])["result"]
    assert result["content"] == [{"type": "text", "text": "hello from the inspector"}], stdout


def test_the_inspector_cli_reports_auth_required_for_an_expired_or_foreign_token(
    clients: Path, oauth_gateway: tuple[str, Issuer], tmp_path: Path
) -> None:
    url, issuer = oauth_gateway
    for token, says in _bad_tokens(issuer, url):
        rc, stdout, stderr = _inspector(tmp_path, url, token, "--method", "tools/list")
        assert rc == 3, (rc, stdout, stderr)
        error = json.loads(stderr.strip().splitlines()[-1])["error"]
        assert error["code"] == "auth_required" and says in error["message"], stderr
        assert '"result"' not in stdout, stdout
