"""The HTTP front as an OAuth 2.1 resource server: access tokens (JWTs) checked against the issuer's keys.

Theory of operation. `ResourceServer.authenticate` takes the `Authorization` header and answers an
`Identity` (principal and roles) or a `Refusal` (what to tell the client, with its status). The
token is refused before anything is decoded when it is over `MAX_TOKEN_BYTES`; its unverified
header must name an algorithm from `ALGORITHMS` (asymmetric only: never `none`, never an HMAC keyed
with a public key); then the key its `kid` names is looked up in the issuer's JWK Set (`KeySource`),
and PyJWT checks the signature with that key and that algorithm, then `iss`, `aud`, `exp`, `nbf`
and `iat` (with the configured leeway). Scopes and the principal come last, from verified claims.

Keys are cached. A file is re-read when it changes (looked at once a second, and at once when a
token names a key it does not hold); a URL is fetched when first needed, again after
`KEYS_MAX_AGE`, and when a token names an unknown key, at most once a `REFETCH_SECONDS`, so
rotation needs nothing from the operator and a flood of made-up `kid`s costs the issuer one
request a minute. No cryptography is written here: PyJWT (over `cryptography`) does all of it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio
import httpx2
import jwt
import structlog

from toolscore.config import HttpAuth

__all__ = [
    "ALGORITHMS",
    "MAX_TOKEN_BYTES",
    "PRINCIPAL_NAME",
    "Identity",
    "JwksError",
    "KeySet",
    "KeySource",
    "Refusal",
    "ResourceServer",
    "parse_jwks",
    "principal_name",
]

log = structlog.get_logger("toolscore.oauth")

ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"})
"""The signature algorithms accepted: asymmetric ones only."""
MAX_TOKEN_BYTES = 16 * 1024
"""A longer `Authorization` value is refused before it is decoded."""
MAX_ROLES = 32
MAX_JWKS_BYTES = 1 << 20
REFETCH_SECONDS = 60.0
"""An unknown `kid` fetches the issuer's keys again at most this often."""
KEYS_MAX_AGE = 300.0
"""Keys fetched from a URL are fetched again after this long (so a withdrawn key stops working)."""
FILE_CHECK_SECONDS = 1.0
FETCH_TIMEOUT = 10.0

PRINCIPAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
"""A principal's or role's name: what a token file allows, so it never holds `/`, spaces or quotes."""
_OUTSIDE = re.compile(r"[^A-Za-z0-9_.@-]+")
_KEY_TYPES = frozenset({"RSA", "EC", "OKP"})
_CURVE_ALGORITHMS = {"P-256": "ES256", "P-384": "ES384"}
_ACCESS_HINT = "send an access token as 'Authorization: Bearer <token>'"


def principal_name(value: str) -> str:
    """`value` itself where it is a valid name, else a readable part and a hash of the whole.

    Deterministic, so one subject is one principal across requests and replicas; the hash keeps
    two subjects that differ only in characters outside the set apart (`a|b` and `a b`).
    """
    if PRINCIPAL_NAME.fullmatch(value):
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    readable = _OUTSIDE.sub("_", value)[:40].strip("_.@-")
    return f"{readable}-{digest}" if readable else f"x-{digest}"


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a valid token is for."""

    principal: str
    roles: tuple[str, ...]
    expires: float | None = field(default=None, compare=False)
    """When the token expires (its `exp`, Unix time): how long token exchange may use it."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is refused, as RFC 6750 section 3 says it: `error` is None where no token came."""

    status: int
    error: Literal["invalid_token", "insufficient_scope", "temporarily_unavailable"] | None
    description: str
    """Fixed text of ours, never a part of the token (it goes into a quoted header parameter)."""


def _invalid(description: str) -> Refusal:
    return Refusal(401, "invalid_token", description)


class JwksError(ValueError):
    """A JWK Set that is not JSON, or holds no key we can verify with."""


def parse_jwks(data: bytes) -> dict[str, dict[str, Any]]:
    """The signing keys of a JWK Set by `kid` (`""` for one without): RSA, EC and OKP public keys.

    Symmetric (`oct`) keys and encryption keys are left out: a token is never checked with a
    secret the issuer published.

    Raises:
        JwksError: not a JWK Set, or no usable key in it.
    """
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        raise JwksError("not JSON") from None
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list):
        raise JwksError('not a JWK Set (an object with a "keys" list)')
    out: dict[str, dict[str, Any]] = {}
    for key in keys:
        if not isinstance(key, dict) or key.get("kty") not in _KEY_TYPES or key.get("use", "sig") != "sig":
            continue
        if "d" in key:  # a private key published by mistake: use only its public half
            key = {k: v for k, v in key.items() if k not in ("d", "p", "q", "dp", "dq", "qi")}
        kid = key.get("kid", "")
        if isinstance(kid, str):
            out.setdefault(kid, key)
    if not out:
        raise JwksError("holds no RSA, EC or OKP signing key")
    return out


def _compatible(key: Mapping[str, Any], alg: str) -> bool:
    """Whether a token signed with `alg` may be checked with `key` (its own `alg`, else its type)."""
    if "alg" in key:
        return bool(key["alg"] == alg)
    kty = key.get("kty")
    if kty == "RSA":
        return alg[:2] in ("RS", "PS")
    if kty == "EC":
        return _CURVE_ALGORITHMS.get(str(key.get("crv"))) == alg
    return kty == "OKP" and alg == "EdDSA"


class KeySet:
    """The issuer's keys at one moment, each loaded once per algorithm it is used with."""

    def __init__(self, jwks: Mapping[str, dict[str, Any]]) -> None:
        self._jwks = dict(jwks)
        self._loaded: dict[tuple[str, str], jwt.PyJWK] = {}

    def __contains__(self, kid: str) -> bool:
        return kid in self._jwks

    def key(self, kid: str | None, alg: str) -> jwt.PyJWK | None:
        """The key `kid` names for `alg` (without a `kid`: the only key), or None."""
        if kid is None:
            if len(self._jwks) != 1:
                return None
            kid = next(iter(self._jwks))
        loaded = self._loaded.get((kid, alg))
        if loaded is None:
            jwk = self._jwks.get(kid)
            if jwk is None or not _compatible(jwk, alg):
                return None
            try:
                loaded = jwt.PyJWK(jwk, algorithm=alg)
            except jwt.PyJWTError:
                return None
            self._loaded[(kid, alg)] = loaded
        return loaded


class KeySource:
    """The issuer's JWK Set from a file or a URL, cached (see the module docstring).

    Args:
        where: A file path, or an `https://` (loopback `http://`) URL.
        clock: Monotonic seconds (tests pass their own).
        transport: The HTTP transport for a URL (tests pass httpx's `MockTransport`).

    Raises:
        JwksError: (a file, at once) unreadable, or not a usable JWK Set, naming the file.
    """

    def __init__(
        self,
        where: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self._where = where
        self._url = where.startswith(("https://", "http://"))
        self._clock = clock
        self._transport = transport
        self._lock = anyio.Lock()
        self._keys: KeySet | None = None
        self._checked = float("-inf")
        """When the file was last looked at, or the URL last fetched (successfully or not)."""
        self._fetched = float("-inf")
        """When the URL's keys now held were fetched."""
        self._content: bytes | None = None
        """The file as last read: read again (a few KB) on each look, parsed only when it differs."""
        if not self._url:
            self._reload_file(strict=True)

    async def keys(self, kid: str | None) -> KeySet | None:
        """The keys to check a token naming `kid` with (None: a URL never fetched successfully)."""
        if not self._due(kid):
            return self._keys
        async with self._lock:
            if self._due(kid):  # not done by another request while this one waited
                await self._refresh()
        return self._keys

    def _due(self, kid: str | None) -> bool:
        keys, now = self._keys, self._clock()
        stale = keys is None or (kid is not None and kid not in keys)
        if not self._url:
            return stale or now - self._checked >= FILE_CHECK_SECONDS
        if now - self._checked < REFETCH_SECONDS:
            return False
        return stale or now - self._fetched >= KEYS_MAX_AGE

    async def _refresh(self) -> None:
        if not self._url:
            self._reload_file(strict=False)
            return
        self._checked = self._clock()
        try:
            jwks = parse_jwks(await self._fetch())
        except (httpx2.HTTPError, JwksError) as exc:
            log.warning("cannot fetch the issuer's keys", url=self._where, error=str(exc) or type(exc).__name__)
            return
        self._keys, self._fetched = KeySet(jwks), self._checked

    async def _fetch(self) -> bytes:
        async with (
            httpx2.AsyncClient(timeout=FETCH_TIMEOUT, transport=self._transport) as client,
            client.stream("GET", self._where, headers={"Accept": "application/json"}) as response,
        ):
            response.raise_for_status()
            body = b""
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_JWKS_BYTES:
                    raise JwksError(f"larger than {MAX_JWKS_BYTES} bytes")
            return body

    def _reload_file(self, *, strict: bool) -> None:
        self._checked = self._clock()
        path = Path(self._where).expanduser()
        try:
            # Contents, not mtime: a same-size rewrite within the file system's timestamp tick is seen too.
            with path.open("rb") as file:
                content = file.read(MAX_JWKS_BYTES + 1)
            if content == self._content:
                return
            if len(content) > MAX_JWKS_BYTES:
                raise JwksError(f"larger than {MAX_JWKS_BYTES} bytes")
            jwks = parse_jwks(content)
        except (OSError, JwksError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else str(exc)
            if strict:
                raise JwksError(f"the JWK Set {path}: {reason}") from None
            log.warning("cannot reload the issuer's keys; keeping the ones loaded", path=str(path), error=reason)
            return
        self._keys, self._content = KeySet(jwks), content


# `exp` is checked here against the server's clock (the same one the cache of verified tokens reads).
_DECODER = jwt.PyJWT(
    options={"require": ["exp", "iss", "aud"], "verify_exp": False, "enforce_minimum_key_length": True}
)
VERIFIED_CACHE = 4096
"""Verified tokens remembered (by digest, least recently used dropped) until they expire, so a
client's every request is not a signature check."""


class ResourceServer:
    """Checks access tokens for `toolscore.http.auth`, and describes itself (RFC 9728 metadata)."""

    def __init__(self, settings: HttpAuth, keys: KeySource, *, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self._keys = keys
        self._clock = clock
        self._verified: OrderedDict[bytes, tuple[Identity, float, str | None, KeySet]] = OrderedDict()
        """Token digest -> (its identity, when it expires with the leeway, its kid, the keys it was checked with)."""
        self._required = frozenset(settings.scopes)
        parts = urlsplit(settings.audience)
        suffix = parts.path.rstrip("/")
        self.metadata_url = f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource{suffix}"
        """Where the metadata document is (RFC 9728 section 3.1: the well-known path before the resource's)."""
        self.metadata_paths = frozenset(f"/.well-known/oauth-protected-resource{p}" for p in ("", "/mcp", suffix))
        """The paths serving it: the root, the /mcp endpoint's, and the audience's own."""

    def metadata(self) -> dict[str, Any]:
        """The protected resource metadata document."""
        document: dict[str, Any] = {
            "resource": self.settings.audience,
            "authorization_servers": [self.settings.issuer],
            "bearer_methods_supported": ["header"],
            "resource_signing_alg_values_supported": sorted(ALGORITHMS),
        }
        if self.settings.scopes:
            document["scopes_supported"] = list(self.settings.scopes)
        return document

    async def authenticate(self, authorization: str | None) -> Identity | Refusal:
        """The identity an `Authorization` header value proves, or why not."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return Refusal(401, None, _ACCESS_HINT)
        if len(token) > MAX_TOKEN_BYTES:
            return _invalid(f"the token is larger than {MAX_TOKEN_BYTES // 1024} KiB")
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        cached = self._verified.get(digest)
        if cached is not None:
            known, expires, known_kid, checked_with = cached
            # Valid while unexpired and checked with the keys still in force (a withdrawn key ends it).
            if self._clock() < expires and await self._keys.keys(known_kid) is checked_with:
                if digest in self._verified:  # (another request may have dropped it while this one waited)
                    self._verified.move_to_end(digest)
                return known
            self._verified.pop(digest, None)
        header = _header(token)
        if header is None:
            return _invalid("the token is not a JWT")
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in ALGORITHMS:
            return _invalid("the token's algorithm is not accepted (RS256/384/512, PS256/384/512, ES256/384, EdDSA)")
        if kid is not None and not isinstance(kid, str):
            return _invalid("the token's kid is not a string")
        keys = await self._keys.keys(kid)
        if keys is None:
            return Refusal(503, "temporarily_unavailable", "the issuer's keys cannot be fetched now")
        key = keys.key(kid, alg)
        if key is None:
            return _invalid("the token is not signed by a key of the issuer")
        claims = self._verify(token, key)
        if isinstance(claims, Refusal):
            return claims
        identity = self._identity(claims)
        if isinstance(identity, Identity):
            self._verified[digest] = (identity, claims["exp"] + self.settings.leeway_seconds, kid, keys)
            if len(self._verified) > VERIFIED_CACHE:
                self._verified.popitem(last=False)
        return identity

    def _verify(self, token: str, key: jwt.PyJWK) -> dict[str, Any] | Refusal:
        """The claims of a token signed with `key`: signature, `iss`, `aud`, `exp`, `nbf`, `iat`."""
        try:
            claims = _DECODER.decode(
                token,
                key=key,
                algorithms=[key.algorithm_name],
                audience=self.settings.audience,
                issuer=self.settings.issuer,
                leeway=self.settings.leeway_seconds,
            )
        except jwt.ImmatureSignatureError:
            return _invalid("the token is not valid yet")
        except jwt.InvalidAudienceError:
            return _invalid("the token is not for this resource (aud)")
        except jwt.InvalidIssuerError:
            return _invalid("the token is not from the configured issuer (iss)")
        except jwt.MissingRequiredClaimError as exc:
            return _invalid(f"the token has no {exc.claim} claim")
        except jwt.InvalidSignatureError:
            return _invalid("the token's signature does not verify")
        except (jwt.PyJWTError, ValueError, RecursionError):
            return _invalid("the token is malformed")
        exp = claims["exp"]
        if not isinstance(exp, int | float) or isinstance(exp, bool) or not math.isfinite(exp):
            return _invalid("the token's exp claim is not a number")
        if exp <= self._clock() - self.settings.leeway_seconds:
            return _invalid("the token has expired")
        return claims

    def _identity(self, claims: dict[str, Any]) -> Identity | Refusal:
        missing = self._required - _scopes(claims)
        if missing:
            return Refusal(403, "insufficient_scope", "the token lacks a required scope")
        subject = next(
            (claims[c] for c in ("sub", "client_id", "azp") if isinstance(claims.get(c), str) and claims[c]), None
        )
        if subject is None:
            return _invalid("the token names no subject (sub, client_id or azp)")
        roles = _claim(claims, self.settings.roles_claim)
        if roles is None:
            roles = []
        elif isinstance(roles, str):
            roles = [roles]
        if not isinstance(roles, list) or not all(isinstance(r, str) and r for r in roles):
            return _invalid("the token's roles claim is not a list of strings")
        if len(roles) > MAX_ROLES:
            return _invalid(f"the token has more than {MAX_ROLES} roles")
        roles = tuple(dict.fromkeys(principal_name(r) for r in roles))
        return Identity(principal_name(subject), roles, float(claims["exp"]))


def _header(token: str) -> dict[str, Any] | None:
    """The unverified JOSE header, only to pick the key: PyJWT decodes the whole token strictly after.

    (PyJWT's own `get_unverified_header` checks the token character by character in Python, which
    is most of a full check's cost; that check still runs, once, in `decode`.)
    """
    head, dot, _ = token.partition(".")
    if not dot or len(head) > 1024:
        return None
    try:
        header = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (ValueError, RecursionError):  # binascii.Error and UnicodeDecodeError are ValueErrors
        return None
    return header if isinstance(header, dict) else None


def _scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """`scope` (space-separated, RFC 9068) and `scp` (a list or a string, as some issuers send it)."""
    found: set[str] = set()
    for value in (claims.get("scope"), claims.get("scp")):
        if isinstance(value, str):
            found.update(value.split())
        elif isinstance(value, list):
            found.update(v for v in value if isinstance(v, str))
    return frozenset(found)


def _claim(claims: Mapping[str, Any], name: str) -> Any:
    """The claim `name`, else, for a dotted name, the path into nested objects (`realm_access.roles`)."""
    if name in claims:
        return claims[name]
    value: Any = claims
    for part in name.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value
