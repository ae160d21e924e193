"""HTTP front overhead: the gateway's streamable HTTP front vs. the fixture server served over HTTP.

    .venv/bin/python benchmarks/http_front.py [--rounds 3] [--calls 500]
    .venv/bin/python benchmarks/http_front.py --sessions 1,8,32,128 --eras legacy,2026 [--rounds 3] [--seconds 2]

Both paths use a real `mcp` client over streamable HTTP: "direct" is the fixture server served over
streamable HTTP by the SDK (`fixture_server.py --http`); "gateway" is `toolscore serve --transport
http` with the fixture as its stdio server (its passthrough calls take the hot paths,
`front/http_fast.py` for the handshake era, `front/http_modern.py` for 2026-07-28). Rounds
alternate the order so machine noise hits both alike; each figure is the median over rounds, the
last column the ratio to direct in the same run. Audit logging is on (to a temporary file), as a user would run it.

Without `--sessions`: one handshake-era client (`mode="legacy"`, what Claude Desktop, Inspector
and mcp-remote speak) in this process, sequential `echo` calls after 20 warm-up calls.

With `--sessions`: for each era (`legacy`: the 2025-11-25 handshake; `2026`: the 2026-07-28 era,
adopted directly as `mode="2026-07-28"`, what the Python SDK's default `auto` settles on) and each
session count N, N concurrent sessions, each its own `Client` on its own `httpx` client (as N
separate agents would be), each making sequential `echo` calls for `--seconds` after a few warm-up
calls. The clients run in a worker process of their own, so the server tree's CPU time (the
process and every descendant, from /proc) counts no client work; the worker's own CPU per call is
reported beside it, and so is the server process's alone (for the gateway: its own cost, without
the stdio server behind it; for the direct server the same as its tree). On a small machine the
clients still compete with the servers for the same cores, so throughput at many sessions is partly
the client's limit: compare the ratio, in the same run, not the absolute figures.
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
from collections import defaultdict
from pathlib import Path

import anyio
import httpx2
from _common import free_port, percentile, wait_serving
from _common import processes as live_processes
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "fixture_server.py"
TOOLSCORE = str(Path(sys.executable).parent / "toolscore")
WARM_UP = 20
SESSION_WARM_UP = 5
"""Calls each concurrent session makes before the measured window (its connection and the
gateway's per-session state are warm by then)."""
ERAS = {"legacy": "legacy", "2026": "2026-07-28"}
"""`--eras` names -> the `mode` a `Client` is opened with."""


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


def tree_cpu(top: int) -> float:
    """CPU seconds so far of process `top` and every descendant."""
    processes = live_processes()
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (parent, _) in processes.items():
        children[parent].append(pid)
    cpu, todo = 0.0, [top]
    while todo:
        pid = todo.pop()
        cpu += processes[pid][1] if pid in processes else 0.0
        todo.extend(children[pid])
    return cpu


def process_cpu(pid: int) -> float:
    """CPU seconds so far of process `pid` alone: the gateway's own, without its servers."""
    found = live_processes().get(pid)
    return found[1] if found is not None else 0.0


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


async def concurrent(url: str, tool: str, sessions: int, mode: str, seconds: float, server: int) -> dict[str, float]:
    """`sessions` clients at once, each sequential `tool` calls for `seconds`; CPU of both sides."""
    latencies: list[float] = []
    ready, finished = 0, 0
    all_ready, go, all_done, close = anyio.Event(), anyio.Event(), anyio.Event(), anyio.Event()
    deadline = 0.0

    async def session() -> None:
        nonlocal ready, finished
        http = httpx2.AsyncClient(timeout=120)
        async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            for _ in range(SESSION_WARM_UP):
                await client.call_tool(tool, {"text": "warm"})
            ready += 1
            if ready == sessions:
                all_ready.set()
            await go.wait()
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                result = await client.call_tool(tool, {"text": "hello"})
                latencies.append((time.perf_counter() - t0) * 1000)
                if result.is_error:  # a failing path must not pass for a fast one
                    raise RuntimeError(f"{url}: {result.content}")
            finished += 1
            if finished == sessions:
                all_done.set()
            await close.wait()  # every session stays open until the window closes: closing is not measured

    out: dict[str, float] = {}
    async with anyio.create_task_group() as tg:
        for _ in range(sessions):
            tg.start_soon(session)
        await all_ready.wait()
        server_before, client_before, top_before = tree_cpu(server), own_cpu(), process_cpu(server)
        began = time.perf_counter()
        deadline = began + seconds
        go.set()
        await all_done.wait()
        elapsed = time.perf_counter() - began
        server_after, client_after, top_after = tree_cpu(server), own_cpu(), process_cpu(server)
        close.set()
    calls = len(latencies)
    out["calls/s"] = calls / elapsed
    out["p50 (ms)"] = statistics.median(latencies)
    out["p95 (ms)"] = percentile(latencies, 0.95)
    out["server tree CPU per call (ms)"] = (server_after - server_before) * 1000 / calls
    out["server process CPU per call (ms)"] = (top_after - top_before) * 1000 / calls
    out["client CPU per call (ms)"] = (client_after - client_before) * 1000 / calls
    out["calls"] = calls
    return out


def worker() -> None:
    """The clients' process: one JSON job a line on stdin, one JSON result a line on stdout."""
    for line in sys.stdin:
        job = json.loads(line)
        result = anyio.run(
            concurrent,
            job["url"],
            job["tool"],
            job["sessions"],
            job["mode"],
            job["seconds"],
            job["server"],
            backend_options={"use_uvloop": True},  # the clients' own cost kept small: they share the cores
        )
        print(json.dumps(result), flush=True)


def gateway_config(tmp: Path, env: dict[str, str]) -> Path:
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
    return config


def servers() -> tuple[dict[str, tuple[list[str], int, str]], dict[str, str]]:
    """The two paths (command, port, tool name) and the environment they run with."""
    tmp = Path(tempfile.mkdtemp(prefix="toolscore-bench-"))
    env = {"FIXTURE_STATE_DIR": str(tmp)}
    config = gateway_config(tmp, env)
    direct_port, gateway_port = free_port(), free_port()
    paths = {
        "direct": ([sys.executable, str(FIXTURE), "--http", str(direct_port)], direct_port, "echo"),
        "gateway": (
            [TOOLSCORE, "serve", "--transport", "http", "--port", str(gateway_port), "--config", str(config)],
            gateway_port,
            "toolscore_bench__echo",
        ),
    }
    return paths, env


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def sessions_main(args: argparse.Namespace) -> None:
    counts = [int(n) for n in args.sessions.split(",")]
    eras = args.eras.split(",")
    unknown = set(eras) - set(ERAS)
    if unknown:
        raise SystemExit(f"unknown era(s) {', '.join(sorted(unknown))}: pick from {', '.join(ERAS)}")
    paths, env = servers()
    print(f"load average at the start: {load()} ({os.cpu_count()} cores)", file=sys.stderr)
    began, cpu_began = time.perf_counter(), os.times()
    started = {name: start(command, port, env) for name, (command, port, _) in paths.items()}
    client = subprocess.Popen(
        [sys.executable, __file__, "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert client.stdin is not None and client.stdout is not None
    names = list(paths)
    results: dict[tuple[str, int, str], list[dict[str, float]]] = defaultdict(list)
    try:
        for round_ in range(args.rounds):
            for era in eras:
                for index, count in enumerate(counts):
                    flip = (round_ + index) % 2 == 1
                    for name in reversed(names) if flip else names:
                        _, port, tool = paths[name]
                        job = {
                            "url": f"http://127.0.0.1:{port}/mcp",
                            "tool": tool,
                            "sessions": count,
                            "mode": ERAS[era],
                            "seconds": args.seconds,
                            "server": started[name].pid,
                        }
                        client.stdin.write(json.dumps(job) + "\n")
                        client.stdin.flush()
                        line = client.stdout.readline()
                        if not line:
                            raise SystemExit(f"the client worker exited ({era}, {count} sessions, {name})")
                        results[era, count, name].append(json.loads(line))
                print(f"round {round_ + 1} {era}: done (load {load()})", file=sys.stderr)
    finally:
        client.stdin.close()
        client.wait(timeout=60)
        for process in started.values():
            process.terminate()
            process.wait(timeout=20)

    def median(era: str, count: int, name: str, metric: str) -> float:
        return statistics.median(r[metric] for r in results[era, count, name])

    metrics = [
        ("calls/s", "calls/s"),
        ("p50 (ms)", "p50 ms"),
        ("p95 (ms)", "p95 ms"),
        ("server tree CPU per call (ms)", "server CPU/call ms"),
        ("server process CPU per call (ms)", "top process CPU/call"),
        ("client CPU per call (ms)", "client CPU/call ms"),
    ]
    for era in eras:
        print(
            f"\n{era} ({ERAS[era]}), {args.seconds:g} s a window, median of {args.rounds} rounds:"
            " direct, gateway, gw/dir"
        )
        print(f"{'sessions':>8}" + "".join(f"{label:>31}" for _, label in metrics))
        for count in counts:
            cells = []
            for metric, _ in metrics:
                direct, gateway = (median(era, count, name, metric) for name in names)
                cells.append(f"{direct:11.2f}{gateway:11.2f}{gateway / direct:9.2f}")
            print(f"{count:8}" + "".join(cells))
        for count in counts:
            pairs = zip(results[era, count, "direct"], results[era, count, "gateway"], strict=True)
            ratios = [(g["calls/s"] / d["calls/s"], g["p50 (ms)"] / d["p50 (ms)"]) for d, g in pairs]
            per_round = ", ".join(f"{t:.2f}/{p:.2f}" for t, p in ratios)
            print(f"  {count} sessions, per round calls/s / p50 ratio: {per_round}")
    cpu = os.times()
    spent = cpu.children_user + cpu.children_system - cpu_began.children_user - cpu_began.children_system
    print(
        f"\nbenchmark wall {time.perf_counter() - began:.0f} s, CPU of its processes {spent:.0f} s;"
        f" load average at the end: {load()}"
    )


async def sequential_main(args: argparse.Namespace) -> None:
    paths, env = servers()
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=500, help="sequential calls per round (without --sessions)")
    parser.add_argument("--sessions", help="concurrent session counts, e.g. 1,8,32,128")
    parser.add_argument("--eras", default="legacy,2026", help="with --sessions: legacy, 2026 or both")
    parser.add_argument("--seconds", type=float, default=2.0, help="with --sessions: the measured window")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # handled before
    args = parser.parse_args()
    if args.sessions:
        sessions_main(args)
    else:
        anyio.run(sequential_main, args)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker()  # its own event loop per job
    else:
        main()
