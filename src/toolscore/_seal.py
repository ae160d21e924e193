"""Request states the gateway signs: HMAC-SHA256 with a key no client sees.

A 2026-07-28 client carries a request state from one round of a call to the next. Whatever the
gateway puts in one of its own (its yes/no question, an era-bridged exchange) is sealed here, so a
client can neither forge one nor alter what it binds; each owner checks the claims it bound.

The key is random per process, unless replicas share one (`toolscore.state`: the front's sealer
takes the deployment's key from Redis, so that a retry may reach any replica, and spends a state
there, so that what may be used once is used once across them all).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["Sealer", "SpendOnce", "digest"]

SpendOnce = Callable[[str, float], Awaitable[bool]]
"""Marks a nonce used until the given expiry (epoch seconds) where every replica sees it; False
if it was used already."""

_MAX_STATE_CHARS = 4096
_MAX_SPENT = 10_000
"""Spent states remembered until they expire; past this, the oldest are dropped early (they still
expire)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


class Sealer:
    """Signs and checks request states: with a per-process random key, or the `key` given.

    Args:
        key: The key replicas share (None: a random one for this process).
        spend_once: Where states are marked used when replicas share the key (None: here).
    """

    def __init__(self, key: bytes | None = None, *, spend_once: SpendOnce | None = None) -> None:
        self._key = key or secrets.token_bytes(32)
        self._spend_once = spend_once
        self._spent: dict[str, float] = {}

    async def spend(self, claims: dict[str, Any]) -> bool:
        """Mark an opened state used; False if it was used before (a replay)."""
        if self._spend_once is not None:
            return await self._spend_once(str(claims.get("nonce")), float(claims["exp"]))
        now = time.time()
        for nonce in [n for n, exp in self._spent.items() if exp < now]:
            del self._spent[nonce]
        nonce = str(claims.get("nonce"))
        if nonce in self._spent:
            return False
        while len(self._spent) >= _MAX_SPENT:
            del self._spent[next(iter(self._spent))]
        self._spent[nonce] = float(claims["exp"])
        return True

    def seal(self, claims: dict[str, Any]) -> str:
        """`claims` as `<payload>.<signature>`, both base64url."""
        payload = _b64(json.dumps(claims, sort_keys=True, separators=(",", ":")).encode())
        return f"{payload}.{_b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())}"

    def open(self, state: str) -> dict[str, Any] | None:
        """The claims of a state this sealer signed and that has not expired, else None."""
        if len(state) > _MAX_STATE_CHARS or state.count(".") != 1:
            return None
        payload, signature = state.split(".")
        expected = _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())
        if not hmac.compare_digest(signature, expected):
            return None
        try:
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except ValueError:  # pragma: no cover - signed by us, so well-formed
            return None
        if (
            not isinstance(claims, dict)
            or not isinstance(claims.get("exp"), int | float)
            or claims["exp"] < time.time()
        ):
            return None
        return claims


def digest(arguments: dict[str, Any] | None) -> str:
    text = json.dumps(arguments or {}, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()
