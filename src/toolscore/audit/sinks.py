"""Audit records and where they go: one append-only JSON line per downstream call.

The JSONL sink writes each record with a single `os.write` on an `O_APPEND` descriptor before the
call is answered: the kernel has the line once the client sees the answer, so a crash of the
gateway loses nothing already answered, and concurrent writers never interleave within a line.
That costs a few microseconds per call; `fsync` (surviving a power cut too) is an option, as is
rotation by size.

Each line carries `"prev"`, the SHA-256 of the line before it (`audit/chain.py`), across rotation
and restarts, so `toolscore audit verify` finds an edited, removed or inserted record. Writers in
several processes take an advisory lock around each append and read the head again when another
one wrote since, so the chain stays one chain.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import msgspec
import structlog
from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticSerializationError

from toolscore._json import scrub_unpaired_surrogates
from toolscore.audit.chain import GENESIS, link
from toolscore.scope import principal_of

__all__ = [
    "AuditRecord",
    "AuditSink",
    "JsonlAuditSink",
    "MemoryAuditSink",
    "NullAuditSink",
    "audit_files",
    "audit_lines",
    "read_audit",
]

log = structlog.get_logger("toolscore.audit")
_encode = msgspec.json.Encoder().encode


class AuditRecord(BaseModel):
    """What toolscore remembers of one call. Argument *names* always, values only on request."""

    model_config = ConfigDict(frozen=True)

    time: datetime
    call_id: str
    request_id: str | None = None
    """The front client's JSON-RPC request id, when the call came from a client request."""
    caller: str | None = None
    """Who called (`toolscore.front.callers`: a connection, session or HTTP principal; `console`
    for the web console), when known."""
    principal: str | None = None
    """The principal of `caller` (`toolscore.scope.principal_of`: `alice` of `principal:alice/c3`),
    derived from it when the record is made; None for a caller without one."""
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

    @model_validator(mode="before")
    @classmethod
    def _derive_principal(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("principal") is None and data.get("caller") is not None:
            return {**data, "principal": principal_of(data["caller"])}
        return data

    @classmethod
    def of_checked(cls, **fields: Any) -> AuditRecord:
        """A record of fields that already have their types, every field given, not validated again.

        The engine builds one per call from its own typed context, where validating the fields
        once more was the largest part of the audit's cost on the call path. The record is the
        one `model_construct` would build, without that function's walk over the fields' defaults.
        """
        if "principal" not in fields:
            fields["principal"] = principal_of(fields.get("caller"))
        record = cls.__new__(cls)
        object.__setattr__(record, "__dict__", fields)
        object.__setattr__(record, "__pydantic_fields_set__", set(fields))
        object.__setattr__(record, "__pydantic_extra__", None)
        object.__setattr__(record, "__pydantic_private__", None)
        return record


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


def _dump_json(record: AuditRecord) -> str:
    try:
        return record.model_dump_json(exclude_none=True)
    except PydanticSerializationError:  # a lone surrogate: replaced, the rest kept
        return scrub_unpaired_surrogates(record).model_dump_json(exclude_none=True)


class JsonlAuditSink:
    """Appends one JSON line per record to a file, created private (0600) if missing.

    Gateways may share the file: each record is written under the file's advisory lock, after the
    last record there. One that finds the file rotated away by another (or rotates it itself) opens
    the file now at `path`, locks it and looks again, so every record goes to the newest file and
    the chain stays one across writers and rotations.

    Args:
        path: The file.
        fsync: Also force each record to disk (survives a power cut; costs a disk flush per call).
        max_bytes: Rotate when the file would grow past this: `audit.jsonl` -> `audit.jsonl.1` -> ...
        backups: Rotated files kept.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, fsync: bool = False, max_bytes: int | None = None, backups: int = 3
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._max_bytes = max_bytes
        self._backups = backups
        self._fd: int | None = self._open()
        self._size, self._head, self._torn = 0, GENESIS, False
        self._head, self._torn = self._read_head(self._fd)
        self.lost = 0
        """Records that could not be written (since the sink was opened)."""
        self._failing = False

    def _open(self) -> int:
        # Read and write: the head of the chain is read back from the file (`_tail`).
        return os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)

    def _read_head(self, fd: int) -> tuple[str, bool]:
        """The chain's head as `fd`'s file holds it (its size noted); for an empty file, the last
        record of the file rotated before it (rotated, then restarted or followed before a record),
        or, where none is kept (`backups: 0`), the head this writer knows: a new file never claims
        to start the chain."""
        self._size = os.fstat(fd).st_size
        if self._size == 0:
            before = self.path.with_name(f"{self.path.name}.1")
            if not before.is_file():
                return self._head, False
            with open(before, "rb") as fh:
                return _tail(fh.fileno(), os.fstat(fh.fileno()).st_size)[0], False
        return _tail(fd, self._size)

    def write(self, record: AuditRecord) -> None:
        """Hand the record's line to the kernel in one write.

        A write that fails (a full disk, a vanished mount) loses the record, not the call, which
        may already have run: it is counted in `lost` and logged once per run of failures.
        """
        if self._fd is None:
            return
        fields = {k: v for k, v in vars(record).items() if v is not None}
        try:
            locked = _lock(self._fd)
            try:
                for _ in range(_TRIES):
                    mine = self._current()
                    if mine is not None and self._append(record, fields, mine.st_size):
                        break
                    locked = _lock(self._fd)  # a new file: lock it, then look again
                else:  # overtaken again and again: kept where it is, not lost (`verify` shows the break)
                    self._append(record, fields, os.fstat(self._fd).st_size, rotate=False)
            finally:
                if locked and self._fd is not None:
                    _unlock(self._fd)
        except OSError as exc:
            self.lost += 1
            if not self._failing:
                self._failing = True
                log.error("audit record lost: writing the audit file failed", path=str(self.path), error=str(exc))
            return
        if self._failing:
            self._failing = False
            log.warning("audit file writable again", path=str(self.path), lost=self.lost)

    def _current(self) -> os.stat_result | None:
        """With the lock held: the descriptor's status while it is still the file at `path` (its size
        then tells `_append` whether another writer appended); if another writer rotated it away,
        the file now there is opened instead (None: the caller locks it)."""
        assert self._fd is not None
        mine = os.fstat(self._fd)
        try:
            at = os.stat(self.path)
        except FileNotFoundError:  # another writer is rotating: open (create) the file it will open
            pass
        else:
            if (at.st_ino, at.st_dev) == (mine.st_ino, mine.st_dev):
                return mine
        self._swap(self._open())
        return None

    def _swap(self, fd: int) -> None:
        """Write to `fd` from now on; its head is read once its lock is held (`_append`)."""
        assert self._fd is not None
        old, self._fd, self._size, self._torn = self._fd, fd, -1, False
        os.close(old)  # its lock goes with it

    def _append(self, record: AuditRecord, fields: dict[str, Any], size: int, *, rotate: bool = True) -> bool:
        """Write the record after the file's last one (True), or rotate the file first and write
        nothing (False: the new file is not locked yet). `size`: the file's, read under the lock."""
        assert self._fd is not None
        if size != self._size:  # another writer appended, or a new file: the head moved
            self._head, self._torn = self._read_head(self._fd)
        try:
            # msgspec writes the JSON `model_dump_json(exclude_none=True)` writes (a float's exponent
            # aside: 1e16 for 1e+16) in a third of the time, on the call's path.
            body = _encode({**fields, "prev": self._head})
        except (TypeError, ValueError):  # a lone surrogate (plan JSON allows "\ud800"), a value msgspec refuses
            body = (_dump_json(record)[:-1] + f',"prev":"{self._head}"}}').encode()
        full = self._max_bytes is not None and self._size and self._size + len(body) + 1 > self._max_bytes
        if full and rotate and self._rotate():
            return False
        line = b"\n" + body + b"\n" if self._torn else body + b"\n"  # a torn last line stays its own line
        written = os.write(self._fd, line)
        self._size += written
        if written != len(line):
            raise OSError(f"short write: {written} of {len(line)} bytes")
        self._head, self._torn = link(body), False
        if self._fsync:
            os.fsync(self._fd)
        return True

    def _rotate(self) -> bool:
        """Shift the backups and open a new file (True); if that fails, keep appending to the current one.

        The open descriptor follows its file through the renames and is swapped only once the new
        file is open, so a failure can never leave writes going to a closed (or reused) descriptor.
        """
        assert self._fd is not None
        try:
            for n in range(self._backups - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{n}")
                if older.exists():
                    older.replace(self.path.with_name(f"{self.path.name}.{n + 1}"))
            if self._backups > 0:
                self.path.replace(self.path.with_name(f"{self.path.name}.1"))
            else:
                self.path.unlink()
            fd = self._open()
        except OSError as exc:
            log.error("audit rotation failed; appending to the current file", path=str(self.path), error=str(exc))
            return False  # the next record past `max_bytes` tries again
        self._swap(fd)  # the head goes on into the new file, read back from the one before it
        return True

    def close(self) -> None:
        """Close the file; later writes are dropped."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


_TAIL_CHUNK = 65536
_TRIES = 64
"""New files (rotated by this writer or another) followed for one record before it is written where it is."""


def _lock(fd: int) -> bool:
    """Take the file's advisory lock (False where the file system has none: one writer assumed)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        return False
    return True


def _unlock(fd: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)


def _tail(fd: int, size: int) -> tuple[str, bool]:
    """The hash of the file's last complete line (`GENESIS` for none), and whether a torn line follows it."""
    if size == 0:
        return GENESIS, False
    torn = os.pread(fd, 1, size - 1) != b"\n"
    end = _last_newline(fd, size)
    if end < 0:
        return GENESIS, torn
    start = _last_newline(fd, end) + 1
    digest = hashlib.sha256()
    for at in range(start, end, _TAIL_CHUNK):  # in chunks: a huge line is never held whole
        digest.update(os.pread(fd, min(_TAIL_CHUNK, end - at), at))
    return digest.hexdigest(), torn


def _last_newline(fd: int, end: int) -> int:
    """The offset of the last newline before `end`, or -1."""
    at = end
    while at > 0:
        start = max(0, at - _TAIL_CHUNK)
        if (found := os.pread(fd, at - start, start).rfind(b"\n")) >= 0:
            return start + found
        at = start
    return -1


def audit_lines(path: str | os.PathLike[str]) -> Iterator[tuple[str, bytes]]:
    """Every line of an audit file and its rotated predecessors, oldest first, as (`file:line`, bytes)."""
    for file in audit_files(path):
        with open(file, "rb") as fh:
            for number, line in enumerate(fh, 1):
                if line.strip():
                    yield f"{file}:{number}", line.rstrip(b"\n")


def audit_files(path: str | os.PathLike[str]) -> list[Path]:
    """The audit file and its rotated predecessors, oldest first."""
    base = Path(path)
    rotated = sorted(
        (p for p in base.parent.glob(f"{base.name}.*") if p.suffix[1:].isdigit()),
        key=lambda p: int(p.suffix[1:]),
        reverse=True,
    )
    return [*rotated, base] if base.exists() else rotated


def read_audit(path: str | os.PathLike[str], *, warn: Callable[[str], None] | None = None) -> list[AuditRecord]:
    """Read an audit file with its rotated predecessors, oldest first.

    A line that does not parse (a crash mid-write leaves a torn last line) is skipped, and
    reported through `warn`.
    """
    records: list[AuditRecord] = []
    for file in audit_files(path):
        with open(file, encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    records.append(AuditRecord.model_validate(json.loads(line)))
                except ValueError:
                    if warn is not None:
                        warn(f"{file}:{number}: skipped a line that is not a complete audit record")
    return records
