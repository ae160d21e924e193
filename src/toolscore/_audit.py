"""Audit records and where they go: one append-only JSON line per downstream call.

The JSONL sink writes each record with a single `os.write` on an `O_APPEND` descriptor before the
call is answered: the kernel has the line once the client sees the answer, so a crash of the
gateway loses nothing already answered, and concurrent writers never interleave within a line.
That costs a few microseconds per call; `fsync` (surviving a power cut) is left to the OS.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

__all__ = ["AuditRecord", "AuditSink", "JsonlAuditSink", "MemoryAuditSink", "NullAuditSink", "read_audit"]


class AuditRecord(BaseModel):
    """What toolscore remembers of one call. Argument *names* always, values only on request."""

    model_config = ConfigDict(frozen=True)

    time: datetime
    call_id: str
    request_id: str | None = None
    """The front client's JSON-RPC request id, when the call came from a client request."""
    plan_id: str | None = None
    """Set on plan steps: the `orchestrate` call they belong to."""
    tool: str
    server: str | None = None
    remote_tool: str | None = None
    phase: str
    """The last phase the call reached."""
    duration_ms: float
    success: bool
    error_kind: str | None = None
    error: str | None = None
    estimated_tokens: int | None = None
    actual_tokens: int | None = None
    violations: tuple[str, ...] = ()
    batched: bool = False
    answered_by: str | None = None
    """A hook that answered in place of the downstream call."""
    argument_names: tuple[str, ...] = ()
    arguments: dict[str, Any] | None = None
    plan_hash: str | None = None
    """On the one record of a whole plan (`tool="orchestrate"`): a hash of the plan text."""
    steps: int | None = None
    outcome: dict[str, int] | None = None
    """Step statuses of a plan and how many ended so."""


class AuditSink(Protocol):
    """Receives every audit record; must not block or raise on the call path."""

    def write(self, record: AuditRecord) -> None: ...

    def close(self) -> None: ...


class NullAuditSink:
    """Discards records (audit file turned off)."""

    def write(self, record: AuditRecord) -> None:
        """Drop the record."""

    def close(self) -> None:
        """Nothing to close."""


class MemoryAuditSink:
    """Keeps records in a list; for tests and embedding."""

    def __init__(self) -> None:
        self.records: list[AuditRecord] = []

    def write(self, record: AuditRecord) -> None:
        """Append the record."""
        self.records.append(record)

    def close(self) -> None:
        """Nothing to close."""


class JsonlAuditSink:
    """Appends one JSON line per record to a file, created private (0600) if missing."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def write(self, record: AuditRecord) -> None:
        """Hand the record's line to the kernel in one write."""
        if self._fd is None:
            return
        os.write(self._fd, (record.model_dump_json(exclude_none=True) + "\n").encode())

    def close(self) -> None:
        """Close the file; later writes are dropped."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_audit(path: str | os.PathLike[str]) -> list[AuditRecord]:
    """Read a JSONL audit file; a torn last line (a crash mid-write) is skipped."""
    records: list[AuditRecord] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                records.append(AuditRecord.model_validate(json.loads(line)))
            except ValueError:
                continue
    return records
