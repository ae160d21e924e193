"""Episodes that survive a restart: an embedded SQLite store with expiry (stdlib sqlite3).

Every query runs in a worker thread (`anyio.to_thread`), so a slow disk never stalls the event
loop; one connection, serialised by a lock. A plan episode's save (`put_soon`, `delete_soon`) does
not hold up the plan's answer: it goes to one writer thread, in order, and `close` waits for every
save still queued, so a clean stop loses none; a read of a record with a save queued waits for it.
A record belongs to a caller: `get` by another caller finds nothing. Expired records are invisible
at once and deleted by `purge` (run by `put` at most once a minute).
Plan episodes (`toolscore.plan.run.Episode`) are stored as their step values, which is all that
references into them read; the raw MCP results are not kept.

Owners: an HTTP principal owns its episodes (those of its stateless requests and of the
handshake-era sessions it opened) across restarts and replicas: another principal never gets
them, whatever id it presents. A connection with no principal (stdio, an HTTP front without
tokens) has an identity that dies with it (and the numbering restarts with the gateway), so its
episodes are stored under "connection": there the random 128-bit episode id is what grants
access, as it is the only thing a later connection can present. An episode that another caller holds in memory
is never restored for a second one: the id moves an episode across a restart or a replica, never
away from a client that is still using it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import structlog

from toolscore.plan.run import Episode, StepRecord
from toolscore.plan.tool import EpisodeStore
from toolscore.state import EpisodeRecords

__all__ = ["DurableEpisodes", "EpisodeDB", "episode_from_dict", "episode_to_dict", "owner_of"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS episodes (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    caller TEXT NOT NULL,
    expires REAL NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (kind, id)
)
"""


log = structlog.get_logger("toolscore.loop")

_PURGE_EVERY = 60.0
"""Seconds between deletions of expired records (a `get` never sees one anyway)."""


class EpisodeDB:
    """Episode records by (kind, id), each with an owner and an expiry time."""

    def __init__(self, path: Path | str, *, ttl_seconds: float) -> None:
        """Args:
        path: The database file (":memory:" for one that dies with the process).
        ttl_seconds: How long a record lives after its last `put`.
        """
        self._path = str(path)
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self.ttl = ttl_seconds
        self._purged = 0.0
        self._writer: ThreadPoolExecutor | None = None
        self._queued: dict[tuple[str, str], Future[None]] = {}
        """The last save queued per record, until it is written (under `_queued_lock`: the writer
        thread drops an entry once written)."""
        self._queued_lock = threading.RLock()  # a callback may run at once, in the thread holding it

    def _run(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            if self._db is None:
                # Opened on first use: a gateway that never stores an episode creates no file.
                if self._path != ":memory:":
                    Path(self._path).parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
                self._db.execute("PRAGMA journal_mode=WAL")
                # With WAL, NORMAL loses at most the last commits on a power cut, never the file's
                # integrity, and saves an fsync per episode write (5-40 ms here).
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.execute(_SCHEMA)
            return self._db.execute(sql, args).fetchall()

    async def put(self, kind: str, ident: str, caller: str, data: dict[str, Any]) -> None:
        """Store (or replace) a record; it expires `ttl_seconds` from now."""
        text = json.dumps(data, ensure_ascii=False, default=str)
        now = time.time()
        await anyio.to_thread.run_sync(
            self._run,
            "INSERT OR REPLACE INTO episodes (kind, id, caller, expires, data) VALUES (?, ?, ?, ?, ?)",
            (kind, ident, caller, now + self.ttl, text),
        )
        if now - self._purged > _PURGE_EVERY:
            self._purged = now
            await self.purge(now)

    def put_soon(self, kind: str, ident: str, caller: str, data: dict[str, Any]) -> None:
        """`put` without waiting: the record is encoded now (a snapshot) and written by the writer
        thread after the saves queued before it; a failure is logged."""
        text = json.dumps(data, ensure_ascii=False, default=str)
        now = time.time()
        sql = "INSERT OR REPLACE INTO episodes (kind, id, caller, expires, data) VALUES (?, ?, ?, ?, ?)"
        self._queue(kind, ident, sql, (kind, ident, caller, now + self.ttl, text))
        if now - self._purged > _PURGE_EVERY:
            self._purged = now
            self._queue("", "", "DELETE FROM episodes WHERE expires <= ?", (now,))

    def delete_soon(self, kind: str, ident: str, caller: str) -> None:
        """`delete` without waiting, in order with the saves queued before it."""
        self._queue(kind, ident, "DELETE FROM episodes WHERE kind = ? AND id = ? AND caller = ?", (kind, ident, caller))

    def _queue(self, kind: str, ident: str, sql: str, args: tuple[Any, ...]) -> None:
        if self._writer is None:
            # One thread: the writes land in the order they were queued.
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="toolscore-episodes")
        key = (kind, ident)
        with self._queued_lock:
            self._queued[key] = self._writer.submit(self._write, sql, args)
            self._queued[key].add_done_callback(lambda written: self._forget(key, written))

    def _forget(self, key: tuple[str, str], written: Future[None]) -> None:
        with self._queued_lock:
            if self._queued.get(key) is written:  # not a later save of the same record
                del self._queued[key]

    def _write(self, sql: str, args: tuple[Any, ...]) -> None:
        try:
            self._run(sql, args)
        except Exception:
            # The plan's answer has gone: the episode lives on in memory, only a restart would lose it.
            log.warning("episode not saved: the store failed", exc_info=True)

    async def _written(self, kind: str, ident: str) -> None:
        with self._queued_lock:
            queued = self._queued.get((kind, ident))
        if queued is not None:
            await anyio.to_thread.run_sync(queued.result)

    async def get(self, kind: str, ident: str, caller: str) -> dict[str, Any] | None:
        """The caller's unexpired record, or None."""
        await self._written(kind, ident)
        rows = await anyio.to_thread.run_sync(
            self._run,
            "SELECT data FROM episodes WHERE kind = ? AND id = ? AND caller = ? AND expires > ?",
            (kind, ident, caller, time.time()),
        )
        if not rows:
            return None
        value = json.loads(rows[0][0])
        return value if isinstance(value, dict) else None

    async def delete(self, kind: str, ident: str, caller: str) -> None:
        """Forget a record (its episode ended)."""
        await self._written(kind, ident)
        await anyio.to_thread.run_sync(
            self._run, "DELETE FROM episodes WHERE kind = ? AND id = ? AND caller = ?", (kind, ident, caller)
        )

    async def take(self, kind: str, ident: str, caller: str) -> dict[str, Any] | None:
        """The caller's unexpired record, deleted by the same statement (a state resumed once)."""
        await self._written(kind, ident)
        rows = await anyio.to_thread.run_sync(
            self._run,
            "DELETE FROM episodes WHERE kind = ? AND id = ? AND caller = ? AND expires > ? RETURNING data",
            (kind, ident, caller, time.time()),
        )
        if not rows:
            return None
        value = json.loads(rows[0][0])
        return value if isinstance(value, dict) else None

    async def purge(self, now: float | None = None) -> None:
        """Delete every expired record."""
        await anyio.to_thread.run_sync(
            self._run, "DELETE FROM episodes WHERE expires <= ?", (time.time() if now is None else now,)
        )

    def close(self) -> None:
        """Write every save still queued, then close the database (a later use opens it again)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.shutdown(wait=True)
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def episode_to_dict(episode: Episode) -> dict[str, Any]:
    """A plan episode as JSON: its step values, ids and block values."""
    return {
        "id": episode.id,
        "next_step": episode.next_step,
        "steps": {str(n): {**r.value(), "id": r.id, "on_error": r.on_error} for n, r in episode.steps.items()},
        "ids": episode.ids,
        "block_values": episode.block_values,
    }


def episode_from_dict(data: dict[str, Any]) -> Episode:
    """The plan episode `episode_to_dict` stored."""
    steps = {}
    for key, v in data.get("steps", {}).items():
        steps[int(key)] = StepRecord(
            step=int(key),
            id=v.get("id"),
            server=str(v.get("server", "")),
            tool=str(v.get("tool", "")),
            status=v.get("status", "skipped"),
            text=str(v.get("text", "")),
            json=v.get("json"),
            error=v.get("error"),
            ms=float(v.get("ms", 0.0)),
            attempts=int(v.get("attempts", 0)),
            on_error=v.get("on_error", "skip_dependents"),
        )
    return Episode(
        id=str(data["id"]),
        next_step=int(data.get("next_step", 1)),
        steps=steps,
        ids=dict(data.get("ids", {})),
        block_values=dict(data.get("block_values", {})),
    )


def owner_of(caller: str) -> str:
    """Whom a caller's episodes belong to in the store (see the module docstring): its principal
    (`principal:<name>`, also for a session it opened, `principal:<name>/c<n>`), else "connection"."""
    if caller.startswith("principal:"):
        return caller.partition("/")[0]
    return "connection"


class DurableEpisodes:
    """Keeps `orchestrate`'s in-memory episodes in the store, so they survive a restart."""

    def __init__(self, db: EpisodeRecords, episodes: EpisodeStore) -> None:
        self._db = db
        self._episodes = episodes

    async def restore(self, caller: str, arguments: dict[str, Any] | None) -> None:
        """Before a plan: bring back the episode it continues, if memory lost it (a restart)."""
        ident = (arguments or {}).get("episode")
        if not isinstance(ident, str) or self._episodes.get(caller, ident) is not None:
            return
        if self._episodes.held_by_another(caller, ident):
            return  # a live episode stays its caller's: the id alone never moves it to another
        data = await self._db.get("plan", ident, owner_of(caller))
        if data is not None:
            self._episodes.new(caller, episode_from_dict(data))

    async def save(self, caller: str, answer: mcp_types.CallToolResult) -> None:
        """After a plan: store its episode as it is now, or forget it once it has its answer."""
        structured = answer.structured_content or {}
        ident = structured.get("episode")
        if not isinstance(ident, str) or "plan" in structured:  # no episode, or a dry run
            return
        db = self._db
        if "answer" in structured:
            if isinstance(db, EpisodeDB):
                db.delete_soon("plan", ident, owner_of(caller))
            else:
                await db.delete("plan", ident, owner_of(caller))
            return
        episode = self._episodes.get(caller, ident)
        if episode is None:
            return
        if isinstance(db, EpisodeDB):
            # This process's own file: only a restart reads it, and `close` writes what is queued,
            # so the answer need not wait (shared records are awaited: another replica may read them next).
            db.put_soon("plan", ident, owner_of(caller), episode_to_dict(episode))
        else:
            await db.put("plan", ident, owner_of(caller), episode_to_dict(episode))
