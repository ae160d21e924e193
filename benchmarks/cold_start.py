"""Cold start of the stack: `toolscore serve` over six stdio servers, and where its time and memory go.

    .venv/bin/python benchmarks/cold_start.py [--rounds 5] [--servers 6] [--compare SRC]

Every path uses a real `mcp` client over stdio in the handshake era, against the fixture server
(tests/fixtures/fixture_server.py, the SDK's lowlevel server: a Python MCP server's start-up):

- "direct": the client spawns one fixture server (one server's own start);
- "N direct": N clients each spawn one fixture server at once (the floor for N servers on this
  machine's cores: the gateway cannot have them all up before they are);
- "gateway": the client spawns `toolscore serve` (stdio front) over N fixture servers, with this
  checkout's `src`; "compare" the same with another checkout's `SRC/src` (say the code before a
  change, from `git worktree add`), so both meet the same machine noise.

Rounds alternate the order. For each path: the client's spawn → `initialize` answered →
`tools/list` answered (every server's tools, through the gateway) → the first `tools/call`
answered; the gateway's own log (`--log-level info`) says when each server was up (spawned,
initialized and listed: its `start_s`); at the first result, the CPU seconds of the spawned
process's whole tree (the gateway, its reaper, the servers; from /proc), the gateway's peak RSS
(VmHWM), and the tree's memory as PSS (shared pages split between the processes that share them)
with its process count.

Then, per module group, what a fresh interpreter pays to import what a stdio gateway imports, in
the order it does (RSS after each step, CPU seconds of each step; medians of `--rounds` runs).
Figures are medians over rounds; the machine may be shared, so CPU seconds are given beside wall.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import anyio
from _common import processes as live_processes
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "fixture_server.py"

GROUPS: list[tuple[str, str]] = [
    ("the config (pydantic, the config models)", "import toolscore.config"),
    ("the protocol types (mcp_types)", "import mcp_types, mcp_types.methods"),
    ("the client session", "import mcp.client.session, mcp.shared.jsonrpc_dispatcher"),
    ("the lowlevel server (with its HTTP app's imports)", "import mcp.server.lowlevel.server, mcp.server.stdio"),
    ("the downstream side", "import toolscore.downstream.hub"),
    ("the rest of the gateway and the stdio front", "import toolscore._gateway, toolscore.front.serve"),
]
"""What a stdio gateway imports, in its order, as steps of one interpreter."""

_GROUP_DRIVER = """\
import json, os, sys, time
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024
out = [("interpreter", rss(), 0.0, 0.0)]
try:
    from toolscore._sdk_packages import lazy_sdk_packages
    lazy_sdk_packages()  # as `toolscore serve` does where there is one
except ImportError:
    pass
for name, code in json.loads(sys.argv[1]):
    w, c = time.perf_counter(), time.process_time()
    exec(code)
    out.append((name, rss(), time.process_time() - c, time.perf_counter() - w))
print(json.dumps(out))
"""


def _status_kb(pid: int, path: str, field: str) -> float:
    try:
        text = Path(f"/proc/{pid}/{path}").read_text()
    except OSError:
        return 0.0
    line = next((line for line in text.splitlines() if line.startswith(field + ":")), None)
    return float(line.split()[1]) if line else 0.0


def tree_figures() -> dict[str, float]:
    """CPU seconds, PSS and process count of each tree this process spawned; the top's VmHWM."""
    processes = live_processes()
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (parent, _) in processes.items():
        children[parent].append(pid)
    tops = children[os.getpid()]
    cpu = pss = reapers = 0.0
    count = 0
    todo = list(tops)
    while todo:
        pid = todo.pop()
        cpu += processes[pid][1]
        pss += _status_kb(pid, "smaps_rollup", "Pss")
        count += 1
        todo.extend(children[pid])
        try:
            if b"_reaper.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                reapers += processes[pid][1]
        except OSError:
            pass
    return {
        "tree CPU at first result (s)": cpu,
        "the gateway's own CPU (s)": sum(processes[pid][1] for pid in tops) if len(tops) == 1 else float("nan"),
        "the reapers' CPU (s)": reapers,
        "tree PSS at first result (MB)": pss / 1024,
        "processes": count,
        "gateway peak RSS (MB)": max(_status_kb(pid, "status", "VmHWM") for pid in tops) / 1024 if tops else 0.0,
    }


_UP = re.compile(r"^(\S+Z) \[info\s*\] server up.*?start_s=([0-9.]+)", re.MULTILINE)


async def one_client(
    params: StdioServerParameters, out: dict[str, float], answered: Callable[[], None], hold: anyio.Event
) -> None:
    """Spawn one server and note when it answered (then call `answered`); stay connected until `hold`."""
    began = time.perf_counter()
    async with Client(params, mode="legacy") as client:
        out["initialize answered (s)"] = time.perf_counter() - began
        await client.list_tools()
        out["tools/list answered (s)"] = time.perf_counter() - began
        await client.call_tool("echo", {"text": "warm"})
        out["first call answered (s)"] = time.perf_counter() - began
        answered()
        await hold.wait()


async def measure_direct(count: int) -> dict[str, float]:
    params = StdioServerParameters(command=sys.executable, args=[str(FIXTURE)], env=_fixture_env())
    results = [dict[str, float]() for _ in range(count)]
    hold, all_answered = anyio.Event(), anyio.Event()
    waiting = [count]

    def answered() -> None:
        waiting[0] -= 1
        if not waiting[0]:
            all_answered.set()

    async with anyio.create_task_group() as tg:
        for out in results:
            tg.start_soon(one_client, params, out, answered, hold)
        await all_answered.wait()
        snapshot = tree_figures()  # every server running, none exited yet
        hold.set()
    out = {key: max(r[key] for r in results) for key in results[0]}
    gateway_only = ("gateway peak RSS (MB)", "the gateway's own CPU (s)", "the reapers' CPU (s)")
    out.update({k: v for k, v in snapshot.items() if k not in gateway_only})
    return out


def _fixture_env() -> dict[str, str]:
    return {"FIXTURE_STATE_DIR": tempfile.mkdtemp(prefix="cold-start-"), "PATH": os.environ.get("PATH", "")}


async def measure_gateway(src: Path, config: Path, count: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(src))
    args = ["-m", "toolscore", "serve", "--config", str(config), "--log-level", "info"]
    params = StdioServerParameters(command=sys.executable, args=args, env=env)
    out: dict[str, float] = {}
    errlog = Path(tempfile.mkdtemp(prefix="cold-start-")) / "gateway.log"
    began, spawned_at = time.perf_counter(), time.time()
    with errlog.open("w") as log:
        from mcp.client.stdio import stdio_client

        async with Client(stdio_client(params, errlog=log), mode="legacy") as client:
            out["initialize answered (s)"] = time.perf_counter() - began
            listed = await client.list_tools()
            out["tools/list answered (s)"] = time.perf_counter() - began
            result = await client.call_tool("s0__echo", {"text": "warm"})
            out["first call answered (s)"] = time.perf_counter() - began
            out.update(tree_figures())
    servers = {tool.name.split("__")[0] for tool in listed.tools if "__" in tool.name}
    if result.is_error or len(servers) != count:
        raise SystemExit(f"the gateway ({src}) did not serve every server: {sorted(servers)}; see {errlog}")
    # "server up" lines: when (the log's UTC timestamp) and how long after its spawn (`start_s`).
    ups = [
        (datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp() - spawned_at, float(m.group(2)))
        for m in _UP.finditer(errlog.read_text())
    ]
    if ups:
        out["the gateway spawned its servers at (s)"] = min(up - start for up, start in ups)
        out["servers up (initialized, listed), first (s)"] = min(up for up, _ in ups)
        out["servers up, last (s)"] = max(up for up, _ in ups)
    return out


def write_config(count: int) -> Path:
    where = Path(tempfile.mkdtemp(prefix="cold-start-"))
    # Distinct environments: servers with identical ones would not all be started early.
    servers = {
        f"s{i}": {
            "command": sys.executable,
            "args": [str(FIXTURE)],
            "env": {"FIXTURE_STATE_DIR": str(where), "N": f"{i}"},
        }
        for i in range(count)
    }
    # No start-up grace: the first `tools/list` answers once every server is up (and lists them all).
    settings = {
        "audit": {"path": str(where / "audit.jsonl")},
        "log_dir": str(where / "logs"),
        "startup_grace_seconds": None,
    }
    path = where / "servers.json"
    path.write_text(json.dumps({"mcpServers": servers, "toolscore": settings}))
    return path


def import_groups(src: Path) -> list[tuple[str, float, float, float]]:
    env = dict(os.environ, PYTHONPATH=str(src))
    groups = json.dumps(GROUPS)
    done = subprocess.run(
        [sys.executable, "-c", _GROUP_DRIVER, groups], env=env, capture_output=True, text=True, check=True
    )
    return [(str(a), float(b), float(c), float(d)) for a, b, c, d in json.loads(done.stdout)]


def _median(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = [k for k in rows[0] if all(k in r for r in rows)]
    return {k: statistics.median(r[k] for r in rows) for k in keys}


def _spread(rows: list[dict[str, float]], key: str) -> str:
    values = [r[key] for r in rows if key in r]
    return f"{min(values):.2f}–{max(values):.2f}" if values else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--servers", type=int, default=6)
    parser.add_argument("--compare", type=Path, help="another checkout whose src/ runs as 'compare'")
    args = parser.parse_args()
    config = write_config(args.servers)
    paths: dict[str, Callable[[], object]] = {
        "direct": lambda: measure_direct(1),
        f"{args.servers} direct": lambda: measure_direct(args.servers),
        "gateway": lambda: measure_gateway(ROOT / "src", config, args.servers),
    }
    if args.compare is not None:
        paths["compare"] = lambda: measure_gateway(args.compare / "src", config, args.servers)
    results: dict[str, list[dict[str, float]]] = defaultdict(list)
    wall_began, cpu_began = time.perf_counter(), os.times()
    for round_ in range(args.rounds):
        order = list(paths) if round_ % 2 == 0 else list(reversed(paths))
        for name in order:
            results[name].append(anyio.run(paths[name]))  # type: ignore[arg-type]
    print(f"## Cold start: {args.servers} stdio servers, {args.rounds} rounds (medians; gateway spread in brackets)\n")
    keys: list[str] = []
    for rows in results.values():
        keys += [k for k in _median(rows) if k not in keys]
    print("| figure | " + " | ".join(results) + " |")
    print("|---" * (len(results) + 1) + "|")
    for key in keys:
        cells = []
        for name, rows in results.items():
            median = _median(rows)
            if key not in median:
                cells.append("")
                continue
            spread = f" ({_spread(rows, key)})" if name in ("gateway", "compare") and "(s)" in key else ""
            cells.append(f"{median[key]:.0f}" if key == "processes" else f"{median[key]:.2f}{spread}")
        print(f"| {key} | " + " | ".join(cells) + " |")
    spent = os.times()
    print(
        f"\nbenchmark wall {time.perf_counter() - wall_began:.0f} s; CPU of the runs (all processes) "
        f"{spent.children_user + spent.children_system - cpu_began.children_user - cpu_began.children_system:.0f} s"
    )
    sources = {"gateway": ROOT}
    if args.compare is not None:
        sources["compare"] = args.compare
    print("\n## Imports per module group (a fresh interpreter; medians of rounds)\n")
    print("| step | " + " | ".join(f"{n}: RSS after (MB) | {n}: CPU (s) | {n}: wall (s)" for n in sources) + " |")
    print("|---" * (3 * len(sources) + 1) + "|")
    tables = {name: [import_groups(src / "src") for _ in range(args.rounds)] for name, src in sources.items()}
    for i, (step, *_rest) in enumerate(next(iter(tables.values()))[0]):
        cells = []
        for runs in tables.values():
            cells += [
                f"{statistics.median(run[i][1] for run in runs):.1f}",
                f"{statistics.median(run[i][2] for run in runs):.3f}",
                f"{statistics.median(run[i][3] for run in runs):.3f}",
            ]
        print(f"| {step} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
