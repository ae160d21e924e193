"""Secret redaction: the built-in patterns, extra ones, JSON values, and the audit sink that uses them."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import text
from tests.policy import policy_client
from toolscore import AuditRecord, MemoryAuditSink
from toolscore.policy.redact import REDACTED, RedactingAuditSink, Redactor

pytestmark = pytest.mark.anyio

SECRET = "sk-proj-" + "a1b2c3d4" * 4

LEAKS = [
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", REDACTED),
    ("id AKIAABCDEFGHIJKLMNOP", f"id {REDACTED}"),
    ("ghp_" + "a" * 36, REDACTED),
    ("github_pat_" + "a1" * 15, REDACTED),
    (SECRET, REDACTED),
    ("xoxb-1234567890-abcdef", REDACTED),
    ("AIza" + "b" * 35, REDACTED),
    ("eyJhbGciOiJI.eyJzdWIiOiIx.c2lnbmF0dXJl", REDACTED),
    ("Authorization: Bearer abcdefghijklmnop1234", f"Authorization: Bearer {REDACTED}"),
    ("postgres://admin:hunter22@db:5432/x", f"postgres://admin:{REDACTED}@db:5432/x"),
    ('{"api_key": "0123456789abcdef"}', f'{{"api_key": "{REDACTED}"}}'),
    ("PASSWORD=correct-horse-battery", f"PASSWORD={REDACTED}"),
    # Short values and quoted values with spaces (the pattern once needed 8+ characters, no spaces).
    ("password=hunter2", f"password={REDACTED}"),
    ("db_password = 'correct horse battery'", f"db_password = '{REDACTED}'"),
    ('{"client_secret": "a b"}', f'{{"client_secret": "{REDACTED}"}}'),
    ("password: hunter2", f"password: {REDACTED}"),
    ("user: bob passwd: hunter2 host: db", f"user: bob passwd: {REDACTED} host: db"),
    ("GITHUB_TOKEN=abc", f"GITHUB_TOKEN={REDACTED}"),
    ("Api-Key: k1,", f"Api-Key: {REDACTED},"),
    ("aws_access_key=k", f"aws_access_key={REDACTED}"),
    ("/cb?token=abc&next=2", f"/cb?token={REDACTED}&next=2"),
]


@pytest.mark.parametrize(("leak", "clean"), LEAKS, ids=[c[:12] for c, _ in LEAKS])
def test_each_kind_of_secret_is_redacted_and_only_the_secret_part(leak: str, clean: str) -> None:
    assert Redactor().text(leak) == clean


def test_text_without_secrets_is_left_alone() -> None:
    for harmless in (
        "",
        "plain words",
        "a token of thanks",
        "https://example.com/a:b",
        "Reset your password: click the link below.",
        "The secret is stored in a vault; passwords: many kinds.",
        "max_tokens: 1000, tokens=5, password_hash=x",
    ):
        assert Redactor().text(harmless) == harmless


def cpu_seconds(text: str) -> float:
    """The best CPU seconds of three redactions of `text` (CPU time holds steady on a busy machine)."""
    best = float("inf")
    for _ in range(3):
        began = time.process_time()
        Redactor().text(text)
        best = min(best, time.process_time() - began)
    return best


@pytest.mark.parametrize(
    "unit", ["password:", "password=", "password: '", 'token="', "password:a", "a_", "_secret"], ids=str
)
def test_hostile_text_is_redacted_in_linear_time(unit: str) -> None:
    """Keys without end, quotes never closed: 4x the text takes about 4x the time, never 16x."""
    small = cpu_seconds(unit * 4_000 + "x y")
    large = cpu_seconds(unit * 16_000 + "x y")
    assert large < 5  # a quadratic pattern would take minutes
    if large > 0.02:  # below that the ratio is noise
        assert large / small < 12, (small, large)


def test_extra_patterns_apply_to_every_text() -> None:
    redactor = Redactor([r"ACME-[0-9]{8}", r"order (?P<secret>\d+)"])
    assert redactor.text("ticket ACME-12345678, order 42") == f"ticket {REDACTED}, order {REDACTED}"


def test_json_values_are_redacted_at_any_depth_object_keys_included() -> None:
    value: dict[str, Any] = {"a": [SECRET, {"b": f"x {SECRET}", "n": 1, "ok": None}], SECRET: True}
    assert Redactor().json(value) == {"a": [REDACTED, {"b": f"x {REDACTED}", "n": 1, "ok": None}], REDACTED: True}
    assert Redactor().json(SECRET) == REDACTED


def test_json_without_secrets_is_returned_as_it_is() -> None:
    value = {"a": ["b", {"c": 1.5}]}
    assert Redactor().json(value) is value


def record(**fields: Any) -> AuditRecord:
    return AuditRecord(
        time=datetime.now(UTC), call_id="c", tool="fx__echo", phase="execution", duration_ms=1.0, success=True, **fields
    )


def test_the_audit_sink_redacts_argument_values_and_errors_before_they_are_written() -> None:
    inner = MemoryAuditSink()
    sink = RedactingAuditSink(inner, Redactor())
    plain = record(arguments={"text": "hi"})
    sink.write(plain)
    sink.write(record(arguments={"text": f"key {SECRET}"}, error=f"failed with {SECRET}"))
    sink.write(record())
    sink.close()
    assert inner.records[0] is plain
    assert inner.records[1].arguments == {"text": f"key {REDACTED}"}
    assert inner.records[1].error == f"failed with {REDACTED}"
    assert inner.records[2].arguments is None and inner.records[2].error is None


def test_the_audit_sink_redacts_secrets_in_argument_names_and_violations() -> None:
    inner = MemoryAuditSink()
    sink = RedactingAuditSink(inner, Redactor())
    sink.write(record(argument_names=(SECRET, "path"), violations=(f"paths: argument '{SECRET}' is outside",)))
    assert inner.records[0].argument_names == (REDACTED, "path")
    assert inner.records[0].violations == (f"paths: argument '{REDACTED}' is outside",)


async def test_secrets_are_redacted_in_results_and_in_the_audit(tmp_path: Path) -> None:
    async with policy_client(tmp_path, {"results": {"redact": True}}) as (client, sink):
        result = await client.call_tool("fx__echo", {"text": f"the key is {SECRET}"})
        assert text(result) == f"the key is {REDACTED}"
        structured = await client.call_tool("fx__add", {"a": 1, "b": 2})
        assert structured.structured_content == {"sum": 3}  # nothing secret: untouched
    assert sink.records[0].arguments == {"text": f"the key is {REDACTED}"}
