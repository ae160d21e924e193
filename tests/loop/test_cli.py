"""`toolscore trajectories export` and the agent-loop part of `toolscore audit stats`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from tests.fixtures.scripted_model import scripted_model
from tests.loop.conftest import loop_gateway
from toolscore.audit.sinks import JsonlAuditSink
from toolscore.cli import main

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


async def two_tasks(tmp_path: Path) -> tuple[Path, Path]:
    """One solved task (2 turns), one stopped by max_turns; the trajectory and audit files."""
    turns = [
        '<think>go</think><fx><echo>{"text": "a"}</echo></fx><execute_tools />',
        "<answer>a</answer>",
        '<fx><echo>{"text": "b"}</echo></fx><execute_tools />',
    ]
    with scripted_model(turns) as model:
        async with loop_gateway(tmp_path, model.url) as (gw, sink), Client(gw.server) as client:
            await client.call_tool("delegate", {"task": "solve a"})
            await client.call_tool("delegate", {"task": "loop", "max_steps": 1})
    audit = JsonlAuditSink(tmp_path / "audit.jsonl")
    for record in sink.records:
        audit.write(record)
    audit.close()
    return tmp_path / "trajectories.jsonl", tmp_path / "audit.jsonl"


async def test_export_chat_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trajectories, _ = await two_tasks(tmp_path)
    out = tmp_path / "chat.jsonl"
    assert main(["trajectories", "export", "--format", "chat-jsonl", "--file", str(trajectories), "-o", str(out)]) == 0
    conversations = [json.loads(line) for line in out.read_text().splitlines()]
    assert [c["outcome"] for c in conversations] == ["answer", "max_turns"]
    solved = conversations[0]["messages"]
    assert [m["role"] for m in solved] == ["system", "user", "assistant", "user", "assistant"]
    assert solved[2]["content"].startswith("<think>go</think>")
    assert solved[4]["content"] == "<answer>a</answer>"  # the stop sequence the endpoint consumed is put back
    capsys.readouterr()
    assert main(["trajectories", "export", "--solved-only", "--file", str(trajectories)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1 and json.loads(printed[0])["answer"] == "a"


async def test_audit_stats_counts_tasks_turns_and_failure_causes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trajectories, audit = await two_tasks(tmp_path)
    capsys.readouterr()
    assert main(["audit", "stats", "--file", str(audit), "--trajectories", str(trajectories), "--json"]) == 0
    loop = json.loads(capsys.readouterr().out)["loop"]
    assert loop["tasks"] == 2 and loop["solved"] == 1
    assert loop["turns_per_task"] == {"mean": 1.5, "median": 1.5, "max": 2}
    assert loop["failure_causes"] == {"max_turns": 1}
    assert loop["tpst"] > 0
    assert main(["audit", "stats", "--file", str(audit), "--trajectories", str(trajectories)]) == 0
    assert "agent loop: tasks 2 (solved 1)" in capsys.readouterr().out


def test_export_without_a_file_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trajectories", "export", "--file", str(tmp_path / "none.jsonl")]) == 1
    assert "no trajectory file" in capsys.readouterr().err
