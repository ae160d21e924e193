"""The audit trail's hash chain: each record names the SHA-256 of the record before it; pure.

A record's hash is the SHA-256 of its exact bytes as written (its JSON line without the newline,
or the stream entry's text), so verifying needs no re-serialisation and sees any edit, down to
one byte. Each record carries `"prev"`: the previous record's hash, or `GENESIS` for the first
record of a chain. Rotation carries the chain on: a new file's first record names the last
record of the file before it.

What a chain cannot show: records removed from the end (the last record has no successor to
name it), or a whole chain rewritten by someone who recomputes every hash. `verify` reports the
head, so the head can be kept somewhere the writer of the log cannot reach (docs/security.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["GENESIS", "ChainReport", "link", "verify"]

GENESIS = "0" * 64
"""`prev` of the first record of a chain."""


def link(body: bytes) -> str:
    """The hash a record's successor names: SHA-256 of the record's bytes, in hex."""
    return hashlib.sha256(body).hexdigest()


@dataclass(frozen=True, slots=True)
class ChainReport:
    """What `verify` found."""

    records: int
    """Records checked (on the chain, from its first record to the break or the end)."""
    unchained: int
    """Records before the chain began (written by a version without it): not covered."""
    head: str | None
    """The hash of the last record (None: no record on a chain)."""
    starts_at: str | None
    """`prev` of the first chained record: `GENESIS`, or the hash of a record rotated or trimmed away."""
    broken_at: str | None = None
    """Where the first broken link is (`file:line` or the stream entry), None when whole."""
    problem: str | None = None

    @property
    def whole(self) -> bool:
        """No broken link."""
        return self.broken_at is None


def verify(entries: Iterable[tuple[str, bytes]]) -> ChainReport:
    """Check each record's `prev` against the hash of the record before it, stopping at the first break.

    Args:
        entries: (where, the record's bytes) in the order written, oldest first; `where` names the
            record in the report (`audit.jsonl.1:17`).

    Records without `prev` at the start (an older version wrote them) are counted as unchained;
    once the chain begins, a record without `prev`, one that is not a JSON object, and one whose
    `prev` is not the previous record's hash are each a broken link. The first chained record's
    `prev` cannot be checked (its predecessor may have been rotated away) and is reported.
    """
    unchained = records = 0
    previous: bytes | None = None
    head: str | None = None
    starts_at: str | None = None
    for where, body in entries:
        prev = _prev(body)
        if head is None and starts_at is None:
            if prev is None:
                if _is_record(body):
                    unchained += 1
                    previous = body
                    continue
                return ChainReport(records, unchained, None, None, where, "not a complete JSON record")
            starts_at = prev
            if previous is not None and prev != link(previous):
                return ChainReport(records, unchained, None, prev, where, _mismatch(prev, link(previous)))
        elif prev is None:
            problem = "not a complete JSON record" if not _is_record(body) else "a record without `prev`"
            return ChainReport(records, unchained, head, starts_at, where, problem)
        elif prev != head:
            assert head is not None
            return ChainReport(records, unchained, head, starts_at, where, _mismatch(prev, head))
        records += 1
        head = link(body)
        previous = body
    return ChainReport(records, unchained, head, starts_at)


def _mismatch(prev: str, expected: str) -> str:
    return (
        f"`prev` is {prev[:16]}..., but the record before it hashes to {expected[:16]}...: a record was edited,"
        " removed or inserted here"
    )


def _prev(body: bytes) -> str | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    prev = value.get("prev") if isinstance(value, dict) else None
    return prev if isinstance(prev, str) else None


def _is_record(body: bytes) -> bool:
    try:
        return isinstance(json.loads(body), dict)
    except ValueError:
        return False
