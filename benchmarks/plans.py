"""The plan scheduler against fixture servers, with direct-client floors measured in the same run.

    .venv/bin/python benchmarks/plans.py [--repeat 3] [--parse-only] [--cpu-rounds 9] [--episode-save]

Plans go straight to the gateway's `orchestrate` (no front client), so the figures are the
scheduler plus the engine plus the stdio downstream hop. Each figure is the median of --repeat runs.
First, parse + check alone (no I/O) for plans of 50, 500 and 2,000 steps: the cost per step
stays flat when both are linear. Last, the gateway's CPU per plan step beside a passthrough
call's through the same engine in the same process (the process's CPU time, the fixture server
apart), in alternating rounds: plans of `<parallel>` of 1 and of 10 echo steps give the cost per
step (the difference over 9) and per plan. `--episode-save` alone: how long a plan's answer
waits for its episode's save to the SQLite file (`toolscore.loop.store`), 300 saves.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types
from _common import percentile
from mcp import Client, StdioServerParameters

from toolscore import MemoryAuditSink, open_gateway, parse_config
from toolscore._logging import configure_logging
from toolscore.config import PlanSettings
from toolscore.downstream.registry import build_registry
from toolscore.plan.check import check_plan, shorthand_table
from toolscore.plan.parse import parse_turn
from toolscore.scope import CallScope

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "fixture_server.py"


async def timed(fn: Callable[[], Awaitable[Any]], repeat: int) -> tuple[float, Any]:
    runs, last = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        last = await fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), last


def sleeps(n: int, seconds: float) -> str:
    return "".join(f'<fx><sleep>{{"seconds": {seconds}}}</sleep></fx>' for _ in range(n))


def model_plan(steps: int) -> str:
    """A plan in the style models write, 4 steps per unit: a <parallel> of a JSON call and a text
    shorthand, a call referencing both, and a CDATA shorthand holding markup and a reference."""
    units = []
    for i in range(steps // 4):
        units.append(
            f"<think>unit {i}: add and say at once, then combine</think>\n"
            f'<parallel id="p{i}">\n  <fx><add id="a{i}">{{"a": {i}, "b": 2}}</add></fx>\n'
            f'  <say id="s{i}">x &lt; y &amp;&amp; z</say>\n</parallel>\n'
            f'<fx><echo id="e{i}">{{"text": "sum ${{a{i}.sum}}, said ${{s{i}.text}}"}}</echo></fx>\n'
            f'<say><![CDATA[print("<b>${{e{i}.text}}</b>") if a < b else None]]></say>\n'
        )
    units.extend(f"<say>one more ({n})</say>\n" for n in range(steps % 4))
    return "".join(units) + "<execute_tools />"


def parse_and_check(repeat: int) -> None:
    """Parse + check time for plans of 50, 500 and 2,000 steps, per step and against 50 steps."""

    def tool(name: str, props: dict[str, Any], required: list[str]) -> mcp_types.Tool:
        return mcp_types.Tool(name=name, input_schema={"type": "object", "properties": props, "required": required})

    integer, string = {"type": "integer"}, {"type": "string"}
    tools = [tool("add", {"a": integer, "b": integer}, ["a", "b"]), tool("echo", {"text": string}, ["text"])]
    config = parse_config(
        {"mcpServers": {"fx": {"command": "x", "shorthand": {"tag": "say", "tool": "echo", "primary": "text"}}}}
    )
    registry = build_registry({"fx": tools}, config)
    shorthands = shorthand_table([(s.name, s.shorthands) for s in config.enabled_servers])
    limits = PlanSettings().model_copy(update={"max_steps": 2000, "max_bytes": 1024 * 1024})
    print(
        f"{'parse + check (CPU, best of runs)':44} {'bytes':>8} {'parse':>9} {'check':>9} {'per step':>9} {'x 50':>6}"
    )
    base = None
    for steps in (50, 500, 2000):
        text = model_plan(steps)
        parse_s, check_s = [], []
        # CPU time, the best of several runs with the collector paused (as timeit does): on a shared
        # machine, wall time and the median measure the neighbours.
        gc.disable()
        try:
            for _ in range(max(repeat, 7)):
                t0 = time.process_time()
                turn = parse_turn(text, max_bytes=1024 * 1024, max_steps=2000)
                t1 = time.process_time()
                plan = check_plan(turn, registry, shorthands=shorthands, limits=limits)
                t2 = time.process_time()
                parse_s.append(t1 - t0)
                check_s.append(t2 - t1)
        finally:
            gc.enable()
        assert len(plan.calls) == steps
        parse_m, check_m = min(parse_s), min(check_s)
        per_step = (parse_m + check_m) / steps
        base = base or per_step
        print(
            f"{'  ' + str(steps) + ' steps':44} {len(text.encode()):8} {parse_m * 1000:7.2f}ms {check_m * 1000:7.2f}ms"
            f" {per_step * 1e6:7.1f}us {per_step / base:6.2f}"
        )
    print()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--parse-only", action="store_true", help="only the parse + check figures")
    parser.add_argument("--cpu-rounds", type=int, default=9, help="rounds of the CPU per step figure")
    parser.add_argument("--cpu-only", action="store_true", help="only the CPU per step figure")
    parser.add_argument("--episode-save", action="store_true", help="only the episode save's wait")
    args = parser.parse_args()
    configure_logging("error")
    if args.episode_save:
        await episode_save()
        return
    parse_and_check(args.repeat)
    if args.parse_only:
        return
    tmp = Path(tempfile.mkdtemp(prefix="toolscore-bench-"))
    params = StdioServerParameters(command=sys.executable, args=[str(FIXTURE)], env={"FIXTURE_STATE_DIR": str(tmp)})
    cfg = parse_config(
        {
            "mcpServers": {"fx": {"command": params.command, "args": params.args, "env": params.env}},
            "toolscore": {"plan": {"server_concurrency": 64}},
        }
    )
    async with (
        open_gateway(cfg, audit=MemoryAuditSink(), log_dir=tmp / "logs") as gw,
        Client(params, mode="legacy") as direct,
    ):

        async def plan(text: str) -> Any:
            result = await gw.orchestrator({"plan": text})
            assert not result.is_error, result.content
            return result

        # The client's version, as the front gives it: what the server negotiated with the gateway.
        version = direct.protocol_version
        if args.cpu_only:
            await cpu_per_step(gw, version, args.cpu_rounds)
            return

        print(f"{'<parallel> of N x sleep(200 ms)':44} {'floor':>8} {'parallel':>9} {'seq':>8} {'efficiency':>10}")
        for n in (1, 2, 4, 8, 16, 32):

            async def floor(n: int = n) -> None:
                async with anyio.create_task_group() as tg:
                    for _ in range(n):
                        tg.start_soon(direct.call_tool, "sleep", {"seconds": 0.2})

            floor_s, _ = await timed(floor, args.repeat)
            par_s, _ = await timed(lambda n=n: plan(f"<parallel>{sleeps(n, 0.2)}</parallel>"), args.repeat)
            seq_s, _ = await timed(lambda n=n: plan(sleeps(n, 0.2)), 1) if n <= 8 else (float("nan"), None)
            print(f"{'  N = ' + str(n):44} {floor_s:8.3f} {par_s:9.3f} {seq_s:8.3f} {floor_s / par_s:10.2f}")

        hops = 10
        chain = '<fx><echo id="e0">{"text": "x"}</echo></fx>' + "".join(
            f'<fx><echo id="e{i}">{{"text": "${{e{i - 1}.text}}"}}</echo></fx>' for i in range(1, hops)
        )

        async def direct_chain() -> None:
            text = "x"
            for _ in range(hops):
                text = (await direct.call_tool("echo", {"text": text})).content[0].text  # type: ignore[union-attr]

        direct_s, _ = await timed(direct_chain, args.repeat)
        chain_s, _ = await timed(lambda: plan(chain), args.repeat)
        print(
            f"\n{'chain of 10 dependent echo steps':44} direct {direct_s * 1000:7.1f} ms"
            f"   plan {chain_s * 1000:7.1f} ms"
        )
        print(f"{'  added per dependency hop':44} {(chain_s - direct_s) / hops * 1000:7.2f} ms")

        unbalanced = (
            '<parallel><sequential><fx><sleep id="u1">{"seconds": 0.1}</sleep></fx>'
            '<fx><sleep>{"seconds": 0.1, "tag": "${u1.status}"}</sleep></fx></sequential>'
            '<fx><sleep>{"seconds": 0.3}</sleep></fx></parallel>'
        )
        unbalanced_s, _ = await timed(lambda: plan(unbalanced), args.repeat)
        print(
            f"{'unbalanced graph (critical path 300 ms)':44} {unbalanced_s * 1000:7.1f} ms = {unbalanced_s / 0.3:.3f} x"
        )

        fail_s, _ = await timed(lambda: direct.call_tool("fail", {}), args.repeat)
        fast_s, _ = await timed(
            lambda: plan(
                '<parallel policy="fail_fast"><fx><sleep>{"seconds": 5}</sleep></fx><fx><fail>{}</fail></fx></parallel>'
            ),
            args.repeat,
        )
        print(f"{'fail_fast: plan wall time':44} {fast_s * 1000:7.1f} ms (a direct fail call: {fail_s * 1000:.1f} ms)")

        timeout_s, _ = await timed(lambda: plan('<fx><sleep timeout="200ms">{"seconds": 5}</sleep></fx>'), args.repeat)
        print(f"{'timeout=200ms: fired after':44} {timeout_s * 1000:7.1f} ms ({(timeout_s - 0.2) * 1000:+.1f} ms)")

        size = 64 * 1024
        passing = (
            f'<fx><large id="big">{{"size": {size}}}</large></fx>'
            '<fx><echo id="c1">{"text": "${big.text}"}</echo></fx><fx><echo>{"text": "${c1.text}"}</echo></fx>'
        )
        _, result = await timed(lambda: plan(passing), 1)
        steps = result.structured_content["steps"]
        moved = sum(s["bytes"] for s in steps)
        seen = len(result.content[0].text.encode()) + len(json.dumps(result.structured_content).encode())
        print(
            f"{'64 KiB passed through 3 steps by reference':44} moved {moved} B,"
            f" model sees {seen} B = {seen / moved:.1%}"
        )
        await cpu_per_step(gw, version, args.cpu_rounds)


def echoes(n: int) -> str:
    return "<parallel>" + "".join(f'<fx><echo>{{"text": "hi {i}"}}</echo></fx>' for i in range(n)) + "</parallel>"


async def cpu_per_step(gw: Any, version: str | None, rounds: int, per_round: int = 100) -> None:
    """CPU time per plan step, per plan, and per passthrough call (`engine.execute` with the bytes
    kept, as the front's lanes call it), alternating; min and median of the rounds."""
    scope = CallScope(caller="bench", version=version)
    runs: dict[str, Callable[[], Awaitable[Any]]] = {
        "plan of 1": lambda: gw.orchestrator({"plan": echoes(1)}, scope=scope),
        "plan of 10": lambda: gw.orchestrator({"plan": echoes(10)}, scope=scope),
        "passthrough call": lambda: gw.engine.execute("fx__echo", {"text": "hi"}, scope=scope, keep_bytes=True),
    }
    for run in runs.values():  # warm up: imports, caches
        for _ in range(20):
            await run()
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(rounds):
        for name, run in runs.items() if round_ % 2 == 0 else reversed(runs.items()):
            began = time.process_time()
            for _ in range(per_round):
                await run()
            cpu[name].append((time.process_time() - began) / per_round * 1000)
    print(f"\n{'gateway CPU (ms), ' + str(rounds) + ' rounds of ' + str(per_round):44} {'min':>8} {'median':>8}")
    for pick in (min, statistics.median):
        step = (pick(cpu["plan of 10"]) - pick(cpu["plan of 1"])) / 9
        cpu.setdefault("per plan step", []).append(step)
        cpu.setdefault("per plan, steps apart", []).append(pick(cpu["plan of 1"]) - step)
    for name, values in cpu.items():
        if name.startswith("per"):
            low, mid = values
        else:
            low, mid = min(values), statistics.median(values)
        print(f"{'  ' + name:44} {low:8.3f} {mid:8.3f}")


async def episode_save(saves: int = 300) -> None:
    """The time `DurableEpisodes.save` keeps a plan's answer waiting, with a plan's worth of time between saves."""
    from toolscore.loop.store import DurableEpisodes, EpisodeDB
    from toolscore.plan.run import StepRecord
    from toolscore.plan.tool import EpisodeStore

    db = EpisodeDB(Path(tempfile.mkdtemp(prefix="toolscore-bench-")) / "episodes.sqlite3", ttl_seconds=3600)
    episodes = EpisodeStore(per_caller=64, max_callers=64)
    episode = episodes.new("bench")
    for n in range(1, 4):
        text = "hello " * 20
        episode.steps[n] = StepRecord(n, f"s{n}", "fx", "echo", status="ok", text=text, json={"n": n}, attempts=1)
    durable = DurableEpisodes(db, episodes)
    answer = mcp_types.CallToolResult(content=[], structured_content={"episode": episode.id})
    waits: list[float] = []
    began_cpu = time.process_time()
    for n in range(50 + saves):
        began = time.perf_counter()
        await durable.save("bench", answer)
        if n >= 50:  # the first ones open the file
            waits.append(time.perf_counter() - began)
        await anyio.sleep(0.002)
    cpu = (time.process_time() - began_cpu) / (50 + saves)
    db.close()
    print(
        f"{'episode save: the answer waits':44} p50 {statistics.median(waits) * 1000:.3f} ms,"
        f" p95 {percentile(waits, 0.95) * 1000:.3f} ms; process CPU per save and sleep {cpu * 1000:.3f} ms"
    )


if __name__ == "__main__":
    anyio.run(main)
