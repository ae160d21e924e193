"""OpenTelemetry spans: one per engine call and one per plan, continuing the caller's trace.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set (`enable_from_env`) or a test hands in a tracer
provider (`enable`). Off, the engine pays one module attribute read per call and `plan_span` is
a shared null context: the OpenTelemetry SDK and exporter are imported only when turned on.

On, the tree for a plan is

    tools/call orchestrate          (the SDK's server span; continues `_meta` or HTTP `traceparent`)
      toolscore.plan                (attributes: plan id, steps, outcome; events: checked or refused, ran)
        toolscore.call fx__add      (one per step; events per phase; server, tool, outcome, tokens)
          tools/call add            (the SDK's client span; its `_meta` carries the context downstream)

The SDK injects the W3C context into every downstream request's `_meta` by itself, and the HTTP
front's `traceparent` header becomes the parent of the SDK's server span (`TraceparentMiddleware`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from toolscore.errors import ConfigError
from toolscore.scope import principal_of

if TYPE_CHECKING:  # imported for real only when tracing is on
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from toolscore._engine import ExecutionContext

__all__ = [
    "ENDPOINT_ENV",
    "CallTracer",
    "TraceparentMiddleware",
    "disable",
    "enable",
    "enable_from_env",
    "plan_attributes",
    "plan_event",
    "plan_span",
    "tracer",
]

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
_NULL = contextlib.nullcontext()


class CallTracer:
    """Opens the spans of engine calls and plans on one OpenTelemetry tracer."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    @contextlib.contextmanager
    def call(self, ctx: ExecutionContext) -> Iterator[None]:
        """The span of one engine call; `ctx.trace` adds an event per phase."""
        from opentelemetry.trace import StatusCode

        with self._tracer.start_as_current_span(
            f"toolscore.call {ctx.tool}", attributes={"toolscore.tool": ctx.tool, "toolscore.call_id": ctx.call_id}
        ) as span:
            ctx.trace = span.add_event
            try:
                yield
            finally:
                ctx.trace = None
                _call_attributes(span, ctx)
                if not ctx.success:
                    span.set_status(StatusCode.ERROR, _outcome(ctx))

    @contextlib.contextmanager
    def plan(self) -> Iterator[Span]:
        """The span of one `orchestrate` call; its steps' call spans are its children."""
        with self._tracer.start_as_current_span("toolscore.plan") as span:
            yield span


def _outcome(ctx: ExecutionContext) -> str:
    if ctx.success:
        return "ok"
    if ctx.cancelled:
        return "cancelled"
    if ctx.error is not None:
        return ctx.error.kind
    return "tool_error" if ctx.result is not None else "failed"


def _call_attributes(span: Span, ctx: ExecutionContext) -> None:
    attributes: dict[str, Any] = {"toolscore.outcome": _outcome(ctx), "toolscore.phase": ctx.phase.value}
    if ctx.server is not None:
        attributes["toolscore.server"] = ctx.server
    if ctx.route is not None:
        attributes["toolscore.remote_tool"] = ctx.route.remote_name
    if ctx.plan_id is not None:
        attributes["toolscore.plan_id"] = ctx.plan_id
    if (principal := principal_of(ctx.scope.caller)) is not None:
        attributes["toolscore.principal"] = principal  # who called, as the audit record says
    if ctx.actual_tokens is not None:
        attributes["toolscore.tokens"] = ctx.actual_tokens
    if ctx.estimated_tokens is not None:
        attributes["toolscore.estimated_tokens"] = ctx.estimated_tokens
    span.set_attributes(attributes)


def plan_attributes(span: Span, answer: Any) -> None:
    """Name the plan's id, episode and step outcomes on its span, from the `orchestrate` answer."""
    structured = getattr(answer, "structured_content", None)
    if getattr(answer, "is_error", False):
        from opentelemetry.trace import StatusCode

        span.set_status(StatusCode.ERROR, "plan refused or failed to check")
    if not isinstance(structured, dict):
        return
    attributes: dict[str, Any] = {}
    for key in ("plan_id", "episode", "completed"):
        if isinstance(structured.get(key), str | bool):
            attributes[f"toolscore.{key}"] = structured[key]
    steps = structured.get("steps")
    if isinstance(steps, list):
        attributes["toolscore.steps"] = len(steps)
        statuses = [s.get("status") for s in steps if isinstance(s, dict)]
        for status in sorted({s for s in statuses if isinstance(s, str)}):
            attributes[f"toolscore.outcome.{status}"] = statuses.count(status)
    span.set_attributes(attributes)


tracer: CallTracer | None = None
"""The tracer of this process, None while tracing is off (the engine reads it per call)."""


def plan_span() -> contextlib.AbstractContextManager[Span | None]:
    """The span of one plan, or a null context while tracing is off."""
    return _NULL if tracer is None else tracer.plan()


def plan_event(name: str, attributes: Mapping[str, str | int | float | bool]) -> None:
    """Mark a stage of the current plan (`checked`, `refused`, `ran`) on its span; nothing while tracing is off."""
    if tracer is None:
        return
    from opentelemetry import trace

    trace.get_current_span().add_event(f"toolscore.plan.{name}", dict(attributes))


def enable(provider: TracerProvider) -> CallTracer:
    """Trace through `provider` from now on (tests pass one with an in-memory exporter)."""
    global tracer
    tracer = CallTracer(provider.get_tracer("toolscore"))
    return tracer


def disable() -> None:
    """Stop opening spans."""
    global tracer
    tracer = None


def enable_from_env(env: Mapping[str, str]) -> bool:
    """Export OTLP over HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set; whether tracing is on.

    The exporter reads the other standard `OTEL_*` variables itself (headers, timeouts,
    `OTEL_SERVICE_NAME`). The provider also becomes the global one, so the SDK's own server and
    client spans go to the same exporter.

    Raises:
        ConfigError: the endpoint is set but the OpenTelemetry SDK or exporter is not installed.
    """
    if not env.get(ENDPOINT_ENV):
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]
            OTLPSpanExporter,
        )
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise ConfigError(
            f"{ENDPOINT_ENV} is set but the OpenTelemetry SDK and OTLP exporter are not installed: "
            "pip install 'toolscore[otel]' (or unset the variable)"
        ) from None
    provider = SdkTracerProvider(resource=Resource.create({"service.name": env.get("OTEL_SERVICE_NAME", "toolscore")}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    enable(provider)
    return True


class TraceparentMiddleware:
    """Makes an HTTP request's W3C `traceparent` header the parent of the SDK's server span.

    The SDK continues a trace only from the request's `_meta`; HTTP clients and proxies send the
    header. Installed ahead of the SDK's own middleware, and only while tracing is on. A `_meta`
    context, when present, still wins (the SDK uses it explicitly).
    """

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        """Run the rest of the chain inside the header's context, if the request has a valid one."""
        from opentelemetry import context, propagate, trace

        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None)
        if headers is None or "traceparent" not in headers:
            return await call_next(ctx)
        carrier = {k: headers[k] for k in ("traceparent", "tracestate") if k in headers}
        try:
            parent = propagate.extract(carrier)
        except (ValueError, TypeError):
            return await call_next(ctx)
        if not trace.get_current_span(parent).get_span_context().is_valid:
            return await call_next(ctx)
        token = context.attach(parent)
        try:
            return await call_next(ctx)
        finally:
            context.detach(token)
