"""`search_tools` on third parties' corpora it was never built on: MetaTool's and the Berkeley
Function-Calling Leaderboard's.

    .venv/bin/python benchmarks/retrieval_external.py metatool METATOOL [--rerank [--weights W,W,...]]
    .venv/bin/python benchmarks/retrieval_external.py bfcl GORILLA [--rerank [--weights W,W,...]]

Each corpus is read from a checkout given on the command line; nothing of either is kept in this
repository.

- `metatool`: a checkout of MetaTool (Huang et al., "MetaTool Benchmark for Large Language Models",
  ICLR 2024; the repository HowieHwong/MetaTool, MIT licence). Its `dataset/plugin_des.json` (a
  plugin's name and the one-line description the paper's prompts show) becomes one tool each, and
  its `dataset/data/all_clean_data.csv` (a request and the one plugin that serves it) the queries.
  The plugins are consumer services (weather, shopping, travel, finance, jobs), and many overlap
  (`ProductSearch`, `ShoppingAssistant`, `Discount`).
- `bfcl`: a checkout of Gorilla (the repository ShishirPatil/gorilla, Apache-2.0 licence), whose
  leaderboard's `simple_python`, `multiple`, `live_simple` and `live_multiple` questions are read
  (`berkeley-function-call-leaderboard/bfcl_eval/data/BFCL_v4_*.json` and their
  `possible_answer/`). Every function offered to any question is one tool (by name, the first
  definition of a name kept), each question whose answer is one call a query, the function it
  calls the tool to find. A function keeps its name, description and parameters' names and
  descriptions: the corpus writes its parameters' types in Python's words (`dict`, `float`,
  `tuple`), no JSON Schema, and the gateway does not list a tool whose schema no client would
  accept.

The requests fall in two halves by a hash of their text (the first byte of its SHA-256 even:
`tune`, odd: `held-out`), as the golden set's original queries do: a choice made on a corpus
(the embedding stage's weight) is made on `tune` and reported on `held-out`. Beside the gateway's
ranker, a textbook Okapi BM25 (k1 1.2, b 0.75) over each tool's name words and description,
without stemming or synonyms, gives the plain word match for reference. Metrics as in
`retrieval.py`: recall@1/5/10 and MRR of the one right tool, nDCG@10.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from retrieval import catalog_of, part, quality, reranked

from toolscore.config import ToolHubSettings
from toolscore.toolhub.rerank import WEIGHT, reranker_for
from toolscore.toolhub.search import Hit, SearchIndex

SERVER = "corpus"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
BFCL_PARTS = ("simple_python", "multiple", "live_simple", "live_multiple")

Corpus = tuple[list[dict[str, Any]], list[dict[str, Any]]]
"""Tool definitions, and queries as golden-set entries (`query`, `relevant`: {tool: 2})."""


def _name(name: str) -> str:
    return _UNSAFE.sub("_", name)


def _entry(query: str, tool: str) -> dict[str, Any]:
    return {"query": query, "relevant": {f"{SERVER}__{_name(tool)}": 2}}


def metatool(root: Path) -> Corpus:
    """MetaTool's plugins as tool definitions, and its requests."""
    described: dict[str, str] = json.loads((root / "dataset" / "plugin_des.json").read_text())
    tools = [
        {"name": _name(name), "description": text, "inputSchema": {"type": "object"}}
        for name, text in described.items()
    ]
    with (root / "dataset" / "data" / "all_clean_data.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    queries = [_entry(row["Query"], row["Tool"]) for row in rows if row["Tool"] in described and row["Query"].strip()]
    return tools, queries


def bfcl(root: Path) -> Corpus:
    """The leaderboard's functions as tool definitions, and its one-call questions."""
    data = root / "berkeley-function-call-leaderboard" / "bfcl_eval" / "data"
    tools: dict[str, dict[str, Any]] = {}
    queries = []
    for subset in BFCL_PARTS:
        answers = {}
        for line in (data / "possible_answer" / f"BFCL_v4_{subset}.json").read_text().splitlines():
            answer = json.loads(line)
            answers[answer["id"]] = answer["ground_truth"]
        for line in (data / f"BFCL_v4_{subset}.json").read_text().splitlines():
            question = json.loads(line)
            for function in question["function"]:
                parameters = (function.get("parameters") or {}).get("properties") or {}
                tools.setdefault(
                    _name(function["name"]),
                    {
                        "name": _name(function["name"]),
                        "description": function.get("description") or "",
                        "inputSchema": {
                            "type": "object",
                            "properties": {
                                name: {"description": str(spec.get("description") or "")}
                                for name, spec in parameters.items()
                                if isinstance(spec, dict)
                            },
                        },
                    },
                )
            calls = answers.get(question["id"]) or []
            said = [turn["content"] for turn in question["question"][0] if turn.get("role") == "user"]
            if len(calls) == 1 and len(calls[0]) == 1 and said:
                queries.append(_entry(said[-1], next(iter(calls[0]))))
    return list(tools.values()), queries


CORPORA = {"metatool": metatool, "bfcl": bfcl}


def halves(queries: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """`tune` and `held-out` as the golden set's original queries are split (`retrieval.part`), and both."""
    return {
        "tune": [q for q in queries if part(q) == "tune"],
        "held-out": [q for q in queries if part(q) == "held-out"],
        "all": queries,
    }


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
    parser.add_argument("corpus", choices=sorted(CORPORA))
    parser.add_argument("path", type=Path, help="a checkout of the corpus's repository")
    parser.add_argument("--rerank", action="store_true", help="also with the embedding stage (toolscore[rerank])")
    parser.add_argument("--weights", help="with --rerank: the tune half's figures for each of these blend weights")
    args = parser.parse_args()
    tools, queries = CORPORA[args.corpus](args.path)
    catalog = catalog_of({SERVER: tools})
    index = SearchIndex(catalog)
    known = [q for q in queries if next(iter(q["relevant"])) in catalog]
    left = len(queries) - len(known)
    print(f"{args.corpus}: {len(known)} requests over {len(catalog)} tools", end="")
    print(f" ({left} requests for a tool the gateway does not list left out)" if left else "")
    parts = halves(known)
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
