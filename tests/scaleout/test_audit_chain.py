"""The shared audit stream is one hash chain across replicas, against the real redis-server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import redis

from toolscore.audit.chain import GENESIS, link, verify
from toolscore.audit.sinks import AuditRecord
from toolscore.state.redis_store import RedisStreamSink, stream_entries

pytestmark = pytest.mark.e2e


def record(n: int) -> AuditRecord:
    return AuditRecord(
        time=datetime.now(UTC), call_id=f"r{n}", tool="fx__echo", server="fx", caller=f"principal:p{n % 2}/c1",
        phase="post_execution", duration_ms=1.0, success=True,
    )  # fmt: skip


@pytest.fixture
def flushed(redis_url: str) -> str:
    redis.Redis.from_url(redis_url).flushdb()
    return redis_url


def test_two_replicas_write_one_chain(flushed: str) -> None:
    one, two = RedisStreamSink(flushed), RedisStreamSink(flushed)
    for n in range(7):
        (one if n % 3 else two).write(record(n))
    one.close()
    two.close()
    assert one.lost == two.lost == 0
    entries = list(stream_entries(flushed))
    report = verify(entries)
    assert report.whole and report.records == 7 and report.starts_at == GENESIS
    assert report.head == link(entries[-1][1])
    assert redis.Redis.from_url(flushed).get("toolscore:audit:head") == report.head.encode()


def test_a_removed_or_forged_entry_breaks_the_chain(flushed: str) -> None:
    sink = RedisStreamSink(flushed)
    for n in range(4):
        sink.write(record(n))
    client = redis.Redis.from_url(flushed)
    ids = [entry_id for entry_id, _ in client.xrange("toolscore:audit")]
    client.xdel("toolscore:audit", ids[1])
    report = verify(stream_entries(flushed))
    assert report.broken_at == f"toolscore:audit {ids[2].decode()}" and report.records == 1
    client.xadd("toolscore:audit", {"r": record(9).model_dump_json()})  # written around the sink: no `prev`
    sink.write(record(10))
    sink.close()
    assert not verify(stream_entries(flushed)).whole


def test_a_trimmed_stream_starts_at_a_record_no_longer_kept(flushed: str) -> None:
    sink = RedisStreamSink(flushed, max_records=1)
    for n in range(300):
        sink.write(record(n))
    sink.close()
    report = verify(stream_entries(flushed))
    assert report.whole and report.records < 300 and report.starts_at != GENESIS
