"""The agent loop with a scripted streaming model: how soon calls start, and what the gateway costs.

    .venv/bin/python benchmarks/loop.py [--repeat 3] [--token-ms 10] [--tool-ms 50]

The model is the scripted OpenAI-compatible server of the tests (tests/fixtures/scripted_model.py)
on loopback, streaming 4-character tokens `--token-ms` apart; the tools are the fixture server's
`sleep` over stdio. A 5-turn task: four turns of calls (two at once, one waiting for a reference)
and an answer. One gateway runs --repeat + 1 tasks in a row; the first is reported apart (it builds
the HTTP client), the figures are medians over the others:

- closing tag -> start: from the moment a call's closing tag has streamed in to the moment the
  call starts (for a call that waits on a reference: to the moment it could start);
- gateway share: wall time minus the time model and tools need at the least, over wall time. The
  least a turn can take is max(the model's stream as the server timed it, for each call: its
  closing tag's time + the tool's own duration), so whatever the gateway adds (parsing, checks,
  the engine, the stdio hop, the HTTP client, the trajectory log) counts as gateway time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.scripted_model import scripted_model  # noqa: E402

from toolscore import MemoryAuditSink, open_gateway, parse_config  # noqa: E402
from toolscore._logging import configure_logging  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "fixture_server.py"


def script(tool_s: float) -> list[str]:
    think = "<think>" + "reading the last results and deciding what to do next " * 2 + "</think>\n"
    sleep = '<fx><sleep id="{id}">{{"seconds": {s}, "tag": "{id}"}}</sleep></fx>\n'
    turns = []
    for n in range(1, 5):
        turns.append(
            think
            + sleep.format(id=f"a{n}", s=tool_s)
            + sleep.format(id=f"b{n}", s=tool_s)
            + f'<fx><echo>{{"text": "a{n} was ${{a{n}.status}}"}}</echo></fx>\n'
            + "<think>that is all for this turn</think>\n<execute_tools />"
        )
    turns.append(think + "<answer>done</answer>")
    return turns


async def tasks(url: str, tmp: Path, n: int) -> list[dict[str, Any]]:
    """Run `n` tasks one after the other through one gateway; each task's wall time and events."""
    fixture = {"command": sys.executable, "args": [str(FIXTURE)], "env": {"FIXTURE_STATE_DIR": str(tmp)}}
    config = parse_config(
        {
            "mcpServers": {"fx": fixture},
            "toolscore": {
                "startup_grace_seconds": None,
                "model": {"provider": "openai-compatible", "url": url, "model": "scripted"},
                "loop": {"trajectories": str(tmp / "t.jsonl"), "episodes_db": str(tmp / "e.sqlite3")},
            },
        }
    )
    out = []
    async with open_gateway(config, audit=MemoryAuditSink(), log_dir=tmp / "logs") as gw:
        await gw.hub.wait_started()
        assert gw.delegator is not None
        for _ in range(n):
            events: list[tuple[str, Any, float]] = []
            began = time.perf_counter()
            result = await gw.delegator(
                {"task": "benchmark"},
                on_event=lambda kind, data, ev=events: ev.append((kind, data, time.perf_counter())),
            )
            wall = time.perf_counter() - began
            assert result.structured_content is not None, result
            assert result.structured_content["stop_reason"] == "answer", result
            out.append({"wall": wall, "events": events})
    return out


def analyse(task: dict[str, Any], stream_s: list[float], tool_s: float) -> tuple[float, list[float]]:
    """(gateway share of wall time, closing tag -> start latencies in ms)."""
    turns: list[list[tuple[str, Any, float]]] = []
    for kind, data, t in task["events"]:
        if kind == "turn_start":
            turns.append([])
        turns[-1].append((kind, data, t))
    least = 0.0
    latencies: list[float] = []
    for n, turn in enumerate(turns):
        start = turn[0][2]
        closes = [t for kind, _, t in turn if kind == "item_closed"]
        starts = [t for kind, _, t in turn if kind == "call_start"]
        # The echo waits for a's result: it could start once a finished.
        ideal_ends = [start + stream_s[n]] + [c + tool_s for c in closes]
        least += max(ideal_ends) - start
        for close, begun in zip(closes[:2], sorted(starts)[:2], strict=False):
            latencies.append((begun - close) * 1000)
    return (task["wall"] - least) / task["wall"], latencies


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--token-ms", type=float, default=10.0)
    parser.add_argument("--tool-ms", type=float, default=50.0)
    args = parser.parse_args()
    configure_logging("warning")
    tool_s = args.tool_ms / 1000
    shares, latencies, walls = [], [], []
    turns = script(tool_s)
    with (
        tempfile.TemporaryDirectory() as d,
        scripted_model(turns * (args.repeat + 1), token_seconds=args.token_ms / 1000) as model,
    ):
        runs = await tasks(model.url, Path(d), args.repeat + 1)
    for n, task in enumerate(runs):
        share, lat = analyse(task, model.stream_seconds[n * len(turns) : (n + 1) * len(turns)], tool_s)
        if n == 0:
            cold = share  # the gateway's first task also builds the HTTP client (its TLS context)
            continue
        shares.append(share)
        latencies += lat
        walls.append(task["wall"])
    lat = sorted(latencies)
    print(f"5-turn task, {args.token_ms:g} ms/token, tools {args.tool_ms:g} ms, {args.repeat} runs")
    print(f"  wall time (median)                 {statistics.median(walls):8.3f} s")
    print(f"  gateway share of wall (median)     {statistics.median(shares) * 100:8.2f} %   (target <= 2 %)")
    print(f"  the same, the gateway's first task {cold * 100:8.2f} %")
    p95 = lat[max(int(len(lat) * 0.95) - 1, 0)]
    print(
        f"  closing tag -> start, ms           p50 {statistics.median(lat):.3f}  p95 {p95:.3f}"
        f"  max {lat[-1]:.3f}   (target <= 5 ms; n={len(lat)})"
    )


if __name__ == "__main__":
    anyio.run(main)
