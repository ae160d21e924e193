"""`/metrics`: the counters over the audit stream, and the HTTP front serving them behind its guard."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.conftest import fixture_entry, http_gateway_process, write_config
from tests.fixtures.fixture_server import build_server
from toolscore._gateway import http_pages, open_gateway
from toolscore.audit.sinks import AuditRecord, MemoryAuditSink
from toolscore.front.console import ConsoleFeed
from toolscore.front.routes import PathRoutes
from toolscore.telemetry.metrics import OTHER, UNROUTED, CallMetrics, MetricsSink, ServerGauge
from toolscore.testing import memory_config

TOKEN = "metrics-test-token-0123456789"


def _record(tool: str, server: str | None, *, ms: float = 3.0, ok: bool = True, kind: str | None = None) -> AuditRecord:
    return AuditRecord(
        time=datetime.now(UTC),
        call_id="c",
        tool=tool,
        server=server,
        phase="post_execution",
        duration_ms=ms,
        success=ok,
        error_kind=kind,
        actual_tokens=10,
    )


def _samples(text: str) -> list[Sample]:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def _value(samples: list[Sample], name: str, **labels: str) -> float:
    found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def test_counters_and_histogram_parse_with_the_prometheus_parser() -> None:
    metrics = CallMetrics()
    metrics.observe(_record("fx__echo", "fx", ms=0.5))
    metrics.observe(_record("fx__echo", "fx", ms=700))
    metrics.observe(_record("fx__fail", "fx", ok=False, kind="tool_error"))
    samples = _samples(metrics.render([ServerGauge("fx", True, 0.25, 3), ServerGauge("down", False)], audit_lost=2))

    assert _value(samples, "toolscore_calls_total", server="fx", tool="fx__echo", outcome="ok") == 2
    assert _value(samples, "toolscore_call_errors_total", server="fx", tool="fx__fail", kind="tool_error") == 1
    assert _value(samples, "toolscore_call_duration_seconds_bucket", tool="fx__echo", le="0.001") == 1
    assert _value(samples, "toolscore_call_duration_seconds_bucket", tool="fx__echo", le="0.5") == 1
    assert _value(samples, "toolscore_call_duration_seconds_bucket", tool="fx__echo", le="1.0") == 2
    assert _value(samples, "toolscore_call_duration_seconds_bucket", tool="fx__echo", le="+Inf") == 2
    assert _value(samples, "toolscore_call_duration_seconds_count", tool="fx__echo") == 2
    assert _value(samples, "toolscore_call_duration_seconds_sum", tool="fx__echo") == pytest.approx(0.7005)
    assert _value(samples, "toolscore_tokens_total", tool="fx__echo") == 20
    assert _value(samples, "toolscore_server_up", server="fx") == 1
    assert _value(samples, "toolscore_server_up", server="down") == 0
    assert _value(samples, "toolscore_server_start_seconds", server="fx") == 0.25
    assert _value(samples, "toolscore_audit_lost_total") == 2


def test_hostile_tool_names_neither_break_the_format_nor_grow_the_series() -> None:
    metrics = CallMetrics(max_series=3)
    # A client may call any name: an unknown one is never routed, so it gets no label of its own.
    for name in ('a"b', "line\nbreak", "back\\slash", "\ud800", "x" * 10_000):
        metrics.observe(_record(name, None, ok=False, kind="tool_not_found"))
    # Routed names come from downstreams: escaped, and past the cap folded into (other).
    for name in ('q"uote', "new\nline", "\\", "é", "five"):
        metrics.observe(_record(name, "fx"))
    samples = _samples(metrics.render())
    calls = [s for s in samples if s.name == "toolscore_calls_total"]
    assert {s.labels["tool"] for s in calls} == {UNROUTED, 'q"uote', "new\nline", OTHER}
    assert _value(samples, "toolscore_calls_total", tool=UNROUTED, outcome="tool_not_found") == 5
    assert _value(samples, "toolscore_calls_total", server="fx", tool=OTHER, outcome="ok") == 3


def test_calls_are_counted_per_principal_within_a_bounded_set() -> None:
    metrics = CallMetrics(max_principals=2)
    for caller, ok in [("principal:alice", True), ("principal:alice/c3", False), ("principal:bob", True)]:
        metrics.observe(_record("echo", "fx", ok=ok).model_copy(update={"caller": caller}))
    for n in range(5):  # principals come from tokens: past the bound they share one label
        metrics.observe(_record("echo", "fx").model_copy(update={"caller": f"principal:p{n}"}))
    metrics.observe(_record("echo", "fx").model_copy(update={"caller": "c1"}))  # no principal: not counted here
    samples = _samples(metrics.render())
    assert _value(samples, "toolscore_principal_calls_total", principal="alice", outcome="ok") == 1
    assert _value(samples, "toolscore_principal_calls_total", principal="alice", outcome="failed") == 1
    assert _value(samples, "toolscore_principal_calls_total", principal="bob", outcome="ok") == 1
    assert _value(samples, "toolscore_principal_calls_total", principal=OTHER, outcome="ok") == 5
    assert {s.labels["principal"] for s in samples if s.name == "toolscore_principal_calls_total"} == {
        "alice",
        "bob",
        OTHER,
    }


def test_the_sink_counts_and_passes_every_record_on() -> None:
    inner = MemoryAuditSink()
    metrics = CallMetrics()
    sink = MetricsSink(inner, metrics)
    sink.write(_record("fx__echo", "fx"))
    sink.close()
    assert len(inner.records) == 1
    assert metrics.records == 1


@pytest.fixture(scope="module")
def http_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A token-guarded HTTP gateway process over the fixture server; yields its base URL."""
    tmp_path: Path = tmp_path_factory.mktemp("metrics")
    config = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    with http_gateway_process(config, env={"TOOLSCORE_TOKEN": TOKEN}) as base:
        yield base


@pytest.mark.e2e
@pytest.mark.anyio
async def test_metrics_count_real_calls_through_the_http_front(http_gateway: str) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(http_gateway + "/mcp", http_client=http)) as client,
    ):
        for _ in range(3):
            assert not (await client.call_tool("fx__echo", {"text": "hi"})).is_error
        assert (await client.call_tool("fx__fail", {"message": "no"})).is_error
        assert (await client.call_tool("fx__nope", {})).is_error
        response = await http.get(http_gateway + "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = _samples(response.text)
    assert _value(samples, "toolscore_calls_total", server="fx", tool="fx__echo", outcome="ok") == 3
    assert _value(samples, "toolscore_call_duration_seconds_count", server="fx", tool="fx__echo") == 3
    assert _value(samples, "toolscore_call_errors_total", tool="fx__fail", kind="tool_error") == 1
    assert _value(samples, "toolscore_calls_total", tool=UNROUTED, outcome="tool_not_found") == 1
    assert _value(samples, "toolscore_tokens_total", tool="fx__echo") > 0
    assert _value(samples, "toolscore_server_up", server="fx") == 1


@pytest.mark.e2e
def test_metrics_sit_behind_the_fronts_guard(http_gateway: str) -> None:
    assert httpx2.get(http_gateway + "/metrics", timeout=60).status_code == 401
    wrong_origin = {"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"}
    assert httpx2.get(http_gateway + "/metrics", headers=wrong_origin, timeout=60).status_code == 403
    ok = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx2.post(http_gateway + "/metrics", headers=ok, timeout=60).status_code == 405


@pytest.mark.anyio
async def test_records_a_sink_drops_itself_are_counted_as_lost(tmp_path: Path) -> None:
    """The audit file (or stream) drops and logs a record it cannot write, without raising:
    /metrics said `toolscore_audit_lost_total 0` while the log said 701 records were lost."""
    # /dev/full takes the open and refuses every write (ENOSPC): a full disk.
    config = memory_config(["fx"], toolscore={"audit": {"path": "/dev/full"}})
    async with (
        open_gateway(config, memory_servers={"fx": build_server(tmp_path)}, metrics=CallMetrics()) as gw,
        Client(gw.server) as client,
    ):
        for _ in range(3):
            assert not (await client.call_tool("fx__echo", {"text": "hi"})).is_error
        page = http_pages(gw)["/metrics"]
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(page), base_url="http://gw") as http:
            response = await http.get("/metrics")
    samples = _samples(response.text)
    assert _value(samples, "toolscore_calls_total", server="fx", tool="fx__echo", outcome="ok") == 3
    assert _value(samples, "toolscore_audit_lost_total") == 3


async def _no_mcp(scope: object, receive: object, send: object) -> None:
    raise AssertionError("a page path reached the MCP app")


@pytest.mark.anyio
async def test_metrics_and_the_console_count_a_servers_tools_after_its_deny_list(tmp_path: Path) -> None:
    """`check` counted after `tools.deny`, /metrics and /ui before it: all now count what clients see."""
    config = memory_config({"fx": {"tools": {"deny": ["echo"]}}})
    async with open_gateway(
        config, memory_servers={"fx": build_server(tmp_path)}, metrics=CallMetrics(), console=ConsoleFeed()
    ) as gw:
        await gw.hub.wait_started()
        listed = sum(1 for t in gw.hub.registry.tools() if t.name.startswith("fx__"))
        downstream = gw.hub.statuses()[0].tools
        assert 0 < listed < downstream  # the deny list took something away
        app = PathRoutes(_no_mcp, http_pages(gw))
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url="http://gw") as http:
            metrics = (await http.get("/metrics")).text
            servers = (await http.get("/ui/api/servers")).json()
    assert _value(_samples(metrics), "toolscore_server_tools", server="fx") == listed
    assert [s["tools"] for s in servers] == [listed]
