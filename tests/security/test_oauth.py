"""The HTTP front as an OAuth 2.1 resource server: access tokens from a test issuer made here.

The issuer is a few keys made with `cryptography` and a JWK Set file (or a URL answered by httpx's
`MockTransport`); the guard is driven in memory through httpx's ASGI transport, with an app behind
it that records the ASGI scope it was called with. One e2e test runs `toolscore serve` with a
real client.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from starlette.types import Receive, Scope, Send

from tests.conftest import TOOLSCORE, fixture_entry, free_port, text, wait_until_answering
from toolscore.config import HttpAuth, HttpSettings, parse_config
from toolscore.errors import ConfigError
from toolscore.front.callers import PRINCIPAL_SCOPE_KEY, ROLES_SCOPE_KEY
from toolscore.front.http import HttpGuard, resolve_exposure
from toolscore.front.oauth import (
    MAX_TOKEN_BYTES,
    PRINCIPAL_NAME,
    Identity,
    JwksError,
    KeySource,
    Refusal,
    ResourceServer,
    parse_jwks,
    principal_name,
)

ISSUER = "https://issuer.test/realms/team"
AUDIENCE = "http://127.0.0.1:8931/mcp"
METADATA = "http://127.0.0.1:8931/.well-known/oauth-protected-resource/mcp"

_RSA = {kid: rsa.generate_private_key(public_exponent=65537, key_size=2048) for kid in ("k1", "k2", "other")}
_EC = ec.generate_private_key(ec.SECP256R1())
_ED = ed25519.Ed25519PrivateKey.generate()


def _public_jwk(kid: str, key: Any, alg: str) -> dict[str, Any]:
    algorithm = jwt.get_algorithm_by_name(alg)
    return {**json.loads(algorithm.to_jwk(key.public_key())), "kid": kid, "use": "sig", "alg": alg}


class Issuer:
    """A test authorization server: signing keys, the JWK Set it publishes, tokens."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.published: list[dict[str, Any]] = []
        self.publish(_public_jwk("k1", _RSA["k1"], "RS256"))

    def publish(self, *jwks: dict[str, Any]) -> None:
        self.published += jwks
        self.path.write_text(json.dumps({"keys": self.published}))

    def token(
        self,
        *,
        kid: str = "k1",
        alg: str = "RS256",
        key: Any = None,
        headers: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        now = int(time.time())
        payload = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 300, "scope": "mcp:tools"}
        payload.update(claims)
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode(payload, key or _RSA[kid], algorithm=alg, headers={"kid": kid, **(headers or {})})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsigned(header: dict[str, Any], claims: dict[str, Any]) -> str:
    return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"


def _settings(jwks: str, **extra: Any) -> HttpAuth:
    return HttpAuth(issuer=ISSUER, audience=AUDIENCE, jwks=jwks, scopes=("mcp:tools",), **extra)


@pytest.fixture
def issuer(tmp_path: Path) -> Issuer:
    return Issuer(tmp_path / "jwks.json")


@pytest.fixture
def server(issuer: Issuer) -> ResourceServer:
    return ResourceServer(_settings(str(issuer.path)), KeySource(str(issuer.path)))


async def _refusal(server: ResourceServer, token: str) -> Refusal:
    outcome = await server.authenticate(f"Bearer {token}")
    assert isinstance(outcome, Refusal), outcome
    return outcome


# --- validation ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_valid_token_gives_its_subject_and_roles(issuer: Issuer, server: ResourceServer) -> None:
    token = issuer.token(roles=["analyst", "ops"])
    assert await server.authenticate(f"Bearer {token}") == Identity("alice", ("analyst", "ops"))
    assert await server.authenticate(f"bearer  {token}") == Identity("alice", ("analyst", "ops"))


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("claims", "says"),
    [
        ({"exp": int(time.time()) - 3600}, "expired"),
        ({"nbf": int(time.time()) + 3600}, "not valid yet"),
        ({"iat": int(time.time()) + 3600}, "not valid yet"),
        ({"aud": "https://other.example.com/mcp"}, "not for this resource"),
        ({"aud": None}, "no aud claim"),
        ({"iss": "https://issuer.test/realms/other"}, "not from the configured issuer"),
        ({"exp": None}, "no exp claim"),
        ({"exp": "9999999999"}, "exp claim is not a number"),
        ({"exp": float("nan")}, "exp claim is not a number"),
        ({"exp": True}, "exp claim is not a number"),
        ({"sub": None}, "names no subject"),
    ],
)
async def test_a_token_with_bad_claims_is_refused_as_invalid(
    issuer: Issuer, server: ResourceServer, claims: dict[str, Any], says: str
) -> None:
    refusal = await _refusal(server, issuer.token(**claims))
    assert (refusal.status, refusal.error) == (401, "invalid_token")
    assert says in refusal.description, refusal.description


@pytest.mark.anyio
async def test_the_leeway_admits_a_token_just_expired_and_a_list_audience(
    issuer: Issuer, server: ResourceServer
) -> None:
    token = issuer.token(exp=int(time.time()) - 10, aud=["https://other.example.com", AUDIENCE])
    assert isinstance(await server.authenticate(f"Bearer {token}"), Identity)


@pytest.mark.anyio
async def test_a_signature_by_another_key_under_a_known_kid_is_refused(issuer: Issuer, server: ResourceServer) -> None:
    refusal = await _refusal(server, issuer.token(key=_RSA["other"]))
    assert refusal.error == "invalid_token" and "signature" in refusal.description


@pytest.mark.anyio
async def test_a_token_edited_after_signing_is_refused(issuer: Issuer, server: ResourceServer) -> None:
    header, _, signature = issuer.token().split(".")
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "root", "exp": int(time.time()) + 60, "scope": "mcp:tools"}
    forged = f"{header}.{_b64(json.dumps(claims).encode())}.{signature}"
    assert "signature" in (await _refusal(server, forged)).description


@pytest.mark.anyio
async def test_a_token_without_a_required_scope_gets_insufficient_scope(issuer: Issuer, server: ResourceServer) -> None:
    refusal = await _refusal(server, issuer.token(scope="openid profile"))
    assert (refusal.status, refusal.error) == (403, "insufficient_scope")
    # `scp`, as a list (some issuers) or a string, counts as well as `scope`.
    assert isinstance(await server.authenticate(f"Bearer {issuer.token(scope=None, scp=['mcp:tools'])}"), Identity)
    assert isinstance(await server.authenticate(f"Bearer {issuer.token(scope=None, scp='mcp:tools x')}"), Identity)


@pytest.mark.anyio
async def test_alg_none_is_refused_before_any_key_is_looked_at(issuer: Issuer, server: ResourceServer) -> None:
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": int(time.time()) + 60, "scope": "mcp:tools"}
    for alg in ("none", "None", "NONE", ""):
        unsigned = _unsigned({"alg": alg, "kid": "k1", "typ": "JWT"}, claims)
        for token in (f"{unsigned}.", unsigned + "." + _b64(b"x")):
            refusal = await _refusal(server, token)
            assert "algorithm is not accepted" in refusal.description


@pytest.mark.anyio
async def test_hs256_signed_with_the_issuers_public_key_is_refused(issuer: Issuer, server: ResourceServer) -> None:
    # The classic confusion: the attacker uses the published public key as an HMAC secret.
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "root", "exp": int(time.time()) + 60, "scope": "mcp:tools"}
    public = _RSA["k1"].public_key()
    secrets = [
        public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
        public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.PKCS1),
        issuer.path.read_bytes(),
    ]
    for alg, digest in (("HS256", hashlib.sha256), ("HS512", hashlib.sha512)):
        for secret in secrets:
            signing_input = _unsigned({"alg": alg, "kid": "k1", "typ": "JWT"}, claims)
            signature = _b64(hmac.new(secret, signing_input.encode(), digest).digest())
            refusal = await _refusal(server, f"{signing_input}.{signature}")
            assert "algorithm is not accepted" in refusal.description


@pytest.mark.anyio
async def test_a_token_whose_alg_differs_from_its_keys_is_refused(issuer: Issuer, server: ResourceServer) -> None:
    # k1 is published as RS256: a PS256 token under it is not checked with it.
    refusal = await _refusal(server, issuer.token(alg="PS256"))
    assert "not signed by a key of the issuer" in refusal.description


@pytest.mark.anyio
async def test_an_oversized_token_is_refused_before_it_is_decoded(issuer: Issuer, server: ResourceServer) -> None:
    padded = issuer.token(padding="x" * MAX_TOKEN_BYTES)  # validly signed, but too large
    refusal = await _refusal(server, padded)
    assert "larger than 16 KiB" in refusal.description


@pytest.mark.anyio
@pytest.mark.parametrize(
    "token",
    [
        "garbage",
        "a.b.c",
        "....",
        "eyJ.eyJ.eyJ",
        _b64(b"[" * 9000) + ".e30.",  # nested past the JSON decoder's recursion limit
        _b64(b'{"alg": "RS256", "kid": ["k1"]}') + ".e30.sig",
        _b64(b'{"alg": "RS256", "kid": "k1"}') + "." + _b64(b"not json") + ".c2ln",
        "é.é.é",
    ],
)
async def test_garbage_is_refused_as_an_invalid_token(server: ResourceServer, token: str) -> None:
    refusal = await _refusal(server, token)
    assert (refusal.status, refusal.error) == (401, "invalid_token")


@pytest.mark.anyio
async def test_no_token_or_another_scheme_is_a_plain_401(server: ResourceServer) -> None:
    for header in (None, "", "Bearer", "Bearer   ", "Basic YWxpY2U6c2VjcmV0", "Token abc"):
        assert await server.authenticate(header) == Refusal(
            401, None, "send an access token as 'Authorization: Bearer <token>'"
        )


@pytest.mark.anyio
async def test_ec_and_eddsa_keys_work_and_keys_without_alg_are_matched_by_type(
    issuer: Issuer, server: ResourceServer
) -> None:
    es = _public_jwk("e1", _EC, "ES256")
    ed = {k: v for k, v in _public_jwk("d1", _ED, "EdDSA").items() if k != "alg"}
    ps = {k: v for k, v in _public_jwk("k2", _RSA["k2"], "PS256").items() if k != "alg"}
    issuer.publish(es, ed, ps)
    assert isinstance(await server.authenticate(f"Bearer {issuer.token(kid='e1', alg='ES256', key=_EC)}"), Identity)
    assert isinstance(await server.authenticate(f"Bearer {issuer.token(kid='d1', alg='EdDSA', key=_ED)}"), Identity)
    assert isinstance(await server.authenticate(f"Bearer {issuer.token(kid='k2', alg='PS384')}"), Identity)
    # An EC key of P-256 is never used for ES384.
    refusal = await _refusal(server, issuer.token(kid="e1", alg="ES384", key=ec.generate_private_key(ec.SECP384R1())))
    assert "not signed by a key" in refusal.description


# --- keys: rotation and caching ------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_rotated_key_in_the_jwks_file_is_picked_up_and_a_withdrawn_one_stops(
    issuer: Issuer, server: ResourceServer
) -> None:
    new = issuer.token(kid="k2")
    assert "not signed by a key" in (await _refusal(server, new)).description
    issuer.publish(_public_jwk("k2", _RSA["k2"], "RS256"))
    assert await server.authenticate(f"Bearer {new}") == Identity("alice", ())
    # k1 withdrawn: the file changed, and it is looked at again (an unknown kid, or a second later).
    old = issuer.token(kid="k1")
    issuer.published = []
    issuer.publish(_public_jwk("k2", _RSA["k2"], "RS256"), _public_jwk("k3", _RSA["other"], "RS256"))
    assert isinstance(await server.authenticate(f"Bearer {issuer.token(kid='k3', key=_RSA['other'])}"), Identity)
    assert "not signed by a key" in (await _refusal(server, old)).description


@pytest.mark.anyio
async def test_a_jwks_url_is_fetched_once_and_again_for_an_unknown_kid_at_most_once_a_minute(issuer: Issuer) -> None:
    fetches: list[str] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        fetches.append(str(request.url))
        return httpx2.Response(200, content=issuer.path.read_bytes())

    now = [1000.0]
    url = "https://issuer.test/realms/team/protocol/openid-connect/certs"
    keys = KeySource(url, clock=lambda: now[0], transport=httpx2.MockTransport(answer))
    server = ResourceServer(_settings(url), keys)
    for _ in range(3):
        assert isinstance(await server.authenticate(f"Bearer {issuer.token()}"), Identity)
    assert fetches == [url]
    # The issuer rotates: a token under the new kid fetches the set again, once.
    issuer.publish(_public_jwk("k2", _RSA["k2"], "RS256"))
    now[0] += 61
    assert isinstance(await server.authenticate(f"Bearer {issuer.token(kid='k2')}"), Identity)
    assert len(fetches) == 2
    # Made-up kids do not make the gateway hammer the issuer.
    for n in range(20):
        await _refusal(server, issuer.token(kid=f"made-up-{n}", key=_RSA["other"]))
    assert len(fetches) == 2
    now[0] += 61
    await _refusal(server, issuer.token(kid="made-up", key=_RSA["other"]))
    assert len(fetches) == 3


@pytest.mark.anyio
async def test_an_unreachable_jwks_url_is_a_503_not_a_bad_token_and_is_not_retried_every_request(
    issuer: Issuer,
) -> None:
    calls: list[int] = []

    def down(request: httpx2.Request) -> httpx2.Response:
        calls.append(1)
        return httpx2.Response(502)

    url = "https://issuer.test/certs"
    server = ResourceServer(_settings(url), KeySource(url, clock=lambda: 5.0, transport=httpx2.MockTransport(down)))
    for _ in range(3):
        refusal = await _refusal(server, issuer.token())
        assert (refusal.status, refusal.error) == (503, "temporarily_unavailable")
    assert len(calls) == 1


@pytest.mark.anyio
async def test_a_verified_token_is_remembered_only_until_it_expires_or_its_key_is_withdrawn(issuer: Issuer) -> None:
    now = [time.time()]
    keys = KeySource(str(issuer.path), clock=lambda: now[0])
    server = ResourceServer(_settings(str(issuer.path)), keys, clock=lambda: now[0])
    token = f"Bearer {issuer.token(exp=int(now[0]) + 100)}"
    assert await server.authenticate(token) == await server.authenticate(token) == Identity("alice", ())
    now[0] += 100 + 29  # within the leeway
    assert isinstance(await server.authenticate(token), Identity)
    now[0] += 2
    assert "expired" in (await _refusal(server, token.removeprefix("Bearer "))).description
    # Remembered, then its key is withdrawn from the file: refused from the next look at the file on.
    other = f"Bearer {issuer.token(sub='bob', exp=int(now[0]) + 300)}"
    assert await server.authenticate(other) == Identity("bob", ())
    issuer.published = []
    issuer.publish(_public_jwk("k2", _RSA["k2"], "RS256"))
    now[0] += 1  # the file is looked at again once a second
    assert "not signed by a key" in (await _refusal(server, other.removeprefix("Bearer "))).description


def test_a_jwks_keeps_only_public_signing_keys(issuer: Issuer) -> None:
    rsa_key = _public_jwk("k1", _RSA["k1"], "RS256")
    secret = {"kty": "oct", "kid": "h", "k": _b64(b"secret"), "alg": "HS256"}
    encryption = {**_public_jwk("enc", _RSA["k2"], "RS256"), "use": "enc"}
    keys = parse_jwks(json.dumps({"keys": [secret, encryption, rsa_key, "junk"]}).encode())
    assert list(keys) == ["k1"]
    for bad in (b"{", b"[]", b'{"keys": {}}', json.dumps({"keys": [secret]}).encode()):
        with pytest.raises(JwksError):
            parse_jwks(bad)


# --- principals and roles ------------------------------------------------------------------------


@pytest.mark.parametrize("subject", ["auth0|65f1c2", "a b/../c", "ü" * 10, "x" * 65, "-lead", "", "a\"b'\\c"])
def test_a_subject_outside_the_name_set_is_mapped_deterministically(subject: str) -> None:
    name = principal_name(subject)
    assert PRINCIPAL_NAME.fullmatch(name) and name == principal_name(subject)
    assert principal_name(subject + "!") != name


def test_a_valid_name_is_kept_as_it_is() -> None:
    for name in ("alice", "5b4c0e0f-1c9e-4a3b-8f7e-0d7c2a1b9e3f", "svc.bot@example.com"):
        assert principal_name(name) == name


@pytest.mark.anyio
async def test_the_principal_falls_back_to_the_client_id_and_roles_are_sanitised(
    issuer: Issuer, server: ResourceServer
) -> None:
    token = issuer.token(sub=None, client_id="ci/runner", roles=["data analyst", "ops", "ops"])
    identity = await server.authenticate(f"Bearer {token}")
    assert isinstance(identity, Identity)
    assert identity.principal == principal_name("ci/runner") and "/" not in identity.principal
    assert identity.roles == (principal_name("data analyst"), "ops")


@pytest.mark.anyio
async def test_roles_come_from_the_configured_claim_even_nested(issuer: Issuer) -> None:
    settings = _settings(str(issuer.path), roles_claim="realm_access.roles")
    server = ResourceServer(settings, KeySource(str(issuer.path)))
    token = issuer.token(realm_access={"roles": ["analyst"]}, roles=["ignored"])
    assert await server.authenticate(f"Bearer {token}") == Identity("alice", ("analyst",))


@pytest.mark.anyio
@pytest.mark.parametrize("roles", [{"admin": True}, [1, 2], ["ok", ""], [f"r{n}" for n in range(33)]])
async def test_a_malformed_or_huge_roles_claim_refuses_the_token(
    issuer: Issuer, server: ResourceServer, roles: Any
) -> None:
    refusal = await _refusal(server, issuer.token(roles=roles))
    assert refusal.error == "invalid_token" and "roles" in refusal.description


# --- the HTTP front ------------------------------------------------------------------------------


class Recorder:
    """The app behind the guard: answers 200 and keeps the scopes it was called with."""

    def __init__(self) -> None:
        self.scopes: list[Scope] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scopes.append(scope)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})


def _front(jwks: Path, **auth: Any) -> tuple[httpx2.AsyncClient, Recorder]:
    settings = HttpSettings(auth=_settings(str(jwks), **auth))
    exposure = resolve_exposure(settings, host="127.0.0.1", port=8931, env={})
    assert exposure.oauth is not None and exposure.token is None
    app = Recorder()
    guard = HttpGuard(app, security=exposure.security, token=exposure.token, oauth=exposure.oauth)
    client = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=guard), base_url="http://127.0.0.1:8931")
    return client, app


@pytest.mark.anyio
async def test_the_principal_and_roles_reach_the_requests_asgi_scope(issuer: Issuer) -> None:
    client, app = _front(issuer.path)
    async with client:
        token = issuer.token(sub="auth0|bob", roles=["analyst"])
        response = await client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    (scope,) = app.scopes
    assert scope[PRINCIPAL_SCOPE_KEY] == principal_name("auth0|bob") and scope[ROLES_SCOPE_KEY] == ("analyst",)


@pytest.mark.anyio
async def test_401_without_a_token_points_at_the_metadata_and_says_the_scopes(issuer: Issuer) -> None:
    client, app = _front(issuer.path)
    async with client:
        response = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert response.status_code == 401 and app.scopes == []
    assert response.headers["www-authenticate"] == f'Bearer resource_metadata="{METADATA}", scope="mcp:tools"'


@pytest.mark.anyio
async def test_a_bad_token_gets_invalid_token_and_a_missing_scope_403(issuer: Issuer) -> None:
    client, app = _front(issuer.path)
    async with client:
        expired = issuer.token(exp=int(time.time()) - 3600)
        bad = await client.get("/mcp", headers={"Authorization": f"Bearer {expired}"})
        narrow = await client.get("/mcp", headers={"Authorization": f"Bearer {issuer.token(scope='other')}"})
    assert bad.status_code == 401 and app.scopes == []
    assert bad.headers["www-authenticate"] == (
        f'Bearer error="invalid_token", error_description="the token has expired", resource_metadata="{METADATA}"'
    )
    assert bad.json() == {"error": "invalid_token", "error_description": "the token has expired"}
    assert narrow.status_code == 403
    challenge = narrow.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="insufficient_scope"') and 'scope="mcp:tools"' in challenge
    assert f'resource_metadata="{METADATA}"' in challenge


@pytest.mark.anyio
async def test_the_protected_resource_metadata_is_served_without_a_token(issuer: Issuer) -> None:
    client, app = _front(issuer.path)
    async with client:
        root = await client.get("/.well-known/oauth-protected-resource")
        suffixed = await client.get("/.well-known/oauth-protected-resource/mcp")
        other = await client.get("/.well-known/oauth-authorization-server")
    expected = {
        "resource": AUDIENCE,
        "authorization_servers": [ISSUER],
        "scopes_supported": ["mcp:tools"],
        "bearer_methods_supported": ["header"],
        "resource_signing_alg_values_supported": sorted(
            ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"]
        ),
    }
    assert root.status_code == suffixed.status_code == 200 and root.json() == suffixed.json() == expected
    assert other.status_code == 404 and app.scopes == []


@pytest.mark.anyio
async def test_without_auth_every_well_known_path_stays_a_404(tmp_path: Path) -> None:
    exposure = resolve_exposure(HttpSettings(), host="127.0.0.1", port=8931, env={})
    guard = HttpGuard(Recorder(), security=exposure.security, token=None, oauth=exposure.oauth)
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=guard), base_url="http://127.0.0.1:8931") as c:
        assert (await c.get("/.well-known/oauth-protected-resource")).status_code == 404
        assert (await c.get("/.well-known/oauth-protected-resource/mcp")).status_code == 404


# --- configuration -------------------------------------------------------------------------------


def test_auth_and_a_token_file_together_are_refused(issuer: Issuer, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("alice-0123456789abcdefghij\n")
    tokens.chmod(0o600)
    settings = HttpSettings(auth=_settings(str(issuer.path)))
    with pytest.raises(ConfigError, match="are both set"):
        resolve_exposure(settings, host="127.0.0.1", port=8931, token_file=str(tokens), env={})
    with pytest.raises(ConfigError, match="are both set"):
        resolve_exposure(settings, host="127.0.0.1", port=8931, env={"TOOLSCORE_TOKEN": "x" * 32})


def test_auth_alone_lets_the_gateway_bind_beyond_loopback(issuer: Issuer) -> None:
    exposure = resolve_exposure(HttpSettings(auth=_settings(str(issuer.path))), host="0.0.0.0", port=8931, env={})
    assert exposure.oauth is not None and "access token" in (exposure.warning("0.0.0.0") or "")


def test_an_unusable_jwks_file_fails_at_start_naming_the_field(tmp_path: Path) -> None:
    for content in (None, "{", '{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}'):
        path = tmp_path / "jwks.json"
        if content is not None:
            path.write_text(content)
        with pytest.raises(ConfigError, match=r"toolscore\.http\.auth\.jwks: the JWK Set"):
            resolve_exposure(HttpSettings(auth=_settings(str(path))), host="127.0.0.1", port=8931, env={})


@pytest.mark.parametrize(
    ("auth", "field"),
    [
        ({"issuer": "issuer.test", "audience": AUDIENCE, "jwks": "k.json"}, "issuer"),
        ({"issuer": ISSUER, "audience": "https://gw.test/mcp#x", "jwks": "k.json"}, "audience"),
        ({"issuer": ISSUER, "audience": AUDIENCE, "jwks": "http://keys.example.com/jwks"}, "jwks"),
        ({"issuer": ISSUER, "audience": AUDIENCE, "jwks": "k.json", "scopes": ["a b"]}, "scopes"),
        ({"issuer": ISSUER, "audience": AUDIENCE, "jwks": "k.json", "leeway_seconds": -1}, "leeway_seconds"),
        ({"issuer": ISSUER, "audience": AUDIENCE}, "jwks"),
        ({"issuer": ISSUER, "audience": AUDIENCE, "jwks": "k.json", "algorithms": ["HS256"]}, "algorithms"),
    ],
)
def test_a_bad_auth_section_names_the_file_and_field(auth: dict[str, Any], field: str) -> None:
    document = {"mcpServers": {}, "toolscore": {"http": {"auth": auth}}}
    with pytest.raises(ConfigError) as caught:
        parse_config(document, source="servers.json")
    assert "servers.json" in str(caught.value) and f"toolscore.http.auth.{field}" in str(caught.value), caught.value


# --- end to end ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def oauth_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Issuer]]:
    tmp_path = tmp_path_factory.mktemp("oauth")
    issuer = Issuer(tmp_path / "jwks.json")
    port = free_port()
    auth = {
        "issuer": ISSUER,
        "audience": f"http://127.0.0.1:{port}/mcp",
        "jwks": str(issuer.path),
        "scopes": ["mcp:tools"],
    }
    section = {
        "audit": {"path": ""},
        "log_dir": str(tmp_path / "logs"),
        "startup_grace_seconds": None,
        "http": {"auth": auth},
    }
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"fx": fixture_entry(tmp_path)}, "toolscore": section}))
    env = {k: v for k, v in os.environ.items() if k != "TOOLSCORE_TOKEN"}
    argv = [TOOLSCORE, "serve", "--transport", "http", "--config", str(config), "--port", str(port)]
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL, env=env)
    wait_until_answering(f"http://127.0.0.1:{port}/", proc)
    yield f"http://127.0.0.1:{port}/mcp", issuer
    proc.terminate()
    assert proc.wait(timeout=60) == 0


@pytest.mark.e2e
@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_real_client_calls_a_tool_with_an_access_token_and_is_refused_without(
    oauth_gateway: tuple[str, Issuer], mode: str
) -> None:
    url, _ = oauth_gateway
    now = int(time.time())
    token = jwt.encode(
        {"iss": ISSUER, "aud": url, "sub": "alice", "exp": now + 300, "scope": "mcp:tools"},
        _RSA["k1"],
        algorithm="RS256",
        headers={"kid": "k1"},
    )
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,  # type: ignore[arg-type]
    ):
        result = await client.call_tool("fx__echo", {"text": "hi"})
        assert text(result) == "hi"
    refused = httpx2.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=60)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith(f'Bearer resource_metadata="{url.removesuffix("/mcp")}')
    metadata = httpx2.get(url.removesuffix("/mcp") + "/.well-known/oauth-protected-resource/mcp", timeout=60)
    assert metadata.json()["resource"] == url and metadata.json()["authorization_servers"] == [ISSUER]
    with pytest.raises(ExceptionGroup) as refusal:
        async with (
            httpx2.AsyncClient(timeout=60) as http,
            Client(streamable_http_client(url, http_client=http), mode=mode) as client,  # type: ignore[arg-type]
        ):
            await client.call_tool("fx__echo", {"text": "hi"})
    assert refusal.group_contains(MCPError)


def _access_token(url: str, subject: str, **extra: Any) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": url, "sub": subject, "exp": now + 300, "scope": "mcp:tools", **extra}
    return jwt.encode(claims, _RSA["k1"], algorithm="RS256", headers={"kid": "k1"})


@pytest.mark.e2e
@pytest.mark.anyio
async def test_a_session_opened_with_one_subjects_access_token_refuses_another_subjects(
    oauth_gateway: tuple[str, Issuer],
) -> None:
    url, _ = oauth_gateway
    opened: list[str] = []

    async def note(response: httpx2.Response) -> None:
        if "mcp-session-id" in response.headers:
            opened.append(response.headers["mcp-session-id"])

    alice_token = _access_token(url, "alice")
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {alice_token}"}, timeout=60, event_hooks={"response": [note]}
        ) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as alice,  # type: ignore[arg-type]
    ):
        assert text(await alice.call_tool("fx__echo", {"text": "mine"})) == "mine"
        headers = {
            "Mcp-Session-Id": opened[0],
            "Mcp-Protocol-Version": "2025-11-25",
            "Accept": "application/json, text/event-stream",
        }
        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "fx__echo", "arguments": {}}}
        async with httpx2.AsyncClient(timeout=60) as bob:
            bearer = {"Authorization": f"Bearer {_access_token(url, 'bob')}"}
            stolen = await bob.post(url, json=call, headers={**headers, **bearer})
            assert stolen.status_code == 404 and "Session not found" in stolen.text, stolen.text
            # A fresh token of alice's own (a refresh) keeps her session.
            renewed = {"Authorization": f"Bearer {_access_token(url, 'alice', jti='renewed')}"}
            assert (await bob.post(url, json=call, headers={**headers, **renewed})).status_code == 200
