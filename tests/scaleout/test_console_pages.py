"""The console's and /metrics' routes in process (ASGI), over a gateway with in-memory servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import anyio
import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.fixture_server import build_server
from toolscore._gateway import Gateway, http_pages, open_gateway
from toolscore.audit.sinks import AuditRecord, MemoryAuditSink
from toolscore.front.console import ConsoleFeed
from toolscore.front.routes import PathRoutes
from toolscore.telemetry.metrics import CallMetrics
from toolscore.testing import memory_config

pytestmark = pytest.mark.anyio


async def _fallback(scope: object, receive: object, send: object) -> None:
    raise AssertionError("a page path reached the MCP app")


@pytest.fixture
async def pages(tmp_path: Path) -> AsyncIterator[tuple[Gateway, httpx2.AsyncClient]]:
    config = memory_config(["fx"])
    async with open_gateway(
        config,
        audit=MemoryAuditSink(),
        memory_servers={"fx": build_server(tmp_path)},
        metrics=CallMetrics(),
        console=ConsoleFeed(),
    ) as gw:
        await gw.hub.wait_started()
        app = PathRoutes(_fallback, http_pages(gw))
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url="http://gw") as client:
            yield gw, client


async def test_the_routes_serve_servers_tools_calls_figures_and_metrics(
    pages: tuple[Gateway, httpx2.AsyncClient],
) -> None:
    _, client = pages
    assert (await client.get("/ui")).headers["content-type"].startswith("text/html")
    servers = (await client.get("/ui/api/servers")).json()
    assert [(s["name"], s["state"]) for s in servers] == [("fx", "up")]
    tools = {t["tool"]["name"]: t["server"] for t in (await client.get("/ui/api/tools")).json()}
    assert tools["fx__echo"] == "fx" and tools["orchestrate"] is None
    answer = await client.post("/ui/api/call", json={"tool": "fx__echo", "arguments": {"text": "in process"}})
    assert answer.json()["content"] == [{"type": "text", "text": "in process"}]
    plan = {"tool": "orchestrate", "arguments": {"plan": '<fx><echo id="a">{"text": "p"}</echo></fx>'}}
    assert (await client.post("/ui/api/call", json=plan)).json()["structuredContent"]["steps"]
    bad = await client.post("/ui/api/call", json={"tool": "fx__echo", "arguments": []})
    assert bad.status_code == 400 and "arguments" in bad.json()["error"]
    assert (await client.put("/ui/api/call", json={})).status_code == 405
    stats = (await client.get("/ui/api/stats")).json()
    assert stats["calls"] == 2 and stats["plans"] == 1  # the direct call and the plan's step
    metrics = await client.get("/metrics")
    families = {f.name: f for f in text_string_to_metric_families(metrics.text)}
    assert families["toolscore_server_up"].samples[0].value == 1
    assert (await client.post("/metrics")).status_code == 405


async def test_a_tail_gets_new_records_and_a_full_tail_drops_rather_than_blocks() -> None:
    feed = ConsoleFeed(keep=2)

    def record(n: int) -> AuditRecord:
        return AuditRecord(
            time=datetime.now(UTC), call_id=str(n), tool="t", phase="execution", duration_ms=1, success=True
        )

    seen: list[str] = []

    async def read() -> None:
        async for r in feed.tail(0.5):
            seen.append(r.call_id)

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        await anyio.sleep(0.05)
        for n in range(1000):  # more than a tail buffers: the writer never waits
            feed.observe(record(n))
    assert seen[:3] == ["0", "1", "2"] and len(seen) < 1000
    assert [r.call_id for r in feed.recent()] == ["998", "999"]
    feed.observe(record(1000))  # no tail open any more: nothing to offer it to
    assert [r.call_id for r in feed.recent()] == ["999", "1000"]
