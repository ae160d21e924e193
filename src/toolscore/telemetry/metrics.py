"""Prometheus metrics from the audit stream: calls, errors, latency and tokens per server and tool; pure.

`CallMetrics` is fed one `AuditRecord` per call (`MetricsSink` puts it in the audit chain) and
renders the Prometheus text exposition format (0.0.4) on demand. It exists only while the HTTP
front serves `/metrics`: a stdio gateway never builds one, so it costs nothing there.

Labels come from tool names, and a client can call any name it likes: a call that never reached
a server is counted under the tool `(unrouted)`, and past `max_series` (server, tool) pairs new
pairs are folded into `(other)`, so a hostile client cannot grow the registry without bound.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from toolscore.audit.sinks import AuditRecord, AuditSink
from toolscore.scope import principal_of

__all__ = [
    "CONTENT_TYPE",
    "DURATION_BUCKETS",
    "OTHER",
    "UNROUTED",
    "CallMetrics",
    "MetricsSink",
    "ServerGauge",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Upper bounds (seconds) of the call duration histogram; +Inf is implied."""
UNROUTED = "(unrouted)"
OTHER = "(other)"
DEFAULT_MAX_SERIES = 2000
DEFAULT_MAX_PRINCIPALS = 200


@dataclass(frozen=True, slots=True)
class ServerGauge:
    """One downstream server as `/metrics` shows it."""

    name: str
    up: bool
    start_seconds: float | None = None
    tools: int = 0


@dataclass(slots=True)
class _Series:
    """The figures of one (server, tool) pair."""

    outcomes: dict[str, int] = field(default_factory=dict)
    buckets: list[int] = field(default_factory=lambda: [0] * len(DURATION_BUCKETS))
    seconds: float = 0.0
    count: int = 0
    tokens: int = 0


class CallMetrics:
    """Counters and histograms over audit records, rendered as Prometheus text.

    Args:
        max_series: The most (server, tool) pairs kept apart; later ones share `(other)`.
    """

    def __init__(self, *, max_series: int = DEFAULT_MAX_SERIES, max_principals: int = DEFAULT_MAX_PRINCIPALS) -> None:
        self._series: dict[tuple[str, str], _Series] = {}
        self._max_series = max_series
        self._principals: dict[tuple[str, str], int] = {}
        """Calls per (principal, outcome): the first `max_principals` principals apart, later ones `(other)`."""
        self._max_principals = max_principals
        self._named: set[str] = set()
        self.records = 0
        """Records observed."""

    def observe(self, record: AuditRecord) -> None:
        """Count one call."""
        self.records += 1
        server = record.server or ""
        tool = record.tool if record.server is not None or record.error_kind is None else UNROUTED
        key = (server, tool)
        series = self._series.get(key)
        if series is None:
            if len(self._series) >= self._max_series:
                key = (server, OTHER)  # bounded: server names come from the config
            series = self._series.setdefault(key, _Series())
        outcome = "ok" if record.success else (record.error_kind or "failed")
        series.outcomes[outcome] = series.outcomes.get(outcome, 0) + 1
        seconds = max(record.duration_ms, 0.0) / 1000
        index = bisect.bisect_left(DURATION_BUCKETS, seconds)
        if index < len(series.buckets):
            series.buckets[index] += 1
        series.seconds += seconds
        series.count += 1
        series.tokens += record.actual_tokens or 0
        principal = principal_of(record.caller)
        if principal is not None:
            if principal not in self._named:
                if len(self._named) < self._max_principals:
                    self._named.add(principal)
                else:
                    principal = OTHER  # bounded: principals come from tokens, not the config
            counted = (principal, "ok" if record.success else "failed")
            self._principals[counted] = self._principals.get(counted, 0) + 1

    def render(self, servers: Iterable[ServerGauge] = (), *, audit_lost: int = 0) -> str:
        """The text exposition of every metric, with `servers` as up/down gauges."""
        out: list[str] = []
        items = sorted(self._series.items())

        _header(out, "toolscore_calls_total", "counter", "Calls through the engine, by outcome (ok or an error kind).")
        for (server, tool), s in items:
            for outcome, n in sorted(s.outcomes.items()):
                out.append(f"toolscore_calls_total{_labels(server=server, tool=tool, outcome=outcome)} {n}")

        _header(out, "toolscore_call_errors_total", "counter", "Calls that did not succeed, by error kind.")
        for (server, tool), s in items:
            for outcome, n in sorted(s.outcomes.items()):
                if outcome != "ok":
                    out.append(f"toolscore_call_errors_total{_labels(server=server, tool=tool, kind=outcome)} {n}")

        name = "toolscore_call_duration_seconds"
        _header(out, name, "histogram", "Call duration, from routing to the audit record.")
        for (server, tool), s in items:
            cumulative = 0
            for bound, n in zip(DURATION_BUCKETS, s.buckets, strict=True):
                cumulative += n
                out.append(f"{name}_bucket{_labels(server=server, tool=tool, le=_number(bound))} {cumulative}")
            out.append(f"{name}_bucket{_labels(server=server, tool=tool, le='+Inf')} {s.count}")
            out.append(f"{name}_sum{_labels(server=server, tool=tool)} {_number(s.seconds)}")
            out.append(f"{name}_count{_labels(server=server, tool=tool)} {s.count}")

        _header(out, "toolscore_tokens_total", "counter", "Tokens of arguments and results (estimated from text).")
        for (server, tool), s in items:
            out.append(f"toolscore_tokens_total{_labels(server=server, tool=tool)} {s.tokens}")

        _header(out, "toolscore_principal_calls_total", "counter", "Calls per principal (HTTP tokens), ok or failed.")
        for (principal, outcome), n in sorted(self._principals.items()):
            out.append(f"toolscore_principal_calls_total{_labels(principal=principal, outcome=outcome)} {n}")

        gauges = sorted(servers, key=lambda g: g.name)
        _header(out, "toolscore_server_up", "gauge", "1 when the downstream server is connected, else 0.")
        for g in gauges:
            out.append(f"toolscore_server_up{_labels(server=g.name)} {int(g.up)}")
        _header(out, "toolscore_server_tools", "gauge", "Tools of the server clients see (after its deny list).")
        for g in gauges:
            out.append(f"toolscore_server_tools{_labels(server=g.name)} {g.tools}")
        _header(out, "toolscore_server_start_seconds", "gauge", "How long the server's last start took.")
        for g in gauges:
            if g.start_seconds is not None:
                out.append(f"toolscore_server_start_seconds{_labels(server=g.name)} {_number(g.start_seconds)}")

        _header(out, "toolscore_audit_lost_total", "counter", "Audit records the sink failed to write.")
        out.append(f"toolscore_audit_lost_total {audit_lost}")
        return "\n".join(out) + "\n"


class MetricsSink:
    """An audit sink that counts every record in `CallMetrics` before passing it on."""

    def __init__(self, inner: AuditSink, metrics: CallMetrics) -> None:
        self._inner = inner
        self._metrics = metrics

    def write(self, record: AuditRecord) -> None:
        """Count the record, then write it (a counting bug never loses the record)."""
        try:
            self._metrics.observe(record)
        finally:
            self._inner.write(record)

    def close(self) -> None:
        """Close the inner sink."""
        self._inner.close()


def _header(out: list[str], name: str, kind: str, help_text: str) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")


def _escape(value: str) -> str:
    # The exposition format escapes exactly these three in label values; a lone surrogate
    # (plan JSON allows one in a name) cannot be encoded, so it is replaced.
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return escaped.encode("utf-8", "replace").decode("utf-8")


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))
