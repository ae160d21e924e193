"""The trajectory log: one JSON line per model turn, (S, A, O) plus timings, tokens and stop reasons.

Format (docs/agent-loop.md): a `start` record per episode holds the system prompt and the task;
each `turn` record holds

- `S`: the state as a content hash (`sha256` of the system prompt and every message sent, in
  order) plus a pointer (`episode`, `turn`): the messages themselves are not repeated per turn,
  since the `start` record and the earlier turns' `A` and `O` rebuild them exactly (`replay`
  checks each hash). Storing them whole would make the file quadratic in the task's length;
- `A`: the model's raw text, `<think>` included; `O`: the results injected after it (or null);
- timings, tokens, the model's stop reason and what the loop made of the turn;

and an `end` record holds the episode's outcome. Records are appended on the event loop, as the
audit log's are: a few kilobytes into the page cache cost less than a hop to a worker thread,
which measured 3-8 ms per turn on a loaded 2-core machine.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from toolscore.loop.contract import task_message
from toolscore.loop.models import Message

__all__ = ["Replayed", "TrajectoryLog", "chat_records", "loop_stats", "read_trajectories", "replay", "state_hash"]

log = structlog.get_logger("toolscore.loop")


def state_hash(system: str, messages: Sequence[Message]) -> str:
    """The content hash of what the model was sent."""
    digest = hashlib.sha256()
    digest.update(json.dumps(system).encode("utf-8", "surrogatepass"))
    for m in messages:
        digest.update(b"\n")
        digest.update(json.dumps([m.role, m.content]).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


class TrajectoryLog:
    """Appends records to a JSON Lines file (or nowhere, with no path)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def write(self, record: dict[str, Any]) -> None:
        """Append one record (one `write` of one line, so concurrent tasks' lines never interleave)."""
        if self.path is None:
            return
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab") as f:
                f.write(line.encode("utf-8", "surrogatepass"))
        except OSError as exc:
            # The task's answer matters more than its record: say so in the log, go on.
            log.warning("trajectory record not written", path=str(self.path), error=str(exc))


def read_trajectories(path: Path) -> Iterator[dict[str, Any]]:
    """Every record of a trajectory file; a line that is not a JSON object is skipped."""
    with path.open("rb") as f:
        for raw in f:
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record


@dataclass(frozen=True, slots=True)
class Replayed:
    """An episode rebuilt from its records."""

    episode: str
    system: str
    messages: list[Message]
    outcome: dict[str, Any] | None
    mismatches: list[int]
    """Turns whose recorded state hash differs from the rebuilt messages' (none if intact)."""


def _episodes(records: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_episode: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        if isinstance(record.get("episode"), str):
            by_episode[record["episode"]].append(record)
    return by_episode


def replay(records: Iterable[dict[str, Any]]) -> list[Replayed]:
    """Each episode's conversation, rebuilt from the `start` record and every turn's A and O."""
    out = []
    for episode, rows in _episodes(records).items():
        start = next((r for r in rows if r.get("type") == "start"), None)
        if start is None:
            continue
        system = str(start.get("system", ""))
        messages = [Message("user", task_message(str(start.get("task", ""))))]
        mismatches = []
        for row in rows:
            if row.get("type") != "turn":
                continue
            if state_hash(system, messages) != (row.get("S") or {}).get("sha256"):
                mismatches.append(int(row.get("turn", 0)))
            messages.append(Message("assistant", str(row.get("A", ""))))
            if isinstance(row.get("O"), str):
                messages.append(Message("user", row["O"]))
        end = next((r for r in rows if r.get("type") == "end"), None)
        out.append(Replayed(episode, system, messages, end, mismatches))
    return out


def chat_records(records: Iterable[dict[str, Any]], *, solved_only: bool = False) -> Iterator[dict[str, Any]]:
    """Training-ready conversations (`{"messages": [...]}` per finished episode), `<think>` kept."""
    for episode in replay(records):
        if episode.outcome is None or (solved_only and episode.outcome.get("stop_reason") != "answer"):
            continue
        yield {
            "messages": [{"role": "system", "content": episode.system}]
            + [{"role": m.role, "content": m.content} for m in episode.messages],
            "episode": episode.episode,
            "outcome": episode.outcome.get("stop_reason"),
            "answer": episode.outcome.get("answer"),
        }


def _selected(end: dict[str, Any], since: float | None, server: str | None) -> bool:
    """Whether an episode's `end` record is in the report's time range and, with `server`, called it."""
    ended = end.get("time")
    if since is not None and not (isinstance(ended, int | float) and ended >= since):
        return False
    calls = end.get("calls")
    return server is None or (isinstance(calls, dict) and bool(calls.get(server)))


def loop_stats(
    records: Iterable[dict[str, Any]], *, since: float | None = None, server: str | None = None
) -> dict[str, Any]:
    """Tasks, turns per task, tokens per solved task (TPST) and why the others stopped: of the
    tasks that ended at or after `since` (a Unix time), and that called `server` if one is named."""
    turns: list[int] = []
    tokens_total = 0
    solved = 0
    causes: Counter[str] = Counter()
    for rows in _episodes(records).values():
        end = next((r for r in rows if r.get("type") == "end"), None)
        if end is None or not _selected(end, since, server):
            continue
        turns.append(sum(1 for r in rows if r.get("type") == "turn"))
        tokens_total += int(end.get("tokens") or 0)
        reason = str(end.get("stop_reason"))
        if reason in ("answer", "implicit_answer"):
            solved += 1
        else:
            causes[reason] += 1
    return {
        "tasks": len(turns),
        "solved": solved,
        "turns_per_task": {
            "mean": round(statistics.fmean(turns), 2) if turns else 0.0,
            "median": statistics.median(turns) if turns else 0,
            "max": max(turns, default=0),
        },
        "tpst": round(tokens_total / solved, 1) if solved else None,
        "failure_causes": dict(causes.most_common()),
    }
