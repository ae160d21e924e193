"""Words out of tool names, descriptions and queries, the same way for tagging and for search; pure.

Names are split where people join words (`_`, `-`, `.`, camelCase, digits), everything is
lower-cased and stemmed by a small suffix stripper of our own: `invoices`, `saving`, `created`
and `creation` meet `invoice`, `save` and `create`; `modified` meets `modify`, `notification`
`notify`, `recommendation` `recommend`, `financial` `finance`, `recursively` `recursive`, British
`summarise`/`colour`/`cancelled` their American forms, and a short table takes the common
irregular verbs (`ran`, `written`, `shown`) to their base. The stems need not be words, only the
same for the forms of one word; a few over-eager merges cost little, since a merge only adds
candidates that the other fields still have to rank. `compounds` gives a camelCase word also
whole (`JavaScript` -> `javascript`), so a query that writes it in one piece finds it too.

Linear in the input and capped, so a hostile description or query costs at most a bounded scan
(the word pattern has no nested repetition, so no backtracking).
"""

from __future__ import annotations

import functools
import re

__all__ = ["MAX_TEXT_CHARS", "STOPWORDS", "compounds", "stem", "terms", "words"]

MAX_TEXT_CHARS = 4096
"""Only this much of one text is read: a description longer than that says nothing more to a search."""
_WORD = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])|[a-z]+|[0-9]+")
_MIXED = re.compile(r"[A-Za-z]*[a-z][A-Z][A-Za-z]*")
"""One run of letters with a capital after a small letter: a camelCase compound (`localStorage`)."""
_VOWELS = frozenset("aeiouy")
# Derivational endings first (longest first), each with what replaces it before the final `e` goes,
# and the shortest stem it may leave.
_DERIVED = (
    ("ification", "ify", 2),
    ("ization", "ize", 3),
    ("mission", "mit", 2),
    ("rsion", "rt", 3),
    ("nsion", "nd", 3),
    ("usion", "ude", 3),
    ("ation", "ate", 4),
    ("ution", "ute", 4),
    ("ition", "", 5),
    ("cial", "ce", 4),
    ("ment", "", 4),
    ("ion", "", 4),
    ("al", "", 4),
)
_PLAIN_ATION = ("ur", "rm", "ll", "rv", "nt", "ct", "nd", "pil", "clar")
"""Stems before `-ation` that come from a verb without `-ate`: `configuration` -> `configure`."""
_KEEP_DOUBLE = frozenset("lsz")
_IRREGULAR = {
    "ran": "run",
    "wrote": "write",
    "written": "write",
    "rewrote": "rewrite",
    "rewritten": "rewrite",
    "shown": "show",
    "sent": "send",
    "found": "find",
    "built": "build",
    "rebuilt": "rebuild",
    "made": "make",
    "got": "get",
    "gotten": "get",
    "took": "take",
    "taken": "take",
    "gave": "give",
    "given": "give",
    "chose": "choose",
    "chosen": "choose",
    "began": "begin",
    "begun": "begin",
    "went": "go",
    "gone": "go",
    "saw": "see",
    "seen": "see",
    "kept": "keep",
    "held": "hold",
    "lost": "lose",
    "paid": "pay",
    "told": "tell",
    "thought": "think",
    "drew": "draw",
    "drawn": "draw",
    "hid": "hide",
    "hidden": "hide",
    "broke": "break",
    "broken": "break",
    "forgot": "forget",
    "forgotten": "forget",
    "undone": "undo",
    "froze": "freeze",
    "frozen": "freeze",
    "children": "child",
    "people": "person",
    "indices": "index",
    "analyses": "analysis",
}
"""Irregular forms of common words, to their base form before stemming."""
_NOT_PLURAL = frozenset(("news", "alias", "canvas", "series", "species", "always", "perhaps", "lens", "bias", "atlas"))
"""Words ending in `s` that are not plurals: left as they are."""
_BRITISH = (
    (re.compile(r"^([a-z]{3,})is(e|es|ed|ing|er|ers|ation|ations|ion|ions)$"), r"\1iz\2"),
    (re.compile(r"^([a-z]{2,})ys(e|es|ed|ing|er|ers)$"), r"\1yz\2"),
    (re.compile(r"^([a-z]{3,})our(s|ed|ing|ite|ites|able)?$"), r"\1or\2"),
    (re.compile(r"^([a-z]{3,})ell(ed|ing|ation|ations|er|ers)$"), r"\1el\2"),
    (re.compile(r"^([a-z]{3,})logue(s)?$"), r"\1log\2"),
)
"""British spellings to American ones before stemming: `summarise`, `analyse`, `colour`,
`cancelled`, `catalogue`. Harmless where no American twin exists: both sides change alike (and
`revision`/`precision` with `revise`/`precise`)."""

_STOPWORDS_TEXT = (
    "a an the of to for in on at by with from into onto about as and or but not no nor "
    "is are was were be been being am do does did doing have has had having "
    "i me my mine we us our you your it its this that these those there here "
    "what which who whom whose how when where why "
    "can could would should will shall may might must "
    "please some any all each every other another such so than then too very just also "
    "want need like via using use "
    "something anything everything nothing someone anyone everyone somebody anybody everybody "
    "ve ll re don doesn didn isn aren wasn weren haven hasn couldn shouldn wouldn"
)
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
"""Words that say nothing about which tool is meant; dropped from queries and documents alike.
The last line is what contractions leave (`I've`, `don't`) and the `re` of `re-run`.

Common tool verbs (`get`, `list`) are not: how common they are in a catalog is for the index's
inverse document frequency to weigh, and `get hotel` should find `get_hotel` before `list_hotels`.
"""


def _has_vowel(text: str) -> bool:
    return any(c in _VOWELS for c in text)


_MAX_STEMMED = 40
"""Longer "words" are left as they are (no English word is), which also bounds the memo below."""


def stem(word: str) -> str:
    """A small suffix stripper for lower-case words: `searches`, `searching`, `searched` -> `search`.

    Irregular forms and British spellings first (`wrote` -> `write`, `colour` -> `color`), then
    plurals (`-ies` -> `-y`, `-sses` -> `-ss`, `-s`), then `-ing`/`-ed`/`-ied` (undoubling a final
    consonant: `running` -> `run`; `modified` -> `modify`), adverbs' `-ly`, derivational endings
    (`-ification`, `-ation`, `-sion`, `-ion`, `-cial`, `-ment`, `-al`), and finally a trailing `e`, so `save`,
    `saves`, `saved` and `saving` all end as `sav`. Agent nouns keep their `-er` (`customer` is not
    `custom`); the search relates `indexer` to `index` at a discount instead.
    Words of three letters or fewer, and anything not plain ASCII letters, are left alone.
    """
    return word if len(word) > _MAX_STEMMED else _stem(word)


@functools.lru_cache(maxsize=65536)  # a catalog repeats its words: each is stemmed once
def _stem(word: str) -> str:
    word = _IRREGULAR.get(word, word)
    if len(word) <= 3 or not word.isascii() or not word.isalpha() or word in _NOT_PLURAL:
        return word
    for pattern, replacement in _BRITISH:
        word = pattern.sub(replacement, word)
    if word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = _IRREGULAR.get(word[:-1], word[:-1])
    if word.endswith("ie") and len(word) >= 5:  # `cookie` meets `cookies`, as `query` meets `queries`
        word = word[:-2] + "y"
    if word.endswith("ied") and len(word) > 5:
        word = word[:-3] + "y"
    else:
        for suffix in ("ing", "ed"):
            base = word[: -len(suffix)]
            if word.endswith(suffix) and len(base) >= 3 and _has_vowel(base) and not word.endswith("eed"):
                word = _undouble(base)
                break
    if word.endswith("ly") and len(word) >= 6 and word[-3] != "i":
        word = word[:-2]
    for suffix, replacement, shortest in _DERIVED:
        base = word[: -len(suffix)]
        if word.endswith(suffix) and len(base) >= shortest and _has_vowel(base):
            word = base if suffix == "ation" and base.endswith(_PLAIN_ATION) else base + replacement
            break
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    return word


def _undouble(base: str) -> str:
    """`runn` -> `run`, `logg` -> `log`; `install`, `access`, `buzz` keep theirs."""
    if len(base) > 3 and base[-1] == base[-2] and base[-1] not in _VOWELS | _KEEP_DOUBLE:
        return base[:-1]
    return base


def words(text: str) -> list[str]:
    """Lower-case stemmed words of `text`: `searchCode_v2` -> `search`, `code`, `v`, `2`."""
    return [stem(w.lower()) for w in _WORD.findall(text[:MAX_TEXT_CHARS])]


def compounds(text: str) -> list[str]:
    """The camelCase compounds of `text` whole, lower-cased and stemmed: `use localStorage` -> `localstorag`."""
    return [stem(match.lower()) for match in _MIXED.findall(text[:MAX_TEXT_CHARS])]


def terms(text: str) -> list[str]:
    """The words of `text` that can tell tools apart: `words` less stop words and single letters."""
    out = []
    for raw in _WORD.findall(text[:MAX_TEXT_CHARS]):
        lower = raw.lower()
        if lower in STOPWORDS or (len(lower) == 1 and not lower.isdigit()):
            continue
        out.append(stem(lower))
    return out
