"""Figures from the audit log: what agents spent and where time went; pure.

Definitions (also in docs/audit.md):

- a **task** is one front call: a passthrough call, or one `orchestrate` plan (its steps are part
  of it). A task is **solved** when it succeeded (for a plan: when its blocks say it did, so a
  failed alternative a `<fallback>` recovered from leaves it solved);
- **TPST**, tokens per solved task: the tokens of every downstream call (arguments + results,
  plan steps included) divided by the number of solved tasks;
- a **slow tool** has a p95 duration above the threshold;
- **token waste**: calls whose tokens the gateway predicted before the call (the arguments plus
  the tool's usual result size) and counted after it differ by more than 20 % (accuracy `min/max`
  below 0.8), and the tokens by which the prediction missed;
- **failures by kind**: the failed calls counted by `error_kind` (`tool_error`, `timeout`, ...).
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from toolscore.audit.sinks import AuditRecord
from toolscore.scope import principal_of

__all__ = ["AuditStats", "ToolStats", "compute_stats", "parse_since"]

PLAN_TOOL = "orchestrate"
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


@dataclass
class ToolStats:
    """One tool's figures."""

    tool: str
    calls: int = 0
    failures: int = 0
    avg_ms: float = 0.0
    p95_ms: float = 0.0
    tokens: int = 0


@dataclass
class AuditStats:
    """The whole report."""

    calls: int = 0
    successes: int = 0
    failures: int = 0
    tasks: int = 0
    solved_tasks: int = 0
    plans: int = 0
    tokens: int = 0
    tpst: float | None = None
    violations: int = 0
    batched: int = 0
    wasteful_estimates: int = 0
    wasted_tokens: int = 0
    slow_threshold_ms: float = 0.0
    tools: list[ToolStats] = field(default_factory=list)
    slow_tools: list[str] = field(default_factory=list)
    failures_by_kind: dict[str, int] = field(default_factory=dict)
    """Failed calls per `error_kind`, most first (`failed` for a record that names none)."""
    servers: list[str] = field(default_factory=list)
    """Every server the log's calls went to (in the time range), sorted: for `--server` to check against."""
    principals: dict[str, int] = field(default_factory=dict)
    """Calls per principal (`caller` of `principal:<name>[/c<n>]`), most first: usage per person
    or agent on an HTTP front with tokens; also what `--principal` checks against."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def parse_since(value: str, *, now: datetime | None = None) -> datetime:
    """`1h`, `30m`, `2d`, `90s`, or an ISO 8601 time (UTC if it names no zone).

    Raises:
        ValueError: anything else.
    """
    match = _RELATIVE.match(value.strip())
    if match:
        return (now or datetime.now(UTC)) - timedelta(**{_UNITS[match.group(2)]: float(match.group(1))})
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))] if ordered else 0.0


def compute_stats(
    records: Iterable[AuditRecord],
    *,
    slow_ms: float,
    since: datetime | None = None,
    server: str | None = None,
    principal: str | None = None,
) -> AuditStats:
    """The report over `records` (optionally from `since`, for one `server`, for one `principal`:
    then plans, whose records name no caller, are counted through their steps only)."""
    stats = AuditStats(slow_threshold_ms=slow_ms)
    durations: dict[str, list[float]] = defaultdict(list)
    per_tool: dict[str, ToolStats] = {}
    kinds: Counter[str] = Counter()
    servers: set[str] = set()
    principals: Counter[str] = Counter()
    for record in records:
        if since is not None and record.time < since:
            continue
        if record.server:
            servers.add(record.server)
        who = principal_of(record.caller)
        if who is not None and not (record.tool == PLAN_TOOL and record.phase == "plan"):
            principals[who] += 1
        if principal is not None and who != principal:
            continue
        if record.tool == PLAN_TOOL and record.phase == "plan":
            if server is None:
                stats.tasks += 1
                stats.plans += 1
                stats.solved_tasks += record.success
            continue
        if server is not None and record.server != server:
            continue
        stats.calls += 1
        stats.successes += record.success
        stats.failures += not record.success
        if not record.success:
            kinds[record.error_kind or "failed"] += 1
        stats.violations += len(record.violations)
        stats.batched += record.batched
        if record.plan_id is None:
            stats.tasks += 1
            stats.solved_tasks += record.success
        tokens = record.actual_tokens or 0
        stats.tokens += tokens
        if record.estimated_tokens and record.actual_tokens:
            low, high = sorted((record.estimated_tokens, record.actual_tokens))
            if low / high < 0.8:
                stats.wasteful_estimates += 1
                stats.wasted_tokens += high - low
        tool = per_tool.setdefault(record.tool, ToolStats(record.tool))
        tool.calls += 1
        tool.failures += not record.success
        tool.tokens += tokens
        durations[record.tool].append(record.duration_ms)
    for name, tool in per_tool.items():
        tool.avg_ms = round(statistics.fmean(durations[name]), 2)
        tool.p95_ms = round(_p95(durations[name]), 2)
    stats.tools = sorted(per_tool.values(), key=lambda t: (-t.calls, t.tool))
    stats.slow_tools = [t.tool for t in stats.tools if t.p95_ms > slow_ms]
    stats.tpst = round(stats.tokens / stats.solved_tasks, 1) if stats.solved_tasks else None
    stats.failures_by_kind = dict(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
    stats.servers = sorted(servers)
    stats.principals = dict(sorted(principals.items(), key=lambda kv: (-kv[1], kv[0])))
    return stats
