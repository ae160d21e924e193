"""Every audit record carries its caller's principal, and the console shows each principal's usage
(`/ui/api/principals`), in memory through the console's JSON API."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.fixtures.fixture_server import build_server
from toolscore._gateway import http_pages, open_gateway
from toolscore.audit.sinks import AuditRecord, JsonlAuditSink, MemoryAuditSink, read_audit
from toolscore.config import parse_config
from toolscore.front.console import OTHER, ConsoleFeed
from toolscore.front.routes import PathRoutes
from toolscore.scope import CallScope


def _record(caller: str | None, *, ok: bool = True, kind: str | None = None, tokens: int = 10) -> AuditRecord:
    return AuditRecord.of_checked(
        time=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        call_id="c",
        caller=caller,
        tool="fx__echo",
        phase="post_execution",
        duration_ms=1.0,
        success=ok,
        error_kind=kind,
        actual_tokens=tokens,
    )


@pytest.mark.parametrize(
    ("caller", "principal"),
    [
        ("principal:alice/c3", "alice"),
        ("principal:bob", "bob"),
        ("principal:carol/console", "carol"),
        ("c4", None),
        (None, None),
    ],
)
def test_a_record_derives_its_principal_once_from_its_caller(caller: str | None, principal: str | None) -> None:
    assert _record(caller).principal == principal
    built = AuditRecord(
        time=datetime.now(UTC), call_id="c", caller=caller, tool="t", phase="p", duration_ms=1, success=True
    )
    assert built.principal == principal


def test_the_audit_file_carries_the_principal_and_reads_it_back(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlAuditSink(path)
    sink.write(_record("principal:alice/c3"))
    sink.write(_record("c4"))
    sink.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["principal"] == "alice" and "principal" not in lines[1]
    assert [r.principal for r in read_audit(path)] == ["alice", None]


def test_the_feed_counts_each_principal_within_a_bounded_table() -> None:
    feed = ConsoleFeed(max_principals=2)
    for record in (
        _record("principal:alice/c1"),
        _record("principal:alice/c2", ok=False, kind="rejected", tokens=0),
        _record("principal:bob", ok=False, kind="timeout"),
        _record("principal:carol"),  # the third principal: counted as (other)
        _record("principal:dave"),
        _record("c9"),  # no principal: not in the table
    ):
        feed.observe(record)
    usage = {u.principal: u.as_dict() for u in feed.usage()}
    assert list(usage) == [OTHER, "alice", "bob"]  # the busiest first, then by name
    assert usage["alice"] == {
        "principal": "alice",
        "calls": 2,
        "failures": 1,
        "refused": 1,
        "tokens": 10,
        "last": "2026-01-02T03:04:05+00:00",
    }
    assert (usage["bob"]["failures"], usage["bob"]["refused"]) == (1, 0)
    assert usage[OTHER]["calls"] == 2
    assert len(feed.recent()) == 6


async def _no_mcp(scope: object, receive: object, send: object) -> None:
    raise AssertionError("a page path reached the MCP app")


@pytest.mark.anyio
async def test_the_console_shows_per_principal_usage_of_real_calls(tmp_path: Path) -> None:
    document: dict[str, Any] = {
        "mcpServers": {
            "fx": {"type": "memory"},
            # Bob has no credential for `web`: his call there is refused before anything is sent.
            "web": {"url": "http://127.0.0.1:9/mcp", "credentials": {"per_principal": {"alice": "a-secret"}}},
        }
    }
    sink = MemoryAuditSink()
    servers = {"fx": build_server(tmp_path), "web": build_server(tmp_path)}
    async with open_gateway(
        parse_config(document, env={}), audit=sink, memory_servers=servers, console=ConsoleFeed()
    ) as gw:
        await gw.hub.wait_started()
        for caller, tool in [
            ("principal:alice/c1", "fx__echo"),
            ("principal:alice/c1", "web__echo"),
            ("principal:alice", "fx__echo"),
            ("principal:bob/c2", "web__echo"),
            ("c3", "fx__echo"),
        ]:
            await gw.engine.execute(tool, {"text": "hi"}, scope=CallScope(caller))
        app = PathRoutes(_no_mcp, http_pages(gw))
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url="http://gw") as http:
            usage = (await http.get("/ui/api/principals")).json()
    assert [(u["principal"], u["calls"], u["failures"], u["refused"]) for u in usage] == [
        ("alice", 3, 0, 0),
        ("bob", 1, 1, 1),
    ]
    assert all(u["tokens"] > 0 for u in usage if u["principal"] == "alice")
    assert [r.principal for r in sink.records] == ["alice", "alice", "alice", "bob", None]
