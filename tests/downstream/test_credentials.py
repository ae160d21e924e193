"""Downstream credentials in memory: the `credentials` section, per-principal secrets, token exchange
against a token endpoint answered by httpx's `MockTransport` (the form it gets, caching, renewal,
refusals), the guard noting access tokens, and the hub keying connections by principal.

The end-to-end tests (real processes and sockets, asserted on the downstream server's side) are in
tests/security/test_downstream_credentials.py.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import anyio
import httpx2
import pytest

from tests.fixtures.fixture_server import build_server
from toolscore import testing
from toolscore.config import ServerConfig, parse_config
from toolscore.downstream.bearer import BearerAuth
from toolscore.downstream.credentials import (
    ACCESS_TOKEN_TYPE,
    REFUSED_RENEWAL_SECONDS,
    TOKEN_EXCHANGE_GRANT,
    PerPrincipal,
    SubjectTokens,
    TokenExchange,
    credential_for,
)
from toolscore.errors import ConfigError, DownstreamUnavailable, Rejected
from toolscore.scope import CallScope

pytestmark = pytest.mark.anyio

ENDPOINT = "https://idp.test/oauth2/token"


def _server(credentials: dict[str, Any], **entry: Any) -> ServerConfig:
    document = {"mcpServers": {"web": {"url": "https://web.test/mcp", "credentials": credentials, **entry}}}
    return parse_config(document, source="servers.json", env={}).servers["web"]


# --- the config section --------------------------------------------------------------------------


def test_secrets_and_the_client_secret_are_masked_when_printed() -> None:
    per = _server({"per_principal": {"alice": "alice-downstream-secret"}})
    assert "alice-downstream-secret" not in repr(per) and "'alice'" in repr(per)
    exchange = _server(
        {"token_exchange": {"token_endpoint": ENDPOINT, "client_id": "gateway", "client_secret": "client-s3cret"}}
    )
    assert "client-s3cret" not in repr(exchange) and "gateway" in repr(exchange)
    assert "alice-downstream-secret" not in repr(credential_for(per, SubjectTokens()))


@pytest.mark.parametrize(
    ("credentials", "field", "says"),
    [
        ({}, "credentials", "exactly one of"),
        (
            {"per_principal": {"a": "x"}, "token_exchange": {"token_endpoint": ENDPOINT, "client_id": "g"}},
            "credentials",
            "not per_principal and token_exchange",
        ),
        ({"per_principal": {"no one": "x"}}, "credentials.per_principal", "is not a principal's name"),
        ({"per_principal": {"alice": "Bearer abc"}}, "credentials.per_principal.alice", "give the secret alone"),
        ({"per_principal": {"alice": "a\nb"}}, "credentials.per_principal.alice", "visible ASCII"),
        (
            {"token_exchange": {"token_endpoint": "http://idp.example.com/token", "client_id": "g"}},
            "credentials.token_exchange.token_endpoint",
            "over https",
        ),
        ({"token_exchange": {"token_endpoint": ENDPOINT}}, "credentials.token_exchange.client_id", "required"),
        (
            {"token_exchange": {"token_endpoint": ENDPOINT, "client_id": "g", "typo": 1}},
            "credentials.token_exchange.typo",
            "",
        ),
        ({"per_principal_file": "/nonexistent/creds"}, "credentials.per_principal_file", "cannot read the file"),
    ],
)
def test_a_bad_credentials_section_names_the_file_and_field(credentials: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _server(credentials)
    message = str(caught.value)
    assert message.startswith(f"servers.json: mcpServers.web.{field}") and says in message, message
    assert "abc" not in message


def test_credentials_need_a_server_reached_by_url() -> None:
    document = {"mcpServers": {"local": {"command": "x", "credentials": {"per_principal": {"a": "b"}}}}}
    with pytest.raises(ConfigError, match=r"servers.json: mcpServers.local: .*'credentials' is for a server reached"):
        parse_config(document, source="servers.json", env={})


def test_secrets_come_from_the_environment() -> None:
    document = {"mcpServers": {"web": {"url": "https://w/mcp", "credentials": {"per_principal": {"alice": "${A}"}}}}}
    server = parse_config(document, env={"A": "from-env"}).servers["web"]
    assert server.credentials is not None and server.credentials.secrets == {"alice": "from-env"}


def _secrets_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "downstream.secrets"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_per_principal_file_is_read_when_the_config_is(tmp_path: Path) -> None:
    path = _secrets_file(tmp_path, "# who gets what\nalice alice-file-secret\n\nbob bob-file-secret\n")
    server = _server({"per_principal_file": str(path)})
    assert server.credentials is not None
    assert server.credentials.secrets == {"alice": "alice-file-secret", "bob": "bob-file-secret"}
    assert "file-secret" not in repr(server)
    # A rotated file makes another entry: a reload restarts the server's connections with it.
    _secrets_file(tmp_path, "alice rotated-secret\n")
    assert _server({"per_principal_file": str(path)}) != server


@pytest.mark.skipif(os.name != "posix", reason="file modes")
@pytest.mark.parametrize(
    ("text", "mode", "says"),
    [
        ("alice s\n", 0o644, "is open to group or others (mode 644): chmod 600 it"),
        ("alice\n", 0o600, "line 1: expected 'NAME SECRET'"),
        ("alice a\nalice b\n", 0o600, "line 2: the name 'alice' is given twice"),
        ("al/ice a\n", 0o600, "line 1: a name is 1-64 of"),
        ("# nothing\n", 0o600, "holds no 'NAME SECRET' line"),
    ],
)
def test_a_bad_per_principal_file_names_the_file_and_line_never_a_secret(
    tmp_path: Path, text: str, mode: int, says: str
) -> None:
    path = _secrets_file(tmp_path, text, mode)
    with pytest.raises(ConfigError) as caught:
        _server({"per_principal_file": str(path)})
    message = str(caught.value)
    assert "mcpServers.web.credentials.per_principal_file" in message and str(path) in message
    assert says in message, message


def test_a_disabled_servers_file_is_not_read() -> None:
    server = _server({"per_principal_file": "${ELSEWHERE}/creds"}, disabled=True)
    assert server.credentials is not None and server.credentials.per_principal_file is not None


# --- per-principal secrets -----------------------------------------------------------------------


async def test_each_principal_gets_its_own_secret_and_others_are_refused_naming_the_server() -> None:
    credential = credential_for(_server({"per_principal": {"alice": "alice-secret"}}), SubjectTokens())
    assert isinstance(credential, PerPrincipal)
    assert await credential.bearer("alice") == "alice-secret"
    with pytest.raises(Rejected) as bob:
        await credential.bearer("bob")
    assert "server 'web'" in str(bob.value) and "principal 'bob' has none" in str(bob.value)
    with pytest.raises(Rejected) as nobody:
        await credential.bearer(None)
    assert "server 'web'" in str(nobody.value) and "this caller has no principal" in str(nobody.value)


# --- token exchange ------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Endpoint:
    """A token endpoint in memory: records each request, answers with `answer(form)`."""

    def __init__(self, answer: Callable[[dict[str, str]], httpx2.Response] | None = None) -> None:
        self.requests: list[tuple[dict[str, str], str | None]] = []
        self._answer = answer or self.issue
        self.lifetime: Any = 300

    def issue(self, form: dict[str, str]) -> httpx2.Response:
        n = len(self.requests) - 1
        body = {
            "access_token": f"issued-{form['audience']}-{form['subject_token']}-{n}",
            "issued_token_type": ACCESS_TOKEN_TYPE,
            "token_type": "Bearer",
            "expires_in": self.lifetime,
        }
        return httpx2.Response(200, json={k: v for k, v in body.items() if v is not None})

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        form = dict(parse_qsl(request.content.decode()))
        self.requests.append((form, request.headers.get("authorization")))
        return self._answer(form)

    @property
    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self.handler)


def _exchange(endpoint: Endpoint, subjects: SubjectTokens, clock: Clock, **settings: Any) -> TokenExchange:
    server = _server(
        {"token_exchange": {"token_endpoint": ENDPOINT, "client_id": "gate way", "client_secret": "s:cret", **settings}}
    )
    assert server.credentials is not None and server.credentials.token_exchange is not None
    return TokenExchange(server, server.credentials.token_exchange, subjects, clock=clock, transport=endpoint.transport)


def _subjects(**tokens: str) -> SubjectTokens:
    subjects = SubjectTokens()
    subjects.wanted = True
    for principal, token in tokens.items():
        subjects.note(principal, token, 4e9)
    return subjects


async def test_the_exchange_posts_the_callers_token_for_the_servers_audience_with_the_gateways_client() -> None:
    endpoint, clock = Endpoint(), Clock()
    exchange = _exchange(endpoint, _subjects(alice="alice-access-token"), clock, scope="files:read files:write")
    assert await exchange.bearer("alice") == "issued-https://web.test/mcp-alice-access-token-0"
    [(form, authorization)] = endpoint.requests
    assert form == {
        "grant_type": TOKEN_EXCHANGE_GRANT,
        "subject_token": "alice-access-token",
        "subject_token_type": ACCESS_TOKEN_TYPE,
        "requested_token_type": ACCESS_TOKEN_TYPE,
        "audience": "https://web.test/mcp",  # the server's url, unless `audience` says otherwise
        "scope": "files:read files:write",
    }
    # RFC 6749 section 2.3.1: client id and secret form-encoded, then HTTP Basic.
    assert authorization == "Basic " + base64.b64encode(b"gate+way:s%3Acret").decode()


async def test_client_secret_post_and_a_configured_audience() -> None:
    endpoint, clock = Endpoint(), Clock()
    exchange = _exchange(endpoint, _subjects(alice="t"), clock, client_auth="post", audience="urn:web")
    await exchange.bearer("alice")
    [(form, authorization)] = endpoint.requests
    assert authorization is None
    assert (form["client_id"], form["client_secret"], form["audience"]) == ("gate way", "s:cret", "urn:web")


async def test_one_exchange_serves_many_calls_even_at_once_until_shortly_before_expiry() -> None:
    endpoint, clock = Endpoint(), Clock()
    exchange = _exchange(endpoint, _subjects(alice="a-token", bob="b-token"), clock)
    got: list[str] = []

    async def call() -> None:
        got.append(await exchange.bearer("alice"))

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(call)
    assert len(set(got)) == 1 and len(endpoint.requests) == 1
    clock.now += 269  # 300 s, renewed 30 s before the end
    assert await exchange.bearer("alice") == got[0] and len(endpoint.requests) == 1
    clock.now += 2
    renewed = await exchange.bearer("alice")
    assert renewed != got[0] and len(endpoint.requests) == 2
    # Each principal its own token.
    assert "b-token" in await exchange.bearer("bob") and len(endpoint.requests) == 3


@pytest.mark.parametrize(("lifetime", "kept"), [(2, 1.8), ("600", 570.0), (None, 54.0), (-5, 54.0)])
async def test_a_short_string_or_missing_lifetime(lifetime: Any, kept: float) -> None:
    endpoint, clock = Endpoint(), Clock()
    endpoint.lifetime = lifetime
    exchange = _exchange(endpoint, _subjects(alice="t"), clock)
    await exchange.bearer("alice")
    clock.now += kept - 0.01
    await exchange.bearer("alice")
    assert len(endpoint.requests) == 1
    clock.now += 0.02
    await exchange.bearer("alice")
    assert len(endpoint.requests) == 2


async def test_a_principal_without_an_access_token_is_refused_before_any_request() -> None:
    endpoint, clock = Endpoint(), Clock()
    exchange = _exchange(endpoint, _subjects(), clock)
    with pytest.raises(Rejected) as caught:
        await exchange.bearer("bob")
    assert "server 'web'" in str(caught.value) and "principal 'bob' has no current one" in str(caught.value)
    with pytest.raises(Rejected, match="this caller has no principal"):
        await exchange.bearer(None)
    assert endpoint.requests == []


def _error(status: int, body: Any) -> Callable[[dict[str, str]], httpx2.Response]:
    return lambda form: (
        httpx2.Response(status, json=body) if not isinstance(body, bytes) else httpx2.Response(status, content=body)
    )


@pytest.mark.parametrize(
    ("status", "body", "kind", "says"),
    [
        (
            400,
            {"error": "invalid_grant", "error_description": "subject not allowed"},
            Rejected,
            "invalid_grant: subject",
        ),
        (400, {"error": "invalid_target"}, Rejected, "refused to exchange principal 'alice''s (invalid_target)"),
        (403, b"no", Rejected, "(HTTP 403)"),
        (401, {"error": "invalid_client"}, DownstreamUnavailable, "refused the exchange (invalid_client)"),
        (503, b"down", DownstreamUnavailable, "refused the exchange (HTTP 503)"),
        (200, {"token_type": "Bearer"}, DownstreamUnavailable, "no usable access_token"),
        (200, {"access_token": "two\nlines"}, DownstreamUnavailable, "no usable access_token"),
        (200, {"access_token": "x", "token_type": "N_A"}, DownstreamUnavailable, "not a bearer token"),
        (200, b"<html>", DownstreamUnavailable, "no usable access_token"),
    ],
)
async def test_refusals_and_bad_answers_name_the_server_and_why(
    status: int, body: Any, kind: type[Exception], says: str
) -> None:
    endpoint, clock = Endpoint(_error(status, body)), Clock()
    exchange = _exchange(endpoint, _subjects(alice="alice-access-token"), clock)
    with pytest.raises(kind) as caught:
        await exchange.bearer("alice")
    assert "server 'web'" in str(caught.value).lower() and says in str(caught.value), str(caught.value)
    # A refusal is not kept: the next call asks again.
    with pytest.raises(kind):
        await exchange.bearer("alice")
    assert len(endpoint.requests) == 2


async def test_an_issuer_quoting_the_subject_token_does_not_pass_it_on() -> None:
    endpoint = Endpoint(_error(400, {"error": "invalid_grant", "error_description": "bad token alice-access-token"}))
    exchange = _exchange(endpoint, _subjects(alice="alice-access-token"), Clock())
    with pytest.raises(Rejected) as caught:
        await exchange.bearer("alice")
    assert "alice-access-token" not in str(caught.value) and "[REDACTED]" in str(caught.value)


async def test_an_unreachable_token_endpoint_is_unavailable_not_a_refusal() -> None:
    def down(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    server = _server({"token_exchange": {"token_endpoint": ENDPOINT, "client_id": "g"}})
    assert server.credentials is not None and server.credentials.token_exchange is not None
    exchange = TokenExchange(
        server, server.credentials.token_exchange, _subjects(alice="t"), transport=httpx2.MockTransport(down)
    )
    with pytest.raises(DownstreamUnavailable, match=r"cannot be reached \(ConnectError\)"):
        await exchange.bearer("alice")


def test_access_tokens_are_kept_only_while_wanted_and_until_they_expire() -> None:
    now = [1000.0]
    subjects = SubjectTokens(clock=lambda: now[0])
    subjects.note("alice", "a", 2000.0)
    assert subjects.current("alice") is None  # no server exchanges tokens: nothing is kept
    subjects.wanted = True
    subjects.note("alice", "a", 2000.0)
    subjects.note("bob", "b", None)  # no expiry known: not kept
    assert (subjects.current("alice"), subjects.current("bob")) == ("a", None)
    now[0] = 2000.0
    assert subjects.current("alice") is None
    subjects.note("alice", "a2", 3000.0)
    subjects.wanted = False  # a reload took the last exchanging server away
    subjects.wanted = True
    assert subjects.current("alice") is None
    assert "a2" not in repr(subjects)


# --- the connection's auth -----------------------------------------------------------------------


async def test_bearer_auth_sets_the_principals_credential_on_every_request_over_the_headers() -> None:
    seen: list[str | None] = []

    def downstream(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.headers.get("authorization"))
        return httpx2.Response(200, json={})

    credential = PerPrincipal("web", {"alice": "alice-secret"}, "credentials.per_principal")
    async with httpx2.AsyncClient(
        transport=httpx2.MockTransport(downstream),
        headers={"Authorization": "Bearer static-listing-secret"},
        auth=BearerAuth(credential, "alice"),
    ) as http:
        await http.post("https://web.test/mcp", json={})
        await http.get("https://web.test/mcp")
    assert seen == ["Bearer alice-secret", "Bearer alice-secret"]


async def test_bearer_auth_renews_and_sends_the_held_token_while_it_lasts_if_renewal_fails() -> None:
    fail = [False]
    endpoint = Endpoint()

    def answer(form: dict[str, str]) -> httpx2.Response:
        return httpx2.Response(503) if fail[0] else endpoint.issue(form)

    endpoint._answer = answer
    clock = Clock()
    exchange = _exchange(endpoint, _subjects(alice="t"), clock)
    seen: list[str | None] = []

    def downstream(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.headers.get("authorization"))
        return httpx2.Response(200, json={})

    async with httpx2.AsyncClient(
        transport=httpx2.MockTransport(downstream), auth=BearerAuth(exchange, "alice")
    ) as http:
        await http.get("https://web.test/mcp")
        clock.now += 280  # due for renewal
        await http.get("https://web.test/mcp")
        fail[0] = True
        clock.now += 275  # due again, and the endpoint is down: the held token goes while it lasts
        await http.get("https://web.test/mcp")
        clock.now += 30  # expired, and still no renewal: the request fails rather than go without
        with pytest.raises(DownstreamUnavailable):
            await http.get("https://web.test/mcp")
    assert seen[0] != seen[1] and seen[1] == seen[2] and len(seen) == 3


async def test_a_token_the_server_refuses_before_it_expires_is_exchanged_again_and_the_request_resent() -> None:
    endpoint = Endpoint()
    exchange = _exchange(endpoint, _subjects(alice="t"), Clock())
    seen: list[tuple[str | None, bytes]] = []
    revoked: set[str] = set()

    def downstream(request: httpx2.Request) -> httpx2.Response:
        token = request.headers.get("authorization")
        seen.append((token, request.content))
        if not seen[1:]:
            revoked.add(str(token))  # the server revokes the first token it sees
        return httpx2.Response(401 if token in revoked else 200, json={})

    async with httpx2.AsyncClient(
        transport=httpx2.MockTransport(downstream), auth=BearerAuth(exchange, "alice")
    ) as http:
        answer = await http.post("https://web.test/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert answer.status_code == 200
        again = await http.post("https://web.test/mcp", json={})  # the new token, kept
    assert len(endpoint.requests) == 2 and again.status_code == 200
    (first, body), (second, resent), (third, _) = seen
    assert first != second == third and body == resent and b'"ping"' in body


async def test_a_server_that_refuses_every_exchanged_token_costs_no_exchange_per_request_for_a_while() -> None:
    endpoint, clock = Endpoint(), Clock()
    exchange = _exchange(endpoint, _subjects(alice="t"), clock)
    seen: list[str | None] = []

    def downstream(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.headers.get("authorization"))
        return httpx2.Response(401, json={})  # whatever the gateway sends

    async with httpx2.AsyncClient(
        transport=httpx2.MockTransport(downstream), auth=BearerAuth(exchange, "alice")
    ) as http:
        assert (await http.post("https://web.test/mcp", json={})).status_code == 401
        assert len(endpoint.requests) == 2 and len(seen) == 2  # the token, then one exchanged anew
        for _ in range(5):  # the 401s stand: no exchange, no resend, the token last got is sent
            assert (await http.post("https://web.test/mcp", json={})).status_code == 401
        assert len(endpoint.requests) == 2 and len(seen) == 7 and seen[-1] == seen[1]
        clock.now += REFUSED_RENEWAL_SECONDS  # then it is tried again, once
        assert (await http.post("https://web.test/mcp", json={})).status_code == 401
        assert len(endpoint.requests) == 3 and len(seen) == 9


async def test_a_configured_secret_the_server_refuses_is_not_sent_again() -> None:
    seen: list[str | None] = []

    def downstream(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.headers.get("authorization"))
        return httpx2.Response(401, json={})

    credential = PerPrincipal("web", {"alice": "alice-secret"}, "credentials.per_principal")
    async with httpx2.AsyncClient(
        transport=httpx2.MockTransport(downstream), auth=BearerAuth(credential, "alice")
    ) as http:
        assert (await http.post("https://web.test/mcp", json={})).status_code == 401
    assert seen == ["Bearer alice-secret"]


# --- the hub: one connection per principal, refusals before anything is sent ---------------------


def _memory_gateway(tmp_path: Path, credentials: dict[str, Any]) -> Any:
    config = parse_config(
        {"mcpServers": {"web": {"url": "http://127.0.0.1:9/mcp", "credentials": credentials}}}, env={}
    )
    return testing.running_gateway({"web": build_server(tmp_path)}, config=config)


async def test_calls_go_over_one_connection_per_principal_and_callers_without_one_are_refused(
    tmp_path: Path,
) -> None:
    async with _memory_gateway(tmp_path, {"per_principal": {"alice": "a-secret", "carol": "c-secret"}}) as (gw, sink):
        for caller in ("principal:alice/c1", "principal:alice/c2", "principal:alice", "principal:carol/c3"):
            outcome = await gw.engine.execute("web__echo", {"text": "hi"}, scope=CallScope(caller))
            assert not outcome.result.is_error, outcome.result
        assert sorted(owner for server, owner in gw.hub._instances if server == "web") == [
            "principal:alice",
            "principal:carol",
        ]
        for caller, says in [
            ("principal:bob/c4", "principal 'bob' has none there"),
            ("anonymous", "this caller has no principal"),
            ("c5", "this caller has no principal"),
            (None, "this caller has no principal"),
        ]:
            outcome = await gw.engine.execute("web__echo", {"text": "hi"}, scope=CallScope(caller))
            message = outcome.result.content[0].text  # type: ignore[union-attr]
            assert outcome.result.is_error and "server 'web'" in message and says in message, message
        assert sink.records[-1].error_kind == "rejected"
        assert len([k for k in gw.hub._instances if k[0] == "web"]) == 2  # no instance for those refused


async def test_a_reload_that_drops_the_credentials_sends_calls_to_the_shared_connection(tmp_path: Path) -> None:
    async with _memory_gateway(tmp_path, {"per_principal": {"alice": "a-secret"}}) as (gw, _):
        assert not gw.hub.subjects.wanted
        config = parse_config(
            {
                "mcpServers": {
                    "web": {
                        "url": "http://127.0.0.1:9/mcp",
                        "credentials": {"token_exchange": {"token_endpoint": ENDPOINT, "client_id": "g"}},
                    }
                }
            },
            env={},
        )
        await gw.hub.apply(config, hide=None)
        assert gw.hub.subjects.wanted  # a server exchanges tokens now: the guard notes them
        plain = parse_config({"mcpServers": {"web": {"url": "http://127.0.0.1:9/mcp"}}}, env={})
        await gw.hub.apply(plain, hide=None)
        assert not gw.hub.subjects.wanted
        outcome = await gw.engine.execute("web__echo", {"text": "hi"}, scope=CallScope("c1"))
        assert not outcome.result.is_error
