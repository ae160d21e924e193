"""The `all` strategy's plain merge: items from every success, deduplicated, sourced, cut; pure.

Items are what a search-like result lists: the objects of a JSON array (`results`, `items` or the
top level; `url`/`link`, `title`, `snippet`/`text`/`content`), else the paragraphs of its text.
Two items are one when they point at the same URL (scheme and host case, `www.`, a trailing slash
and the fragment ignored) or, without a URL, say the same text (case and spacing ignored); the
merged item keeps every source. Each item's text is cut at a sentence boundary to a byte budget.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import mcp_types

__all__ = ["Item", "cut_at_sentence", "extract_items", "merge", "url_key"]

_MAX_PARSE_CHARS = 1_000_000
"""A text block longer than this is not parsed as JSON (its paragraphs are still items)."""
_MAX_ITEMS_PER_SOURCE = 200
_URL = re.compile(r"https?://[^\s<>\"')\]]{1,2048}")
_SPACE = re.compile(r"\s+")
_PARAGRAPH = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"[.!?。！？][\"')\]]*(?=\s)|\n")
_URL_KEYS = ("url", "link", "href", "uri")
_TEXT_KEYS = ("snippet", "text", "content", "summary", "description", "body")


@dataclass(slots=True)
class Item:
    """One merged item and every source that gave it."""

    text: str
    url: str | None = None
    title: str | None = None
    sources: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The item as structured content shows it."""
        out: dict[str, Any] = {"title": self.title, "url": self.url, "text": self.text, "sources": self.sources}
        return {k: v for k, v in out.items() if v is not None}


def url_key(url: str) -> str:
    """The identity of a URL for deduplication."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return url.strip()
    host = (parts.hostname or "").lower().removeprefix("www.")
    try:
        port = parts.port
    except ValueError:  # out of range: not a port anyone can reach, so not part of the identity
        port = None
    port_text = f":{port}" if port and port not in (80, 443) else ""
    return urlunsplit(("", host + port_text, parts.path.rstrip("/"), parts.query, ""))


def _text_key(text: str) -> str:
    return _SPACE.sub(" ", text).strip().casefold()


def cut_at_sentence(text: str, budget: int) -> str:
    """`text` within `budget` UTF-8 bytes, cut after its last whole sentence that fits (else a word)."""
    if len(text.encode("utf-8", "surrogatepass")) <= budget:
        return text
    head = text.encode("utf-8", "surrogatepass")[: max(budget - 3, 1)].decode("utf-8", "ignore")
    ends = [m.end() for m in _SENTENCE_END.finditer(head)]
    if ends and ends[-1] >= len(head) // 3:
        return head[: ends[-1]].rstrip()
    space = head.rfind(" ")
    return (head[:space] if space >= len(head) // 3 else head).rstrip() + "…"


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _from_object(obj: dict[str, Any]) -> Item | None:
    url = next((v for k in _URL_KEYS if (v := _string(obj.get(k)))), None)
    title = _string(obj.get("title")) or _string(obj.get("name"))
    text = next((v for k in _TEXT_KEYS if (v := _string(obj.get(k)))), None)
    if url is None and text is None and title is None:
        return None
    return Item(text or title or url or "", url, title if text else None)


def _listed(value: Any) -> list[Any] | None:
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        for key in ("results", "items", "data", "hits"):
            if isinstance(value.get(key), list):
                return list(value[key])
    return None


def extract_items(result: mcp_types.CallToolResult) -> list[Item]:
    """The items of one result: a structured or JSON list of objects, else text paragraphs."""
    listed = _listed(result.structured_content)
    texts = [b.text for b in result.content if isinstance(b, mcp_types.TextContent)]
    if listed is None and len(texts) == 1 and len(texts[0]) <= _MAX_PARSE_CHARS and texts[0].lstrip()[:1] in "[{":
        try:
            listed = _listed(json.loads(texts[0]))
        except (ValueError, RecursionError):
            listed = None
    if listed is not None:
        found = [_from_object(o) for o in listed[:_MAX_ITEMS_PER_SOURCE] if isinstance(o, dict)]
        return [i for i in found if i is not None]
    items: list[Item] = []
    for text in texts:
        for paragraph in _PARAGRAPH.split(text[:_MAX_PARSE_CHARS]):
            if paragraph.strip() and len(items) < _MAX_ITEMS_PER_SOURCE:
                url = _URL.search(paragraph)
                items.append(Item(paragraph.strip(), url.group(0) if url else None))
    for block in result.content:
        if isinstance(block, mcp_types.ResourceLink) and len(items) < _MAX_ITEMS_PER_SOURCE:
            items.append(Item(block.description or block.name, str(block.uri), block.title))
    return items


def merge(results: Sequence[tuple[str, mcp_types.CallToolResult]], *, item_bytes: int, max_items: int) -> list[Item]:
    """Every source's items in turn (first of each, then second...), deduplicated, each cut to `item_bytes`."""
    merged: list[Item] = []
    seen: dict[str, Item] = {}
    per_source = [(source, extract_items(result)) for source, result in results]
    longest = max((len(items) for _, items in per_source), default=0)
    for rank in range(longest):  # round robin: every source's best items come before anyone's tenth
        for source, items in per_source:
            if rank >= len(items):
                continue
            item = items[rank]
            keys = [f"u:{url_key(item.url)}"] if item.url else []
            keys.append(f"t:{_text_key(item.text)}")
            known = next((seen[k] for k in keys if k in seen), None)
            if known is not None:
                if source not in known.sources:
                    known.sources.append(source)
                continue
            if len(merged) >= max_items:
                continue
            item.text = cut_at_sentence(item.text, item_bytes)
            item.sources = [source]
            merged.append(item)
            for key in keys:
                seen[key] = item
    return merged
