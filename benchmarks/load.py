"""Load and soak: many concurrent HTTP clients against one `toolscore serve --transport http`.

    .venv/bin/python benchmarks/load.py [--clients 50] [--calls 200] [--soak-seconds 0]

Loopback only, and bounded: the gateway is started here on 127.0.0.1 over the fixture server
(stdio), with audit logging on (to a temporary file) as a user would run it. Phase 1: `--clients`
clients, each its own HTTP session in the handshake era, make `--calls` sequential `echo` calls at
once; it prints errors, p50/p99 latency and calls/s, and a direct stdio client to the same fixture
server in the same run for scale. Phase 2 (`--soak-seconds`): a light, steady load (clients that
connect, call and leave, `--soak-clients` at a time) for that long; then the gateway's resident
memory before and after. A leak shows as RSS growing across the soak, not as the burst's peak.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
from _common import HOST, free_port, percentile, wait_serving
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "fixture_server.py"
TOOLSCORE = str(Path(sys.executable).parent / "toolscore")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Tally:
    """Latencies and errors of every call, across clients."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors: list[str] = []


async def one_client(url: str, calls: int, tally: Tally, *, pause: float = 0.0) -> None:
    """One client session: `calls` sequential echo calls; every failure counted, none raised."""
    try:
        async with (
            httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=60)) as http,
            Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
        ):
            for i in range(calls):
                began = time.perf_counter()
                result = await client.call_tool("fx__echo", {"text": f"call {i}"})
                tally.latencies.append(time.perf_counter() - began)
                if result.is_error:
                    tally.errors.append(str(result.content[0])[:200])
                if pause:
                    await anyio.sleep(pause)
    except Exception as exc:  # a failed session is an error to report, not a crash of the benchmark
        tally.errors.append(f"{type(exc).__name__}: {exc}"[:200])


async def burst(url: str, clients: int, calls: int) -> tuple[Tally, float]:
    tally = Tally()
    began = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(clients):
            tg.start_soon(one_client, url, calls, tally)
    return tally, time.perf_counter() - began


async def direct(calls: int) -> list[float]:
    """The same calls from one client straight to the fixture server (stdio), for scale."""
    params = StdioServerParameters(command=sys.executable, args=[str(FIXTURE)])
    latencies = []
    async with Client(params, mode="legacy") as client:
        for i in range(calls):
            began = time.perf_counter()
            await client.call_tool("echo", {"text": f"call {i}"})
            latencies.append(time.perf_counter() - began)
    return latencies


async def soak(url: str, seconds: float, clients: int, pid: int) -> tuple[Tally, list[tuple[float, float]]]:
    """Clients that connect, make 20 calls 200 ms apart and leave, `clients` at a time, for `seconds`."""
    tally = Tally()
    samples: list[tuple[float, float]] = []
    end = time.monotonic() + seconds

    async def worker() -> None:
        while time.monotonic() < end:
            await one_client(url, 20, tally, pause=0.2)

    async def sample() -> None:
        start = time.monotonic()
        while time.monotonic() < end:
            samples.append((time.monotonic() - start, rss_mib(pid)))
            await anyio.sleep(min(60.0, max(1.0, seconds / 10)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(sample)
        for _ in range(clients):
            tg.start_soon(worker)
    return tally, samples


def start_gateway(tmp: Path, port: int) -> subprocess.Popen[bytes]:
    config = tmp / "servers.json"
    fixture = {"command": sys.executable, "args": [str(FIXTURE)], "env": {"FIXTURE_STATE_DIR": str(tmp)}}
    settings = {
        "audit": {"path": str(tmp / "audit.jsonl")},
        "log_dir": str(tmp / "logs"),
        "startup_grace_seconds": None,
    }
    config.write_text(json.dumps({"mcpServers": {"fx": fixture}, "toolscore": settings}))
    argv = [TOOLSCORE, "serve", "--transport", "http", "--host", HOST, "--port", str(port), "--config", str(config)]
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    wait_serving(proc, port, "the gateway", 60)
    return proc


def report(name: str, tally: Tally, seconds: float | None = None) -> dict[str, Any]:
    ms = [v * 1000 for v in tally.latencies]
    row: dict[str, Any] = {
        "phase": name,
        "calls": len(ms),
        "errors": len(tally.errors),
        "p50 ms": round(percentile(ms, 0.5), 2),
        "p99 ms": round(percentile(ms, 0.99), 2),
    }
    if seconds:
        row["calls/s"] = round(len(ms) / seconds)
    return row


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50, choices=range(1, 501), metavar="1..500")
    parser.add_argument("--calls", type=int, default=200, choices=range(1, 10_001), metavar="1..10000")
    parser.add_argument("--soak-seconds", type=float, default=0.0, help="0 to skip the soak (at most 3600)")
    parser.add_argument("--soak-clients", type=int, default=5, choices=range(1, 101), metavar="1..100")
    args = parser.parse_args()
    if not 0 <= args.soak_seconds <= 3600:
        parser.error("--soak-seconds must be between 0 and 3600")
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        port = free_port()
        proc = start_gateway(tmp, port)
        url = f"http://{HOST}:{port}/mcp"
        try:
            await burst(url, 2, 20)  # warm-up: imports, first sessions
            rss_start = rss_mib(proc.pid)
            tally, seconds = await burst(url, args.clients, args.calls)
            rss_burst = rss_mib(proc.pid)
            base = Tally()
            base.latencies = await direct(min(args.calls, 500))
            rows = [
                report(f"{args.clients} clients x {args.calls} calls", tally, seconds),
                report("direct, 1 client", base),
            ]
            ratio = rows[0]["p50 ms"] / rows[1]["p50 ms"]
            print(f"gateway pid {proc.pid}, RSS {rss_start:.1f} MiB before the burst, {rss_burst:.1f} MiB after")
            for row in rows:
                print("  ".join(f"{k}: {v}" for k, v in row.items()))
            print(f"p50 under load / direct p50: {ratio:.1f}x")
            for error in sorted(set(tally.errors))[:5]:
                print("  error:", error)
            if args.soak_seconds:
                await anyio.sleep(2)
                rss_before = rss_mib(proc.pid)
                soaked, samples = await soak(url, args.soak_seconds, args.soak_clients, proc.pid)
                await anyio.sleep(5)  # let closed sessions be dropped
                rss_after = rss_mib(proc.pid)
                print("  ".join(f"{k}: {v}" for k, v in report(f"soak {args.soak_seconds:g} s", soaked).items()))
                print("RSS during the soak (s, MiB):", ", ".join(f"{t:.0f}: {m:.1f}" for t, m in samples))
                growth = rss_after - rss_before
                print(f"RSS before the soak {rss_before:.1f} MiB, after {rss_after:.1f} MiB: {growth:+.1f} MiB")
                for error in sorted(set(soaked.errors))[:5]:
                    print("  error:", error)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    anyio.run(main)
