"""The `<result>` transcript the model reads after a plan ran; pure.

Each step gets one `<result>` in step order with its status and a capped view of its output (head
and tail, entity-escaped, so no output can close the element early or forge another). The caps
are per result and per turn; references still see the full stored result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from toolscore.errors import PlanProblem
from toolscore.plan.run import BlockOutcome, StepRecord

__all__ = ["View", "render_plan_errors", "render_results", "view_of"]

_GAP = "\n…[{n} bytes omitted]…\n"


@dataclass(frozen=True, slots=True)
class View:
    """What the model sees of one step's output."""

    text: str
    truncated: bool


def view_of(text: str, limit: int) -> View:
    """`text` cut to about `limit` bytes: head and tail, with the gap marked."""
    data = text.encode()
    if len(data) <= limit:
        return View(text, False)
    half = max(limit // 2 - 32, 16)
    head = data[:half].decode(errors="ignore")
    tail = data[-half:].decode(errors="ignore")
    return View(head + _GAP.format(n=len(data) - 2 * half) + tail, True)


_PLAIN = frozenset("&<>\"'\n\r\t")
"""The characters `quoteattr` escapes or chooses its quotes by: a value without any is quoted as it is."""


def _quoted(value: str) -> str:
    # Most values (numbers, statuses, names) need no escaping: the same output, without
    # quoteattr's replacements (a step's line has eight attributes).
    return f'"{value}"' if _PLAIN.isdisjoint(value) else quoteattr(value)


def _attrs(values: dict[str, Any]) -> str:
    return "".join(f" {k}={_quoted(str(v))}" for k, v in values.items() if v is not None)


def render_results(
    records: Sequence[StepRecord],
    blocks: Sequence[BlockOutcome],
    *,
    per_result: int,
    per_turn: int,
    warnings: Sequence[str] = (),
    episode: str | None = None,
    budget_expired: bool = False,
    intermediate: frozenset[int] = frozenset(),
) -> tuple[str, list[dict[str, Any]]]:
    """The transcript, and the same per step as structured data.

    Steps in `intermediate` feed later steps of the plan by reference; the model sees an eighth of
    the usual view of them, since their data already went where it was needed. The structured form
    carries a step's value only when it is shown whole: the text holds the view of the others.
    """
    lines: list[str] = []
    if episode is not None:
        lines.append(f"<episode id={quoteattr(episode)} />")
    steps: list[dict[str, Any]] = []
    spent = 0
    for record in records:
        body = record.text if record.status == "ok" or not record.error else record.error
        cap = per_result // 8 if record.step in intermediate else per_result
        room = max(min(cap, per_turn - spent), 256)
        view = view_of(body, room)
        spent += len(view.text.encode())
        attrs: dict[str, Any] = {
            "step": record.step,
            "id": record.id,
            "server": record.server,
            "tool": record.tool,
            "status": record.status,
            "attempts": record.attempts,
            "ms": f"{record.ms:.0f}",
            "bytes": record.bytes,
            "truncated": "true" if view.truncated else None,
        }
        lines.append(f"<result{_attrs(attrs)}>\n{escape(view.text)}\n</result>")
        steps.append(
            {
                "step": record.step,
                "id": record.id,
                "server": record.server,
                "tool": record.tool,
                "status": record.status,
                "ms": round(record.ms, 1),
                "attempts": record.attempts,
                "bytes": record.bytes,
                "truncated": view.truncated,
                "result": None if view.truncated else record.json if record.status == "ok" else view.text,
                "error": record.error,
            }
        )
    for block in blocks:
        block_attrs = _attrs({"block": block.kind, "id": block.id, "status": block.status})
        lines.append(f"<result{block_attrs}>{escape(block.error or '')}</result>")
    if budget_expired:
        lines.append("<warning>the plan's time budget ran out: unfinished steps were cancelled</warning>")
    lines.extend(f"<warning>{escape(w)}</warning>" for w in warnings)
    return "\n".join(lines), steps


def render_plan_errors(problems: Sequence[PlanProblem]) -> str:
    """One `<plan_error>` per problem, naming where it is and what to change."""
    out = []
    for p in problems:
        attrs = {"code": p.code, "step": p.step, "tag": p.tag, "id": p.id, "ref": p.ref, "line": p.line}
        out.append(f"<plan_error{_attrs(attrs)}>{escape(p.message)}</plan_error>")
    out.append("Nothing was run. Fix the plan and send it again.")
    return "\n".join(out)
