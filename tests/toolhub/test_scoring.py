from __future__ import annotations

from datetime import UTC, datetime

from toolscore.audit.sinks import AuditRecord, MemoryAuditSink
from toolscore.toolhub.scoring import ObservingSink, Scoreboard


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def record(tool: str, ok: bool, ms: float = 10.0, **extra: object) -> AuditRecord:
    fields: dict[str, object] = {
        "time": datetime.now(UTC),
        "call_id": "1",
        "tool": tool,
        "server": tool.split("__")[0],
        "phase": "post_execution",
        "duration_ms": ms,
        "success": ok,
        "error_kind": None if ok else "tool_error",
        **extra,
    }
    return AuditRecord.model_validate(fields)


def order(board: Scoreboard, *tools: tuple[str, int]) -> list[str]:
    entries = [(name, prio, i) for i, (name, prio) in enumerate(tools)]
    return [e[0] for e in board.order(entries, lambda e: e)]


def test_untried_tools_go_by_priority_then_list_order() -> None:
    board = Scoreboard()
    assert order(board, ("a", 0), ("b", 5), ("c", 0)) == ["b", "a", "c"]


def test_failures_move_a_tool_down_and_successes_bring_it_back() -> None:
    board = Scoreboard(clock=Clock())
    for _ in range(2):
        board.observe(record("a__t", False))
        board.observe(record("b__t", True))
    assert order(board, ("a__t", 9), ("b__t", 0)) == ["b__t", "a__t"]
    for _ in range(3):
        board.observe(record("a__t", True))
    assert order(board, ("a__t", 9), ("b__t", 0)) == ["a__t", "b__t"]


def test_failures_are_forgiven_with_time() -> None:
    clock = Clock()
    board = Scoreboard(half_life_seconds=10, clock=clock)
    for _ in range(4):
        board.observe(record("a__t", False))
    assert board.success("a__t") < 0.1
    clock.now += 40  # four half-lives
    assert board.success("a__t") > 0.9
    assert order(board, ("a__t", 9), ("b__t", 0)) == ["a__t", "b__t"]


def test_latency_counts_by_doublings_and_an_unmeasured_tool_is_not_starved() -> None:
    board = Scoreboard(clock=Clock())
    board.observe(record("slow__t", True, ms=400))
    board.observe(record("fast__t", True, ms=20))
    board.observe(record("jitter__t", True, ms=24))
    assert order(board, ("slow__t", 9), ("fast__t", 0), ("jitter__t", 1)) == ["jitter__t", "fast__t", "slow__t"]
    # never measured: as fast as the fastest, so priority and list order decide
    assert order(board, ("fast__t", 0), ("new__t", 0)) == ["fast__t", "new__t"]
    assert order(board, ("fast__t", 0), ("new__t", 1)) == ["new__t", "fast__t"]


def test_records_that_say_nothing_about_the_server_are_ignored() -> None:
    board = Scoreboard(clock=Clock())
    board.observe(record("a__t", False, error_kind="cancelled"))
    board.observe(record("a__t", False, error_kind="rejected"))
    board.observe(record("a__t", False, error_kind="invalid_arguments"))
    board.observe(record("a__t", True, answered_by="single_flight"))
    board.observe(record("orchestrate", False, plan_hash="ab", server=None))
    assert board.get("a__t") is None and board.get("orchestrate") is None
    board.observe(record("a__t", False, error_kind="timeout"))
    score = board.get("a__t")
    assert score is not None and score.calls == 1 and score.success == 0.5


def test_the_observing_sink_scores_and_passes_every_record_on() -> None:
    inner = MemoryAuditSink()
    board = Scoreboard()
    sink = ObservingSink(inner, board)
    sink.write(record("a__t", True, ms=5))
    sink.close()
    assert len(inner.records) == 1 and board.get("a__t") is not None
