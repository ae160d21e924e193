"""`search_tools`' retrieval quality on its golden set, and the search latency at 200 and 2,000 tools.

    .venv/bin/python benchmarks/retrieval.py [--rounds 5] [--misses [PART]] [--rerank [--weights W,W,...]]

The golden set (`benchmarks/data/toolhub_golden.json`, docs/toolhub.md says how it was made) holds
tool definitions of published MCP servers and queries written as a user would, never naming the
tool, each with graded relevance (2: the tool for the task, 1: one that would also do, else 0).
The index is the one the gateway builds (`SearchIndex` over the real registry's routes and the
capability tagger), queried as `search_tools` queries it.

The queries fall in parts, each reported on its own: the original 134 split in two halves by a hash
of the query's text (the first byte of its SHA-256 even: the `tune` half, odd: the `held-out` half),
two batches written later for tuning (`"set": "tune-extra"`, and `"tune-2"` in the style of
`fresh-2`; reported with the tune half as `tune+`), the `fresh` queries (`"set": "fresh"`), written
over the same tools before the ranker was run on them and never used to tune it, and the sealed
`fresh-2` queries (`"set": "fresh-2"`), written in another style (situations, terse commands,
idioms) before a later round of ranker changes and measured only before it and after its last
change. Two more batches are in the style of published tool-retrieval benchmarks (requests with
concrete details, outcomes, search-box keywords, questions), each written from the tool
definitions alone by a writer who saw neither the ranker nor any other query: `tune-3` (tuning,
in `tune+`), then `fresh-3`, `fresh-4`, `fresh-5` and `fresh-6`, each sealed for one round of
ranker changes, the next. Ranking
changes are tuned on `tune+` only (`--misses` lists that part's failures unless told another);
`held-out` and the `fresh` parts say how well the ranker does on queries it was not fitted to,
`original` and `all` are the sums.

Quality, per part: recall@1/5/10 (a grade-2 tool among the first k), MRR (of the first
grade-2 tool; 0 past 100) and nDCG@10 (gains 2^grade - 1). Latency: `SearchIndex.search(query,
10)` alone, per query, at 200 tools (the first 200 of the set) and at 2,000 (the set repeated
under other server names, as a large gateway would hold similar servers), p50 and p95 over
`--rounds` passes of every query, in wall-clock time and in the CPU time of the searching thread
(on a busy machine the wall-clock tail is mostly waiting for a CPU). `--misses` lists the queries
of one part (default `tune+`) whose grade-2 tool is not in the top 5, with what came first.

`--rerank` adds the optional embedding stage (`toolhub/rerank.py`; needs `toolscore[rerank]`):
every part's figures with it off and on, from the same index in the same run, and the search
latency with it on (the first search, which embeds the whole catalog, apart from the rest).
`--weights 0.1,0.2,...` prints the tuning data's figures (`tune+` only) for each blend weight: the
weight is chosen there and on the tune half of MetaTool's corpus (`retrieval_external.py`), never
on `held-out` or the `fresh` parts.

Targets (issue "Finding the right tool among thousands"): recall@5 >= 0.90, MRR >= 0.75,
p95 <= 5 ms at 2,000 tools.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import mcp_types
from _common import percentile

from toolscore.config import ToolHubSettings, parse_config
from toolscore.downstream.registry import build_registry
from toolscore.toolhub.capabilities import Tagged, index_capabilities
from toolscore.toolhub.rerank import WEIGHT, Reranker, reranker_for
from toolscore.toolhub.search import Hit, SearchIndex

GOLDEN = Path(__file__).parent / "data" / "toolhub_golden.json"
PARTS = (
    "tune",
    "tune-extra",
    "tune-2",
    "tune-3",
    "held-out",
    "fresh",
    "fresh-2",
    "fresh-3",
    "fresh-4",
    "fresh-5",
    "fresh-6",
    "fresh-7",
    "fresh-8",
    "fresh-9",
    "fresh-10",
    "fresh-11",
)


def part(entry: dict[str, Any]) -> str:
    """Which part of the golden set a query is in: the later batches by their mark, the
    original queries `tune` or `held-out` by their text's hash."""
    marked = entry.get("set")
    if marked in PARTS:
        return str(marked)
    return "tune" if hashlib.sha256(entry["query"].encode()).digest()[0] % 2 == 0 else "held-out"


def groups(queries: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The parts reported, in order: each part, the tuning data (`tune+`), the original set, all."""
    by = {name: [q for q in queries if part(q) == name] for name in PARTS}
    return {
        **by,
        "tune+": by["tune"] + by["tune-extra"] + by["tune-2"] + by["tune-3"],
        "original": by["tune"] + by["held-out"],
        "all": queries,
    }


Search = Callable[[str, int], list[Hit]]
"""A ranker as the benchmark calls it: (query, k) -> hits, best first."""


def catalog_of(servers: dict[str, list[dict[str, Any]]]) -> Mapping[str, Tagged]:
    """The gateway's tagged tools over `servers` (name -> tool definitions), as the index sees them."""
    tools = {name: [mcp_types.Tool.model_validate(t) for t in defs] for name, defs in servers.items()}
    config = parse_config({"mcpServers": {name: {"type": "memory"} for name in servers}})
    routes = list(build_registry(tools, config).routes.values())
    return index_capabilities(routes, config).tools


def index_of(servers: dict[str, list[dict[str, Any]]]) -> SearchIndex:
    """The gateway's search index over `servers` (name -> tool definitions)."""
    return SearchIndex(catalog_of(servers))


def reranked(reranker: Reranker, index: SearchIndex, tools: Mapping[str, Tagged]) -> Search:
    """`index` with the second stage, as `ToolHub.search` runs it."""
    return lambda query, k: reranker.search(index, tools, query, k)


def quality(index: SearchIndex | Search, queries: list[dict[str, Any]]) -> tuple[dict[str, float], list[str]]:
    """The metrics over `queries`, and a line per query whose best tool is not in the top 5."""
    search = index.search if isinstance(index, SearchIndex) else index
    found = {"recall@1": 0.0, "recall@5": 0.0, "recall@10": 0.0, "MRR": 0.0, "nDCG@10": 0.0}
    misses = []
    for entry in queries:
        grades: dict[str, int] = entry["relevant"]
        ranked = [hit.name for hit in search(entry["query"], 100)]
        first = next((i + 1 for i, name in enumerate(ranked) if grades.get(name) == 2), None)
        for k in (1, 5, 10):
            found[f"recall@{k}"] += first is not None and first <= k
        found["MRR"] += 1 / first if first else 0.0
        dcg = sum((2 ** grades.get(name, 0) - 1) / math.log2(i + 2) for i, name in enumerate(ranked[:10]))
        ideal = sorted(grades.values(), reverse=True)[:10]
        found["nDCG@10"] += dcg / sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
        if first is None or first > 5:
            misses.append(f"  {entry['query']!r}: rank {first or '>100'}; top 3 {ranked[:3]}")
    return {name: value / len(queries) for name, value in found.items()}, misses


def scaled(servers: dict[str, list[dict[str, Any]]], total: int) -> dict[str, list[dict[str, Any]]]:
    """`total` tools: the set's servers, then copies of them under other names, cut at `total`."""
    out: dict[str, list[dict[str, Any]]] = {}
    left = total
    copy = 0
    while left > 0:
        for name, defs in servers.items():
            if left <= 0:
                break
            out[name if copy == 0 else f"{name}{copy + 1}"] = defs[:left]
            left -= len(out[name if copy == 0 else f"{name}{copy + 1}"])
        copy += 1
    return out


def latency(index: SearchIndex | Search, queries: list[str], rounds: int) -> tuple[list[float], list[float]]:
    """Each search's wall-clock and CPU (this thread's) time, in milliseconds."""
    search = index.search if isinstance(index, SearchIndex) else index
    wall, cpu = [], []
    for _ in range(rounds):
        for query in queries:
            began, began_cpu = time.perf_counter(), time.thread_time()
            search(query, 10)
            cpu.append((time.thread_time() - began_cpu) * 1000)
            wall.append((time.perf_counter() - began) * 1000)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--misses",
        nargs="?",
        const="tune+",
        choices=(*PARTS, "tune+", "original", "all"),
        help="list the queries of one part (default: tune+, the tuning data) whose tool is not in the top 5",
    )
    parser.add_argument("--rerank", action="store_true", help="also run with the embedding re-rank (toolscore[rerank])")
    parser.add_argument(
        "--weights", help="with --rerank: the tuning data's figures for each of these blend weights (comma-separated)"
    )
    args = parser.parse_args()
    reranker = None
    if args.rerank:
        reranker = reranker_for(ToolHubSettings(rerank="embedding"))
        if reranker is None:
            sys.exit("--rerank needs the re-ranker's model: pip install 'toolscore[rerank]'")
    golden = json.loads(GOLDEN.read_text())
    servers: dict[str, list[dict[str, Any]]] = golden["servers"]
    queries: list[dict[str, Any]] = golden["queries"]
    tools = sum(len(defs) for defs in servers.values())
    graded = sum(len(q["relevant"]) for q in queries)
    negatives = sum(len(q.get("hard_negatives", ())) for q in queries)
    print(f"golden set: {len(queries)} queries over {tools} tools of {len(servers)} servers")
    print(f"  {graded} graded pairs, {negatives} hard negatives")
    began = time.perf_counter()
    catalog = catalog_of(servers)
    index = SearchIndex(catalog)
    print(f"registry, tags and index built in {(time.perf_counter() - began) * 1000:.1f} ms")
    shown: dict[str, list[str]] = {}
    rankers: dict[str, SearchIndex | Search] = {"": index}
    if reranker is not None:
        rankers = {"off": index, f"on ({reranker.weight})": reranked(reranker, index, catalog)}
    for label, ranker in rankers.items():
        if label:
            print(f"re-rank {label}:")
        for name, group in groups(queries).items():
            metrics, misses = quality(ranker, group)
            print(f"{name:>10} ({len(group):3d}): " + "  ".join(f"{m} {v:.3f}" for m, v in metrics.items()))
            if args.misses == name:
                shown[f"{name} {label}".strip()] = misses
    if reranker is not None and args.weights:
        tuning = groups(queries)["tune+"]
        for weight in (float(w) for w in args.weights.split(",")):
            reranker.weight = weight
            metrics, _ = quality(reranked(reranker, index, catalog), tuning)
            print(f"weight {weight:.2f}, tune+ only: " + "  ".join(f"{m} {v:.3f}" for m, v in metrics.items()))
        reranker.weight = WEIGHT
    for name, misses in shown.items():
        print(f"{name}: {len(misses)} queries without their tool in the top 5:")
        print("\n".join(misses))
    words = [q["query"] for q in queries]
    for total in (200, 2000):
        big_catalog = catalog_of(scaled(servers, total))
        big = SearchIndex(big_catalog)
        report(f"search latency at {len(big)} tools", *latency(big, words, args.rounds))
        if reranker is not None:
            # a re-ranker of its own, so the first search embeds the catalog as a new gateway's would
            # (the gateway does that in a worker thread before its first search)
            fresh = reranker_for(ToolHubSettings(rerank="embedding")) or reranker
            with_it = reranked(fresh, big, big_catalog)
            began = time.perf_counter()
            with_it(words[0], 10)
            first = (time.perf_counter() - began) * 1000
            print(f"  embedding stage on, the first search (the catalog embedded): {first:.0f} ms")
            report("  embedding stage on, every search after it", *latency(with_it, words, args.rounds))


def report(what: str, wall: list[float], cpu: list[float]) -> None:
    """One latency line: wall-clock and CPU p50/p95."""
    times = {name: (percentile(v, 0.5), percentile(v, 0.95)) for name, v in (("wall", wall), ("CPU", cpu))}
    print(
        f"{what}: p50 {times['wall'][0]:.3f} ms  p95 {times['wall'][1]:.3f} ms"
        f"  (CPU time: p50 {times['CPU'][0]:.3f} ms  p95 {times['CPU'][1]:.3f} ms)"
    )


if __name__ == "__main__":
    main()
