"""The ToolHub's figures: listing size per catalog mode, search latency, first_success over a race.

    .venv/bin/python benchmarks/toolhub.py [--tools 200] [--searches 2000] [--rounds 15]

1. `tools/list` of a gateway over `--tools` in-process tools (10 servers), in `full` and in
   `search` mode, as the bytes of the JSON result a real client receives.
2. `search_tools` p50: the hub's own search (BM25 plus the full definitions of the top 5) in
   process, and the same through a real in-memory MCP client (that adds the protocol hop).
3. `first_success` over a fast (50 ms) and a slow (500 ms) search server, both stdio subprocesses:
   the capability call's p50 against a direct call of the fast server's tool, alternating rounds.
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
from mcp import Client

from toolscore import parse_config
from toolscore._logging import configure_logging
from toolscore.testing import FakeDownstream, running_gateway

ROOT = Path(__file__).resolve().parents[1]
SEARCH_SERVER = ROOT / "tests" / "fixtures" / "search_server.py"
TOPICS = ["weather", "stock", "calendar", "email", "invoice", "ticket", "recipe", "flight", "hotel", "lyrics"]
VERBS = ["get", "list", "create", "update", "delete", "search", "export", "import", "archive", "summarize"]
QUERIES = ["export flight records", "weather forecast", "delete an email", "search recipes", "hotel booking id"]


def catalog(total: int) -> dict[str, FakeDownstream]:
    per_server = max(1, total // len(TOPICS))
    fakes: dict[str, FakeDownstream] = {}
    for s, topic in enumerate(TOPICS):
        fake = FakeDownstream(topic)
        for t in range(per_server):
            verb = VERBS[t % len(VERBS)]
            schema = {
                "type": "object",
                "properties": {"id": {"type": "string", "description": f"The {topic} id."}, "note": {"type": "string"}},
                "required": ["id"],
            }
            fake.tool(f"{verb}_{topic}_{t}", schema=schema, description=f"{verb.title()} a {topic} record by its id.")(
                lambda id, note="": id
            )
        fakes[f"{topic}{s}"] = fake
    return fakes


def size(result: Any) -> int:
    """Bytes of the result as the wire carries it (compact JSON)."""
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


async def listing_and_search(total: int, searches: int) -> None:
    fakes = catalog(total)
    sizes = {}
    for mode in ("full", "search"):
        async with running_gateway(fakes, toolscore={"catalog": mode}) as (gw, _), Client(gw.server) as client:
            listed = await client.list_tools()
            sizes[mode] = (len(listed.tools), size(listed))
            if mode == "search":
                hub = gw.toolhub
                assert hub is not None
                in_process = []
                for i in range(searches):
                    began = time.perf_counter()
                    hub.search(QUERIES[i % len(QUERIES)], 5)
                    in_process.append(time.perf_counter() - began)
                through = []
                for i in range(searches // 4):
                    began = time.perf_counter()
                    await client.call_tool("search_tools", {"query": QUERIES[i % len(QUERIES)], "k": 5})
                    through.append(time.perf_counter() - began)
    full, search = sizes["full"], sizes["search"]
    print(f"tools/list, {total} tools behind the gateway")
    print(f"  full:   {full[0]:4d} tools listed, {full[1]:7d} bytes (~{full[1] // 4} tokens)")
    print(f"  search: {search[0]:4d} tools listed, {search[1]:7d} bytes (~{search[1] // 4} tokens)")
    print(f"  search/full: {search[1] / full[1]:.3f}")
    print("search_tools p50 / p95 (ms), top 5 with full schemas")
    for label, samples in (("in process (the hub)", in_process), ("through an MCP client", through)):
        q = statistics.quantiles(samples, n=20)
        print(f"  {label:24s} {statistics.median(samples) * 1000:7.3f} / {q[18] * 1000:7.3f}   (target p50 <= 1 ms)")


async def race(rounds: int, fast: float, slow: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:

        def engine(name: str, latency: float) -> dict[str, Any]:
            env = {"SEARCH_ENGINE": name, "SEARCH_LATENCY": str(latency), "SEARCH_STATE_DIR": tmp}
            return {"command": sys.executable, "args": [str(SEARCH_SERVER)], "env": env, "capabilities": ["search"]}

        config = parse_config(
            {
                "mcpServers": {"fast": engine("fast", fast), "slow": engine("slow", slow)},
                "toolscore": {"startup_grace_seconds": None, "audit": {"path": ""}, "log_dir": tmp},
            }
        )
        direct_args = {"query": "mcp"}
        hub_args = {"capability": "web", "arguments": {"query": "mcp"}, "strategy": "first_success"}
        async with running_gateway({}, config=config) as (gw, _), Client(gw.server) as client:
            for _ in range(3):  # warm both paths
                await client.call_tool("fast__web_search", direct_args)
                await client.call_tool("call_capability", hub_args)
            direct, raced = [], []
            for _ in range(rounds):
                began = time.perf_counter()
                await client.call_tool("fast__web_search", direct_args)
                direct.append(time.perf_counter() - began)
                began = time.perf_counter()
                answer = await client.call_tool("call_capability", hub_args)
                raced.append(time.perf_counter() - began)
                assert "fast" in answer.content[0].text  # type: ignore[union-attr]
    d, r = statistics.median(direct) * 1000, statistics.median(raced) * 1000
    print(
        f"first_success over fast ({fast * 1000:.0f} ms) + slow ({slow * 1000:.0f} ms) stdio servers, p50 of {rounds}"
    )
    print(f"  direct call to the fast one: {d:7.2f} ms")
    print(f"  call_capability:             {r:7.2f} ms")
    print(f"  ratio: {r / d:.3f}   (target <= 1.1)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tools", type=int, default=200)
    parser.add_argument("--searches", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    configure_logging("error")
    anyio.run(listing_and_search, args.tools, args.searches)
    anyio.run(race, args.rounds, 0.05, 0.5)


if __name__ == "__main__":
    main()
