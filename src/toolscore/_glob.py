"""The one glob matcher: tool filters, policy rules and path-argument names all match with it, and
text against literal pieces with anything between (resource templates, approved plan arguments); pure."""

from __future__ import annotations

import fnmatch
import functools
import re
import unicodedata
from collections.abc import Iterable

__all__ = ["matches", "pieces_match"]


def matches(name: str, patterns: str | Iterable[str], *, fold: bool = False) -> bool:
    """Whether `name` matches any of `patterns` (fnmatch: `*`, `?`, `[seq]`; `/` is not special).

    Args:
        name: The name to test.
        patterns: One glob, or several.
        fold: Compare both sides compatibility-normalised (NFKC) and case-folded. Deny rules fold,
            so a look-alike spelling of a denied name (`FX__ＤＥＬＥＴＥ`, `Fx__Delete`) is denied too;
            allow rules do not, so a folded spelling can never widen what they let through.
    """
    if isinstance(patterns, str):  # one glob, not a sequence of one-character globs
        patterns = (patterns,)
    compiled = _compiled(tuple(patterns), fold)
    return compiled is not None and compiled.match(_folded(name) if fold else name) is not None


# Policy rules match on every call: the globs of one rule become one regular expression, once.
# Patterns come from the config, so the cache holds a handful of entries.
@functools.lru_cache(maxsize=1024)
def _compiled(patterns: tuple[str, ...], fold: bool) -> re.Pattern[str] | None:
    if not patterns:
        return None
    return re.compile("|".join(fnmatch.translate(_folded(p) if fold else p) for p in patterns))


def _folded(name: str) -> str:
    return unicodedata.normalize("NFKC", name).casefold()


def pieces_match(value: str, literals: tuple[str, ...] | list[str]) -> bool:
    """Whether `value` is `literals` with any text between each two (a glob of `*`s, its literal
    pieces given): the first piece at its start, the last at its end, the others in order between.

    Leftmost matches, each piece looked for once: linear in `value`, never exponential.
    """
    if len(literals) == 1:
        return value == literals[0]
    head, tail = literals[0], literals[-1]
    if len(value) < len(head) + len(tail) or not value.startswith(head) or not value.endswith(tail):
        return False
    at, end = len(head), len(value) - len(tail)
    for middle in literals[1:-1]:
        found = value.find(middle, at, end)
        if found < 0:
            return False
        at = found + len(middle)
    return True
