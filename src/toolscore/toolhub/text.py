"""Words out of tool names and descriptions, the same way for tagging and for search; pure.

Linear in the input and capped, so a hostile description or query costs at most a bounded scan.
"""

from __future__ import annotations

import re

__all__ = ["MAX_TEXT_CHARS", "stem", "words"]

MAX_TEXT_CHARS = 4096
"""Only this much of one text is read: a description longer than that says nothing more to a search."""
_WORD = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])|[a-z]+|[0-9]+")
_SUFFIXES = ("ing", "ies", "es", "ed", "s")


def stem(word: str) -> str:
    """A light suffix strip, so `searches`, `searching` and `search` meet (not a linguistic stemmer)."""
    for suffix in _SUFFIXES:
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def words(text: str) -> list[str]:
    """Lower-case stemmed words of `text`: `searchCode_v2` -> `search`, `code`, `v`, `2`."""
    return [stem(w.lower()) for w in _WORD.findall(text[:MAX_TEXT_CHARS])]
