"""The research corpus: documents split into passages, indexed with SQLite FTS5 (BM25).

Documents come from local folders (Markdown, text, HTML) or from pages fetched at research time.
Links between documents are kept, so research can follow them within bounds.
"""

from __future__ import annotations

import html
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urljoin

__all__ = ["Corpus", "Hit", "html_to_text", "query_terms"]

EXTENSIONS = (".md", ".markdown", ".txt", ".rst", ".html", ".htm")
PASSAGE_CHARS = 900
MAX_FILE_BYTES = 2 * 1024 * 1024
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]*")
_MD_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
        "can",
        "should",
        "would",
        "about",
        "into",
        "than",
        "then",
    ]
)


def query_terms(question: str) -> list[str]:
    """The distinct, lowercased content words of a question."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(question.lower()):
        if word not in STOPWORDS and len(word) > 1:
            seen.setdefault(word, None)
    return list(seen)


class _TextExtractor(HTMLParser):
    """HTML -> (title, text, links); script and style dropped, blocks become paragraphs."""

    _BLOCK = frozenset({"p", "div", "li", "br", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "section", "article", "pre"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.links: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style", "noscript"):
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.links.append(href)
        if tag in self._BLOCK:
            self.parts.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "noscript"):
            self._skip = max(0, self._skip - 1)
        elif tag == "title":
            self._in_title = False
        if tag in self._BLOCK:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip:
            self.parts.append(data)


def html_to_text(source: str) -> tuple[str, str, list[str]]:
    """(title, text, links) of an HTML page."""
    parser = _TextExtractor()
    parser.feed(source)
    text = re.sub(r"[ \t]+", " ", html.unescape("".join(parser.parts)))
    text = re.sub(r"\n\s*\n+", "\n\n", text).strip()
    return parser.title.strip(), text, parser.links


_STRUCTURAL = re.compile(r"^\s*(?:[|#>*+\-]|\d+[.)]\s|```)")


def _unwrap(paragraph: str) -> str:
    """Join hard-wrapped prose lines; keep table rows, list items and headings on their own lines."""
    lines: list[str] = []
    for raw in paragraph.splitlines():
        line = " ".join(raw.split())
        if not line:
            continue
        if lines and not _STRUCTURAL.match(raw) and not _STRUCTURAL.match(lines[-1]):
            lines[-1] += " " + line
        else:
            lines.append(line)
    return "\n".join(lines)


_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s")


def _cut(paragraph: str) -> int:
    """Where to split a paragraph longer than PASSAGE_CHARS: never inside a word, and inside a
    sentence only when one sentence runs past twice the passage size."""
    line = paragraph.rfind("\n", 0, PASSAGE_CHARS)
    ends = [m.end() for m in _SENTENCE_END.finditer(paragraph, 0, 2 * PASSAGE_CHARS)]
    before = [end for end in ends if end <= PASSAGE_CHARS]
    if before and before[-1] > line:
        return before[-1]
    if line > 0:
        return line + 1
    if ends:  # the first sentence is longer than a passage: keep it whole
        return ends[0]
    space = paragraph.rfind(" ", 0, PASSAGE_CHARS)
    return space + 1 if space > 0 else PASSAGE_CHARS


def _passages(text: str) -> Iterable[str]:
    """Paragraphs, merged up to PASSAGE_CHARS (a long paragraph is split at sentence ends)."""
    current = ""
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = _unwrap(paragraph)
        if not paragraph:
            continue
        while len(paragraph) > PASSAGE_CHARS:
            cut = _cut(paragraph)
            if current:
                yield current
                current = ""
            yield paragraph[:cut].strip()
            paragraph = paragraph[cut:].strip()
        if current and len(current) + len(paragraph) + 1 > PASSAGE_CHARS:
            yield current
            current = ""
        current = f"{current}\n{paragraph}".strip()
    if current:
        yield current


@dataclass(frozen=True, slots=True)
class Hit:
    """A passage that matched, with its document."""

    doc: int
    url: str
    title: str
    text: str
    score: float
    """BM25 relevance: higher is better."""


class Corpus:
    """An FTS5 index of passages plus the links between documents."""

    def __init__(self) -> None:
        self._db = sqlite3.connect(":memory:")
        self._db.executescript(
            """
            CREATE TABLE docs (id INTEGER PRIMARY KEY, url TEXT UNIQUE, title TEXT);
            CREATE TABLE links (src INTEGER, dst_url TEXT);
            CREATE VIRTUAL TABLE passages USING fts5(text, doc UNINDEXED, tokenize='porter unicode61');
            """
        )

    @property
    def documents(self) -> int:
        """How many documents are indexed."""
        return int(self._db.execute("SELECT count(*) FROM docs").fetchone()[0])

    def has(self, url: str) -> bool:
        """Whether a document with this URL is indexed."""
        return self._db.execute("SELECT 1 FROM docs WHERE url = ?", (url,)).fetchone() is not None

    def add(self, url: str, title: str, text: str, links: Iterable[str] = ()) -> int | None:
        """Index one document (once per URL); relative links are resolved against its URL."""
        if self.has(url):
            return None
        cursor = self._db.execute("INSERT INTO docs (url, title) VALUES (?, ?)", (url, title or url))
        doc = int(cursor.lastrowid or 0)
        self._db.executemany("INSERT INTO passages (text, doc) VALUES (?, ?)", [(p, doc) for p in _passages(text)])
        targets = {urldefrag(urljoin(url, link))[0] for link in links if not link.startswith(("mailto:", "#"))}
        self._db.executemany("INSERT INTO links (src, dst_url) VALUES (?, ?)", [(doc, t) for t in sorted(targets)])
        return doc

    def add_file(self, path: Path) -> int | None:
        """Index a Markdown, text or HTML file."""
        if path.suffix.lower() not in EXTENSIONS or path.stat().st_size > MAX_FILE_BYTES:
            return None
        source = path.read_text(encoding="utf-8", errors="replace")
        url = path.resolve().as_uri()
        if path.suffix.lower() in (".html", ".htm"):
            title, text, links = html_to_text(source)
        else:
            heading = re.search(r"^#\s+(.+)$", source, re.MULTILINE)
            title, text, links = (heading.group(1).strip() if heading else path.stem), source, _MD_LINK.findall(source)
        return self.add(url, title, text, links)

    def add_folder(self, folder: Path) -> int:
        """Index every supported file under `folder`; returns how many were added."""
        added = 0
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not any(part.startswith(".") for part in path.relative_to(folder).parts):
                added += self.add_file(path) is not None
        return added

    def search(self, terms: list[str], *, limit: int, docs: Iterable[int] | None = None) -> list[Hit]:
        """The best passages for any of `terms`, optionally only within `docs`."""
        if not terms:
            return []
        match = " OR ".join('"' + t.replace('"', "") + '"' for t in terms)
        sql = (
            "SELECT passages.doc, docs.url, docs.title, passages.text, -bm25(passages) FROM passages "
            "JOIN docs ON docs.id = passages.doc WHERE passages MATCH ?"
        )
        params: list[object] = [match]
        if docs is not None:
            ids = list(docs)
            if not ids:
                return []
            sql += f" AND passages.doc IN ({','.join('?' * len(ids))})"
            params.extend(ids)
        sql += " ORDER BY bm25(passages) LIMIT ?"
        params.append(limit)
        return [Hit(*row) for row in self._db.execute(sql, params)]

    def linked(self, doc_ids: Iterable[int]) -> list[int]:
        """Indexed documents that the given documents link to."""
        ids = list(doc_ids)
        if not ids:
            return []
        rows = self._db.execute(
            f"SELECT DISTINCT docs.id FROM links JOIN docs ON docs.url = links.dst_url "
            f"WHERE links.src IN ({','.join('?' * len(ids))})",
            ids,
        )
        return [int(r[0]) for r in rows if int(r[0]) not in ids]
