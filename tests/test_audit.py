"""The JSONL audit file: one line per call, private, readable after a crash mid-write."""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from toolscore import AuditRecord, JsonlAuditSink, read_audit
from toolscore.audit.stats import compute_stats, parse_since


def record(n: int) -> AuditRecord:
    return AuditRecord(
        time=datetime.now(UTC), call_id=str(n), tool="s__t", phase="post_execution", duration_ms=1.5, success=True
    )


def test_each_record_is_one_line_in_a_private_file(tmp_path: Path) -> None:
    path = tmp_path / "state" / "audit.jsonl"
    sink = JsonlAuditSink(path)
    sink.write(record(1))
    sink.write(record(2))
    # Readable before close: each write is already in the file.
    assert [json.loads(line)["call_id"] for line in path.read_text().splitlines()] == ["1", "2"]
    sink.close()
    sink.write(record(3))  # after close: dropped, not an error
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [r.call_id for r in read_audit(path)] == ["1", "2"]


def test_a_torn_last_line_is_skipped_by_the_reader(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlAuditSink(path)
    sink.write(record(1))
    sink.close()
    with path.open("a") as fh:
        fh.write('{"time": "2026-11-22T00:00:00Z", "call_id": "2", "tool"')
    assert [r.call_id for r in read_audit(path)] == ["1"]


def test_appends_to_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    for n in (1, 2):
        sink = JsonlAuditSink(path)
        sink.write(record(n))
        sink.close()
    assert [r.call_id for r in read_audit(path)] == ["1", "2"]


def test_rotation_keeps_backups_and_the_reader_reads_them_in_order(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlAuditSink(path, max_bytes=400, backups=2, fsync=True)
    for n in range(12):
        sink.write(record(n))
    sink.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]
    assert all(p.stat().st_size <= 400 for p in tmp_path.iterdir())
    call_ids = [int(r.call_id) for r in read_audit(path)]
    assert call_ids == sorted(call_ids) and call_ids[-1] == 11  # oldest dropped, order kept


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


def test_the_audit_commands_print_the_report_and_skip_a_torn_line(tmp_path: Path) -> None:
    path = recorded_log(tmp_path)
    exe = str(Path(sys.executable).parent / "toolscore")
    stats = subprocess.run(
        [exe, "audit", "stats", "--file", str(path), "--slow-ms", "1000"], capture_output=True, text=True, check=False
    )
    assert stats.returncode == 0, stats.stderr
    assert "TPST 325" in stats.stdout and "skipped a line" in stats.stderr
    assert re.search(r"b__y\s+2\s+0\s+3000\.0\s+4000\.0\s+500\s+slow", stats.stdout)
    as_json = subprocess.run(
        [exe, "audit", "stats", "--file", str(path), "--json"], capture_output=True, text=True, check=False
    )
    assert json.loads(as_json.stdout)["tpst"] == 325.0
    tail = subprocess.run(
        [exe, "audit", "tail", "-n", "2", "--file", str(path)], capture_output=True, text=True, check=False
    )
    lines = tail.stdout.splitlines()
    assert len(lines) == 2 and "plan=p1" in lines[1] and "ok=2" in lines[1]
