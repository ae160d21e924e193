"""The ToolHub's figures: listing size per catalog mode, search latency, first_success over a race.

    .venv/bin/python benchmarks/toolhub.py [--tools 200] [--searches 2000] [--rounds 15] [--only steps]

1. `tools/list` of a gateway over `--tools` in-process tools (10 servers), in `full` and in
   `search` mode, as the bytes of the JSON result a real client receives.
2. `search_tools` p50: the hub's own search (BM25 plus the full definitions of the top 5) in
   process, and the same through a real in-memory MCP client (that adds the protocol hop).
3. `first_success` over a fast (50 ms) and a slow (500 ms) search server, both stdio subprocesses:
   the capability call's p50 against a direct call of the fast server's tool, alternating rounds.
4. Steps (model tool calls) per task in `full` and `search` mode, over the same `--tools` catalog,
   for a few representative tasks, counted by driving a real client with a fixed policy in place
   of a model: in full mode every tool is listed, so each needed tool is one call (or the whole
   task one `orchestrate` plan); in search mode each needed tool that no earlier search returned
   costs a `search_tools` with the task's own words (k=5), and a second one with the tool's verb
   and topic when the first missed it, then `call_tool` per tool (or one plan). Every call is
   made and must succeed; the searches' misses are BM25's, measured, not assumed.
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


# (task, [(needed tool: verb_topic, the words a user would search with)])
TASKS = [
    ("one lookup", [("get_weather", "weather at station w-17")]),
    ("two independent actions", [("export_flight", "export my flight records"), ("delete_email", "delete an email")]),
    (
        "a chain of three on one server",
        [
            ("search_hotel", "find a hotel booking"),
            ("get_hotel", "hotel booking details"),
            ("update_hotel", "change the hotel booking"),
        ],
    ),
    (
        "five tools on five servers",
        [
            ("list_invoice", "unpaid invoices"),
            ("create_ticket", "open a support ticket"),
            ("get_calendar", "my calendar today"),
            ("update_stock", "update stock level"),
            ("import_recipe", "import a recipe"),
        ],
    ),
]


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


def _matches(name: str, needed: str) -> bool:
    """`weather0__get_weather_3` is a `get_weather` tool (the catalog has two of each, alike)."""
    return name.partition("__")[2].rsplit("_", 1)[0] == needed


async def steps(total: int) -> None:
    fakes = catalog(total)
    rows = []
    for mode in ("full", "search"):
        async with running_gateway(fakes, toolscore={"catalog": mode}) as (gw, _), Client(gw.server) as client:
            listed = [t.name for t in (await client.list_tools()).tools]
            for task, needs in TASKS:
                searches, misses, found = 0, 0, {}
                seen: list[str] = [] if mode == "search" else listed
                for needed, words in needs:
                    for query in (words, needed.replace("_", " ")):
                        hit = next((n for n in seen if _matches(n, needed)), None)
                        if hit is not None or mode == "full":
                            break
                        searches += 1
                        answer = await client.call_tool("search_tools", {"query": query, "k": 5})
                        if not answer.is_error:  # else "No tool matches": a miss like any other
                            seen = seen + [t["name"] for t in json.loads(answer.content[0].text)]  # type: ignore[union-attr]
                        misses += not any(_matches(n, needed) for n in seen)
                    hit = next((n for n in seen if _matches(n, needed)), None)
                    assert hit is not None, (mode, needed)
                    found[needed] = hit
                # Do the task both ways: a call per tool, then one plan; every call must succeed.
                for name in found.values():
                    args = {"id": "x1"}
                    if mode == "search":
                        result = await client.call_tool("call_tool", {"name": name, "arguments": args})
                    else:
                        result = await client.call_tool(name, args)
                    assert not result.is_error, result
                plan = "".join(
                    f'<call server="{gw.hub.registry.get(n).server}" tool="{n.partition("__")[2]}">'  # type: ignore[union-attr]
                    '{"id": "x1"}</call>'
                    for n in found.values()
                )
                result = await client.call_tool("orchestrate", {"plan": plan + "<execute_tools />"})
                assert not result.is_error, result
                rows.append((task, mode, len(needs), searches, misses))
    print(f"steps (model tool calls) per task, {total} tools; search mode: search_tools k=5, a second try on a miss")
    header = f"{'full: calls / plan':>18s}  {'search: calls / plan':>20s}  searches (misses)"
    print(f"  {'task':34s} {'tools':>5s}  {header}")
    by_task = {(t, m): (n, s, x) for t, m, n, s, x in rows}
    for task, _ in TASKS:
        n, searched, missed = by_task[(task, "search")]
        assert by_task[(task, "full")][1] == 0  # every tool listed: no search
        print(
            f"  {task:34s} {n:5d}  {n:>11d} / {1:<4d}  {n + searched:>13d} / {1 + searched:<4d}  {searched} ({missed})"
        )


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
    parser.add_argument("--only", choices=["listing", "race", "steps"], help="run one part")
    args = parser.parse_args()
    configure_logging("error")
    if args.only in (None, "listing"):
        anyio.run(listing_and_search, args.tools, args.searches)
    if args.only in (None, "race"):
        anyio.run(race, args.rounds, 0.05, 0.5)
    if args.only in (None, "steps"):
        anyio.run(steps, args.tools)


if __name__ == "__main__":
    main()
