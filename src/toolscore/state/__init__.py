"""State that replicas share: rate-limit buckets, plan episodes and the audit stream.

The default is none of this: each process keeps its state in memory. With `toolscore.state` set
to a Redis URL, `open_state` gives a `RedisState` (`state/redis.py`) and the gateway hands it to
the parts that hold state across calls:

- `policy/rate.py` takes tokens through `TokenStore.take_token` (one atomic Lua script per limit);
- `policy/flow.py` caps concurrency per server through `SlotStore` (leased slots, a bounded queue),
  and lets identical concurrent read-only calls on any replica share one downstream call through
  `FlightStore` (a leased lock, the result kept a few seconds for the calls that waited);
- `orchestrate` episodes and `delegate`'s paused 2026-era tasks go through an `EpisodeRecords`
  (the same calls as the SQLite store, `loop/store.py`, so `DurableEpisodes` works over either);
- audit records fan out to a Redis stream (`RedisStreamSink`) besides the JSONL file, one hash chain;
- pinned tool definitions (`RedisPinBook`, `trust/pins.py`) are one set for every replica.

Every key has a TTL. Handshake-era HTTP sessions stay on the replica that opened them
(docs/operations.md says what that means for a deployment).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from toolscore.config import Config
    from toolscore.state.redis_store import RedisState

__all__ = ["CounterStore", "EpisodeRecords", "FlightStore", "SharedState", "SlotStore", "TokenStore", "open_state"]


def open_state(config: Config) -> RedisState | None:
    """The shared state `toolscore.state` names, or None (this process's memory).

    The Redis client is imported only here, when the config asks for it (it takes ~0.4 s).
    """
    settings = config.settings
    if settings.state is None:
        return None
    from toolscore.state.redis_store import RedisState

    return RedisState(settings.state, prefix=settings.state_prefix)


class TokenStore(Protocol):
    """Token buckets kept where every replica sees them."""

    async def take_token(self, key: str, rate: float, burst: int) -> float | None:
        """Take a token from bucket `key` (`rate`/s, up to `burst`): None if one was there, else seconds to wait."""
        ...


class CounterStore(Protocol):
    """Counters that expire, kept where every replica sees them (the quotas of a day)."""

    async def count_up(self, key: str, amount: int, *, below: int | None, ttl: float) -> int | None:
        """Add `amount` to counter `key` unless it already holds `below` or more (then None, and
        nothing added); the count after. A new counter expires `ttl` seconds after its first count."""
        ...


class SlotStore(Protocol):
    """Concurrency slots kept where every replica sees them."""

    async def acquire_slot(self, key: str, cap: int, queue: int, holder: str, lease: float) -> bool:
        """Wait for one of `cap` slots of `key`; False (at once) when `queue` calls already wait."""
        ...

    async def release_slot(self, key: str, holder: str) -> None:
        """Give the slot back."""
        ...


class FlightStore(Protocol):
    """Single-flight batching across replicas: who makes a call, and its result for those who waited."""

    async def start_flight(self, key: str, flight: str, lease: float) -> str | None:
        """Lead flight `key` as `flight` (None; it ends by `lease` seconds at most), or the flight already under way."""
        ...

    async def end_flight(self, key: str, flight: str, result: bytes | None, keep: float) -> None:
        """End the flight: its result (None: it has none) stays `keep` seconds for the calls waiting on it."""
        ...

    async def await_flight(self, key: str, flight: str) -> bytes | None:
        """Once `flight` ends: its result, or None when it ended without one."""
        ...


class SharedState(TokenStore, CounterStore, SlotStore, FlightStore, Protocol):
    """What the policy's hooks keep in shared state."""


class EpisodeRecords(Protocol):
    """Episode records by (kind, id), each owned by a caller and expiring `ttl` seconds after its last put."""

    ttl: float

    async def put(self, kind: str, ident: str, caller: str, data: dict[str, Any]) -> None:
        """Store (or replace) a record."""
        ...

    async def get(self, kind: str, ident: str, caller: str) -> dict[str, Any] | None:
        """The caller's unexpired record, or None."""
        ...

    async def delete(self, kind: str, ident: str, caller: str) -> None:
        """Forget a record."""
        ...

    async def take(self, kind: str, ident: str, caller: str) -> dict[str, Any] | None:
        """The caller's unexpired record, forgotten in the same step: of two concurrent takes, one gets it."""
        ...

    def close(self) -> None:
        """Release what the store holds."""
        ...
