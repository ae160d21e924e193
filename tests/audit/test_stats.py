"""Audit reports: TPST, slow tools and token waste from a recorded log, and the commands that print them."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from toolscore import read_audit
from toolscore.audit.stats import compute_stats, parse_since
from toolscore.cli import main

LOG = [
    # two passthrough calls: one solved, one failed; one with a bad estimate
    {
        "tool": "a__x",
        "server": "a",
        "remote_tool": "x",
        "success": True,
        "duration_ms": 10,
        "estimated_tokens": 100,
        "actual_tokens": 100,
    },
    {
        "tool": "a__x",
        "server": "a",
        "remote_tool": "x",
        "success": False,
        "error_kind": "tool_error",
        "duration_ms": 30,
        "estimated_tokens": 100,
        "actual_tokens": 50,
        "violations": ["tools: denied"],
    },
    # a plan of two steps on server b, solved
    {
        "tool": "b__y",
        "server": "b",
        "remote_tool": "y",
        "success": True,
        "duration_ms": 2000,
        "plan_id": "p1",
        "actual_tokens": 250,
    },
    {
        "tool": "b__y",
        "server": "b",
        "remote_tool": "y",
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


def recorded_trajectories(tmp_path: Path) -> Path:
    """Two finished `delegate` tasks: one at 10:00 that called server a, one at 10:05 that called b."""
    path = tmp_path / "trajectories.jsonl"
    rows = []
    for episode, minute, server, reason in (("e1", 0, "a", "answer"), ("e2", 5, "b", "max_turns")):
        ended = datetime(2026, 11, 22, 10, minute, tzinfo=UTC).timestamp()
        rows.append({"type": "start", "episode": episode, "time": ended - 1, "task": "t", "system": "s"})
        rows.append({"type": "turn", "episode": episode, "turn": 1, "A": "", "O": None})
        rows.append(
            {
                "type": "end",
                "episode": episode,
                "time": ended,
                "stop_reason": reason,
                "tokens": 10,
                "calls": {server: 1},
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def loop_report(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, int]:
    assert main(["audit", "stats", *args, "--json"]) == 0
    loop = json.loads(capsys.readouterr().out)["loop"]
    return {"tasks": loop["tasks"], "solved": loop["solved"]}


def test_since_and_server_filter_the_agent_loop_figures_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = ["--file", str(recorded_log(tmp_path)), "--trajectories", str(recorded_trajectories(tmp_path))]
    assert loop_report(capsys, *files) == {"tasks": 2, "solved": 1}
    assert loop_report(capsys, *files, "--server", "a") == {"tasks": 1, "solved": 1}
    assert loop_report(capsys, *files, "--server", "b") == {"tasks": 1, "solved": 0}
    assert loop_report(capsys, *files, "--since", "2026-11-22T10:01:00") == {"tasks": 1, "solved": 0}


def test_a_server_the_log_never_saw_is_named_with_the_ones_it_did(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = recorded_log(tmp_path)
    assert main(["audit", "stats", "--file", str(path), "--server", "nosuch"]) == 1
    printed = capsys.readouterr()
    assert printed.out == ""
    assert "--server 'nosuch': no call to that server in the audit log; servers seen: a, b" in printed.err


def test_the_report_breaks_failures_down_and_says_what_token_estimates_missed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = recorded_log(tmp_path)
    assert compute_stats(read_audit(path), slow_ms=1000).failures_by_kind == {"tool_error": 1}
    assert main(["audit", "stats", "--file", str(path)]) == 0
    out = capsys.readouterr().out
    assert "failures by kind: tool_error 1" in out
    assert "token estimates: 1 of 4 calls used over 20 % more or fewer tokens than predicted" in out
    assert "50 tokens off in all" in out


def test_tail_names_a_tool_as_stats_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = recorded_log(tmp_path)
    assert main(["audit", "tail", "-n", "5", "--file", str(path)]) == 0
    tools = [line.split()[1] for line in capsys.readouterr().out.splitlines()]
    assert tools == ["a__x", "a__x", "b__y", "b__y", "orchestrate"]
    assert main(["audit", "stats", "--file", str(path)]) == 0
    assert re.search(r"^a__x\s", capsys.readouterr().out, re.MULTILINE)


def test_calls_are_counted_per_principal_and_filtered_by_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.jsonl"
    callers = ["principal:alice", "principal:alice/c2", "principal:bob", "c3", None]
    lines = []
    for n, caller in enumerate(callers):
        fields = {"time": f"2026-11-22T10:0{n}:00Z", "call_id": str(n), "phase": "post_execution", "tool": "a__x"}
        fields |= {"server": "a", "success": n != 1, "duration_ms": 1, **({"caller": caller} if caller else {})}
        lines.append(json.dumps(fields))
    path.write_text("\n".join(lines) + "\n")
    stats = compute_stats(read_audit(path), slow_ms=1000)
    assert stats.principals == {"alice": 2, "bob": 1}  # a session alice opened is hers; c3 has none
    alice = compute_stats(read_audit(path), slow_ms=1000, principal="alice")
    assert (alice.calls, alice.failures) == (2, 1)
    assert main(["audit", "stats", "--file", str(path)]) == 0
    assert "calls by principal: alice 2, bob 1" in capsys.readouterr().out
    assert main(["audit", "stats", "--file", str(path), "--principal", "carol"]) == 1
    assert "--principal 'carol': no call of that principal in the audit log; principals seen: alice, bob" in (
        capsys.readouterr().err
    )
