"""Words out of tool names, descriptions and queries, the same way for tagging and for search; pure.

Names are split where people join words (`_`, `-`, `.`, camelCase, digits), everything is
lower-cased and stemmed by a small suffix stripper of our own: `invoices`, `saving`, `created`
and `creation` meet `invoice`, `save` and `create`. The stems need not be words, only the same for
the forms of one word; a few over-eager merges cost little, since a merge only adds candidates
that the other fields still have to rank.

Linear in the input and capped, so a hostile description or query costs at most a bounded scan
(the word pattern has no nested repetition, so no backtracking).
"""

from __future__ import annotations

import functools
import re

__all__ = ["MAX_TEXT_CHARS", "STOPWORDS", "stem", "terms", "words"]

MAX_TEXT_CHARS = 4096
"""Only this much of one text is read: a description longer than that says nothing more to a search."""
_WORD = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])|[a-z]+|[0-9]+")
_VOWELS = frozenset("aeiouy")
# Derivational endings first (longest first), each with what replaces it before the final `e` goes.
_DERIVED = (
    ("ization", "ize"),
    ("ation", "ate"),
    ("ution", "ute"),
    ("ition", "ite"),
    ("ment", ""),
    ("ion", ""),
    ("al", ""),
)
_KEEP_DOUBLE = frozenset("lsz")

_STOPWORDS_TEXT = (
    "a an the of to for in on at by with from into onto about as and or but not no nor "
    "is are was were be been being am do does did doing have has had having "
    "i me my mine we us our you your it its this that these those there here "
    "what which who whom whose how when where why "
    "can could would should will shall may might must "
    "please some any all each every other another such so than then too very just also "
    "want need like via using use"
)
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
"""Words that say nothing about which tool is meant; dropped from queries and documents alike.

Common tool verbs (`get`, `list`) are not: how common they are in a catalog is for the index's
inverse document frequency to weigh, and `get hotel` should find `get_hotel` before `list_hotels`.
"""


def _has_vowel(text: str) -> bool:
    return any(c in _VOWELS for c in text)


_MAX_STEMMED = 40
"""Longer "words" are left as they are (no English word is), which also bounds the memo below."""


def stem(word: str) -> str:
    """A small suffix stripper for lower-case words: `searches`, `searching`, `searched` -> `search`.

    Plurals first (`-ies` -> `-y`, `-sses` -> `-ss`, `-s`), then `-ing`/`-ed` (undoubling a final
    consonant: `running` -> `run`), then derivational endings (`-ation`, `-ion`, `-ment`, `-al`),
    and finally a trailing `e`, so `save`, `saves`, `saved` and `saving` all end as `sav`.
    Words of three letters or fewer, and anything not plain ASCII letters, are left alone.
    """
    return word if len(word) > _MAX_STEMMED else _stem(word)


@functools.lru_cache(maxsize=65536)  # a catalog repeats its words: each is stemmed once
def _stem(word: str) -> str:
    if len(word) <= 3 or not word.isascii() or not word.isalpha():
        return word
    if word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        base = word[: -len(suffix)]
        if word.endswith(suffix) and len(base) >= 3 and _has_vowel(base) and not word.endswith("eed"):
            word = base
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in _VOWELS | _KEEP_DOUBLE:
                word = word[:-1]
            break
    for suffix, replacement in _DERIVED:
        base = word[: -len(suffix)]
        if word.endswith(suffix) and len(base) >= 4 and _has_vowel(base):
            word = base + replacement
            break
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    return word


def words(text: str) -> list[str]:
    """Lower-case stemmed words of `text`: `searchCode_v2` -> `search`, `code`, `v`, `2`."""
    return [stem(w.lower()) for w in _WORD.findall(text[:MAX_TEXT_CHARS])]


def terms(text: str) -> list[str]:
    """The words of `text` that can tell tools apart: `words` less stop words and single letters."""
    out = []
    for raw in _WORD.findall(text[:MAX_TEXT_CHARS]):
        lower = raw.lower()
        if lower in STOPWORDS or (len(lower) == 1 and not lower.isdigit()):
            continue
        out.append(stem(lower))
    return out
