"""OpenTelemetry: the span tree of a plan, an HTTP `traceparent` continued, and tracing off by default."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import uvicorn
from mcp import Client
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

from tests.conftest import free_port, memory_gateway
from toolscore import Gateway, MemoryAuditSink
from toolscore.errors import ConfigError
from toolscore.scope import CallScope
from toolscore.telemetry import tracing

pytestmark = pytest.mark.anyio

_EXPORTER = InMemorySpanExporter()


class _Switch(Sampler):
    """Records spans only while a test here runs: the global provider outlives this module."""

    on = False

    def should_sample(self, parent_context: Any, *args: Any, **kwargs: Any) -> SamplingResult:
        return SamplingResult(Decision.RECORD_AND_SAMPLE if self.on else Decision.DROP)

    def get_description(self) -> str:
        return "switch"


_SWITCH = _Switch()


def _provider() -> TracerProvider:
    """The process's provider, ours: the SDK's own server and client spans go to it too (set once per process)."""
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    provider = TracerProvider(sampler=_SWITCH)
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(provider)
    return provider


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    tracing.enable(_provider())
    _EXPORTER.clear()
    _SWITCH.on = True
    try:
        yield _EXPORTER
    finally:
        _SWITCH.on = False
        tracing.disable()
        _EXPORTER.clear()


@pytest.fixture
async def traced_gw(tmp_path: Path, spans: InMemorySpanExporter) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    async with memory_gateway(tmp_path) as pair:
        yield pair


_INIT = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}


def _rpc(request_id: int, method: str, params: dict[str, object]) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def _parent(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> ReadableSpan | None:
    return by_id.get(span.parent.span_id) if span.parent is not None else None


async def test_a_plan_is_one_span_over_its_steps_and_the_context_reaches_the_downstream(
    traced_gw: tuple[Gateway, MemoryAuditSink], spans: InMemorySpanExporter
) -> None:
    gw, _ = traced_gw
    plan = '<parallel><fx><add id="a">{"a": 1, "b": 2}</add></fx><fx><echo id="b">{"text": "hi"}</echo></fx></parallel>'
    async with Client(gw.server) as client:
        result = await client.call_tool("orchestrate", {"plan": plan})
        assert not result.is_error
        bad = await client.call_tool("fx__add", {"a": "not a number"})
        assert bad.is_error
    finished = spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}
    (plan_span,) = [s for s in finished if s.name == "toolscore.plan"]
    calls = [s for s in finished if s.name.startswith("toolscore.call ")]
    steps = [s for s in calls if _parent(s, by_id) is plan_span]
    assert sorted(s.name for s in steps) == ["toolscore.call fx__add", "toolscore.call fx__echo"]
    assert plan_span.attributes is not None
    assert plan_span.attributes["toolscore.steps"] == 2
    assert plan_span.attributes["toolscore.outcome.ok"] == 2
    events = {e.name: dict(e.attributes or {}) for e in plan_span.events}
    assert list(events) == ["toolscore.plan.checked", "toolscore.plan.ran"]
    assert events["toolscore.plan.checked"]["toolscore.steps"] == 2
    assert events["toolscore.plan.ran"] == {"toolscore.completed": True}
    for step in steps:
        attrs = step.attributes or {}
        assert attrs["toolscore.server"] == "fx"
        assert attrs["toolscore.outcome"] == "ok"
        assert attrs["toolscore.plan_id"] == plan_span.attributes["toolscore.plan_id"]
        assert attrs["toolscore.tokens"] > 0
        assert [e.name for e in step.events] == ["pre_execution", "execution", "post_execution"]
        # The SDK's client span under the step, and the downstream server's span under that:
        # the W3C context went along in the request's `_meta`.
        (client_span,) = [s for s in finished if _parent(s, by_id) is step]
        assert client_span.kind is trace.SpanKind.CLIENT
        assert any(_parent(s, by_id) is client_span and s.kind is trace.SpanKind.SERVER for s in finished)
    # The plan span sits under the front's own server span for `tools/call orchestrate`.
    front = _parent(plan_span, by_id)
    assert front is not None and front.name == "tools/call orchestrate"

    (invalid,) = [s for s in calls if _parent(s, by_id) is not plan_span]
    assert (invalid.attributes or {})["toolscore.outcome"] == "invalid_arguments"
    assert [e.name for e in invalid.events] == ["error_handling"]
    assert invalid.status.status_code is trace.StatusCode.ERROR


async def test_a_refused_plan_says_so_on_its_span(
    traced_gw: tuple[Gateway, MemoryAuditSink], spans: InMemorySpanExporter
) -> None:
    async with Client(traced_gw[0].server) as client:
        refused = await client.call_tool("orchestrate", {"plan": '<fx><nope>{"a": 1}</nope></fx>'})
        assert refused.is_error
    (plan_span,) = [s for s in spans.get_finished_spans() if s.name == "toolscore.plan"]
    assert [(e.name, dict(e.attributes or {})) for e in plan_span.events] == [
        ("toolscore.plan.refused", {"toolscore.problems": 1})
    ]
    assert plan_span.status.status_code is trace.StatusCode.ERROR


async def test_the_http_front_continues_an_incoming_traceparent(
    traced_gw: tuple[Gateway, MemoryAuditSink], spans: InMemorySpanExporter
) -> None:
    gw, _ = traced_gw
    port = free_port()
    app = gw.server.streamable_http_app(host="127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    headers = {"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(60):
            while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to await
                await anyio.sleep(0.01)
        # Raw JSON-RPC, as a non-Python client behind a tracing proxy sends it: the trace is in
        # the header only (an SDK client would put its own in `_meta`, which wins).
        async with httpx2.AsyncClient(
            base_url=f"http://127.0.0.1:{port}",
            headers={**headers, "Accept": "application/json, text/event-stream"},
        ) as http:
            init = await http.post("/mcp", json=_rpc(1, "initialize", _INIT))
            session = {"Mcp-Session-Id": init.headers["mcp-session-id"]}
            await http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            answer = await http.post(
                "/mcp",
                json=_rpc(2, "tools/call", {"name": "fx__echo", "arguments": {"text": "echoed-back"}}),
                headers=session,
            )
            assert answer.status_code == 200
            assert "echoed-back" in answer.text
        server.should_exit = True
    (call,) = [s for s in spans.get_finished_spans() if s.name == "toolscore.call fx__echo"]
    assert f"{call.context.trace_id:032x}" == trace_id


async def test_tracing_is_off_without_an_endpoint(tmp_path: Path) -> None:
    assert tracing.enable_from_env({}) is False
    assert tracing.tracer is None
    with tracing.plan_span() as span:
        assert span is None
    async with memory_gateway(tmp_path) as (gw, _), Client(gw.server) as client:
        assert not (await client.call_tool("fx__echo", {"text": "untraced"})).is_error
    assert not any(type(m).__name__ == "TraceparentMiddleware" for m in gw.server.middleware)


def test_an_endpoint_without_the_exporter_installed_is_a_clear_error() -> None:
    try:
        import opentelemetry.exporter.otlp.proto.http  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("the OTLP exporter is installed here")
    with pytest.raises(ConfigError, match=r"OTEL_EXPORTER_OTLP_ENDPOINT is set .* pip install 'toolscore\[otel\]'"):
        tracing.enable_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing.tracer is None


async def test_a_calls_span_names_its_principal(
    traced_gw: tuple[Gateway, MemoryAuditSink], spans: InMemorySpanExporter
) -> None:
    gw, sink = traced_gw
    await gw.engine.execute("fx__echo", {"text": "hi"}, scope=CallScope("principal:alice/c1"))
    await gw.engine.execute("fx__echo", {"text": "hi"}, scope=CallScope("c2"))  # stdio: no principal
    calls = [s for s in spans.get_finished_spans() if s.name == "toolscore.call fx__echo"]
    assert [(s.attributes or {}).get("toolscore.principal") for s in calls] == ["alice", None]
    assert [r.caller for r in sink.records[-2:]] == ["principal:alice/c1", "c2"]
