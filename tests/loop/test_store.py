"""The SQLite episode store: expiry, owners, a restart, and plan episodes round-tripped."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.conftest import text
from tests.fixtures.scripted_model import scripted_model
from tests.loop.conftest import loop_gateway
from toolscore.loop.store import EpisodeDB, episode_from_dict, episode_to_dict, owner_of
from toolscore.plan.run import Episode, StepRecord

pytestmark = pytest.mark.anyio


async def test_records_survive_a_restart_and_stay_with_their_caller(tmp_path: Path) -> None:
    db = EpisodeDB(tmp_path / "e.sqlite3", ttl_seconds=60)
    await db.put("plan", "ep1", "alice", {"x": 1})
    db.close()
    again = EpisodeDB(tmp_path / "e.sqlite3", ttl_seconds=60)
    assert await again.get("plan", "ep1", "alice") == {"x": 1}
    assert await again.get("plan", "ep1", "mallory") is None
    await again.delete("plan", "ep1", "alice")
    assert await again.get("plan", "ep1", "alice") is None
    again.close()


async def test_take_hands_a_record_to_its_owner_once(tmp_path: Path) -> None:
    db = EpisodeDB(tmp_path / "e.sqlite3", ttl_seconds=60)
    await db.put("pending", "s1", "alice", {"task": "t"})
    assert await db.take("pending", "s1", "mallory") is None  # not theirs: left alone
    taken = [await db.take("pending", "s1", "alice") for _ in range(2)]
    assert taken == [{"task": "t"}, None]
    db.close()


async def test_expired_records_are_gone(tmp_path: Path) -> None:
    db = EpisodeDB(":memory:", ttl_seconds=0.001)
    await db.put("plan", "old", "a", {"x": 1})
    await anyio.sleep(0.01)
    assert await db.get("plan", "old", "a") is None
    await db.purge()
    db.ttl = 60
    await db.put("plan", "new", "a", {"y": "\u00e9"})
    assert await db.get("plan", "new", "a") == {"y": "\u00e9"}
    db.close()


def test_plan_episode_round_trip() -> None:
    episode = Episode("abc", next_step=3)
    episode.steps[1] = StepRecord(1, "s", "fx", "echo", status="ok", text="hi", json={"a": 1}, ms=1.5, attempts=1)
    episode.steps[2] = StepRecord(2, None, "fx", "fail", status="error", error="boom", on_error="continue")
    episode.ids.update({"s": 1, "blk": None})
    episode.block_values["blk"] = {"s": {"status": "ok"}}
    back = episode_from_dict(episode_to_dict(episode))
    assert back.id == "abc" and back.next_step == 3
    assert back.lookup("s") == episode.lookup("s")
    assert back.lookup(2) == episode.lookup(2)
    assert back.steps[2].on_error == "continue"
    assert back.lookup("blk") == {"s": {"status": "ok"}}


async def test_orchestrate_episodes_survive_a_gateway_restart(tmp_path: Path) -> None:
    async with loop_gateway(tmp_path, None) as (gw, _sink), Client(gw.server) as client:
        first = await client.call_tool("orchestrate", {"plan": '<fx><echo id="e">{"text": "kept"}</echo></fx>'})
        assert first.structured_content is not None
        episode = first.structured_content["episode"]
    async with loop_gateway(tmp_path, None) as (gw, _sink), Client(gw.server) as client:
        later = await client.call_tool(
            "orchestrate", {"plan": '<fx><echo>{"text": "${e.text} again"}</echo></fx>', "episode": episode}
        )
        assert not later.is_error, text(later)
        assert "kept again" in text(later)
        done = await client.call_tool("orchestrate", {"plan": "<answer>x</answer>", "episode": episode})
        assert not done.is_error
    async with loop_gateway(tmp_path, None) as (gw, _sink), Client(gw.server) as client:
        gone = await client.call_tool(
            "orchestrate", {"plan": '<fx><echo>{"text": "${e.text}"}</echo></fx>', "episode": episode}
        )
        assert gone.is_error and "unknown or has expired" in text(gone)


async def test_orchestrate_continues_a_delegated_task(tmp_path: Path) -> None:
    turns = ['<fx><echo id="found">{"text": "from the task"}</echo></fx><execute_tools />', "<answer>ok</answer>"]
    with scripted_model(turns) as model:
        async with loop_gateway(tmp_path, model.url) as (gw, _sink), Client(gw.server) as client:
            task = await client.call_tool("delegate", {"task": "t"})
            assert task.structured_content is not None
            episode = task.structured_content["episode"]
            more = await client.call_tool(
                "orchestrate", {"plan": '<fx><echo>{"text": "${found.text}!"}</echo></fx>', "episode": episode}
            )
    assert "from the task!" in text(more)


def test_a_principal_owns_the_episodes_of_its_sessions_and_a_bare_connection_its_id() -> None:
    # A session a principal opened (`principal:<name>/c<n>`) stores under the principal: another
    # principal's session on another replica never restores it; without a principal the id is the key.
    assert owner_of("principal:alice") == "principal:alice"
    assert owner_of("principal:alice/c7") == "principal:alice"
    assert owner_of("principal:bob/c7") != owner_of("principal:alice/c7")
    assert owner_of("c7") == owner_of("c8") == "connection"


async def test_a_plan_answers_while_its_save_waits_and_a_clean_stop_writes_it(tmp_path: Path) -> None:
    # Another connection holds the file's write lock: the episode's save cannot land until it is let go.
    blocker = sqlite3.connect(tmp_path / "episodes.sqlite3", check_same_thread=False, isolation_level=None)
    blocker.execute("PRAGMA journal_mode=WAL")
    blocker.execute(
        "CREATE TABLE IF NOT EXISTS episodes (kind TEXT NOT NULL, id TEXT NOT NULL, caller TEXT NOT NULL, "
        "expires REAL NOT NULL, data TEXT NOT NULL, PRIMARY KEY (kind, id))"
    )
    blocker.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.5, blocker.commit)
    try:
        async with loop_gateway(tmp_path, None) as (gw, _sink), Client(gw.server) as client:
            first = await client.call_tool("orchestrate", {"plan": '<fx><echo id="e">{"text": "kept"}</echo></fx>'})
            # The answer came with the save still queued behind the lock (it used to wait, and fail).
            assert not first.is_error and "could not be saved" not in text(first), text(first)
            assert first.structured_content is not None
            episode = first.structured_content["episode"]
            assert blocker.execute("SELECT count(*) FROM episodes").fetchone() == (0,)
            release.start()  # the gateway stops with the save pending: closing writes it
    finally:
        release.cancel()
        blocker.close()
    async with loop_gateway(tmp_path, None) as (gw, _sink), Client(gw.server) as client:
        later = await client.call_tool(
            "orchestrate", {"plan": '<fx><echo>{"text": "${e.text} again"}</echo></fx>', "episode": episode}
        )
        assert not later.is_error, text(later)
        assert "kept again" in text(later)


async def test_a_read_waits_for_the_save_queued_before_it(tmp_path: Path) -> None:
    db = EpisodeDB(tmp_path / "e.sqlite3", ttl_seconds=60)
    for n in range(20):
        db.put_soon("plan", "ep", "alice", {"n": n})
    assert await db.get("plan", "ep", "alice") == {"n": 19}
    db.delete_soon("plan", "ep", "alice")
    assert await db.get("plan", "ep", "alice") is None
    db.put_soon("plan", "ep2", "alice", {"x": 1})
    db.close()
    again = EpisodeDB(tmp_path / "e.sqlite3", ttl_seconds=60)
    assert await again.get("plan", "ep2", "alice") == {"x": 1}
    again.close()
