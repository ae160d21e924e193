"""The caching hints of list results (`ttlMs`, `cacheScope`, 2026-07-28): a server's, and the aggregate; pure.

A 2026-07-28 server says how long a list it answered may be held (`ttlMs`) and whether a shared
cache may serve it to anyone (`cacheScope: "public"`) or only to the same caller (`"private"`).
The gateway holds each server's lists itself, and answers its clients' lists from every server's
at once, so what it may promise is bounded by every server's promise:

- `ttlMs`: the least freshness left among the servers listed, counted from when the gateway
  received each list (as an HTTP cache's `Age` is): a list the gateway has held for 4 s of its 10 s
  is fresh for 6 s more, not 10. A server that gave none (the handshake era has no such field) or
  gave 0 gives 0: the list is to be read again at each use, and `list_changed` says when it changed.
- `cacheScope`: `public` only if every server said `public` and the list is the same for every
  caller; else `private`.

A list whose positive `ttlMs` has run out is stale: the gateway lists that server again on the
next request for it (`stale`), rather than polling on a timer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["ListHint", "Scope", "combined", "hint_of"]

Scope = Literal["public", "private"]


@dataclass(frozen=True, slots=True)
class ListHint:
    """What one server said of one list it answered, and when the gateway received it."""

    ttl_ms: int | None
    """None: the server gave no `ttlMs` (or a negative one, which the spec says to read as 0)."""
    scope: Scope | None
    received: float
    """When the list was received, in seconds of the clock `combined` and `stale` are given."""

    def remaining_ms(self, now: float) -> int:
        """How much longer the list is fresh (0: stale, or no promise was made)."""
        if not self.ttl_ms:
            return 0
        return max(0, self.ttl_ms - int((now - self.received) * 1000))

    def stale(self, now: float) -> bool:
        """Whether a positive `ttlMs` has run out: the server is to be asked again."""
        return bool(self.ttl_ms) and self.remaining_ms(now) == 0


def hint_of(result: Mapping[str, Any], received: float) -> ListHint:
    """The hint of a list result as sent (its first page's, for a list of several pages)."""
    ttl = result.get("ttlMs")
    scope = result.get("cacheScope")
    return ListHint(
        ttl if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl >= 0 else None,
        scope if scope in ("public", "private") else None,
        received,
    )


def combined(hints: Iterable[ListHint | None], now: float, *, per_caller: bool = False) -> tuple[int, Scope]:
    """The `ttlMs` and `cacheScope` of a list made of every server's (None: a server that gave none).

    `per_caller`: the list differs between callers (a caller's own rules hide tools), so it is private.
    With no server at all, the list is the gateway's own: 0 and private, the SDK's defaults.
    """
    ttl: int | None = None
    public = not per_caller
    for hint in hints:
        remaining = 0 if hint is None else hint.remaining_ms(now)
        ttl = remaining if ttl is None else min(ttl, remaining)
        public = public and hint is not None and hint.scope == "public"
    if ttl is None:
        return 0, "private"
    return ttl, "public" if public else "private"
