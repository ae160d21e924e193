"""Passthrough overhead: the gateway vs. a direct client to the same fixture server, over stdio.

    .venv/bin/python benchmarks/passthrough.py [--rounds 3] [--calls 500]

Both paths use a real `mcp` client over stdio in the handshake era (what Claude Desktop speaks).
"direct" spawns the fixture server; "gateway" spawns `toolscore serve`, which spawns the fixture;
"minimal" is the floor of any SDK-based proxy (benchmarks/minimal_proxy.py: forwarding only).
Rounds alternate direct/gateway so machine noise hits both alike; each figure is the median over
rounds, and the last columns are ratios to direct. Audit logging is on (to a temporary file), as a
user would run it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "fixture_server.py"
TOOLSCORE = str(Path(sys.executable).parent / "toolscore")
MIB = 1 << 20


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Route:
    """One way to reach the fixture server: directly, or through the gateway."""

    def __init__(self, name: str, params: StdioServerParameters, prefix: str) -> None:
        self.name = name
        self.params = params
        self.prefix = prefix

    def tool(self, name: str) -> str:
        return self.prefix + name


async def measure(path: Route, calls: int) -> dict[str, float]:
    out: dict[str, float] = {}
    began = time.perf_counter()
    async with Client(path.params, mode="legacy") as client:
        await client.call_tool(path.tool("echo"), {"text": "warm"})
        out["cold start (s)"] = time.perf_counter() - began
        echo = path.tool("echo")

        latencies = []
        for _ in range(calls):
            t0 = time.perf_counter()
            await client.call_tool(echo, {"text": "hello"})
            latencies.append((time.perf_counter() - t0) * 1000)
        out["sequential p50 (ms)"] = statistics.median(latencies)
        out["sequential p95 (ms)"] = percentile(latencies, 0.95)

        batches, width = 20, 50
        t0 = time.perf_counter()
        for _ in range(batches):
            async with anyio.create_task_group() as tg:
                for _ in range(width):
                    tg.start_soon(client.call_tool, echo, {"text": "hello"})
        out["50-concurrent (calls/s)"] = batches * width / (time.perf_counter() - t0)

        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(client.call_tool, path.tool("sleep"), {"seconds": 0.1})
        out["10 x sleep(100 ms) wall (s)"] = time.perf_counter() - t0

        sizes = []
        for _ in range(5):
            t0 = time.perf_counter()
            result = await client.call_tool(path.tool("large"), {"size": MIB})
            sizes.append(time.perf_counter() - t0)
            assert len(result.content[0].text) == MIB  # type: ignore[union-attr]
        out["1 MiB result (ms)"] = statistics.median(sizes) * 1000
    return out


def gateway_rss_mb(config: Path) -> float:
    """RSS of a gateway process after it served calls, from /proc."""
    import subprocess

    proc = subprocess.Popen(
        [TOOLSCORE, "serve", "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None

    def rpc(msg: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write((json.dumps(msg) + "\n").encode())
        proc.stdin.flush()

    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
    rpc({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
    proc.stdout.readline()
    rpc({"jsonrpc": "2.0", "method": "notifications/initialized"})
    for i in range(1, 201):
        args = {"name": "toolscore_bench__large", "arguments": {"size": 65536 if i % 20 == 0 else 10}}
        rpc({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": args})
        proc.stdout.readline()
    status = Path(f"/proc/{proc.pid}/status").read_text()
    rss_kb = int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])
    proc.stdin.close()
    proc.wait(10)
    proc.stdout.close()
    return rss_kb / 1024


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=500, help="sequential calls per round")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="toolscore-bench-"))
    fixture = StdioServerParameters(command=sys.executable, args=[str(FIXTURE)], env={"FIXTURE_STATE_DIR": str(tmp)})
    config = tmp / "servers.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {"toolscore_bench": fixture.model_dump(include={"command", "args", "env"})},
                "toolscore": {"audit": {"path": str(tmp / "audit.jsonl")}, "log_dir": str(tmp / "logs")},
            }
        )
    )
    minimal = StdioServerParameters(
        command=sys.executable,
        args=[str(Path(__file__).parent / "minimal_proxy.py"), sys.executable, str(FIXTURE)],
        env={"FIXTURE_STATE_DIR": str(tmp)},
    )
    paths = [
        Route("direct", fixture, ""),
        Route("minimal", minimal, ""),
        Route(
            "gateway",
            StdioServerParameters(command=TOOLSCORE, args=["serve", "--config", str(config)]),
            "toolscore_bench__",
        ),
    ]
    results: dict[str, list[dict[str, float]]] = {p.name: [] for p in paths}
    for round_ in range(args.rounds):
        for path in paths if round_ % 2 == 0 else list(reversed(paths)):
            results[path.name].append(await measure(path, args.calls))
            print(f"round {round_ + 1} {path.name}: done", file=sys.stderr)

    print(
        f"\n{'metric':32} {'direct':>10} {'minimal':>10} {'gateway':>10} {'min/dir':>8} {'gw/dir':>7}"
        f"   (median of {args.rounds} rounds)"
    )
    for metric in results["direct"][0]:
        d, m, g = (statistics.median(r[metric] for r in results[name]) for name in ("direct", "minimal", "gateway"))
        print(f"{metric:32} {d:10.3f} {m:10.3f} {g:10.3f} {m / d:8.2f} {g / d:7.2f}")
    print(f"{'gateway RSS after 200 calls (MB)':32} {'':10} {gateway_rss_mb(config):10.1f}")


if __name__ == "__main__":
    anyio.run(main)
