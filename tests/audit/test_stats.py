"""Audit reports: TPST, slow tools and token waste from a recorded log, and the commands that print them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from toolscore import read_audit
from toolscore.audit.stats import compute_stats, parse_since
from toolscore.cli import main

LOG = [
    # two passthrough calls: one solved, one failed; one with a bad estimate
    {"tool": "a__x", "server": "a", "success": True, "duration_ms": 10, "estimated_tokens": 100, "actual_tokens": 100},
    {
        "tool": "a__x",
        "server": "a",
        "success": False,
        "duration_ms": 30,
        "estimated_tokens": 100,
        "actual_tokens": 50,
        "violations": ["tools: denied"],
    },
    # a plan of two steps on server b, solved
    {"tool": "b__y", "server": "b", "success": True, "duration_ms": 2000, "plan_id": "p1", "actual_tokens": 250},
    {
        "tool": "b__y",
        "server": "b",
        "success": True,
        "duration_ms": 4000,
        "plan_id": "p1",
        "actual_tokens": 250,
        "batched": True,
    },
    {
        "tool": "orchestrate",
        "phase": "plan",
        "success": True,
        "duration_ms": 6100,
        "plan_id": "p1",
        "outcome": {"ok": 2},
        "steps": 2,
    },
]


def recorded_log(tmp_path: Path) -> Path:
    path = tmp_path / "audit.jsonl"
    lines = []
    for n, fields in enumerate(LOG):
        fields = {"time": f"2026-11-22T10:0{n}:00Z", "call_id": str(n), "phase": "post_execution", **fields}
        lines.append(json.dumps(fields))
    path.write_text("\n".join(lines) + "\n" + '{"torn": ')
    return path


def test_stats_on_a_recorded_log_give_the_known_figures(tmp_path: Path) -> None:
    stats = compute_stats(read_audit(recorded_log(tmp_path)), slow_ms=1000)
    assert (stats.calls, stats.successes, stats.failures) == (4, 3, 1)
    assert (stats.tasks, stats.solved_tasks, stats.plans) == (3, 2, 1)
    assert stats.tokens == 650 and stats.tpst == 325.0
    assert (stats.violations, stats.batched) == (1, 1)
    assert (stats.wasteful_estimates, stats.wasted_tokens) == (1, 50)
    assert [(t.tool, t.calls, t.failures, t.avg_ms, t.p95_ms) for t in stats.tools] == [
        ("a__x", 2, 1, 20.0, 30.0),
        ("b__y", 2, 0, 3000.0, 4000.0),
    ]
    assert stats.slow_tools == ["b__y"]
    only_a = compute_stats(read_audit(recorded_log(tmp_path)), slow_ms=1000, server="a")
    assert (only_a.calls, only_a.tasks, only_a.plans) == (2, 2, 0)
    later = compute_stats(read_audit(recorded_log(tmp_path)), slow_ms=1000, since=parse_since("2026-11-22T10:02:00"))
    assert later.calls == 2


def test_the_audit_commands_print_the_report_and_skip_a_torn_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = recorded_log(tmp_path)
    assert main(["audit", "stats", "--file", str(path), "--slow-ms", "1000"]) == 0
    stats = capsys.readouterr()
    assert "TPST 325" in stats.out and "skipped a line" in stats.err
    assert re.search(r"b__y\s+2\s+0\s+3000\.0\s+4000\.0\s+500\s+slow", stats.out)
    assert main(["audit", "stats", "--file", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tpst"] == 325.0
    assert main(["audit", "tail", "-n", "2", "--file", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "plan=p1" in lines[1] and "ok=2" in lines[1]
