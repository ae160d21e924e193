"""Shared state on Redis: token buckets, slots and flights (Lua), episode records and the audit stream, all with TTLs.

Keys, all under `toolscore.state_prefix` (default `toolscore:`):

| key | type | TTL |
|---|---|---|
| `rate:<limit>:<scope key>` | hash (tokens, at) | until the bucket would be full again, plus 1 s |
| `episode:<kind>:<id>` | string (JSON: owner, data) | `loop.episode_ttl_seconds` after the last write |
| `slots:<server>`, `waiting:<server>` | sorted set (holder -> lease expiry) | the longest lease |
| `flight:<sha256>` | string (the leading flight's id) | the call's deadline + 5 s |
| `flight:<sha256>:<flight>` | string (the result's JSON) | 10 s |
| `audit` | stream (one field `r`: the record's JSON) | `audit.stream_ttl_seconds` after the last record |
| `toolhub:scores` | hash (tool -> its learned score's JSON, `toolhub/persist.py`) | a week after the last save |
| `audit:head` | string (the hash of the stream's last record) | as the stream |
| `pins` | hash (`pinned:<server>/<tool>`, `pending:...` -> the definition's JSON) | none: pins are kept |

The bucket script reads Redis's own clock (`TIME`), so replicas whose clocks differ still agree.
The audit stream is written with a blocking client before the call is answered, as the JSONL
file is: a replica killed the next instant has lost nothing it answered. A Redis that does not
answer within `_AUDIT_TIMEOUT` loses the record (counted, logged), and is left alone for
`_AUDIT_BACKOFF` seconds so calls do not each wait for it.

The stream is one hash chain across replicas (`audit/chain.py`): each record's `prev` names the
record before it in the stream. A replica writes with the head it expects; a Lua script appends
only if that is still the head, and otherwise answers the head, for the replica to re-encode and
try again.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import anyio
import redis
import redis.asyncio
import structlog
from pydantic_core import PydanticSerializationError
from redis.commands.core import AsyncScript

from toolscore._json import scrub_unpaired_surrogates
from toolscore.audit.chain import GENESIS, link
from toolscore.audit.sinks import AuditRecord, AuditSink
from toolscore.config import AuditConfig
from toolscore.errors import ConfigError, Rejected
from toolscore.trust.pins import Pin, PinBook, pin_of

__all__ = ["RedisEpisodes", "RedisPinBook", "RedisState", "RedisStreamSink", "read_stream", "stream_entries"]

log = structlog.get_logger("toolscore.state")

_AUDIT_TIMEOUT = 0.5
_AUDIT_TRIES = 8
"""Appends a writer retries when other replicas keep moving the head (each retry is one round trip)."""
# KEYS: the stream, its head. ARGV: the head expected ("" for none), the record, its hash, the
# stream's approximate length cap, the TTL in ms. Returns nil when appended, else the actual head.
_APPEND = """
local head = redis.call('GET', KEYS[2]) or ''
if head ~= ARGV[1] then return head end
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[4], '*', 'r', ARGV[2])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return false
"""
_AUDIT_BACKOFF = 5.0
_READ_CHUNK = 1000

# KEYS[1]: the bucket. ARGV: rate (tokens/s), burst. Returns "-1" when a token was taken, else
# the seconds until one will be there (as a string: Lua numbers lose their fraction in replies).
_TAKE = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(b[1]) or burst
local at = tonumber(b[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local wait = -1
if tokens < 1 then
  wait = (1 - tokens) / rate
else
  tokens = tokens - 1
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'at', string.format('%.17g', now))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) / rate * 1000) + 1000)
return string.format('%.17g', wait)
"""


# KEYS[1]: the running calls, KEYS[2]: the waiting ones (sorted sets: member -> lease expiry, ms).
# ARGV: cap, queue, holder, running lease ms, waiting lease ms, first ("1": not yet counted as
# waiting). Returns 1: a slot is the holder's; 0: wait and ask again; -1: refused (queue full).
_ACQUIRE = """
local cap, queue = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < cap then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), ARGV[3])
  redis.call('ZREM', KEYS[2], ARGV[3])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]))
  return 1
end
if ARGV[6] == '1' and redis.call('ZCARD', KEYS[2]) >= queue then
  return -1
end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[5]), ARGV[3])
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[5]))
return 0
"""
# KEYS[1]: an episode record. ARGV[1]: the caller. Returns the record and deletes it when the caller
# owns it, else nil (and leaves it): one step, so of two replicas taking one record one gets it.
_TAKE_RECORD = """
local v = redis.call('GET', KEYS[1])
if not v then return false end
local ok, d = pcall(cjson.decode, v)
if ok and type(d) == 'table' and d['owner'] == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return v
end
return false
"""

# KEYS[1]: a flight's lock. ARGV: this flight's id, its lease (ms). Returns nil when this flight
# now leads, else the id of the flight under way (checked and set in one step: one leader).
_START_FLIGHT = """
local cur = redis.call('GET', KEYS[1])
if cur then return cur end
redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
return false
"""

# KEYS[1]: the lock, KEYS[2]: this flight's result. ARGV: the flight's id, "1" if there is a
# result, the result, how long it stays (ms). The result is written before the lock goes, in one step.
_END_FLIGHT = """
if ARGV[2] == '1' then
  redis.call('SET', KEYS[2], ARGV[3], 'PX', tonumber(ARGV[4]))
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
return 1
"""

# KEYS[1]: a counter. ARGV: the bound (-1: none), the amount, its lifetime (s). Returns -1 when
# the counter is at the bound (nothing added), else the count after: checked and added in one step.
_COUNT_UP = """
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local below = tonumber(ARGV[1])
if below >= 0 and v >= below then return -1 end
local amount = tonumber(ARGV[2])
if amount ~= 0 then
  v = redis.call('INCRBY', KEYS[1], amount)
  if redis.call('TTL', KEYS[1]) < 0 then redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3])) end
end
return v
"""

_POLL = 0.02
"""Seconds between a waiting call's tries for a shared slot."""
_WAIT_LEASE_MS = 2000
"""A waiting call that stops asking (its replica died) leaves the queue after this long."""


def _unchecked(what: str, hook: str, exc: redis.RedisError) -> Rejected:
    """A shared check Redis could not make (a limit, a quota, a cap, an approval's one use): it is
    not skipped; the call is refused, saying why, and the failure logged."""
    log.error("shared check not made: Redis failed", check=what, error=f"{type(exc).__name__}: {exc}")
    return Rejected(f"{what} could not be checked (the shared state is unreachable); retry shortly", hook=hook)


class RedisState:
    """The async side of shared state (buckets, episodes) over one connection pool.

    Args:
        url: `redis://`, `rediss://` or `unix://`.
        prefix: Put before every key.
    """

    def __init__(self, url: str, *, prefix: str = "toolscore:") -> None:
        self.url = url
        self.prefix = prefix
        self._client: redis.asyncio.Redis = redis.asyncio.Redis.from_url(url, socket_timeout=5.0)
        self._take = self._client.register_script(_TAKE)
        self._acquire = self._client.register_script(_ACQUIRE)
        self._take_record = self._client.register_script(_TAKE_RECORD)
        self._start_flight = self._client.register_script(_START_FLIGHT)
        self._end_flight = self._client.register_script(_END_FLIGHT)
        self._count_up = self._client.register_script(_COUNT_UP)

    async def take_token(self, key: str, rate: float, burst: int) -> float | None:
        """Take a token from the shared bucket `key`: None if one was there, else seconds to wait."""
        try:
            reply = await self._take(keys=[f"{self.prefix}rate:{key}"], args=[repr(float(rate)), burst])
        except redis.RedisError as exc:
            raise _unchecked("the rate limit", "rate_limits", exc) from None
        wait = float(reply)
        return None if wait < 0 else wait

    async def count_up(self, key: str, amount: int, *, below: int | None, ttl: float) -> int | None:
        """Add `amount` to the shared counter `key` unless it holds `below` or more (then None)."""
        try:
            reply = await self._count_up(
                keys=[f"{self.prefix}count:{key}"], args=[-1 if below is None else below, amount, max(1, int(ttl))]
            )
        except redis.RedisError as exc:
            raise _unchecked("a quota", "principals", exc) from None
        count = int(reply)
        return None if count < 0 else count

    async def acquire_slot(self, key: str, cap: int, queue: int, holder: str, lease: float) -> bool:
        """Wait for one of `cap` shared slots of `key`; False when `queue` calls already wait.

        A slot is held until `release_slot`, or `lease` seconds at most (a replica that dies
        holding one frees it then). Waiting calls ask again every 20 ms; they are not served in
        arrival order.
        """
        keys = [f"{self.prefix}slots:{key}", f"{self.prefix}waiting:{key}"]
        lease_ms = max(1000, int(lease * 1000))
        first = "1"
        try:
            while True:
                got = int(await self._acquire(keys=keys, args=[cap, queue, holder, lease_ms, _WAIT_LEASE_MS, first]))
                if got == 1:
                    return True
                if got == -1:
                    return False
                first = "0"
                await anyio.sleep(_POLL)
        except redis.RedisError as exc:
            raise _unchecked("the concurrency cap", "concurrency", exc) from None
        except BaseException:
            with anyio.CancelScope(shield=True), contextlib.suppress(redis.RedisError):
                await self._client.zrem(keys[1], holder)  # cancelled while waiting: leave the queue
            raise

    async def release_slot(self, key: str, holder: str) -> None:
        """Give the slot back (shielded: a cancelled call still frees it)."""
        with anyio.CancelScope(shield=True), contextlib.suppress(redis.RedisError):
            await self._client.zrem(f"{self.prefix}slots:{key}", holder)

    def _flight_keys(self, key: str, flight: str) -> list[str]:
        return [f"{self.prefix}flight:{key}", f"{self.prefix}flight:{key}:{flight}"]

    async def start_flight(self, key: str, flight: str, lease: float) -> str | None:
        """Lead flight `key` (None), or the id of the one under way on some replica.

        Batching only saves calls: a Redis that fails makes this call lead, unshared (logged).
        """
        try:
            other = await self._start_flight(
                keys=self._flight_keys(key, flight)[:1], args=[flight, max(1000, int(lease * 1000))]
            )
        except redis.RedisError as exc:
            log.warning("call not batched across replicas: Redis failed", error=f"{type(exc).__name__}: {exc}")
            return None
        return None if other is None else bytes(other).decode("utf-8", "replace")

    async def end_flight(self, key: str, flight: str, result: bytes | None, keep: float) -> None:
        """Publish the result (if any) for `keep` seconds and free the key (shielded: a cancelled leader still does)."""
        args: list[bytes | str | int] = (
            [flight, "0", b"", 1] if result is None else [flight, "1", result, max(1, int(keep * 1000))]
        )
        with anyio.CancelScope(shield=True), contextlib.suppress(redis.RedisError):
            await self._end_flight(keys=self._flight_keys(key, flight), args=args)

    async def await_flight(self, key: str, flight: str) -> bytes | None:
        """Ask every 20 ms until `flight` ends (or its lease runs out); its result, or None."""
        lock, done = self._flight_keys(key, flight)
        try:
            while True:
                pipe = self._client.pipeline(transaction=True)  # both read at one instant
                pipe.get(done)
                pipe.get(lock)
                result, holder = await pipe.execute()
                if result is not None:
                    return bytes(result)
                if holder is None or bytes(holder).decode("utf-8", "replace") != flight:
                    return None
                await anyio.sleep(_POLL)
        except redis.RedisError as exc:
            log.warning("batched call goes on alone: Redis failed", error=f"{type(exc).__name__}: {exc}")
            return None

    def episodes(self, ttl_seconds: float) -> RedisEpisodes:
        """Episode records in this Redis, living `ttl_seconds` after their last write."""
        return RedisEpisodes(self._client, self.prefix, ttl_seconds, self._take_record)

    def with_audit_stream(self, sink: AuditSink, audit: AuditConfig) -> AuditSink:
        """`sink`, and the shared audit stream beside it."""
        stream = RedisStreamSink(
            self.url, prefix=self.prefix, max_records=audit.stream_max_records, ttl_seconds=audit.stream_ttl_seconds
        )
        return FanOutSink(sink, stream)

    async def read_scores(self) -> dict[str, bytes | str]:
        """The ToolHub's saved scores, every replica's (tool -> JSON); {} when Redis fails (logged)."""
        try:
            raw = await self._client.hgetall(f"{self.prefix}toolhub:scores")
        except redis.RedisError as exc:
            log.warning("toolhub scores not read: Redis failed", error=f"{type(exc).__name__}: {exc}")
            return {}
        return {(k.decode("utf-8", "replace") if isinstance(k, bytes) else str(k)): v for k, v in raw.items()}

    async def write_scores(self, scores: Mapping[str, str], ttl_seconds: float) -> None:
        """Save some tools' scores (tool -> JSON); the hash lives `ttl_seconds` from now (failures logged)."""
        key = f"{self.prefix}toolhub:scores"
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                for tool, score in scores.items():
                    pipe.hset(key, tool, score)
                pipe.expire(key, max(1, int(ttl_seconds)))
                await pipe.execute()
        except redis.RedisError as exc:
            log.warning("toolhub scores not saved: Redis failed", error=f"{type(exc).__name__}: {exc}")

    async def seal_key(self) -> bytes | None:
        """The key every replica signs request states with (`toolscore._seal`), made by the first
        to ask; None when Redis fails (logged: this replica then signs with a key of its own)."""
        key = f"{self.prefix}seal:key"
        try:
            await self._client.set(key, secrets.token_bytes(32), nx=True)
            found = await self._client.get(key)
        except redis.RedisError as exc:
            log.warning(
                "request states signed with this replica's own key: Redis failed",
                error=f"{type(exc).__name__}: {exc}",
            )
            return None
        if not isinstance(found, bytes) or len(found) < 32:  # not one a replica made: not trusted
            log.warning("request states signed with this replica's own key: the shared one is too short", key=key)
            return None
        return found

    async def spend_once(self, nonce: str, expires: float) -> bool:
        """Mark a request state's nonce used, across replicas, until it expires; False if it was."""
        try:
            done = await self._client.set(
                f"{self.prefix}seal:spent:{nonce}", b"1", nx=True, exat=max(1, int(expires) + 1)
            )
        except redis.RedisError as exc:
            raise _unchecked("the approval", "destructive", exc) from None  # not spent: not taken
        return bool(done)

    async def aclose(self) -> None:
        """Close the pool."""
        await self._client.aclose()


class RedisEpisodes:
    """`EpisodeRecords` in Redis: one JSON string per episode, owned by a caller, with a TTL."""

    def __init__(self, client: redis.asyncio.Redis, prefix: str, ttl: float, take: AsyncScript) -> None:
        self._client = client
        self._prefix = prefix
        self.ttl = ttl
        self._take = take

    def _key(self, kind: str, ident: str) -> str:
        return f"{self._prefix}episode:{kind}:{ident}"

    async def put(self, kind: str, ident: str, caller: str, data: dict[str, Any]) -> None:
        """Store (or replace) the record; it expires `ttl` seconds from now."""
        text = json.dumps({"owner": caller, "data": data}, ensure_ascii=False, default=str)
        await self._client.set(self._key(kind, ident), text.encode("utf-8", "replace"), px=max(1, int(self.ttl * 1000)))

    async def get(self, kind: str, ident: str, caller: str) -> dict[str, Any] | None:
        """The caller's record, or None (another caller's record is not found either)."""
        return _owned(await self._client.get(self._key(kind, ident)), caller)

    async def delete(self, kind: str, ident: str, caller: str) -> None:
        """Forget the caller's record."""
        await self.take(kind, ident, caller)

    async def take(self, kind: str, ident: str, caller: str) -> dict[str, Any] | None:
        """The caller's record, deleted in the same step (one Lua script)."""
        return _owned(await self._take(keys=[self._key(kind, ident)], args=[caller]), caller)

    def close(self) -> None:
        """Nothing of its own: the pool belongs to `RedisState`."""


def _owned(raw: bytes | str | None, caller: str) -> dict[str, Any] | None:
    """The data of a stored record if `caller` owns it."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict) or value.get("owner") != caller or not isinstance(value.get("data"), dict):
        return None
    data: dict[str, Any] = value["data"]
    return data


class RedisStreamSink:
    """An audit sink appending each record to the stream `<prefix>audit`, before the call is answered.

    Args:
        url: The Redis URL.
        prefix: Put before the key.
        max_records: The stream is trimmed to about this many.
        ttl_seconds: The stream expires this long after its last record.
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "toolscore:",
        max_records: int = 1_000_000,
        ttl_seconds: float = 7 * 86400.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = redis.Redis.from_url(url, socket_timeout=_AUDIT_TIMEOUT, socket_connect_timeout=_AUDIT_TIMEOUT)
        self.key = f"{prefix}audit"
        self._head_key = f"{prefix}audit:head"
        self._append = self._client.register_script(_APPEND)
        self._head = ""
        """The head this replica last saw ("": none yet); the script corrects it when another moved it."""
        self._max = max_records
        self._ttl_ms = max(1, int(ttl_seconds * 1000))
        self._clock = clock
        self._resume_at = 0.0
        self.lost = 0
        """Records that could not be appended."""

    def write(self, record: AuditRecord) -> None:
        """Append the record on the chain (one script: one round trip while the head is ours); a
        failure loses it, never the call."""
        if self._clock() < self._resume_at:
            self.lost += 1
            return
        try:
            text = record.model_dump_json(exclude_none=True)
        except PydanticSerializationError:  # a lone surrogate: keep the rest, as the JSONL sink does
            text = scrub_unpaired_surrogates(record).model_dump_json(exclude_none=True)
        try:
            for _ in range(_AUDIT_TRIES):
                body = f'{text[:-1]},"prev":"{self._head or GENESIS}"}}'.encode()
                digest = link(body)
                moved = self._append(
                    keys=[self.key, self._head_key], args=[self._head, body, digest, self._max, self._ttl_ms]
                )
                if moved is None:
                    self._head = digest
                    return
                self._head = moved.decode() if isinstance(moved, bytes) else str(moved)
            raise redis.RedisError(f"the chain's head moved {_AUDIT_TRIES} times in a row")
        except redis.RedisError as exc:
            self.lost += 1
            self._resume_at = self._clock() + _AUDIT_BACKOFF
            log.error(
                "audit record lost: the Redis stream did not take it; retrying in a few seconds",
                key=self.key,
                error=f"{type(exc).__name__}: {exc}",
                lost=self.lost,
            )

    def close(self) -> None:
        """Close the connection."""
        self._client.close()


class FanOutSink:
    """Writes every record to each sink in turn; one failing never keeps a record from the others."""

    def __init__(self, *sinks: AuditSink) -> None:
        self._sinks = sinks

    @property
    def lost(self) -> int:
        """Records the sinks counted as lost (each sink that keeps such a count)."""
        return sum(getattr(sink, "lost", 0) for sink in self._sinks)

    def write(self, record: AuditRecord) -> None:
        """Hand the record to every sink."""
        failure: Exception | None = None
        for sink in self._sinks:
            try:
                sink.write(record)
            except Exception as exc:
                failure = exc
        if failure is not None:
            raise failure

    def close(self) -> None:
        """Close every sink."""
        for sink in self._sinks:
            sink.close()


def stream_entries(url: str, *, prefix: str = "toolscore:") -> Iterator[tuple[str, bytes]]:
    """Every entry of the shared audit stream as (`key id`, the record's bytes), oldest first, for
    `audit/chain.verify`; an entry without a record is an empty body (a broken link).

    Raises:
        ConfigError: Redis cannot be reached.
    """
    client = redis.Redis.from_url(url, socket_timeout=10.0)
    key, start = f"{prefix}audit", "-"
    try:
        while True:
            try:
                chunk = cast(list[tuple[bytes, dict[bytes, bytes]]], client.xrange(key, start, "+", _READ_CHUNK))
            except redis.RedisError as exc:
                raise ConfigError(f"cannot read the audit stream {key} at toolscore.state: {exc}") from None
            for entry_id, fields in chunk:
                yield f"{key} {entry_id.decode()}", fields.get(b"r", b"")
            if len(chunk) < _READ_CHUNK:
                return
            start = "(" + chunk[-1][0].decode()
    finally:
        client.close()


def read_stream(
    url: str, *, prefix: str = "toolscore:", warn: Callable[[str], None] | None = None
) -> Iterator[AuditRecord]:
    """Every record in the shared audit stream, oldest first, read in chunks (`stream_entries`).

    Raises:
        ConfigError: Redis cannot be reached.
    """
    for where, body in stream_entries(url, prefix=prefix):
        try:
            yield AuditRecord.model_validate_json(body)
        except ValueError:
            if warn is not None:
                warn(f"{where}: skipped an entry that is not an audit record")


class RedisPinBook(PinBook):
    """Pinned definitions every replica shares: the hash `<prefix>pins` (`trust/pins.py`).

    A first sight is written with HSETNX, so of two replicas that see a tool first at once, one
    pin wins and the other adopts it at its next refresh; approvals, pending changes and resets
    are written as they are. Read and written with a blocking client, at a rebuild (rare).
    """

    def __init__(self, url: str, *, prefix: str = "toolscore:") -> None:
        self._client = redis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)
        self.key = f"{prefix}pins"
        try:
            super().__init__(Path(self.key))
        except ConfigError as exc:  # Redis down at start: no pins until a rebuild reads them
            log.error("pins not read; read again at the next list change", error=str(exc))

    def refresh(self) -> None:
        """Read every pin again (a `pins approve` on any machine, another replica's first sights).

        Raises:
            ConfigError: Redis cannot be reached.
        """
        try:
            raw = cast(dict[bytes, bytes], self._client.hgetall(self.key))
        except redis.RedisError as exc:
            raise ConfigError(f"cannot read the pins {self.key} at toolscore.state: {exc}") from None
        pinned: dict[str, Pin] = {}
        pending: dict[str, Pin] = {}
        for field, value in raw.items():
            section, _, key = field.decode("utf-8", "replace").partition(":")
            try:
                pin = pin_of(json.loads(value))
            except (KeyError, TypeError, ValueError):
                continue  # not a pin: skipped, as the stream reader skips junk
            (pinned if section == "pinned" else pending)[key] = pin
        self.pinned, self.pending = pinned, pending

    def save(self) -> None:
        """Write what changed since the last save (raises OSError when Redis fails)."""
        if not self.changes:
            return
        pipe = self._client.pipeline(transaction=False)
        for (section, key), pin in self.changes.items():
            field = f"{section}:{key}"
            if pin is None:
                pipe.hdel(self.key, field)
                continue
            text = json.dumps(pin.as_dict(), sort_keys=True)
            if section == "pinned" and key in self.first_seen:
                pipe.hsetnx(self.key, field, text)
            else:
                pipe.hset(self.key, field, text)
        try:
            pipe.execute()
        except redis.RedisError as exc:
            raise OSError(f"Redis did not take the pins: {exc}") from None
        self.changes.clear()
        self.first_seen.clear()
