"""Passthrough overhead: the gateway vs. a direct client to the same fixture server, over stdio.

    .venv/bin/python benchmarks/passthrough.py [--rounds 3] [--calls 500] [--compare SRC]

Every path uses a real `mcp` client over stdio in the handshake era (what Claude Desktop speaks):
"direct" spawns the fixture server; "relay" spawns benchmarks/line_relay.py, which spawns the
fixture and copies bytes both ways, parsing nothing (the cost of the process hop alone);
"minimal" is the floor of any SDK-based proxy (benchmarks/minimal_proxy.py: forwarding only);
"gateway" spawns `toolscore serve`, which spawns the fixture (under its reaper process);
with `--compare SRC`, "compare" spawns the same command from another checkout's `SRC/src` (say,
the code before a change, from `git worktree add`), so old and new code meet the same noise.
Rounds alternate the order so machine noise hits every path alike; each figure is the median
over rounds, and the last columns are ratios to direct. Audit logging is on (to a temporary
file), as a user would run it.

- cold start: spawn -> first result (the client lists the tools before its first call);
- tree CPU per call: user + system CPU of the spawned process and every descendant (/proc),
  over the sequential calls, per call; the benchmark client itself is not counted;
- 1 MiB result: the median of `LARGE_CALLS` sequential calls each returning 1 MiB of text;
- 10 echo at once: through the gateway, one `orchestrate` plan of 10 parallel echo steps;
  on the other paths, 10 concurrent calls;
- peak RSS: VmHWM of the spawned process alone (the gateway, not its servers or its reaper),
  at the first result (start-up: imports) and at the end (after 1 MiB results and plans).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import anyio
from _common import percentile
from _common import processes as live_processes
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "fixture_server.py"
HERE = Path(__file__).resolve().parent
TOOLSCORE = str(Path(sys.executable).parent / "toolscore")
MIB = 1 << 20
LARGE_CALLS = 25
"""1 MiB calls per round, their median reported: 5 left the figure to the first calls' noise (a
steady stream measured 1.24x where 5 calls gave 1.35-1.66x in the same session)."""
PLAN_STEPS = 10


class Route:
    """One way to reach the fixture server: directly, through a relay or a proxy, or through the gateway."""

    def __init__(self, name: str, params: StdioServerParameters, prefix: str, *, plans: bool = False) -> None:
        self.name = name
        self.params = params
        self.prefix = prefix
        self.plans = plans
        """Whether `orchestrate` is there (the gateway): then the 10 echo go as one plan."""

    def tool(self, name: str) -> str:
        return self.prefix + name


def spawned_tree() -> tuple[int, float]:
    """The process this benchmark spawned (the client's server) and the CPU seconds of its whole tree."""
    processes = live_processes()
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (parent, _) in processes.items():
        children[parent].append(pid)
    (top,) = children[os.getpid()]  # one server at a time
    cpu, todo = 0.0, [top]
    while todo:
        pid = todo.pop()
        cpu += processes[pid][1]
        todo.extend(children[pid])
    return top, cpu


def peak_rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) / 1024


def _plan(route: Route) -> str:
    server = route.prefix.removesuffix("__")
    steps = "".join(f'<{server}><echo>{{"text": "step {i}"}}</echo></{server}>' for i in range(PLAN_STEPS))
    return f"<parallel>{steps}</parallel><execute_tools />"


async def measure(path: Route, calls: int) -> dict[str, float]:
    out: dict[str, float] = {}
    began = time.perf_counter()
    async with Client(path.params, mode="legacy") as client:
        await client.call_tool(path.tool("echo"), {"text": "warm"})
        out["cold start (s)"] = time.perf_counter() - began
        echo = path.tool("echo")

        top, cpu_before = spawned_tree()
        out["peak RSS at first result (MB)"] = peak_rss_mb(top)
        latencies = []
        t_seq = time.perf_counter()
        for _ in range(calls):
            t0 = time.perf_counter()
            await client.call_tool(echo, {"text": "hello"})
            latencies.append((time.perf_counter() - t0) * 1000)
        seq_seconds = time.perf_counter() - t_seq
        _, cpu_after = spawned_tree()
        out["sequential p50 (ms)"] = statistics.median(latencies)
        out["sequential p95 (ms)"] = percentile(latencies, 0.95)
        out["sequential (calls/s)"] = calls / seq_seconds
        out["tree CPU per call (ms)"] = (cpu_after - cpu_before) * 1000 / calls

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
        for _ in range(LARGE_CALLS):
            t0 = time.perf_counter()
            result = await client.call_tool(path.tool("large"), {"size": MIB})
            sizes.append(time.perf_counter() - t0)
            assert len(result.content[0].text) == MIB  # type: ignore[union-attr]
        out["1 MiB result (ms)"] = statistics.median(sizes) * 1000

        async def ten_echo() -> None:
            if path.plans:
                answer = await client.call_tool("orchestrate", {"plan": _plan(path)})
                assert not answer.is_error, answer.content
                return
            async with anyio.create_task_group() as tg:
                for i in range(PLAN_STEPS):
                    tg.start_soon(client.call_tool, echo, {"text": f"step {i}"})

        await ten_echo()  # the first plan imports the plan machinery: not what is measured here
        tens = []
        for _ in range(20):
            t0 = time.perf_counter()
            await ten_echo()
            tens.append((time.perf_counter() - t0) * 1000)
        out[f"{PLAN_STEPS} echo at once (ms)"] = statistics.median(tens)
        out["peak RSS at the end (MB)"] = peak_rss_mb(top)
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=500, help="sequential calls per round")
    parser.add_argument("--compare", type=Path, metavar="SRC", help="also run the gateway of this checkout")
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

    def through(script: str) -> StdioServerParameters:
        return StdioServerParameters(
            command=sys.executable,
            args=[str(HERE / script), sys.executable, str(FIXTURE)],
            env={"FIXTURE_STATE_DIR": str(tmp)},
        )

    paths = [
        Route("direct", fixture, ""),
        Route("relay", through("line_relay.py"), ""),
        Route("minimal", through("minimal_proxy.py"), ""),
        Route(
            "gateway",
            StdioServerParameters(command=TOOLSCORE, args=["serve", "--config", str(config)]),
            "toolscore_bench__",
            plans=True,
        ),
    ]
    if args.compare is not None:
        other = StdioServerParameters(
            command=sys.executable,
            args=["-m", "toolscore", "serve", "--config", str(config)],
            env={"PYTHONPATH": str(args.compare.resolve() / "src")},
        )
        paths.append(Route("compare", other, "toolscore_bench__", plans=True))
    names = [p.name for p in paths]
    results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        for path in paths if round_ % 2 == 0 else list(reversed(paths)):
            results[path.name].append(await measure(path, args.calls))
            print(f"round {round_ + 1} {path.name}: done", file=sys.stderr)

    header = "".join(f"{name:>10}" for name in names)
    ratios = "".join(f"{name[:3] + '/dir':>9}" for name in names[1:])
    print(f"\n{'metric':32}{header}{ratios}   (median of {args.rounds} rounds)")
    for metric in results["direct"][0]:
        medians = [statistics.median(r[metric] for r in results[name]) for name in names]
        cells = "".join(f"{m:10.3f}" for m in medians)
        print(f"{metric:32}{cells}" + "".join(f"{m / medians[0]:9.2f}" for m in medians[1:]))
    print(
        f"\n'{PLAN_STEPS} echo at once' is one orchestrate plan through the gateway, {PLAN_STEPS} concurrent calls "
        "elsewhere; 'peak RSS' is the spawned process alone (the fixture server itself, for direct)."
    )


if __name__ == "__main__":
    anyio.run(main)
