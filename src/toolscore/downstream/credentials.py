"""Downstream credentials: what the gateway sends an HTTP server for each calling principal.

Theory of operation. A server entry's `credentials` (`config.Credentials`) gives each principal a
bearer credential of its own at that server: a secret from the config or a file (`PerPrincipal`),
or a token the gateway gets by OAuth 2.0 token exchange (RFC 8693) for the caller's access token
(`TokenExchange`). The client's own token is never sent to a downstream server: it goes only to
the configured token endpoint, as the exchange's `subject_token`.

One connection per principal. The hub keys such a server's connections by principal
(`principal:<name>`, as it keys `isolation: "session"` instances by caller), and each carries a
`BearerAuth` (`bearer.py`): every HTTP request it makes asks the credential for the principal's current token.
Before each call the hub asks too (`Credential.bearer`), so a caller without a credential is
refused, with the server and the reason, before anything is sent; the connection listing the
server's tools carries the entry's `headers` alone and takes no call.

Where the subject token comes from. The HTTP front's guard checks each request's access token
(`front.oauth`) and, while some server exchanges tokens, notes it with its expiry under its
principal in `SubjectTokens`. An exchange for principal P uses P's latest unexpired token; the
issued token is kept per principal until shortly before its `expires_in`, so N calls cost one
exchange. Principals of a token file have no access token, and are refused by such a server.
"""

from __future__ import annotations

import json
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote_plus

import anyio
import structlog

from toolscore._redact import redact_text
from toolscore.config import ServerConfig, TokenExchangeSettings
from toolscore.errors import DownstreamUnavailable, Rejected, ToolscoreError

if TYPE_CHECKING:  # httpx2 is loaded by the first exchange: a gateway with no HTTP server never needs it
    import httpx2

__all__ = [
    "ACCESS_TOKEN_TYPE",
    "TOKEN_EXCHANGE_GRANT",
    "Credential",
    "PerPrincipal",
    "SubjectTokens",
    "TokenExchange",
    "credential_for",
]

log = structlog.get_logger("toolscore.credentials")

TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
HOOK = "credentials"
"""The name refusals carry (`Rejected.hook`), as a policy rule's do."""
EARLY_SECONDS = 30.0
"""An issued token is exchanged again this long before it expires (at most a tenth of its lifetime)."""
DEFAULT_LIFETIME = 60.0
"""Seconds an issued token is kept when the token endpoint does not say (`expires_in`)."""
EXCHANGE_TIMEOUT = 10.0
MAX_RESPONSE_BYTES = 64 * 1024
REFUSED_RENEWAL_SECONDS = 30.0
"""After a server refused a token exchanged anew for a refused one too, its 401s stand this long:
no exchange, no resend (a server that refuses every exchanged token costs no exchange per request)."""
MAX_KEPT = 10_000
"""Principals whose tokens are kept (subject tokens, and issued ones per server); least recent dropped."""
_VISIBLE = re.compile(r"[\x21-\x7e]{1,16384}")
_DOCS = "docs/security.md#downstream-credentials"


class Credential(Protocol):
    """A server's credential per principal."""

    server: str

    async def bearer(self, principal: str | None) -> str:
        """The secret to send for `principal` now.

        Raises:
            Rejected: the principal has none (or there is no principal), or the token endpoint refused it.
            DownstreamUnavailable: the token endpoint cannot be reached, or refused the gateway itself.
        """
        ...

    def held(self, principal: str) -> str | None:
        """The principal's secret as last obtained, while it has not expired (None: none held)."""
        ...

    def refused(self, principal: str, secret: str) -> bool:
        """The server answered 401 to `secret`: forget it if it can be obtained anew (a revoked or
        rotated token); whether `bearer` may now give another."""
        ...

    def renewal_refused(self, principal: str) -> None:
        """The server answered 401 to the secret `bearer` gave after `refused` too: it refuses what
        this credential gives, so give up renewing for a while (`REFUSED_RENEWAL_SECONDS`)."""
        ...


def _no_principal(server: str) -> Rejected:
    return Rejected(
        f"server '{server}' is reached with each principal's own credential, and this caller has no "
        "principal: call through the HTTP front with a token (toolscore.http.auth, or a token file "
        f"with one 'NAME TOKEN' line per client); see {_DOCS}",
        hook=HOOK,
    )


class PerPrincipal:
    """A fixed secret per principal (`per_principal` or `per_principal_file`)."""

    def __init__(self, server: str, secrets: Mapping[str, str], source: str) -> None:
        self.server = server
        self._secrets = dict(secrets)
        self._source = source

    def __repr__(self) -> str:
        return f"PerPrincipal({self.server!r}, principals={sorted(self._secrets)}, source={self._source!r})"

    async def bearer(self, principal: str | None) -> str:
        if principal is None:
            raise _no_principal(self.server)
        secret = self._secrets.get(principal)
        if secret is None:
            raise Rejected(
                f"server '{self.server}' is reached with each principal's own secret ({self._source}), "
                f"and principal '{principal}' has none there",
                hook=HOOK,
            )
        return secret

    def held(self, principal: str) -> str | None:
        return self._secrets.get(principal)

    def refused(self, principal: str, secret: str) -> bool:
        return False  # a configured secret: asking again gives the same one

    def renewal_refused(self, principal: str) -> None:
        return None  # never renewed


class SubjectTokens:
    """Each principal's latest valid OAuth access token, noted by the HTTP front's guard, kept for
    token exchange only: while no server exchanges tokens (`wanted` false) nothing is kept."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._tokens: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._wanted = False

    def __repr__(self) -> str:
        return f"SubjectTokens(wanted={self._wanted}, principals={len(self._tokens)})"

    @property
    def wanted(self) -> bool:
        """Whether some server exchanges tokens (the hub sets it from the config in force)."""
        return self._wanted

    @wanted.setter
    def wanted(self, value: bool) -> None:
        self._wanted = value
        if not value:
            self._tokens.clear()

    def note(self, principal: str, token: str, expires: float | None) -> None:
        """`principal` presented `token`, valid until `expires` (Unix time; None: unknown, not kept)."""
        if not self._wanted or expires is None:
            return
        self._tokens.pop(principal, None)
        self._tokens[principal] = (token, expires)
        while len(self._tokens) > MAX_KEPT:
            self._tokens.popitem(last=False)

    def current(self, principal: str) -> str | None:
        """The principal's latest token, unless it has expired."""
        kept = self._tokens.get(principal)
        if kept is None:
            return None
        if kept[1] <= self._clock():
            del self._tokens[principal]
            return None
        return kept[0]


@dataclass(frozen=True, slots=True)
class _Issued:
    token: str
    renew_at: float
    expires_at: float


class TokenExchange:
    """Tokens for one server, exchanged for each principal's access token (RFC 8693) and kept
    until shortly before they expire.

    Args:
        server: The server's name (its `url` is the default audience).
        settings: `credentials.token_exchange`.
        subjects: Where the principals' access tokens are.
        clock: Monotonic seconds (tests pass their own).
        transport: The HTTP transport to the token endpoint (tests pass httpx's `MockTransport`).
    """

    def __init__(
        self,
        server: ServerConfig,
        settings: TokenExchangeSettings,
        subjects: SubjectTokens,
        *,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.server = server.name
        self.settings = settings
        self.audience = settings.audience or server.url or ""
        self._subjects = subjects
        self._clock = clock
        self._transport = transport
        self._issued: OrderedDict[str, _Issued] = OrderedDict()
        self._locks: dict[str, anyio.Lock] = {}
        self._refusing: OrderedDict[str, float] = OrderedDict()
        """Principals whose renewed tokens the server refused too, and until when its 401s stand."""

    def __repr__(self) -> str:
        return f"TokenExchange({self.server!r}, endpoint={self.settings.token_endpoint!r}, audience={self.audience!r})"

    def held(self, principal: str) -> str | None:
        issued = self._issued.get(principal)
        return issued.token if issued is not None and self._clock() < issued.expires_at else None

    def refused(self, principal: str, secret: str) -> bool:
        until = self._refusing.get(principal)
        if until is not None:
            if self._clock() < until:
                return False  # the server refuses what the exchange gives: its 401 stands for now
            del self._refusing[principal]
        issued = self._issued.get(principal)
        if issued is not None and issued.token == secret:
            del self._issued[principal]  # revoked before its time: the next call exchanges again
        return True

    def renewal_refused(self, principal: str) -> None:
        log.warning(
            "downstream refused a token exchanged anew; its 401s stand for a while",
            server=self.server,
            principal=principal,
            seconds=REFUSED_RENEWAL_SECONDS,
        )
        self._refusing.pop(principal, None)
        self._refusing[principal] = self._clock() + REFUSED_RENEWAL_SECONDS
        while len(self._refusing) > MAX_KEPT:
            self._refusing.popitem(last=False)

    async def bearer(self, principal: str | None) -> str:
        if principal is None:
            raise _no_principal(self.server)
        issued = self._issued.get(principal)
        if issued is not None and self._clock() < issued.renew_at:
            return issued.token
        lock = self._locks.get(principal)
        if lock is None:
            lock = self._locks[principal] = anyio.Lock()
        async with lock:  # one exchange however many calls wait for it
            issued = self._issued.get(principal)
            if issued is None or self._clock() >= issued.renew_at:
                issued = await self._exchange(principal)
                self._issued.pop(principal, None)
                self._issued[principal] = issued
                while len(self._issued) > MAX_KEPT:
                    dropped, _ = self._issued.popitem(last=False)
                    if (old := self._locks.get(dropped)) is not None and not old.locked():
                        del self._locks[dropped]
        return issued.token

    async def _exchange(self, principal: str) -> _Issued:
        subject = self._subjects.current(principal)
        if subject is None:
            raise Rejected(
                f"server '{self.server}' is reached with a token exchanged for the caller's OAuth access "
                f"token, and principal '{principal}' has no current one (a token file's principals have "
                f"none): call with an access token of toolscore.http.auth's issuer; see {_DOCS}",
                hook=HOOK,
            )
        settings = self.settings
        form = {
            "grant_type": TOKEN_EXCHANGE_GRANT,
            "subject_token": subject,
            "subject_token_type": ACCESS_TOKEN_TYPE,
            "requested_token_type": ACCESS_TOKEN_TYPE,
            "audience": self.audience,
        }
        if settings.scope:
            form["scope"] = settings.scope
        import httpx2

        auth: httpx2.BasicAuth | None = None
        if settings.client_secret is not None and settings.client_auth == "basic":
            # RFC 6749 section 2.3.1: both form-encoded, then Basic.
            auth = httpx2.BasicAuth(quote_plus(settings.client_id), quote_plus(settings.client_secret))
        else:
            form["client_id"] = settings.client_id
            if settings.client_secret is not None:
                form["client_secret"] = settings.client_secret
        started = self._clock()
        try:
            async with (
                httpx2.AsyncClient(timeout=EXCHANGE_TIMEOUT, transport=self._transport) as http,
                http.stream(
                    "POST", settings.token_endpoint, data=form, auth=auth, headers={"Accept": "application/json"}
                ) as response,
            ):
                body = b""
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_RESPONSE_BYTES:
                        raise self._unavailable(principal, f"its answer is larger than {MAX_RESPONSE_BYTES} bytes")
                status = response.status_code
        except httpx2.HTTPError as exc:
            raise self._unavailable(principal, f"it cannot be reached ({type(exc).__name__})") from None
        answer = _json_object(body)
        if status != 200:
            raise self._refused(principal, status, answer, subject)
        token = answer.get("access_token") if answer is not None else None
        if not isinstance(token, str) or not _VISIBLE.fullmatch(token):
            raise self._unavailable(principal, "its answer holds no usable access_token")
        assert answer is not None
        kind = answer.get("token_type")
        if isinstance(kind, str) and kind.lower() != "bearer":
            raise self._unavailable(principal, f"it issued a token of type {kind[:40]!r}, not a bearer token")
        lifetime = answer.get("expires_in")
        if isinstance(lifetime, str) and lifetime.isdigit():  # some servers send a string
            lifetime = int(lifetime)
        if not isinstance(lifetime, int | float) or isinstance(lifetime, bool) or not 0 < lifetime < 10**9:
            lifetime = DEFAULT_LIFETIME
        expires = started + float(lifetime)
        log.info(
            "downstream token exchanged",
            server=self.server,
            principal=principal,
            audience=self.audience,
            expires_in=lifetime,
        )
        return _Issued(token, expires - min(EARLY_SECONDS, float(lifetime) / 10), expires)

    def _unavailable(self, principal: str, why: str) -> DownstreamUnavailable:
        return DownstreamUnavailable(
            f"Server '{self.server}': no token for principal '{principal}': the token endpoint "
            f"{self.settings.token_endpoint}: {why}.",
            server=self.server,
        )

    def _refused(self, principal: str, status: int, answer: dict[str, Any] | None, subject: str) -> ToolscoreError:
        error = answer.get("error") if answer is not None else None
        code = error if isinstance(error, str) and _VISIBLE.fullmatch(error[:64]) else None
        described = answer.get("error_description") if answer is not None else None
        detail = code or f"HTTP {status}"
        if isinstance(described, str) and described.strip():
            # The issuer's words, quoted to the client: never a token (the subject's least of all).
            text = "".join(c if c.isprintable() else " " for c in described[:200]).replace(subject, "[REDACTED]")
            detail = f"{detail}: {redact_text(text)}"
        if code == "invalid_client" or status >= 500 or status in (401, 429):
            # Not the caller's doing: the gateway's client, or the issuer itself.
            return self._unavailable(principal, f"it refused the exchange ({detail})")
        return Rejected(
            f"server '{self.server}' is reached with a token exchanged for the caller's access token, and "
            f"the token endpoint refused to exchange principal '{principal}''s ({detail})",
            hook=HOOK,
        )


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def credential_for(server: ServerConfig, subjects: SubjectTokens) -> Credential | None:
    """The credential a server entry's `credentials` describe (None: none, `headers` alone)."""
    credentials = server.credentials
    if credentials is None:
        return None
    if credentials.token_exchange is not None:
        return TokenExchange(server, credentials.token_exchange, subjects)
    # Named by its key, not its path: the message goes to the client.
    source = (
        "credentials.per_principal_file" if credentials.per_principal_file is not None else "credentials.per_principal"
    )
    return PerPrincipal(server.name, credentials.secrets or {}, source)
