"""State that replicas share: rate-limit buckets, plan episodes and the audit stream.

The default is none of this: each process keeps its state in memory. With `toolscore.state` set
to a Redis URL, `open_state` gives a `RedisState` (`state/redis.py`) and the gateway hands it to
the parts that hold state across calls:

- `policy/rate.py` takes tokens through `TokenStore.take_token` (one atomic Lua script per limit);
- `policy/flow.py` caps concurrency per server through `SlotStore` (leased slots, a bounded queue);
- `orchestrate` episodes go through an `EpisodeRecords` (the same calls as the SQLite store,
  `loop/store.py`, so `DurableEpisodes` works over either);
- audit records fan out to a Redis stream (`RedisStreamSink`) besides the JSONL file.

Every key has a TTL. Not shared yet: single-flight batching and 2026-era session data stay per
process (docs/operations.md says what that means for a deployment).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from toolscore.config import Config
    from toolscore.state.redis_store import RedisState

__all__ = ["EpisodeRecords", "SharedState", "SlotStore", "TokenStore", "open_state"]


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


class SlotStore(Protocol):
    """Concurrency slots kept where every replica sees them."""

    async def acquire_slot(self, key: str, cap: int, queue: int, holder: str, lease: float) -> bool:
        """Wait for one of `cap` slots of `key`; False (at once) when `queue` calls already wait."""
        ...

    async def release_slot(self, key: str, holder: str) -> None:
        """Give the slot back."""
        ...


class SharedState(TokenStore, SlotStore, Protocol):
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

    def close(self) -> None:
        """Release what the store holds."""
        ...
