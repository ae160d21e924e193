"""HTTP front overhead: the gateway's streamable HTTP front vs. the fixture server served over HTTP.

    .venv/bin/python benchmarks/http_front.py [--rounds 3] [--calls 500]

Both paths use a real `mcp` client over streamable HTTP in the handshake era (`mode="legacy"`,
what Claude Desktop, Inspector and mcp-remote speak), sequential `echo` calls:
"direct" is the fixture server served over streamable HTTP by the SDK (`fixture_server.py
--http`); "gateway" is `toolscore serve --transport http` with the fixture as its stdio server
(its passthrough calls take the hot path, `front/http_fast.py`). Rounds alternate the order so
machine noise hits both alike; each figure is the median over rounds, the last column the ratio
to direct in the same run. Audit logging is on (to a temporary file), as a user would run it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx2
from _common import free_port, percentile, wait_serving
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "fixture_server.py"
TOOLSCORE = str(Path(sys.executable).parent / "toolscore")
WARM_UP = 20


def start(command: list[str], port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start a server process and wait until it answers HTTP on `port`."""
    process = subprocess.Popen(command, env={**os.environ, **env}, stderr=subprocess.DEVNULL)
    wait_serving(process, port, command[1], 30)
    return process


async def measure(url: str, tool: str, calls: int) -> dict[str, float]:
    out: dict[str, float] = {}
    http = httpx2.AsyncClient(timeout=60)
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
        for _ in range(WARM_UP):
            await client.call_tool(tool, {"text": "warm"})
        latencies = []
        began = time.perf_counter()
        for _ in range(calls):
            t0 = time.perf_counter()
            await client.call_tool(tool, {"text": "hello"})
            latencies.append((time.perf_counter() - t0) * 1000)
        seconds = time.perf_counter() - began
    out["sequential p50 (ms)"] = statistics.median(latencies)
    out["sequential p95 (ms)"] = percentile(latencies, 0.95)
    out["sequential (calls/s)"] = calls / seconds
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=500, help="sequential calls per round")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="toolscore-bench-"))
    env = {"FIXTURE_STATE_DIR": str(tmp)}
    config = tmp / "servers.json"
    server = {"command": sys.executable, "args": [str(FIXTURE)], "env": env}
    config.write_text(
        json.dumps(
            {
                "mcpServers": {"toolscore_bench": server},
                "toolscore": {"audit": {"path": str(tmp / "audit.jsonl")}, "log_dir": str(tmp / "logs")},
            }
        )
    )
    direct_port, gateway_port = free_port(), free_port()
    paths = {
        "direct": ([sys.executable, str(FIXTURE), "--http", str(direct_port)], direct_port, "echo"),
        "gateway": (
            [TOOLSCORE, "serve", "--transport", "http", "--port", str(gateway_port), "--config", str(config)],
            gateway_port,
            "toolscore_bench__echo",
        ),
    }
    processes = [start(command, port, env) for command, port, _ in paths.values()]
    names = list(paths)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    try:
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else list(reversed(names)):
                _, port, tool = paths[name]
                results[name].append(await measure(f"http://127.0.0.1:{port}/mcp", tool, args.calls))
                print(f"round {round_ + 1} {name}: done", file=sys.stderr)
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=20)

    print(f"\n{'metric':26}{'direct':>10}{'gateway':>10}{'gw/dir':>9}   (median of {args.rounds} rounds)")
    for metric in results["direct"][0]:
        direct, gateway = (statistics.median(r[metric] for r in results[name]) for name in names)
        print(f"{metric:26}{direct:10.3f}{gateway:10.3f}{gateway / direct:9.2f}")
    per_round = [g["sequential p50 (ms)"] / d["sequential p50 (ms)"] for d, g in zip(*results.values(), strict=True)]
    print(f"\np50 ratio per round: {', '.join(f'{r:.2f}' for r in per_round)}")


if __name__ == "__main__":
    anyio.run(main)
