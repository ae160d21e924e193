"""The catalog's search index behind `search_tools`: BM25F over a tool's fields; pure.

Theory of operation. Each tool is a document of fields, each with a weight: its name (split on
`_`, `-` and case, stemmed and as written), its title, the first sentence of its description, the
whole description, its parameters' names and descriptions, its annotations, its capability tags
and its server's words (its name, and a prefix nearly all its tool names share), which count
there only, not again in the other fields.
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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from toolscore.toolhub.capabilities import Tagged
from toolscore.toolhub.synonyms import related, stems
from toolscore.toolhub.text import MAX_TEXT_CHARS, STOPWORDS, stem, terms

__all__ = ["FIELD_WEIGHTS", "MAX_QUERY_WORDS", "Hit", "SearchIndex"]

MAX_QUERY_WORDS = 32
"""Words of a query that count; the rest are ignored (a query is a few keywords)."""
FIELD_WEIGHTS: Mapping[str, float] = {
    "name": 3.0,
    "exact": 0.5,
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
_B: Mapping[str, float] = {"name": 0.5, "exact": 0.5, "title": 0.5, "tags": 0.3, "server": 0.0, "annotations": 0.0}
"""Length normalisation per field (0.75 where unnamed): short fields barely vary in length."""
_K1 = 1.2
_SYNONYM = 0.5
"""What a synonym's match is worth against the query word's own."""
_MAX_PARAMS = 64
_MAX_DEPTH = 3
_SENTENCE_END = re.compile(r"[.!?](\s|$)|\n")
_WORD = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])|[a-z]+|[0-9]+")
_URL = re.compile(r"(?:[a-z][a-z0-9+.-]{0,15}://|www\.)\S|[\w-]{1,63}\.(?:com|org|net|io|dev)(?:/|$)", re.I)
_FILE = re.compile(r"[\w*?./~-]{0,200}\w\.[A-Za-z][A-Za-z0-9]{0,3}$")
_PREFIX_MIN_TOOLS = 3
_PREFIX_SHARE = 0.8
"""A word in at least this share of a server's tool names (of three or more) is the server's prefix."""
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


def _server_words(tools: Mapping[str, Tagged]) -> dict[str, frozenset[str]]:
    """Per server: its name's words, and words in nearly all of its tools' names (a prefix such as `browser_`)."""
    names: dict[str, list[set[str]]] = defaultdict(list)
    for tagged in tools.values():
        route = tagged.route
        names[route.server].append(set(terms(route.local_name or route.remote_name)))
    out = {}
    for server, sets in names.items():
        common: set[str] = set()
        if len(sets) >= _PREFIX_MIN_TOOLS:
            counts: dict[str, int] = defaultdict(int)
            for words in sets:
                for word in words:
                    counts[word] += 1
            common = {w for w, n in counts.items() if n >= _PREFIX_SHARE * len(sets)}
        out[server] = frozenset(terms(server)) | common
    return out


def _exact(name: str) -> list[str]:
    """The words of a name as written, lower-cased, less stop words."""
    return [w for w in (raw.lower() for raw in _WORD.findall(name[:MAX_TEXT_CHARS])) if w not in STOPWORDS]


def _fields(tagged: Tagged, server_words: frozenset[str]) -> dict[str, list[str]]:
    route = tagged.route
    tool = route.tool
    description = (tool.description or "")[:MAX_TEXT_CHARS]
    notes = tool.annotations
    title = " ".join(t for t in (tool.title, notes.title if notes else None) if t)
    params = [p for _, p in zip(range(_MAX_PARAMS), _parameters(tool.input_schema), strict=False)]
    hints = [word for attr, word in _HINTS if notes is not None and getattr(notes, attr)]

    def own(words: list[str]) -> list[str]:
        # The server's own words say which server, never which of its tools: they count once, as `server`.
        return [w for w in words if w not in server_words]

    return {
        "name": own(terms(route.local_name or route.remote_name)),
        "exact": [f"={w}" for w in _exact(route.local_name or route.remote_name) if stem(w) not in server_words],
        "title": own(terms(title)),
        "summary": own(terms(_summary(description))),
        "description": own(terms(description)),
        "params": [t for name, _ in params for t in terms(name)],
        "param_text": own([t for _, text in params for t in terms(text)][:512]),
        "annotations": hints,
        "tags": [t for tag in sorted(tagged.tags) for t in terms(tag)],
        "server": sorted(server_words),
    }


def _query(query: str, known: Callable[[str], bool]) -> list[tuple[str, str]]:
    """(term, the query's own word) per word that can tell tools apart, in order, first occurrence only.

    Each word counts stemmed, and as written against the names' exact forms (`=notifications`), so
    a plural asks more for `list_notifications` than for `get_notification_details`. Values in a
    query name a kind of thing, not a tool: a URL counts as `url`, a file name with an extension as
    `file`, and a bare number not at all. Two adjacent words the index knows as one count as one
    (`local storage` finds `localstorage`, `look up` is `lookup`), the second then not on its own.
    """
    out: dict[str, str] = {}
    previous: str | None = None
    for token in query[:MAX_TEXT_CHARS].split():
        kind = "url" if _URL.match(token) else "file" if _FILE.match(token) else None
        if kind is not None:
            out.setdefault(kind, token)
            previous = None
            continue
        for raw in _WORD.findall(token):
            lower = raw.lower()
            joined = stem(previous + lower) if previous is not None and lower.isalpha() else None
            previous = lower if lower.isalpha() else None
            if joined is not None and known(joined):
                out.setdefault(joined, f"{previous} {lower}")
                continue
            if lower.isdigit() or lower in STOPWORDS or len(lower) == 1:
                continue
            out.setdefault(stem(lower), lower)
            out.setdefault(f"={lower}", lower)
    return list(out.items())


class SearchIndex:
    """BM25F over the exposed tools; immutable once built."""

    def __init__(self, tools: Mapping[str, Tagged]) -> None:
        self._names: list[str] = []
        self._servers: list[str] = []
        self._tags: list[frozenset[str]] = []
        docs: list[dict[str, list[str]]] = []
        server_words = _server_words(tools)
        for name, tagged in tools.items():
            self._names.append(name)
            self._servers.append(tagged.route.server)
            self._tags.append(tagged.tags)
            docs.append(_fields(tagged, server_words[tagged.route.server]))
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
        # A synonym-table term's postings merged with its synonyms' (each tool's best match, a synonym at
        # a discount), once here: a few milliseconds at 2,000 tools, and no search pays for it.
        self._expanded: dict[str, dict[int, float]] = {}
        for term in sorted(stems()):
            best = dict(self._postings.get(term, {}))
            for other in sorted(related(term)):
                for doc, value in self._postings.get(other, {}).items():
                    if value * _SYNONYM > best.get(doc, 0.0):
                        best[doc] = value * _SYNONYM
            if best:
                self._expanded[term] = best

    def __len__(self) -> int:
        return len(self._names)

    def _knows(self, term: str) -> bool:
        return term in self._postings or term in self._expanded

    def _matches(self, term: str) -> Mapping[int, float]:
        """Each tool's best match for `term`: the term itself, or one of its synonyms at a discount."""
        expanded = self._expanded.get(term)
        return expanded if expanded is not None else self._postings.get(term, {})

    def search(self, query: str, k: int, *, server: str | None = None, capability: str | None = None) -> list[Hit]:
        """The `k` best tools for `query`, best first (no match: empty); `server`/`capability` narrow them."""
        scores: dict[int, float] = defaultdict(float)
        matched: list[tuple[str, Mapping[int, float]]] = []
        for term, word in _query(query, self._knows)[: 2 * MAX_QUERY_WORDS]:  # each word: its stem and its form
            matches = self._matches(term)
            if matches:
                matched.append((word, matches))
                for doc, value in matches.items():
                    scores[doc] += value
        if server is not None or capability is not None:
            scores = defaultdict(
                float,
                {
                    doc: score
                    for doc, score in scores.items()
                    if (server is None or self._servers[doc] == server)
                    and (capability is None or capability in self._tags[doc])
                },
            )
        if not scores or k < 1:
            return []
        # Every tool's terms are added in the query's order, so equal tools get bit-equal sums: the
        # k-th best score is a sharp cut, and the tools at or above it are ordered by score, then name.
        cut = heapq.nlargest(k, scores.values())[-1]
        ranked = sorted(
            (doc for doc, score in scores.items() if score >= cut), key=lambda d: (-scores[d], self._names[d])
        )
        return [
            Hit(self._names[doc], round(scores[doc], 4), tuple(dict.fromkeys(w for w, m in matched if doc in m)))
            for doc in ranked[:k]
        ]
