"""Rate limits: token buckets per tool, server or client session; a call finding its bucket empty is refused.

The buckets live in this process, or, with `toolscore.state` set, in Redis (`state/`), where every
replica takes from the same ones.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio
import mcp_types

from toolscore._engine import ExecutionContext
from toolscore._glob import matches
from toolscore.config import RateLimit
from toolscore.errors import Rejected
from toolscore.policy.scope import PerServer, Scope
from toolscore.state import TokenStore

__all__ = ["RateLimits", "TokenBucket", "rate_limits"]

_PRUNE_FLOOR = 1024


@dataclass(slots=True)
class TokenBucket:
    """`rate` tokens a second, up to `burst`; a call takes one. Pure: the caller says what time it is."""

    rate: float
    burst: int
    tokens: float
    at: float
    """When `tokens` was last brought up to date."""

    @classmethod
    def full(cls, rate: float, burst: int, now: float) -> TokenBucket:
        """A bucket holding `burst` tokens at `now`."""
        return cls(rate, burst, float(burst), now)

    def take(self, now: float) -> float | None:
        """Take a token: None when there was one, else the seconds until there will be (none is taken)."""
        self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return (1 - self.tokens) / self.rate
        self.tokens -= 1
        return None

    def refilled(self, now: float) -> bool:
        """Whether the bucket is full again by `now`, so a fresh one would behave the same."""
        return self.tokens + (now - self.at) * self.rate >= self.burst


class RateLimits:
    """Pre-execution: every limit matching the tool takes a token from the call's bucket, or refuses it."""

    name = "rate_limits"

    def __init__(
        self,
        limits: Sequence[RateLimit],
        *,
        clock: Callable[[], float] = anyio.current_time,
        store: TokenStore | None = None,
    ) -> None:
        """Args:
        limits: The configured limits, in order.
        clock: Seconds on a monotonic clock (tests pass their own).
        store: Shared buckets (Redis); None keeps them in this process.
        """
        self._limits = tuple(limits)
        self._store = store
        # A shared bucket is named by what its limit says, not its position: replicas whose
        # configs list limits in another order (or differ) never share a bucket by accident.
        self._ids = tuple(hashlib.sha256(limit.model_dump_json().encode()).hexdigest()[:16] for limit in self._limits)
        self._clock = clock
        self._buckets: dict[tuple[int, str], TokenBucket] = {}  # (limit, tool/server/session) -> its bucket
        self._prune_at = _PRUNE_FLOOR

    async def __call__(self, ctx: ExecutionContext) -> mcp_types.CallToolResult | None:
        now = self._clock()
        for n, limit in enumerate(self._limits):
            if not matches(ctx.tool, limit.match):
                continue
            key = {"tool": ctx.tool, "server": ctx.server or "", "session": ctx.scope.caller or ""}[limit.scope]
            if self._store is not None:
                wait = await self._store.take_token(f"{self._ids[n]}:{limit.scope}:{key}", limit.rate, limit.burst)
            else:
                bucket = self._buckets.get((n, key))
                if bucket is None:
                    self._prune(now)
                    bucket = self._buckets[(n, key)] = TokenBucket.full(limit.rate, limit.burst, now)
                wait = bucket.take(now)
            if wait is not None:
                raise Rejected(
                    f"rate limit of {limit.rate:g} calls/s per {limit.scope} reached for '{ctx.tool}'; retry in "
                    f"{wait:.1f} s",
                    hook="rate_limits",
                )
        return None

    def _prune(self, now: float) -> None:
        # Session ids come and go: without this, every session ever seen would keep a bucket.
        # A refilled bucket is the same as none; the threshold doubles so pruning stays amortised O(1).
        if len(self._buckets) < self._prune_at:
            return
        self._buckets = {key: b for key, b in self._buckets.items() if not b.refilled(now)}
        self._prune_at = max(_PRUNE_FLOOR, 2 * len(self._buckets))


def rate_limits(scopes: PerServer[Scope], store: TokenStore | None = None) -> RateLimits | None:
    """The `rate_limits` hook, when any limit is configured (its buckets in `store`, when given)."""
    limits = scopes.gateway.rules.rate_limits
    return RateLimits(limits, store=store) if limits else None
