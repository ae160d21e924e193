"""The JSONL audit file: one line per call, private, readable after a crash mid-write."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime
from pathlib import Path

from toolscore import AuditRecord, JsonlAuditSink, read_audit
from toolscore.testing import captured_logs


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


def test_a_full_disk_loses_records_counts_them_and_never_raises(tmp_path: Path) -> None:
    # /dev/full: every write fails with ENOSPC, as on a full disk.
    sink = JsonlAuditSink("/dev/full")
    with captured_logs() as logs:
        sink.write(record(1))  # the call this record is of already ran: the sink must not raise
        sink.write(record(2))
    sink.close()
    assert sink.lost == 2
    errors = [entry for entry in logs if entry["log_level"] == "error"]
    assert len(errors) == 1 and "No space left on device" in errors[0]["error"]  # once per burst


def test_a_rotation_that_fails_keeps_appending_to_the_current_file(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    blocker = tmp_path / "audit.jsonl.1"  # a non-empty directory: renaming the file onto it fails
    blocker.mkdir()
    (blocker / "keep").write_text("x")
    sink = JsonlAuditSink(path, max_bytes=300, backups=1)
    with captured_logs() as logs:
        for n in range(6):
            sink.write(record(n))
    sink.close()
    assert sink.lost == 0
    assert [json.loads(line)["call_id"] for line in path.read_text().splitlines()] == [str(n) for n in range(6)]
    assert any("rotation failed" in entry["event"] for entry in logs)


def test_a_record_holding_a_lone_surrogate_is_written_with_it_replaced(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlAuditSink(path)
    sink.write(record(1).model_copy(update={"arguments": {"text": "a\ud800b"}}))
    sink.close()
    assert sink.lost == 0
    assert json.loads(path.read_text())["arguments"] == {"text": "a\ufffdb"}


def test_a_record_of_checked_fields_is_the_validated_record_and_written_the_same(tmp_path: Path) -> None:
    fields = {
        "time": datetime(2026, 11, 26, 6, 0, 0, 123456, tzinfo=UTC),
        "call_id": "a-1",
        "request_id": "7",
        "caller": "console",
        "plan_id": None,
        "tool": "fx__echo",
        "server": "fx",
        "remote_tool": "echo",
        "phase": "post_execution",
        "duration_ms": 1.234,
        "success": False,
        "error_kind": "tool_error",
        "error": None,
        "estimated_tokens": 30,
        "actual_tokens": 12,
        "violations": ("rule: no",),
        "batched": False,
        "answered_by": None,
        "argument_names": ("text", "n"),
        "arguments": {"text": "caf\u00e9 \U0001f600", "n": None, "deep": {"x": [1, 2.5, True]}},
        "plan_hash": None,
        "steps": None,
        "outcome": {"ok": 2},
    }
    # of_checked takes every field but `principal`, which it derives from `caller` as validation does.
    assert set(fields) | {"principal"} == set(AuditRecord.model_fields)
    checked, validated = AuditRecord.of_checked(**fields), AuditRecord(**fields)
    assert checked == validated
    principal = AuditRecord.of_checked(**{**fields, "caller": "principal:alice/c2"})
    assert principal == AuditRecord(**{**fields, "caller": "principal:alice/c2"})
    assert principal.principal == "alice"
    sink = JsonlAuditSink(tmp_path / "audit.jsonl")
    sink.write(checked)
    sink.close()
    line = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[0])
    assert line.pop("prev") == "0" * 64  # the chain's first link (audit/chain.py)
    assert line == json.loads(validated.model_dump_json(exclude_none=True))
