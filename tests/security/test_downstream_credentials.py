"""No token passthrough: what reaches a downstream HTTP server is the gateway's credential for the
calling principal, never the client's own token, asserted on the server's side.

The downstream servers are the fixture server over streamable HTTP, writing down the
`Authorization` header of every message it gets (FIXTURE_AUTH_LOG); the token endpoint is a tiny
HTTP server on loopback made here, which records each exchange and issues opaque tokens with an
`expires_in`; access tokens come from the OAuth tests' issuer (its keys, a JWK Set file). The
gateway is `toolscore serve --transport http`, reached by real clients.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import anyio
import httpx2
import jwt
import pytest

from tests.conftest import (
    FIXTURE_SERVER,
    TOOLSCORE,
    free_port,
    http_client,
    http_gateway_process,
    loopback_http,
    make_config,
    running_gateway,
    wait_for,
    wait_until_answering,
    write_config,
)
from tests.security.test_oauth import ISSUER, Issuer, Recorder, _settings
from toolscore.config import HttpSettings
from toolscore.downstream.credentials import ACCESS_TOKEN_TYPE, TOKEN_EXCHANGE_GRANT, SubjectTokens
from toolscore.front.http import HttpGuard, resolve_exposure
from toolscore.scope import CallScope

GATEWAY_CLIENT = ("toolscore-gateway", "gateway-client-secret")
BASIC = "Basic " + base64.b64encode(":".join(GATEWAY_CLIENT).encode()).decode()
SHORT_LIFETIME = 2


# --- the guard notes access tokens for the exchange, and nothing else -----------------------------


@pytest.mark.anyio
async def test_the_guard_notes_a_checked_access_token_only_while_some_server_exchanges(tmp_path: Path) -> None:
    issuer = Issuer(tmp_path / "jwks.json")
    exposure = resolve_exposure(HttpSettings(auth=_settings(str(issuer.path))), host="127.0.0.1", port=8931, env={})
    subjects = SubjectTokens()
    guard = HttpGuard(Recorder(), security=exposure.security, token=None, oauth=exposure.oauth, subjects=subjects)
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=guard), base_url="http://127.0.0.1:8931") as c:
        first = issuer.token(sub="alice")
        await c.get("/metrics", headers={"Authorization": f"Bearer {first}"})
        assert subjects.current("alice") is None  # no server exchanges tokens: none kept
        subjects.wanted = True
        await c.get("/metrics", headers={"Authorization": f"Bearer {first}"})
        assert subjects.current("alice") == first
        renewed = issuer.token(sub="alice", jti="renewed")
        await c.get("/metrics", headers={"Authorization": f"Bearer {renewed}"})
        assert subjects.current("alice") == renewed  # the latest one
        forged = issuer.token(sub="mallory", kid="other")
        assert (await c.get("/metrics", headers={"Authorization": f"Bearer {forged}"})).status_code == 401
        assert subjects.current("mallory") is None  # a refused token is never noted


# --- a token endpoint and downstream servers on loopback ------------------------------------------


@dataclass
class Exchanges:
    """What the token endpoint received: one form per exchange, and the client authentication."""

    forms: list[dict[str, str]] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def for_audience(self, audience: str) -> list[dict[str, str]]:
        with self.lock:
            return [f for f in self.forms if f.get("audience") == audience]


def token_endpoint(exchanges: Exchanges, lifetimes: dict[str, int]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            form = dict(parse_qsl(self.rfile.read(int(self.headers["Content-Length"])).decode()))
            with exchanges.lock:
                exchanges.forms.append(form)
                exchanges.authorizations.append(self.headers.get("Authorization"))
                n = len(exchanges.forms)
            if self.headers.get("Authorization") != BASIC:
                return self._answer(401, {"error": "invalid_client"})
            if form.get("grant_type") != TOKEN_EXCHANGE_GRANT or form.get("subject_token_type") != ACCESS_TOKEN_TYPE:
                return self._answer(400, {"error": "unsupported_grant_type"})
            subject = jwt.decode(form["subject_token"], options={"verify_signature": False})["sub"]
            if subject == "mallory":
                return self._answer(400, {"error": "invalid_grant", "error_description": "mallory may not"})
            audience = form["audience"]
            token = f"exchanged.{subject}.{audience.rsplit('/', 2)[-2]}.{n}"
            body = {
                "access_token": token,
                "issued_token_type": ACCESS_TOKEN_TYPE,
                "token_type": "Bearer",
                "expires_in": lifetimes.get(audience, 300),
            }
            self._answer(200, body)

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@dataclass
class Downstream:
    """A fixture server over streamable HTTP, and what it saw."""

    url: str
    log: Path

    def seen(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def calls(self) -> list[dict[str, Any]]:
        return [m for m in self.seen() if m["method"] == "tools/call"]


@pytest.fixture(scope="module")
def downstreams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Downstream]]:
    tmp_path = tmp_path_factory.mktemp("downstreams")
    procs: list[subprocess.Popen[bytes]] = []
    found: dict[str, Downstream] = {}
    for name in ("ex", "short", "pp", "tf"):
        port = free_port()
        # A path per server, so an audience names it: http://127.0.0.1:<port>/<name>/mcp is mounted at /mcp.
        log = tmp_path / f"{name}.jsonl"
        env = {**os.environ, "FIXTURE_STATE_DIR": str(tmp_path), "FIXTURE_AUTH_LOG": str(log)}
        procs.append(subprocess.Popen([sys.executable, FIXTURE_SERVER, "--http", str(port)], env=env))
        found[name] = Downstream(f"http://127.0.0.1:{port}/mcp", log)
    for downstream in found.values():
        # Up before the gateway starts: one that connected too early would back off for seconds.
        wait_until_answering(downstream.url)
    yield found
    for proc in procs:
        proc.terminate()
        proc.wait(60)


def _exchange(endpoint: str, **extra: Any) -> dict[str, Any]:
    client_id, secret = GATEWAY_CLIENT
    return {"token_exchange": {"token_endpoint": endpoint, "client_id": client_id, "client_secret": secret, **extra}}


@dataclass
class OAuthGateway:
    url: str
    issuer: Issuer
    exchanges: Exchanges
    downstreams: dict[str, Downstream]

    def token(self, subject: str) -> str:
        return self.issuer.token(sub=subject, aud=self.url, jti=f"{subject}-{time.monotonic_ns()}")


EX_AUDIENCE = "https://ex.example.com/mcp"
_SECTION = {"audit": {"path": ""}, "startup_grace_seconds": None}


@pytest.fixture(scope="module")
def oauth_gateway(
    tmp_path_factory: pytest.TempPathFactory, downstreams: dict[str, Downstream]
) -> Iterator[OAuthGateway]:
    tmp_path = tmp_path_factory.mktemp("oauth-credentials")
    issuer = Issuer(tmp_path / "jwks.json")
    exchanges = Exchanges()
    short = downstreams["short"].url
    with loopback_http(token_endpoint(exchanges, {short: SHORT_LIFETIME})) as endpoint:
        port = free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        servers = {
            "ex": {"url": downstreams["ex"].url, "credentials": _exchange(endpoint + "/token", audience=EX_AUDIENCE)},
            "short": {"url": short, "credentials": _exchange(endpoint + "/token")},  # audience: its url
            "pp": {"url": downstreams["pp"].url, "credentials": {"per_principal": {"alice": "${PP_ALICE}"}}},
        }
        auth = {"issuer": ISSUER, "audience": url, "jwks": str(issuer.path), "scopes": ["mcp:tools"]}
        config = write_config(
            tmp_path,
            servers,
            toolscore={**_SECTION, "log_dir": str(tmp_path / "logs"), "http": {"auth": auth}},
        )
        env = {"PP_ALICE": "pp-secret-of-alice", "TOOLSCORE_TOKEN": ""}
        with _gateway_on(config, port, env) as base:
            yield OAuthGateway(base + "/mcp", issuer, exchanges, downstreams)


@contextmanager
def _gateway_on(config: Path, port: int, env: dict[str, str]) -> Iterator[str]:
    """`toolscore serve --transport http` on `port` (the one the config's audience names); its base URL."""
    argv = [TOOLSCORE, "serve", "--transport", "http", "--config", str(config), "--port", str(port)]
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL, env={**os.environ, **env})
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_answering(base + "/", proc)
        yield base
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0


async def _call(url: str, token: str, tool: str, text: str, *, mode: str = "legacy") -> tuple[bool, str]:
    async with http_client(url, token, mode) as client:
        result = await client.call_tool(tool, {"text": text})
    block = result.content[0]
    return bool(result.is_error), getattr(block, "text", "")


def _subject(form: dict[str, str]) -> str:
    return str(jwt.decode(form["subject_token"], options={"verify_signature": False})["sub"])


def _never_the_clients_token(gateway: OAuthGateway, *tokens: str) -> None:
    for name, downstream in gateway.downstreams.items():
        for message in downstream.seen():
            seen = message["authorization"] or ""
            assert not any(t in seen for t in tokens), f"{name} saw a client's token: {message}"


@pytest.mark.e2e
@pytest.mark.anyio
async def test_token_exchange_per_principal_audience_bound_cached_and_never_the_clients_token(
    oauth_gateway: OAuthGateway,
) -> None:
    gw = oauth_gateway
    ex = gw.downstreams["ex"]
    alice, bob = gw.token("alice"), gw.token("bob")
    for n in range(3):
        assert await _call(gw.url, alice, "ex__echo", f"alice {n}") == (False, f"alice {n}")
    # A stateless (2026-07-28) request of alice's, with a token of hers: her connection, her exchanged token.
    assert await _call(gw.url, alice, "ex__echo", "alice 3", mode="auto") == (False, "alice 3")
    assert await _call(gw.url, bob, "ex__echo", "bob 0") == (False, "bob 0")

    # One exchange per principal for all its calls (the other tests' principals are others).
    exchanged = {_subject(f): f for f in gw.exchanges.for_audience(EX_AUDIENCE) if _subject(f) in ("alice", "bob")}
    assert sorted(_subject(f) for f in gw.exchanges.for_audience(EX_AUDIENCE)).count("alice") == 1
    assert exchanged["alice"]["subject_token"] == alice and exchanged["bob"]["subject_token"] == bob
    assert exchanged["alice"]["requested_token_type"] == ACCESS_TOKEN_TYPE

    calls = {c["arguments"]["text"]: c["authorization"] for c in ex.calls()}
    alice_token = calls["alice 0"]
    assert alice_token is not None and alice_token.startswith("Bearer exchanged.alice.")
    assert [calls[f"alice {n}"] for n in range(4)] == [alice_token] * 4
    assert calls["bob 0"] is not None and calls["bob 0"].startswith("Bearer exchanged.bob.")
    # The connection listing the tools carries `headers` alone (none here); every other, an exchanged token.
    seen = {m["authorization"] for m in ex.seen()}
    assert None in seen and all(a is None or a.startswith("Bearer exchanged.") for a in seen), seen
    _never_the_clients_token(gw, alice, bob)


@pytest.mark.e2e
@pytest.mark.anyio
async def test_an_exchanged_token_is_renewed_when_it_expires_for_the_servers_own_audience(
    oauth_gateway: OAuthGateway,
) -> None:
    gw = oauth_gateway
    short = gw.downstreams["short"]
    carol = gw.token("carol")
    assert await _call(gw.url, carol, "short__echo", "before") == (False, "before")
    await anyio.sleep(SHORT_LIFETIME + 0.2)
    assert await _call(gw.url, carol, "short__echo", "after") == (False, "after")
    exchanged = gw.exchanges.for_audience(short.url)  # no `audience` configured: the server's url
    assert [_subject(f) for f in exchanged].count(
        "carol"
    ) >= 2  # renewed (the connection's own requests may have renewed it in between too)
    calls = {c["arguments"]["text"]: c["authorization"] for c in short.calls()}
    assert calls["before"] != calls["after"]
    assert all(calls[k].startswith("Bearer exchanged.carol.") for k in ("before", "after"))
    _never_the_clients_token(gw, carol)


@pytest.mark.e2e
@pytest.mark.anyio
async def test_callers_without_a_credential_are_refused_naming_the_server_and_why(
    oauth_gateway: OAuthGateway,
) -> None:
    gw = oauth_gateway
    mallory, bob, alice = gw.token("mallory"), gw.token("bob"), gw.token("alice")
    failed, message = await _call(gw.url, mallory, "ex__echo", "mallory")
    assert failed and "server 'ex'" in message and "invalid_grant: mallory may not" in message, message
    failed, message = await _call(gw.url, bob, "pp__echo", "bob")
    assert failed and "server 'pp'" in message and "principal 'bob' has none there" in message, message
    assert await _call(gw.url, alice, "pp__echo", "alice") == (False, "alice")
    pp = {c["arguments"]["text"]: c["authorization"] for c in gw.downstreams["pp"].calls()}
    assert pp == {"alice": "Bearer pp-secret-of-alice"}  # bob's call never reached it
    assert "mallory" not in {c["arguments"]["text"] for c in gw.downstreams["ex"].calls()}
    _never_the_clients_token(gw, mallory, bob, alice)


@pytest.mark.e2e
@pytest.mark.anyio
async def test_a_token_file_principal_gets_its_secret_not_its_gateway_token_and_no_exchange(
    tmp_path: Path, downstreams: dict[str, Downstream]
) -> None:
    tokens = {"alice": "alice-gateway-token-0123456789", "bob": "bob-gateway-token-0123456789"}
    token_file = tmp_path / "tokens"
    token_file.write_text("".join(f"{k} {v}\n" for k, v in tokens.items()))
    token_file.chmod(0o600)
    secrets = tmp_path / "downstream.secrets"
    secrets.write_text("alice tf-secret-of-alice\n")
    secrets.chmod(0o600)
    servers = {
        "tf": {"url": downstreams["tf"].url, "credentials": {"per_principal_file": str(secrets)}},
        # Token exchange needs an OAuth access token: principals of a token file have none.
        "ex": {"url": downstreams["ex"].url, "credentials": _exchange("http://127.0.0.1:9/token")},
    }
    config = write_config(
        tmp_path,
        servers,
        toolscore={**_SECTION, "log_dir": str(tmp_path / "logs"), "http": {"token_file": str(token_file)}},
    )
    with http_gateway_process(config, env={"TOOLSCORE_TOKEN": ""}) as base:
        url = base + "/mcp"
        assert await _call(url, tokens["alice"], "tf__echo", "from alice") == (False, "from alice")
        failed, message = await _call(url, tokens["bob"], "tf__echo", "from bob")
        assert failed and "server 'tf'" in message and "principal 'bob' has none there" in message, message
        failed, message = await _call(url, tokens["alice"], "ex__echo", "exchange")
        assert failed and "server 'ex'" in message and "principal 'alice' has no current one" in message, message
    seen = downstreams["tf"].calls()
    assert [(c["arguments"]["text"], c["authorization"]) for c in seen] == [("from alice", "Bearer tf-secret-of-alice")]
    for downstream in downstreams.values():
        assert not any(t in (m["authorization"] or "") for m in downstream.seen() for t in tokens.values())


@pytest.fixture
def recording_server(tmp_path: Path) -> Iterator[Any]:
    """Start the fixture server (`--http` or `--sse`) writing down what it gets; (its URL, its log)."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(flag: str) -> tuple[str, Downstream]:
        port, log = free_port(), tmp_path / f"seen{len(procs)}.jsonl"
        env = {**os.environ, "FIXTURE_STATE_DIR": str(tmp_path), "FIXTURE_AUTH_LOG": str(log)}
        procs.append(subprocess.Popen([sys.executable, FIXTURE_SERVER, flag, str(port)], env=env))
        url = f"http://127.0.0.1:{port}" + ("/mcp" if flag == "--http" else "/sse")
        wait_until_answering(url, procs[-1])
        return url, Downstream(url, log)

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(60)


@pytest.mark.e2e
@pytest.mark.anyio
@pytest.mark.parametrize("flag", ["--http", "--sse"])
async def test_each_principals_own_secret_reaches_the_server_over_http_and_sse(
    tmp_path: Path, recording_server: Any, flag: str
) -> None:
    url, seen = recording_server(flag)
    entry = {
        "type": "http" if flag == "--http" else "sse",
        "url": url,
        "connect_timeout": 15,
        "headers": {"Authorization": "Bearer listing-only", "X-Team": "blue"},
        "credentials": {"per_principal": {"alice": "alice-secret", "bob": "bob-secret"}},
    }
    # The fixture needs a moment to bind; the hub retries with backoff until it answers.
    async with running_gateway(make_config({"web": entry}), tmp_path) as (gw, _):
        await wait_for(lambda: gw.hub.unavailable_reason("web") is None, 20)
        for caller in ("principal:alice/c1", "principal:bob/c2", "principal:alice", "principal:carol"):
            outcome = await gw.engine.execute("web__echo", {"text": caller}, scope=CallScope(caller))
            assert outcome.result.is_error == (caller == "principal:carol"), outcome.result
    calls = {c["arguments"]["text"]: c["authorization"] for c in seen.calls()}
    assert calls == {
        "principal:alice/c1": "Bearer alice-secret",
        "principal:bob/c2": "Bearer bob-secret",
        "principal:alice": "Bearer alice-secret",
    }
    # The connection listing the tools carries the entry's headers alone.
    assert "Bearer listing-only" in {m["authorization"] for m in seen.seen()}
