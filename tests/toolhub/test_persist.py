"""The ToolHub's learned scores outlive the gateway: saved when it closes, restored when it opens."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import wait_for
from tests.toolhub.test_scoring import Clock, record
from toolscore import Gateway
from toolscore.testing import FakeDownstream, memory_config, running_gateway
from toolscore.toolhub.persist import MAX_FILE_BYTES, FileScores
from toolscore.toolhub.scoring import FORGET_AFTER_SECONDS, Scoreboard

pytestmark = pytest.mark.anyio


def servers() -> dict[str, FakeDownstream]:
    alpha, beta = FakeDownstream("alpha"), FakeDownstream("beta")

    @alpha.tool("lookup", description="Look a word up.")
    def broken(query: str) -> str:
        raise RuntimeError("index offline")

    @beta.tool("lookup", description="Look a word up.")
    def working(query: str) -> str:
        return f"beta: {query}"

    return {"alpha": alpha, "beta": beta}


@asynccontextmanager
async def gateway(scores: Path, **toolhub: Any) -> AsyncIterator[Gateway]:
    entries: dict[str, dict[str, Any]] = {n: {"capabilities": {"lookup": ["define"]}} for n in ("alpha", "beta")}
    settings = {"scores_path": str(scores), "capabilities": {"define": {"strategy": "fallback"}}, **toolhub}
    config = memory_config(entries, toolscore={"toolhub": settings})
    async with running_gateway(servers(), config=config) as (gw, _):
        yield gw


def order(gw: Gateway) -> list[str]:
    return [t.route.public_name for t in gw.toolhub.ranked("define")]


async def test_a_restarted_gateway_still_knows_which_candidate_failed(tmp_path: Path) -> None:
    path = tmp_path / "state" / "scores.json"
    async with gateway(path) as gw, Client(gw.server) as client:
        assert order(gw) == ["alpha__lookup", "beta__lookup"]  # nothing learned yet: config order
        result = await client.call_tool("call_capability", {"capability": "define", "arguments": {"query": "x"}})
        assert not result.is_error and "beta: x" in str(result.content)
        assert order(gw) == ["beta__lookup", "alpha__lookup"]
    saved = json.loads(path.read_text())["scores"]
    assert set(saved) == {"alpha__lookup", "beta__lookup"} and saved["alpha__lookup"]["success"] == 0.5
    assert os.stat(path).st_mode & 0o777 == 0o600
    async with gateway(path) as again:
        assert order(again) == ["beta__lookup", "alpha__lookup"]  # learned before the restart
        score = again.toolhub.scores.get("alpha__lookup")
        assert score is not None and score.calls == 1


async def test_scores_are_saved_while_the_gateway_runs_not_only_when_it_stops(tmp_path: Path) -> None:
    # A gateway killed outright keeps what it saved last: here, before it stops at all.
    path = tmp_path / "scores.json"
    async with gateway(path, save_seconds=0.05) as gw, Client(gw.server) as client:
        await anyio.sleep(0.2)
        assert not path.exists()  # nothing learned, nothing written
        await client.call_tool("call_capability", {"capability": "define", "arguments": {"query": "x"}})

        def saved() -> dict[str, Any]:
            return json.loads(path.read_text())["scores"] if path.exists() else {}

        # A round may fall between alpha's failure and beta's answer, and save alpha alone first.
        await wait_for(lambda: "beta__lookup" in saved())
        assert saved()["alpha__lookup"]["success"] == 0.5 and saved()["beta__lookup"]["calls"] == 1
        assert not gw.toolhub.scores.changed  # taken by the save: the next round writes nothing new


async def test_scores_are_kept_in_memory_only_when_persistence_is_off(tmp_path: Path) -> None:
    path = tmp_path / "scores.json"
    async with gateway(path, persist_scores=False) as gw, Client(gw.server) as client:
        await client.call_tool("call_capability", {"capability": "define", "arguments": {"query": "x"}})
        assert order(gw) == ["beta__lookup", "alpha__lookup"]
    assert not path.exists()


async def test_failures_are_forgiven_while_the_gateway_is_down_and_old_scores_forgotten(tmp_path: Path) -> None:
    store = FileScores(tmp_path / "scores.json")
    clock = Clock()
    before = Scoreboard(half_life_seconds=10, clock=clock)
    for _ in range(4):
        before.observe(record("a__t", False))
    await store.save_from(before)
    clock.now += 40  # four half-lives pass with the gateway stopped
    after = Scoreboard(half_life_seconds=10, clock=clock)
    assert await store.load_into(after) == 1
    assert after.success("a__t") > 0.9
    clock.now += FORGET_AFTER_SECONDS
    assert await store.load_into(Scoreboard(clock=clock)) == 0  # too old to say anything


async def test_two_gateways_sharing_the_file_keep_each_others_scores(tmp_path: Path) -> None:
    store = FileScores(tmp_path / "scores.json")
    clock = Clock()
    one, two = Scoreboard(clock=clock), Scoreboard(clock=clock)
    one.observe(record("a__t", False))
    one.observe(record("shared__t", False))
    clock.now += 1
    two.observe(record("b__t", True))
    two.observe(record("shared__t", True))
    await store.save_from(two)
    await store.save_from(one)  # saved last, but its `shared__t` is older
    merged = Scoreboard(clock=clock)
    assert await store.load_into(merged) == 3
    shared = merged.get("shared__t")
    assert shared is not None and shared.success == 1.0


@pytest.mark.parametrize(
    "content",
    [
        b"\xff\xfe not utf-8",
        b"{not json",
        b"[1, 2]",
        b'{"scores": []}',
        b'{"scores": {"t": {"success": "NaN", "at": 1, "calls": 1}, "u": 5, "v": {"success": 2, "at": 1, "calls": 0}}}',
        b'{"scores": {"t": {"success": 1.0, "at": 1e400, "calls": 1}, "u": {"success": 1, "at": 1, "calls": true}}}',
        b"[" * 100_000,
    ],
)
async def test_a_damaged_or_hostile_file_is_skipped_not_raised(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "scores.json"
    path.write_bytes(content)
    board = Scoreboard()
    assert await FileScores(path).load_into(board) == 0
    board.observe(record("a__t", True))
    await FileScores(path).save_from(board)  # and it is replaced by a good one
    assert await FileScores(path).load_into(Scoreboard()) == 1


async def test_a_symlink_or_a_huge_file_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "elsewhere.json"
    secret.write_text(json.dumps({"scores": {"a__t": {"success": 0.0, "latency_ms": None, "at": 1e12, "calls": 1}}}))
    link = tmp_path / "scores.json"
    link.symlink_to(secret)
    assert await FileScores(link).load_into(Scoreboard()) == 0
    huge = tmp_path / "huge.json"
    huge.write_bytes(b" " * (MAX_FILE_BYTES + 1))
    assert await FileScores(huge).load_into(Scoreboard()) == 0


async def test_a_gateway_opens_over_an_unreadable_scores_file(tmp_path: Path) -> None:
    path = tmp_path / "scores.json"
    path.write_bytes(b"\x00garbage")
    async with gateway(path) as gw:
        assert order(gw) == ["alpha__lookup", "beta__lookup"]
