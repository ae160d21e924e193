"""Live scores of tools from the audit stream: recent success, then latency; pure.

Every audit record of a downstream call updates its tool's score; a cancelled call (the loser of
a `first_success` race) and a call refused before it reached the server say nothing about the
server and are ignored. Failures are forgiven with time (`half_life_seconds`), so a tool that a
`fallback` strategy stops reaching after failures is tried first again later.

The board outlives the process (`persist.py`): `snapshot` gives what changed since the last one,
`restore` takes a saved board back. Times are wall-clock seconds, so forgiveness runs on while
the gateway is down, and a score not refreshed for `FORGET_AFTER_SECONDS` is dropped on restore.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from toolscore.audit.sinks import AuditRecord, AuditSink

__all__ = ["FORGET_AFTER_SECONDS", "MAX_SAVED_TOOLS", "ObservingSink", "Scoreboard", "ToolScore"]

T = TypeVar("T")
_ALPHA = 0.5
"""Weight of the newest outcome: three successes in a row undo three failures."""
FORGET_AFTER_SECONDS = 7 * 24 * 3600.0
"""A saved score older than this says too little about the tool today: it is not restored."""
MAX_SAVED_TOOLS = 10_000
"""At most this many tools' scores are restored from one saved board (a hostile file is bounded)."""
_NOT_THE_SERVERS_FAULT = frozenset({"cancelled", "rejected", "invalid_arguments", "tool_not_found"})


@dataclass(slots=True)
class ToolScore:
    """What the audit stream says of one tool."""

    success: float = 1.0
    """Exponentially weighted share of successful calls (1.0 until a call says otherwise)."""
    latency_ms: float | None = None
    """Exponentially weighted duration of its successful calls."""
    at: float = 0.0
    """When the last counted call ended (the clock of the board: wall-clock seconds)."""
    calls: int = 0

    @classmethod
    def from_saved(cls, raw: Any) -> ToolScore | None:
        """A score as `snapshot` saved it; None when anything in it is not what a snapshot writes."""
        if not isinstance(raw, Mapping):
            return None
        success, at = _number(raw.get("success")), _number(raw.get("at"))
        latency = raw.get("latency_ms")
        calls = raw.get("calls")
        if success is None or at is None or not 0.0 <= success <= 1.0:
            return None
        if latency is not None and ((latency := _number(latency)) is None or latency < 0):
            return None
        if not isinstance(calls, int) or isinstance(calls, bool) or calls < 0:
            return None
        return cls(success, latency, at, calls)


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


class Scoreboard:
    """Scores per exposed tool, and the order candidates are tried in."""

    def __init__(self, *, half_life_seconds: float = 300.0, clock: Callable[[], float] = time.time) -> None:
        self._half_life = half_life_seconds
        self._clock = clock
        self._scores: dict[str, ToolScore] = {}
        self._changed: set[str] = set()

    def observe(self, record: AuditRecord) -> None:
        """Count one audit record (records that are not a downstream call's outcome are ignored)."""
        if record.server is None or record.plan_hash is not None or record.error_kind in _NOT_THE_SERVERS_FAULT:
            return
        if record.answered_by is not None:  # a hook answered in the server's place
            return
        current = self.success(record.tool)
        score = self._scores.setdefault(record.tool, ToolScore())
        score.success = current + _ALPHA * (float(record.success) - current)
        if record.success:
            previous = score.latency_ms
            score.latency_ms = (
                record.duration_ms if previous is None else previous + _ALPHA * (record.duration_ms - previous)
            )
        score.at = self._clock()
        score.calls += 1
        self._changed.add(record.tool)

    @property
    def changed(self) -> bool:
        """Whether a score changed since the last snapshot (something new to save)."""
        return bool(self._changed)

    def snapshot(self, *, changed_only: bool = False) -> dict[str, dict[str, Any]]:
        """Every score (or those changed since the last snapshot) as plain JSON values, by tool."""
        tools = sorted(self._changed) if changed_only else sorted(self._scores)
        self._changed.clear()
        return {tool: asdict(self._scores[tool]) for tool in tools}

    def restore(self, saved: Mapping[str, Any]) -> int:
        """Take back a saved board: each score newer than the one held, not older than a week; how many.

        Entries that are not what `snapshot` writes are skipped, so a damaged or hostile file costs
        only its own entries.
        """
        now = self._clock()
        taken = 0
        for tool, raw in list(saved.items())[:MAX_SAVED_TOOLS]:
            score = ToolScore.from_saved(raw)
            if not isinstance(tool, str) or score is None or now - score.at > FORGET_AFTER_SECONDS:
                continue
            held = self._scores.get(tool)
            if held is None or held.at < score.at:
                self._scores[tool] = score
                taken += 1
        return taken

    def get(self, tool: str) -> ToolScore | None:
        """The tool's score, if any of its calls were counted."""
        return self._scores.get(tool)

    def success(self, tool: str) -> float:
        """Its recent success share, its failures forgiven by half every `half_life_seconds`."""
        score = self._scores.get(tool)
        if score is None:
            return 1.0
        age = max(0.0, self._clock() - score.at)
        return 1.0 - (1.0 - score.success) * float(0.5 ** (age / self._half_life))

    def order(self, candidates: Sequence[T], key: Callable[[T], tuple[str, int, int]]) -> list[T]:
        """`candidates` best first: success (in quarters), latency (by doublings), priority, list order.

        `key` gives each candidate's (tool, priority, list order). Coarse steps on purpose: a few
        milliseconds of jitter must not reorder two healthy servers, and the configured priority
        decides between tools the stream cannot tell apart. A tool with no measured latency yet
        counts as fast as the fastest measured one, so it is neither favoured nor starved.
        """

        def bucket(tool: str) -> int | None:
            score = self._scores.get(tool)
            if score is None or score.latency_ms is None:
                return None
            return int(math.log2(max(score.latency_ms, 1.0)))

        keyed = [(key(c), c) for c in candidates]
        buckets = {tool: bucket(tool) for (tool, _, _), _ in keyed}
        known = [b for b in buckets.values() if b is not None]
        fastest = min(known, default=0)

        def rank(item: tuple[tuple[str, int, int], T]) -> tuple[float, int, int, int]:
            (tool, priority, position), _ = item
            latency = buckets[tool]
            return (-round(self.success(tool) * 4) / 4, fastest if latency is None else latency, -priority, position)

        return [c for _, c in sorted(keyed, key=rank)]


class ObservingSink:
    """An audit sink that shows every record to a scoreboard before passing it on."""

    def __init__(self, inner: AuditSink, board: Scoreboard) -> None:
        self._inner = inner
        self._board = board

    def write(self, record: AuditRecord) -> None:
        """Score the record, then write it (a scoring bug never loses the record)."""
        try:
            self._board.observe(record)
        finally:
            self._inner.write(record)

    def close(self) -> None:
        """Close the inner sink."""
        self._inner.close()
