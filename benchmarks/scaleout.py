"""What running beyond one machine costs: tracing, `/metrics`, Redis rate limits, and 2 replicas vs 1.

    .venv/bin/python benchmarks/scaleout.py [--calls 20000] [--rounds 5] [--replicas-seconds 10]

Needs `redis-server` on PATH for the Redis figures (it starts its own on a free loopback port).

The engine runs in process against an instant downstream (as benchmarks/policy.py), so the
figures are the engine's own cost. Rounds alternate the variants; the median of the rounds'
per-call medians is printed:

- *bypassed*: the call runs as if the engine had no tracing code at all (the context is built and
  the traced body entered directly);
- *off*: `execute()` as shipped with tracing off (the target: at most 5 µs over *bypassed*);
- *on*: tracing on, through the OpenTelemetry SDK with no exporter (the spans are made, then dropped);
- the `/metrics` counters: `CallMetrics.observe` per audit record;
- a rate limit in process vs in Redis (the Lua bucket): the added p50 per call (target <= 0.3 ms);
- throughput of 50 concurrent HTTP clients (the SDK client, in this process) against one
  `toolscore serve --transport http` replica, then split over two sharing one Redis.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import mcp_types
from _common import free_port

from toolscore import EngineSettings, ToolExecutionEngine, parse_config
from toolscore._engine import CallOutcome, ExecutionContext
from toolscore._logging import configure_logging
from toolscore.audit.sinks import AuditRecord, NullAuditSink
from toolscore.downstream.registry import build_registry
from toolscore.policy import build_policy
from toolscore.state.redis_store import RedisState
from toolscore.telemetry import tracing
from toolscore.telemetry.metrics import CallMetrics

SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
RESULT = mcp_types.CallToolResult(content=[mcp_types.TextContent(text="a result of some length " * 20)])
ARGS = {"text": "hello world"}


class Instant:
    """A downstream that answers at once, so only the engine is measured."""

    def __init__(self, config: Any) -> None:
        self.registry = build_registry({"fx": [mcp_types.Tool(name="echo", input_schema=SCHEMA)]}, config)

    def unavailable_reason(self, server: str) -> str | None:
        return None

    async def __call__(
        self, server: str, tool: str, arguments: Any, *, progress: Any, scope: Any, keep_bytes: bool = False
    ) -> mcp_types.CallToolResult:
        return RESULT


class Bypassed(ToolExecutionEngine):
    """The engine with its tracing check skipped: the baseline the check is measured against."""

    async def execute(self, tool: str, arguments: Any = None, **_: Any) -> CallOutcome:  # type: ignore[override]
        ctx = ExecutionContext(call_id="bench", tool=tool, arguments=dict(arguments or {}))
        return await self._execute(ctx, None)


def build(
    kind: type[ToolExecutionEngine], state: RedisState | None = None, limited: bool = False
) -> ToolExecutionEngine:
    constraints = {"enabled": True, "rate_limits": [{"rate": 1e9, "burst": 1_000_000_000}]} if limited else {}
    config = parse_config({"mcpServers": {"fx": {"command": "x"}}, "constraints": constraints})
    fake = Instant(config)
    policy = build_policy(config, state=state)
    return kind(
        tools=fake,
        call=fake,
        audit=NullAuditSink(),
        settings=EngineSettings.from_config(config),
        pre_hooks=policy.pre,
    )


def start_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], str] | None:
    binary = shutil.which("redis-server")
    if binary is None:
        return None
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    return proc, f"redis://127.0.0.1:{port}/0"


def start_replica(workdir: Path, redis_url: str) -> tuple[subprocess.Popen[bytes], str]:
    fixture = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "fixture_server.py"
    workdir.mkdir(parents=True, exist_ok=True)
    config = {
        "mcpServers": {
            "fx": {"command": sys.executable, "args": [str(fixture)], "env": {"FIXTURE_STATE_DIR": str(workdir)}}
        },
        "toolscore": {
            "audit": {"path": str(workdir / "audit.jsonl")},
            "log_dir": str(workdir / "logs"),
            "startup_grace_seconds": None,
            "state": redis_url,
        },
    }
    path = workdir / "servers.json"
    path.write_text(json.dumps(config))
    port = free_port()
    toolscore = str(Path(sys.executable).parent / "toolscore")
    proc = subprocess.Popen(
        [toolscore, "serve", "--transport", "http", "--port", str(port), "--config", str(path), "--log-level", "error"],
        stderr=subprocess.DEVNULL,
    )
    return proc, f"http://127.0.0.1:{port}/mcp"


async def wait_up(url: str) -> None:
    import httpx2

    async with httpx2.AsyncClient() as http:
        for _ in range(300):
            try:
                await http.get(url.removesuffix("/mcp") + "/")
                return
            except httpx2.TransportError:
                await anyio.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


async def throughput(urls: list[str], clients: int, seconds: float) -> float:
    """Calls a second from `clients` concurrent SDK clients, spread over `urls`."""
    from mcp import Client

    done = 0
    deadline = 0.0

    async def one(url: str, ready: anyio.Event) -> None:
        nonlocal done
        async with Client(url, mode="legacy") as client:
            await client.call_tool("fx__echo", {"text": "warm"})
            await ready.wait()
            while time.perf_counter() < deadline:
                await client.call_tool("fx__echo", {"text": "hello"})
                done += 1

    ready = anyio.Event()
    async with anyio.create_task_group() as tg:
        for n in range(clients):
            tg.start_soon(one, urls[n % len(urls)], ready)
        await anyio.sleep(3)  # every client connected and warm
        deadline = time.perf_counter() + seconds
        began = time.perf_counter()
        ready.set()
    return done / (time.perf_counter() - began)


async def per_call_us(eng: ToolExecutionEngine, calls: int) -> float:
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        run = await eng.execute("fx__echo", ARGS)
        samples.append((time.perf_counter() - t0) * 1e6)
        assert run.context.success, run.result
    return statistics.median(samples)


def observe_us(calls: int) -> float:
    metrics = CallMetrics()
    record = AuditRecord(
        time=datetime.now(UTC), call_id="c", tool="fx__echo", server="fx", phase="post_execution",
        duration_ms=1.5, success=True, actual_tokens=120,
    )  # fmt: skip
    t0 = time.perf_counter()
    for _ in range(calls):
        metrics.observe(record)
    return (time.perf_counter() - t0) / calls * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--replicas-seconds", type=float, default=10.0, help="0 skips the replica run")
    parser.add_argument("--clients", type=int, default=50)
    args = parser.parse_args()
    configure_logging("error")
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider()  # no processor: spans are made and dropped
    bypassed, shipped = build(Bypassed), build(ToolExecutionEngine)
    results: dict[str, list[float]] = {"bypassed": [], "off": [], "on": []}
    for _ in range(args.rounds):
        results["bypassed"].append(await per_call_us(bypassed, args.calls))
        results["off"].append(await per_call_us(shipped, args.calls))
        tracing.enable(provider)
        try:
            results["on"].append(await per_call_us(shipped, args.calls))
        finally:
            tracing.disable()
    base, off, on = (statistics.median(results[k]) for k in ("bypassed", "off", "on"))
    print(f"engine per call, tracing code bypassed : {base:7.2f} us")
    print(f"engine per call, tracing off (shipped) : {off:7.2f} us  (added {off - base:+.2f} us; target <= 5 us)")
    print(f"engine per call, tracing on (SDK)      : {on:7.2f} us  (added {on - base:+.2f} us)")
    print(f"/metrics counters per audit record     : {observe_us(args.calls * 5):7.2f} us")

    tmp = Path(tempfile.mkdtemp(prefix="toolscore-scaleout-"))
    started = start_redis(tmp)
    if started is None:
        print("redis-server not found: no Redis figures")
        return
    redis_proc, url = started
    procs: list[subprocess.Popen[bytes]] = []
    try:
        state = RedisState(url)
        local, shared = build(ToolExecutionEngine, limited=True), build(ToolExecutionEngine, state, limited=True)
        rate: dict[str, list[float]] = {"local": [], "redis": []}
        calls = max(1000, args.calls // 4)
        for _ in range(args.rounds):
            rate["local"].append(await per_call_us(local, calls))
            rate["redis"].append(await per_call_us(shared, calls))
        await state.aclose()
        lo, rd = statistics.median(rate["local"]), statistics.median(rate["redis"])
        print(f"engine p50, rate limit in process      : {lo:7.1f} us")
        print(
            f"engine p50, rate limit in Redis (Lua)  : {rd:7.1f} us  (added {(rd - lo) / 1e3:.3f} ms; target <= 0.3 ms)"
        )
        if args.replicas_seconds <= 0:
            return
        urls = []
        for n in (1, 2):
            proc, replica = start_replica(tmp / f"r{n}", url)
            procs.append(proc)
            urls.append(replica)
        for replica in urls:
            await wait_up(replica)
        one = await throughput(urls[:1], args.clients, args.replicas_seconds)
        two = await throughput(urls, args.clients, args.replicas_seconds)
        print(f"{args.clients} HTTP clients, 1 replica             : {one:7.0f} calls/s")
        print(f"{args.clients} HTTP clients, 2 replicas + Redis    : {two:7.0f} calls/s  (x{two / one:.2f})")
    finally:
        for proc in procs:
            proc.terminate()
        redis_proc.terminate()


if __name__ == "__main__":
    anyio.run(main)
