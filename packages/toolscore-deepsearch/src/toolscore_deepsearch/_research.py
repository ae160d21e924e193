"""The research loop over a corpus: deterministic and extractive.

question -> terms -> BM25 passages -> best documents -> linked documents (bounded by `depth` and
`max_pages`) -> passages re-ranked -> sentences scored by the query terms they cover (weighted by
how rare each term is among the retrieved passages) -> an answer of the best sentences, each
with its source's citation number `[n]`, plus the numbered sources.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from toolscore_deepsearch._corpus import Corpus, Hit, query_terms

__all__ = ["Report", "Source", "research"]

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[`])|\n+")
_MARKUP = re.compile(r"^[\s|#>*\-+]+|[\s|]+$")
MAX_SENTENCE_CHARS = 400


def _sentences(text: str) -> list[str]:
    """Whole sentences and lines of a passage, with Markdown table and list markup trimmed.

    A piece that does not end a sentence (a passage cut inside one) is left out unless it is a
    line of its own (a heading, a list item or a table row), so no answer ends mid-word.
    """
    out = []
    for piece in _SENTENCE.split(text):
        piece = _MARKUP.sub("", piece).replace(" | ", "; ").strip()
        if 20 <= len(piece) <= MAX_SENTENCE_CHARS and not set(piece) <= set("|-: "):
            out.append(piece)
    return out


@dataclass(frozen=True, slots=True)
class Source:
    """One cited document."""

    n: int
    url: str
    title: str
    snippet: str


@dataclass
class Report:
    """What `research` found."""

    question: str
    answer: str
    sources: list[Source] = field(default_factory=list)
    passages: list[dict[str, object]] = field(default_factory=list)
    documents_searched: int = 0
    pages_followed: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "question": self.question,
            "answer": self.answer,
            "sources": [_source(s) for s in self.sources],
            "passages": self.passages,
            "documents_searched": self.documents_searched,
            "pages_followed": self.pages_followed,
        }

    def as_text(self) -> str:
        lines = [self.answer, "", "Sources:"]
        lines += [f"[{s.n}] {s.title} — {s.url}" for s in self.sources] or ["(none)"]
        return "\n".join(lines)


def _source(s: Source) -> dict[str, object]:
    return {"n": s.n, "url": s.url, "title": s.title, "snippet": s.snippet}


def _stem(word: str) -> str:
    # Enough folding for matching sentences against terms (FTS5's porter stemmer ranks passages).
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def research(
    corpus: Corpus,
    question: str,
    *,
    max_sources: int = 5,
    depth: int = 1,
    max_pages: int = 10,
    max_sentences: int = 6,
) -> Report:
    """Answer `question` from `corpus` with cited extractive sentences."""
    terms = query_terms(question)
    report = Report(question=question, answer="", documents_searched=corpus.documents)
    hits = corpus.search(terms, limit=50)
    best: dict[int, Hit] = {}
    for hit in hits:
        best.setdefault(hit.doc, hit)
    chosen = list(best)[:max_sources]
    # Follow links from the chosen documents, breadth first, within the bounds.
    frontier, followed = list(chosen), 0
    for _ in range(max(0, depth)):
        linked = [d for d in corpus.linked(frontier) if d not in best][: max(0, max_pages - followed)]
        if not linked:
            break
        for hit in corpus.search(terms, limit=20, docs=linked):
            best.setdefault(hit.doc, hit)
            hits.append(hit)
        followed += len(linked)
        frontier = linked
    report.pages_followed = followed
    ranked = sorted(best.values(), key=lambda h: -h.score)[:max_sources]
    if not ranked:
        report.answer = f"No passage in the corpus ({report.documents_searched} documents) matches: {question}"
        return report
    rank = {hit.doc: n for n, hit in enumerate(ranked)}
    stems = [_stem(t) for t in terms]
    passages = [h for h in hits if h.doc in rank]
    document_frequency = {s: sum(1 for h in passages if s in h.text.lower()) for s in stems}
    weight = {s: math.log(1 + len(passages) / (1 + document_frequency[s])) for s in stems}
    scored: list[tuple[float, int, str, int]] = []
    seen: set[str] = set()
    for order, hit in enumerate(passages):
        for sentence in _sentences(hit.text):
            key = sentence.lower()
            if key in seen:
                continue
            seen.add(key)
            covered = sum(weight[s] for s in stems if s in key)
            if covered:
                # Covering more (and rarer) terms first; ties go to the better-ranked passage.
                scored.append((covered + hit.score * 1e-3, -order, sentence, hit.doc))
    scored.sort(reverse=True)
    picked = [(sentence, doc) for _, _, sentence, doc in scored[:max_sentences]]
    if not picked:  # no sentence names a term (the stemmers disagree): the best passage's first
        first = next((s for h in ranked for s in _sentences(h.text)), None)
        if first is None:
            report.answer = f"No passage in the corpus ({report.documents_searched} documents) matches: {question}"
            return report
        picked = [(first, next(h.doc for h in ranked if first in _sentences(h.text)))]
    # Only sources the answer cites are listed, numbered in the order the answer first cites them,
    # and each one's snippet is the answer's own sentence from it: a whole sentence, never a cut.
    numbers: dict[int, int] = {}
    snippets: dict[int, str] = {}
    for sentence, doc in picked:
        numbers.setdefault(doc, len(numbers) + 1)
        snippets.setdefault(doc, sentence)
    by_doc = {hit.doc: hit for hit in ranked}
    report.sources = [Source(n, by_doc[doc].url, by_doc[doc].title, snippets[doc]) for doc, n in numbers.items()]
    report.passages = [{"source": numbers[h.doc], "text": h.text} for h in passages if h.doc in numbers]
    report.answer = " ".join(f"{sentence} [{numbers[doc]}]" for sentence, doc in picked)
    return report
