"""Who may reach the HTTP front: the bearer token or OAuth access tokens, the Host/Origin allow-lists,
TLS and the body cap.

`resolve_exposure` turns `toolscore.http` and the `serve` flags into a checked `HttpExposure`
before anything starts (refusing a non-loopback bind without a token); `HttpGuard` is the ASGI
middleware that enforces it in front of the SDK's app. Access tokens are checked in `front.oauth`;
the guard answers for them as the MCP authorization specification says (RFC 9728 metadata, RFC 6750
challenges).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import ssl
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolscore.config import DEFAULT_MAX_REQUEST_BYTES, TOKEN_ENV, HttpSettings, read_secret_text
from toolscore.errors import ConfigError
from toolscore.front.callers import PRINCIPAL_SCOPE_KEY, ROLES_SCOPE_KEY
from toolscore.front.http_input import check_body
from toolscore.front.oauth import PRINCIPAL_NAME, JwksError, KeySource, Refusal, ResourceServer

if TYPE_CHECKING:
    from toolscore.downstream.credentials import SubjectTokens

__all__ = [
    "SINGLE_PRINCIPAL",
    "TOKEN_ENV",
    "BearerToken",
    "HttpExposure",
    "HttpGuard",
    "is_loopback",
    "parse_token_file",
    "resolve_exposure",
]

MIN_TOKEN_CHARS = 16
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
_FLAGS = {"allowed_hosts": "--allow-host", "allowed_origins": "--allow-origin"}


SINGLE_PRINCIPAL = "bearer"
"""The principal of a token file holding one bare token (and of `TOOLSCORE_TOKEN`)."""
_PRINCIPAL_NAME = PRINCIPAL_NAME


@dataclass(frozen=True, slots=True, eq=False)
class BearerToken:
    """The secrets clients send as `Authorization: Bearer <token>`, one per principal; its repr
    names only where they came from."""

    entries: tuple[tuple[str, bytes], ...] = field(repr=False)
    """(principal, token) pairs."""
    source: str

    def principal(self, presented: bytes) -> str | None:
        """The principal whose token `presented` is, or None; in time independent of which one
        matched or where the others differ (every entry is compared)."""
        found = None
        for name, value in self.entries:
            if hmac.compare_digest(value, presented):
                found = name
        return found

    def matches(self, presented: bytes) -> bool:
        """Whether `presented` is one of the tokens."""
        return self.principal(presented) is not None


@dataclass(frozen=True, slots=True)
class HttpExposure:
    """What the HTTP front enforces, resolved and checked before the gateway starts."""

    loopback: bool
    token: BearerToken | None
    security: TransportSecuritySettings
    tls_cert: str | None = None
    tls_key: str | None = None
    oauth: ResourceServer | None = None
    """Access tokens checked against `toolscore.http.auth` (then `token` is None)."""

    @property
    def scheme(self) -> str:
        """`https` with a TLS certificate, else `http`."""
        return "https" if self.tls_cert else "http"

    def warning(self, host: str) -> str | None:
        """The line to print for a bind other machines can reach (None on loopback)."""
        if self.loopback:
            return None
        tls = "TLS is on" if self.tls_cert else "terminate TLS in a reverse proxy or give --tls-cert/--tls-key"
        hosts = ", ".join(self.security.allowed_hosts)
        needs = "an access token" if self.oauth else "the bearer token"
        return (
            f"{host} is not a loopback address: every request needs {needs}; {tls}; "
            f"accepted Host headers: {hosts} (add the name clients use with --allow-host)"
        )


def is_loopback(host: str) -> bool:
    """Whether a bind address is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False  # a host name: whatever it resolves to, treat it as exposed
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def resolve_exposure(
    settings: HttpSettings,
    *,
    host: str,
    port: int,
    token_file: str | None = None,
    allow_hosts: Sequence[str] = (),
    allow_origins: Sequence[str] = (),
    tls_cert: str | None = None,
    tls_key: str | None = None,
    env: Mapping[str, str] | None = None,
) -> HttpExposure:
    """Merge the `serve` flags into `toolscore.http` and check the result.

    Flags win over the config; `allow_hosts` and `allow_origins` add to the configured lists. The
    token comes from `token_file` (the flag), else `$TOOLSCORE_TOKEN`, else `settings.token_file`.
    `settings.auth` (OAuth access tokens) excludes all three: one kind of credential per gateway.

    Raises:
        ConfigError: a non-loopback bind without a token, an unreadable, too open or weak token, a
            token and `auth` both set, a JWK Set file that does not load, TLS certificate and key
            that do not load, or a malformed host or origin.
    """
    update: dict[str, object] = {
        "allowed_hosts": (*settings.allowed_hosts, *allow_hosts),
        "allowed_origins": (*settings.allowed_origins, *allow_origins),
    }
    update.update({k: v for k, v in (("tls_cert", tls_cert), ("tls_key", tls_key)) if v is not None})
    try:
        merged = HttpSettings.model_validate({**settings.model_dump(), **update})
    except ValidationError as exc:  # the config was checked when loaded: a flag is wrong
        first = exc.errors()[0]
        flag = _FLAGS.get(str(first["loc"][0]), str(first["loc"][0]))
        raise ConfigError(first["msg"].removeprefix("Value error, "), field=flag) from None

    variables = os.environ if env is None else env
    if token_file:
        token: BearerToken | None = _read_token_file(token_file)
    elif variables.get(TOKEN_ENV):
        token = _checked_token(variables[TOKEN_ENV], TOKEN_ENV)
    elif merged.token_file:
        token = _read_token_file(merged.token_file)
    else:
        token = None
    oauth = None
    if merged.auth is not None:
        if token is not None:
            raise ConfigError(
                f"toolscore.http.auth and a bearer token ({token.source}) are both set: a gateway takes "
                f"OAuth access tokens or token-file tokens, not both; drop one (unset {TOKEN_ENV} if it is set)",
                field="toolscore.http.auth",
            )
        try:
            oauth = ResourceServer(merged.auth, KeySource(merged.auth.jwks))
        except JwksError as exc:
            raise ConfigError(str(exc), field="toolscore.http.auth.jwks") from None
    loopback = is_loopback(host)
    if token is None and oauth is None and not loopback:
        raise ConfigError(
            f"--host {host} is not a loopback address, so clients must authenticate: set {TOKEN_ENV} "
            "or give --token-file (or toolscore.http.token_file), or configure toolscore.http.auth"
        )

    cert, key = _checked_tls(merged.tls_cert, merged.tls_key)
    scheme = "https" if cert else "http"
    authorities = _authorities((host, *_LOOPBACK_NAMES), port, scheme)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*authorities, *merged.allowed_hosts],
        allowed_origins=[*(f"{scheme}://{a}" for a in authorities), *merged.allowed_origins],
    )
    return HttpExposure(loopback, token, security, cert, key, oauth)


def _authorities(hosts: Sequence[str], port: int, scheme: str) -> list[str]:
    """The Host header values naming `hosts` on `port` (bare too on the scheme's default port)."""
    bare = port == (443 if scheme == "https" else 80)
    out: list[str] = []
    for host in hosts:
        name = f"[{host.strip('[]')}]" if ":" in host else host
        out += [f"{name}:{port}", name] if bare else [f"{name}:{port}"]
    return list(dict.fromkeys(out))


def _read_token_file(raw: str) -> BearerToken:
    path = Path(raw).expanduser()
    try:
        text = read_secret_text(path, "the token file")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return parse_token_file(text, str(path))


def parse_token_file(text: str, source: str) -> BearerToken:
    """A token file: one bare token (one principal, `bearer`), or lines `NAME TOKEN`, one principal
    each; blank lines and `#` comments are skipped. Messages name the file and line, never a token."""
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)]
    lines = [(n, line) for n, line in lines if line and not line.startswith("#")]
    if not lines:
        raise ConfigError(f"the token file {source} holds no token")
    if len(lines) == 1 and len(lines[0][1].split()) == 1:
        return BearerToken(((SINGLE_PRINCIPAL, _checked_value(lines[0][1], source)),), source)
    entries: list[tuple[str, bytes]] = []
    for n, line in lines:
        parts = line.split()
        where = f"{source} line {n}"
        if len(parts) != 2:
            raise ConfigError(f"{where}: expected 'NAME TOKEN' (a principal's name, a space, its token)")
        name, value = parts
        if _PRINCIPAL_NAME.fullmatch(name) is None:
            raise ConfigError(f"{where}: a name is 1-64 of A-Z a-z 0-9 _ . @ - and starts with a letter or digit")
        token = _checked_value(value, where)
        if any(name == other for other, _ in entries):
            raise ConfigError(f"{where}: the name '{name}' is given twice")
        if any(hmac.compare_digest(token, other) for _, other in entries):
            raise ConfigError(f"{where}: this token is already another name's: each principal needs its own")
        entries.append((name, token))
    return BearerToken(tuple(entries), source)


def _checked_token(text: str, source: str) -> BearerToken:
    return BearerToken(((SINGLE_PRINCIPAL, _checked_value(text, source)),), source)


def _checked_value(text: str, source: str) -> bytes:
    # Messages name the source, never the value.
    value = text.strip()
    if not value.isascii() or not value.isprintable() or " " in value:
        raise ConfigError(f"the token in {source} must be one line of printable ASCII without spaces")
    if len(value) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"the token in {source} is shorter than {MIN_TOKEN_CHARS} characters: make one with "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return value.encode("ascii")


def _checked_tls(cert: str | None, key: str | None) -> tuple[str | None, str | None]:
    """Load the pair once now, so a bad file is one line before start rather than a uvicorn traceback."""
    if cert is None:
        if key is not None:
            raise ConfigError("--tls-key needs --tls-cert")
        return None, None
    cert = str(Path(cert).expanduser())
    key = str(Path(key).expanduser()) if key else None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        # An empty password: an encrypted key fails here instead of prompting on the terminal.
        context.load_cert_chain(cert, key, password=lambda: b"")
    except OSError as exc:  # ssl.SSLError included
        raise ConfigError(
            f"cannot load the TLS certificate {cert} and key {key or cert} (PEM, key not encrypted): "
            f"{exc.strerror or exc}"
        ) from None
    return cert, key


class HttpGuard:
    """ASGI middleware in front of the SDK's app: the Host/Origin allow-list, then the bearer token
    (or the OAuth access token).

    Both run on every path before the app sees the request, so a request from a DNS-rebinding web
    page or without the token never reaches the MCP layer, and its body is never read. The
    authenticated principal (and, with OAuth, its roles) goes into the ASGI scope for the layers
    below (`PRINCIPAL_SCOPE_KEY`, `ROLES_SCOPE_KEY`); a checked access token is noted in `subjects`
    for token exchange (`toolscore.downstream.credentials`), which keeps it only while some server
    exchanges tokens. The token goes nowhere else: no layer below sees it.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        security: TransportSecuritySettings,
        token: BearerToken | None,
        public: frozenset[str] = frozenset(),
        max_body: int = DEFAULT_MAX_REQUEST_BYTES,
        oauth: ResourceServer | None = None,
        subjects: SubjectTokens | None = None,
    ) -> None:
        self._app = app
        self._oauth = oauth
        self._subjects = subjects
        self._max_body = max_body
        """The app's body size limit: every body up to it is checked (`check_body`)."""
        self._hosts = TransportSecurityMiddleware(security)  # the SDK's own Host/Origin rules
        self._token = token
        self._public = public
        """Exact paths served without the token (static pages holding no data), after the Host/Origin check."""
        self._sessions = _SessionOwners()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._app(scope, receive, send)
            return
        if scope["type"] != "http":  # the MCP app serves no websockets
            await send({"type": "websocket.close", "code": 1008})
            return
        request = Request(scope)
        refused = await self._hosts.validate_request(request)
        if refused is None and scope["path"].startswith("/.well-known/"):
            if self._oauth is not None and scope["path"] in self._oauth.metadata_paths:
                # RFC 9728: how a client finds the authorization server; public, as it must be.
                refused = JSONResponse(self._oauth.metadata(), headers={"Cache-Control": "max-age=300"})
            else:  # OAuth discovery probes (mcp-remote sends them): a clean "no OAuth here".
                refused = JSONResponse({"error": "not_found"}, status_code=404)
        principal: str | None = None
        roles: tuple[str, ...] = ()
        if refused is None and scope["path"] not in self._public:
            if self._oauth is not None:
                authorization = request.headers.get("authorization")
                identity = await self._oauth.authenticate(authorization)
                if isinstance(identity, Refusal):
                    refused = _challenge(identity, self._oauth)
                else:
                    principal, roles = identity.principal, identity.roles
                    if self._subjects is not None and self._subjects.wanted and authorization is not None:
                        self._subjects.note(principal, authorization.partition(" ")[2].strip(), identity.expires)
            elif self._token is not None:
                principal = self._principal(request, self._token)
                if principal is None:
                    refused = _unauthorized()
        session = request.headers.get(_SESSION_HEADER)
        if principal is not None and session is not None and not self._sessions.admits(session, principal):
            refused = _session_not_found()
        if refused is not None:
            await refused(scope, receive, send)
            return
        if principal is not None:
            # Who holds the token: per-client state of stateless (2026-07-28) requests is keyed by it.
            scope[PRINCIPAL_SCOPE_KEY] = principal
            scope[ROLES_SCOPE_KEY] = roles
        if not scope["path"].startswith("/mcp"):  # the gateway's own pages (/metrics, /ui) read their own bodies
            await self._app(scope, receive, send)
            return
        if principal is not None and session is None:
            send = self._sessions.recording(send, principal)  # an opening request: note who owns its session
        await check_body(self._app, scope, receive, send, limit=self._max_body)  # errors the SDK would not send
        if principal is not None and session is not None and scope["method"] == "DELETE":
            self._sessions.forget(session)

    @staticmethod
    def _principal(request: Request, token: BearerToken) -> str | None:
        scheme, _, presented = request.headers.get("authorization", "").partition(" ")
        return token.principal(presented.strip().encode("latin-1")) if scheme.lower() == "bearer" else None


_SESSION_HEADER = "mcp-session-id"
_MAX_SESSION_OWNERS = 100_000
"""Session owners remembered (the SDK keeps 10 000 sessions at most); past that the oldest is forgotten."""


class _SessionOwners:
    """Which principal opened each handshake-era session.

    A session is one caller whatever token its requests carry, so without this a holder of any
    token who learns another principal's session id would act as that client (its instances,
    episodes, tasks). A request naming a session another principal opened is answered as the SDK
    answers an unknown session.
    """

    def __init__(self) -> None:
        self._owners: OrderedDict[str, str] = OrderedDict()

    def admits(self, session: str, principal: str) -> bool:
        """Whether `principal` may use `session` (one this gateway did not see opened is the SDK's to judge)."""
        owner = self._owners.get(session)
        return owner is None or owner == principal

    def recording(self, send: Send, principal: str) -> Send:
        """`send`, noting `principal` as the owner of the session its response opens."""

        async def recorded(message: Message) -> None:
            if message["type"] == "http.response.start":
                for name, value in message.get("headers", ()):
                    if name.lower() == _SESSION_HEADER.encode():
                        self._owners[value.decode("latin-1")] = principal
                        while len(self._owners) > _MAX_SESSION_OWNERS:
                            self._owners.popitem(last=False)
            await send(message)

        return recorded

    def forget(self, session: str) -> None:
        """The session was closed (`DELETE`)."""
        self._owners.pop(session, None)


def _session_not_found() -> Response:
    return JSONResponse(
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Session not found"}}, status_code=404
    )


def _unauthorized() -> Response:
    return JSONResponse(
        {"error": "unauthorized", "message": "send the gateway's token as 'Authorization: Bearer <token>'"},
        status_code=401,
        headers={"WWW-Authenticate": 'Bearer realm="toolscore"'},
    )


def _challenge(refusal: Refusal, oauth: ResourceServer) -> Response:
    """A refused access token, answered as RFC 6750 section 3 and RFC 9728 section 5.1 say."""
    body = {"error": refusal.error or "unauthorized", "error_description": refusal.description}
    if refusal.status not in (401, 403):  # the issuer's keys are out of reach: not the client's doing
        return JSONResponse(body, status_code=refusal.status, headers={"Retry-After": "60"})
    params = [f'resource_metadata="{oauth.metadata_url}"']
    if refusal.error is not None:
        params[:0] = [f'error="{refusal.error}"', f'error_description="{refusal.description}"']
    if oauth.settings.scopes and refusal.error != "invalid_token":
        params.append(f'scope="{" ".join(oauth.settings.scopes)}"')
    return JSONResponse(body, status_code=refusal.status, headers={"WWW-Authenticate": "Bearer " + ", ".join(params)})
