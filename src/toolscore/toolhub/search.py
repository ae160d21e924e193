"""The catalog's search index behind `search_tools`: BM25F over a tool's fields; pure.

Theory of operation. Each tool is a document of fields, each with a weight: its name (split on
`_`, `-` and case), its title, the first sentence of its description, the whole description, its
parameters' names and descriptions, its annotations, its capability tags and its server's name.
BM25F folds a term's frequency in every field into one weighted frequency, each field normalised
by its own average length, and saturates that once (k1), so a word repeated in the description
cannot outweigh it in the name. The per-(term, tool) contribution does not depend on the query,
so it is computed once when the index is built; a search only adds up the postings of its own
terms, a few thousand additions at 2,000 tools.

A query word also looks for its synonyms (`synonyms.py`) at a discount, and each query word counts
once per tool, by its best match (the word itself or one synonym), so a tool does not win by
matching many synonyms of one word. Ranking is deterministic: equal scores go by tool name.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from toolscore.toolhub.capabilities import Tagged
from toolscore.toolhub.synonyms import related
from toolscore.toolhub.text import MAX_TEXT_CHARS, terms

__all__ = ["FIELD_WEIGHTS", "MAX_QUERY_WORDS", "Hit", "SearchIndex"]

MAX_QUERY_WORDS = 32
"""Words of a query that count; the rest are ignored (a query is a few keywords)."""
FIELD_WEIGHTS: Mapping[str, float] = {
    "name": 3.0,
    "title": 2.0,
    "summary": 1.0,
    "description": 1.0,
    "params": 0.8,
    "param_text": 0.4,
    "annotations": 0.5,
    "tags": 1.0,
    "server": 1.0,
}
"""How much a word counts in each field. The summary is the description's first sentence, which
says what the tool is for; it counts on top of the whole description."""
_B: Mapping[str, float] = {"name": 0.5, "title": 0.5, "tags": 0.3, "server": 0.0, "annotations": 0.0}
"""Length normalisation per field (0.75 where unnamed): short fields barely vary in length."""
_K1 = 1.2
_SYNONYM = 0.5
"""What a synonym's match is worth against the query word's own."""
_MAX_PARAMS = 64
_MAX_DEPTH = 3
_SENTENCE_END = re.compile(r"[.!?](\s|$)|\n")
_HINTS = (
    ("read_only_hint", "readonly"),
    ("destructive_hint", "destructive"),
    ("idempotent_hint", "idempotent"),
    ("open_world_hint", "openworld"),
)


@dataclass(frozen=True, slots=True)
class Hit:
    """One tool found, with its score and the query words that matched it (directly or by synonym)."""

    name: str
    score: float
    matched: tuple[str, ...]


def _summary(description: str) -> str:
    head = description[:400]
    end = _SENTENCE_END.search(head)
    return head[: end.start() + 1] if end else head


def _parameters(schema: Any, depth: int = 0) -> Iterator[tuple[str, str]]:
    """(name, description) of the schema's properties, nested objects included, bounded in depth."""
    if depth > _MAX_DEPTH or not isinstance(schema, dict):
        return
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return
    for name, spec in properties.items():
        described = spec.get("description") if isinstance(spec, dict) else None
        yield str(name), described if isinstance(described, str) else ""
        if isinstance(spec, dict):
            yield from _parameters(spec, depth + 1)
            yield from _parameters(spec.get("items"), depth + 1)


def _fields(tagged: Tagged) -> dict[str, list[str]]:
    route = tagged.route
    tool = route.tool
    description = (tool.description or "")[:MAX_TEXT_CHARS]
    notes = tool.annotations
    title = " ".join(t for t in (tool.title, notes.title if notes else None) if t)
    params = [p for _, p in zip(range(_MAX_PARAMS), _parameters(tool.input_schema), strict=False)]
    hints = [word for attr, word in _HINTS if notes is not None and getattr(notes, attr)]
    return {
        "name": terms(route.local_name or route.remote_name),
        "title": terms(title),
        "summary": terms(_summary(description)),
        "description": terms(description),
        "params": [t for name, _ in params for t in terms(name)],
        "param_text": [t for _, text in params for t in terms(text)][:512],
        "annotations": hints,
        "tags": [t for tag in sorted(tagged.tags) for t in terms(tag)],
        "server": terms(route.server),
    }


class SearchIndex:
    """BM25F over the exposed tools; immutable once built."""

    def __init__(self, tools: Mapping[str, Tagged]) -> None:
        self._names: list[str] = []
        self._servers: list[str] = []
        self._tags: list[frozenset[str]] = []
        docs: list[dict[str, list[str]]] = []
        for name, tagged in tools.items():
            self._names.append(name)
            self._servers.append(tagged.route.server)
            self._tags.append(tagged.tags)
            docs.append(_fields(tagged))
        count = len(docs)
        average = {f: (sum(len(d[f]) for d in docs) / count if count else 0.0) or 1.0 for f in FIELD_WEIGHTS}
        weighted: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        for doc, fields in enumerate(docs):
            for field, words in fields.items():
                if not words:
                    continue
                b = _B.get(field, 0.75)
                norm = FIELD_WEIGHTS[field] / (1 - b + b * len(words) / average[field])
                for word in words:
                    weighted[word][doc] += norm
        # Per (term, tool): idf times the saturated weighted frequency; a search only adds these.
        self._postings: dict[str, dict[int, float]] = {}
        for term, per_doc in weighted.items():
            idf = math.log(1 + (count - len(per_doc) + 0.5) / (len(per_doc) + 0.5))
            self._postings[term] = {doc: idf * tf / (_K1 + tf) for doc, tf in per_doc.items()}

    def __len__(self) -> int:
        return len(self._names)

    def search(self, query: str, k: int, *, server: str | None = None, capability: str | None = None) -> list[Hit]:
        """The `k` best tools for `query`, best first (no match: empty); `server`/`capability` narrow them."""
        surface: dict[str, str] = {}  # stem -> the query's own word, for `matched`
        for word in re.findall(r"[A-Za-z0-9]+", query[:MAX_TEXT_CHARS]):
            for stemmed in terms(word):
                surface.setdefault(stemmed, word.lower())
        asked = list(surface)[:MAX_QUERY_WORDS]
        scores: dict[int, float] = defaultdict(float)
        hits: dict[int, list[str]] = defaultdict(list)
        for term in asked:
            best: dict[int, float] = {}
            for candidate, weight in ((term, 1.0), *((r, _SYNONYM) for r in sorted(related(term)))):
                for doc, value in self._postings.get(candidate, {}).items():
                    value *= weight
                    if value > best.get(doc, 0.0):
                        best[doc] = value
            for doc, value in best.items():
                scores[doc] += value
                hits[doc].append(surface[term])

        def allowed(doc: int) -> bool:
            return (server is None or self._servers[doc] == server) and (
                capability is None or capability in self._tags[doc]
            )

        ranked = heapq.nsmallest(
            k,
            (doc for doc in scores if allowed(doc)),
            key=lambda doc: (-round(scores[doc], 9), self._names[doc]),
        )
        return [Hit(self._names[doc], round(scores[doc], 4), tuple(hits[doc])) for doc in ranked]
