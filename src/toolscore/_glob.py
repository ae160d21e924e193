"""The one glob matcher: tool filters, policy rules and path-argument names all match with it; pure."""

from __future__ import annotations

import fnmatch
import functools
import re
import unicodedata
from collections.abc import Iterable

__all__ = ["matches"]


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
