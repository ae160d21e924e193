"""Engine overhead of the constraint rules: 10 active rules vs constraints off, per call.

    .venv/bin/python benchmarks/policy.py [--calls 20000] [--rounds 5]

The engine runs in process against an instant in-process downstream, so the figure is the
engine's own cost per call (validation, hooks, token accounting, the audit write to a file); a
real downstream call costs a millisecond or more on top. Rounds alternate off/on; the median of
the rounds' per-call medians is printed.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types

from toolscore import EngineSettings, JsonlAuditSink, ToolExecutionEngine, parse_config
from toolscore._logging import configure_logging
from toolscore.downstream.registry import build_registry
from toolscore.policy import build_policy

SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
    "required": ["path", "text"],
}
RESULT = mcp_types.CallToolResult(content=[mcp_types.TextContent(text="a result of some length " * 20)])
ARGS = {"path": "/srv/data/notes.txt", "text": "hello world"}


class Instant:
    """A downstream that answers at once, so only the engine is measured."""

    def __init__(self, config: Any) -> None:
        tools = [mcp_types.Tool(name="write", input_schema=SCHEMA)]
        self.registry = build_registry({"fx": tools}, config)

    def unavailable_reason(self, server: str) -> str | None:
        return None

    async def __call__(
        self, server: str, tool: str, arguments: Any, *, progress: Any, scope: Any, keep_bytes: bool = False
    ) -> mcp_types.CallToolResult:
        return RESULT


TEN_RULES: dict[str, Any] = {
    "enabled": True,
    "tools": {"allow": ["fx__*"], "deny": ["*__delete*"]},  # 1, 2
    "destructive": "deny",  # 3
    "arguments": {
        "max_bytes": 10_000,  # 4
        "deny_patterns": [r"rm\s+-rf\s+/", r"DROP\s+TABLE"],  # 5, 6
        "paths": {"arguments": ["path"], "roots": ["/srv"]},  # 7
    },
    "rate_limits": [{"scope": "tool", "rate": 1_000_000, "burst": 1_000_000}],  # 8
    "concurrency": {"per_server": 64, "queue": 64},  # 9
    "results": {"max_bytes": 100_000, "redact": True},  # 10
}


def engine(constraints: dict[str, Any], audit: Path) -> ToolExecutionEngine:
    config = parse_config({"mcpServers": {"fx": {"command": "x"}}, "constraints": constraints})
    policy = build_policy(config)
    fake = Instant(config)
    return ToolExecutionEngine(
        tools=fake,
        call=fake,
        audit=JsonlAuditSink(audit),
        settings=EngineSettings.from_config(config),
        pre_hooks=policy.pre,
        wrap_hooks=policy.wrap,
        post_hooks=policy.post,
    )


async def per_call_us(eng: ToolExecutionEngine, calls: int) -> float:
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        run = await eng.execute("fx__write", ARGS)
        samples.append((time.perf_counter() - t0) * 1e6)
        assert run.context.success, run.result
    return statistics.median(samples)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    configure_logging("error")
    tmp = Path(tempfile.mkdtemp(prefix="toolscore-bench-"))
    off, on = engine({"enabled": False}, tmp / "off.jsonl"), engine(TEN_RULES, tmp / "on.jsonl")
    await per_call_us(off, 1000)
    await per_call_us(on, 1000)
    results: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(args.rounds):
        results["off"].append(await per_call_us(off, args.calls))
        results["on"].append(await per_call_us(on, args.calls))
    base, rules = statistics.median(results["off"]), statistics.median(results["on"])
    print(f"engine per call, constraints off : {base:7.1f} us")
    print(f"engine per call, 10 rules active : {rules:7.1f} us")
    print(f"added by the rules               : {rules - base:7.1f} us  (target <= 100 us)")


if __name__ == "__main__":
    anyio.run(main)
