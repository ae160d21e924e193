"""The audit file's hash chain: written by the JSONL sink across rotation, restarts and writers,
and every kind of tampering found by `verify` at the record where it shows."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.conftest import write_config
from toolscore.audit.chain import GENESIS, link, verify
from toolscore.audit.sinks import AuditRecord, JsonlAuditSink, audit_files, audit_lines, read_audit
from toolscore.cli import main


def record(n: int, caller: str | None = "principal:ops/c1") -> AuditRecord:
    return AuditRecord(
        time=datetime(2026, 11, 26, tzinfo=UTC), call_id=f"c{n}", tool="fx__echo", server="fx", caller=caller,
        phase="post_execution", duration_ms=1.0, success=True,
    )  # fmt: skip


def written(path: Path, n: int, **sink: int) -> Path:
    audit = JsonlAuditSink(path, **sink)  # type: ignore[arg-type]
    for i in range(n):
        audit.write(record(i))
    audit.close()
    return path


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def test_each_record_names_the_hash_of_the_one_before(tmp_path: Path) -> None:
    path = written(tmp_path / "audit.jsonl", 3)
    first, second, third = lines(path)
    assert json.loads(first)["prev"] == GENESIS
    assert json.loads(second)["prev"] == link(first)
    assert json.loads(third)["prev"] == link(second)
    assert [r.caller for r in read_audit(path)] == ["principal:ops/c1"] * 3  # who called, on every record
    report = verify(audit_lines(path))
    assert report.whole and report.records == 3 and report.starts_at == GENESIS and report.head == link(third)


def test_a_restart_continues_the_chain(tmp_path: Path) -> None:
    path = written(tmp_path / "audit.jsonl", 2)
    written(path, 2)
    assert verify(audit_lines(path)).records == 4


def test_rotation_carries_the_chain_into_the_next_file(tmp_path: Path) -> None:
    path = written(tmp_path / "audit.jsonl", 12, max_bytes=900, backups=20)
    assert len(audit_files(path)) > 2
    report = verify(audit_lines(path))
    assert report.whole and report.records == 12 and report.starts_at == GENESIS
    newest = audit_files(path)[-1]
    older = audit_files(path)[-2]
    assert json.loads(lines(newest)[0])["prev"] == link(lines(older)[-1])


def test_files_rotated_away_leave_a_chain_that_starts_at_a_record_no_longer_kept(tmp_path: Path) -> None:
    path = written(tmp_path / "audit.jsonl", 12, max_bytes=900, backups=1)
    report = verify(audit_lines(path))
    assert report.whole and 0 < report.records < 12 and report.starts_at not in (None, GENESIS)


def tampered(tmp_path: Path, change: str) -> tuple[str | None, str | None]:
    path = written(tmp_path / "audit.jsonl", 5)
    rows = lines(path)
    if change == "edit":
        rows[2] = rows[2].replace(b'"success":true', b'"success":false')
    elif change == "byte":
        rows[1] = rows[1].replace(b"c1", b"c9")
    elif change == "remove":
        del rows[2]
    elif change == "insert":
        rows.insert(2, rows[1])
    elif change == "swap":
        rows[1], rows[2] = rows[2], rows[1]
    elif change == "truncate":
        rows[3] = rows[3][:40]
    path.write_bytes(b"\n".join(rows) + b"\n")
    report = verify(audit_lines(path))
    return report.broken_at, report.problem


@pytest.mark.parametrize(
    ("change", "line"),
    [("edit", 4), ("byte", 3), ("remove", 3), ("insert", 3), ("swap", 2), ("truncate", 4)],
)
def test_tampering_is_found_at_the_first_record_it_breaks(tmp_path: Path, change: str, line: int) -> None:
    broken_at, problem = tampered(tmp_path, change)
    assert broken_at == f"{tmp_path / 'audit.jsonl'}:{line}", (broken_at, problem)
    assert problem is not None


def test_a_torn_last_line_stays_its_own_line_and_shows_as_a_break(tmp_path: Path) -> None:
    path = written(tmp_path / "audit.jsonl", 2)
    with path.open("ab") as fh:
        fh.write(b'{"time": "2026-11-26T00:00:00Z", "call_')  # a crash mid-write
    written(path, 1)
    rows = lines(path)
    assert len(rows) == 4 and json.loads(rows[3])["prev"] == link(rows[1])  # the torn line is not linked
    report = verify(audit_lines(path))
    assert report.broken_at == f"{path}:3" and report.problem == "not a complete JSON record"
    assert len(read_audit(path)) == 3


def test_two_writers_on_one_file_keep_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    one, two = JsonlAuditSink(path), JsonlAuditSink(path)
    for i in range(6):
        (one if i % 3 else two).write(record(i))
    one.close()
    two.close()
    assert verify(audit_lines(path)).records == 6


def test_a_file_rotated_with_no_backups_kept_never_claims_to_start_the_chain(tmp_path: Path) -> None:
    path = written(tmp_path / "audit.jsonl", 12, max_bytes=900, backups=0)
    assert audit_files(path) == [path]
    report = verify(audit_lines(path))
    assert report.whole and report.starts_at != GENESIS  # the records before it are gone, and it says so
    assert json.loads(lines(path)[0])["prev"] == report.starts_at


def test_two_writers_on_one_file_that_rotates_keep_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    one, two = (JsonlAuditSink(path, max_bytes=900, backups=50) for _ in range(2))
    for i in range(24):  # each rotates the file in turn; the other must follow it to the new one
        (one if i % 3 else two).write(record(i))
    one.close()
    two.close()
    assert len(audit_files(path)) > 4
    report = verify(audit_lines(path))
    assert report.whole and report.records == 24 and report.starts_at == GENESIS


def test_writers_racing_on_one_file_that_rotates_keep_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sinks = [JsonlAuditSink(path, max_bytes=2000, backups=1000) for _ in range(4)]

    def run(sink: JsonlAuditSink, base: int) -> None:
        for i in range(60):
            sink.write(record(base + i))

    threads = [threading.Thread(target=run, args=(sink, n * 100)) for n, sink in enumerate(sinks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for sink in sinks:
        sink.close()
    report = verify(audit_lines(path))
    assert report.whole, report
    assert report.records == 240 and report.starts_at == GENESIS
    assert sorted(r.call_id for r in read_audit(path)) == sorted(f"c{n * 100 + i}" for n in range(4) for i in range(60))


def test_records_before_the_chain_are_counted_apart(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text(record(0).model_dump_json() + "\n" + record(1).model_dump_json() + "\n")
    written(path, 2)
    report = verify(audit_lines(path))
    assert report.whole and (report.unchained, report.records) == (2, 2)
    assert report.starts_at == link(lines(path)[1])


def test_a_record_without_prev_inside_the_chain_is_a_break(tmp_path: Path) -> None:
    path = written(tmp_path / "audit.jsonl", 2)
    with path.open("a") as fh:
        fh.write(record(9).model_dump_json() + "\n")
    report = verify(audit_lines(path))
    assert report.broken_at == f"{path}:3" and report.problem == "a record without `prev`"


def test_a_lone_surrogate_record_is_chained_too(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    audit = JsonlAuditSink(path)
    audit.write(record(0))
    audit.write(record(1).model_copy(update={"tool": "\ud800 lone"}))
    audit.write(record(2))
    audit.close()
    assert verify(audit_lines(path)).records == 3


def test_audit_verify_says_whole_or_names_the_first_broken_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, {})
    path = written(tmp_path / "audit.jsonl", 3)
    assert main(["audit", "verify", "--config", str(config)]) == 0  # the config's file
    out = capsys.readouterr().out
    assert "audit chain whole: 3 records" in out and f"head {link(lines(path)[-1])}" in out
    rows = lines(path)
    path.write_bytes(b"\n".join([rows[0], rows[2]]) + b"\n")
    assert main(["audit", "verify", str(path), "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert f"audit chain broken at {path}:2" in err and "1 records verified before it" in err
    assert main(["audit", "verify", str(tmp_path / "none.jsonl"), "--config", str(config)]) == 1
