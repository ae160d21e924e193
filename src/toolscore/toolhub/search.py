"""The catalog's search index: BM25 over tool names, descriptions and capability tags; pure.

Built once per tool list (microseconds per tool), searched per `search_tools` call: a query
touches only the postings of its own words, so a search over hundreds of tools stays well under a
millisecond. Name words and tags count more than description words (they are repeated in the
document), since a model searching for "web search" means a tool named so more than one that
mentions the web in passing.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from toolscore.toolhub.capabilities import Tagged
from toolscore.toolhub.text import words

__all__ = ["MAX_QUERY_WORDS", "SearchIndex"]

MAX_QUERY_WORDS = 32
"""Words of a query that count; the rest are ignored (a query is a few keywords)."""
_K1 = 1.2
_B = 0.75
_NAME_WEIGHT = 3
_TAG_WEIGHT = 2


@dataclass(frozen=True, slots=True)
class _Posting:
    doc: int
    tf: int


class SearchIndex:
    """BM25 over the exposed tools; immutable once built."""

    def __init__(self, tools: Mapping[str, Tagged]) -> None:
        self._names: list[str] = []
        lengths: list[int] = []
        postings: dict[str, list[_Posting]] = defaultdict(list)
        for doc, (name, tagged) in enumerate(tools.items()):
            route = tagged.route
            terms = Counter(words(route.remote_name) * _NAME_WEIGHT)
            terms.update(words(route.server))
            terms.update(words(route.tool.description or ""))
            for tag in tagged.tags:
                terms.update(words(tag) * _TAG_WEIGHT)
            self._names.append(name)
            lengths.append(sum(terms.values()))
            for term, tf in terms.items():
                postings[term].append(_Posting(doc, tf))
        count = len(self._names)
        average = (sum(lengths) / count) if count else 1.0
        # Per posting, the document-length part of BM25's denominator, computed once here.
        self._norm = [_K1 * (1 - _B + _B * length / average) for length in lengths]
        self._idf = {t: math.log(1 + (count - len(p) + 0.5) / (len(p) + 0.5)) for t, p in postings.items()}
        self._postings = dict(postings)

    def __len__(self) -> int:
        return len(self._names)

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        """The `k` best tools for `query`, best first, with their scores (no match: empty)."""
        scores: dict[int, float] = defaultdict(float)
        for term in dict.fromkeys(words(query)[:MAX_QUERY_WORDS]):
            idf = self._idf.get(term)
            if idf is None:
                continue
            for posting in self._postings[term]:
                scores[posting.doc] += idf * posting.tf * (_K1 + 1) / (posting.tf + self._norm[posting.doc])
        best = heapq.nlargest(k, scores.items(), key=lambda item: (item[1], -item[0]))
        return [(self._names[doc], round(score, 4)) for doc, score in best]
