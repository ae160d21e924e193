"""Path confinement: find every path in a call's arguments, check it against the roots, pin it; pure.

Theory of operation. A model can hide a path anywhere the downstream will read one: a list
(`{"paths": [...]}`), a nested object, an argument named `file_path` or `filePath`, a `file:`
URI, or a reference that resolves to any of these at run time. So confinement does not look for
a few argument names holding strings: it walks the whole arguments value once.

- A key *names a path* when its last word (snake, kebab or camel case) is one of `PATH_WORDS`,
  when it matches a configured glob, or when the tool's inputSchema gives it a path `format`.
  Everything under such a key must be path strings (arrays and objects are walked): a number, a
  boolean or null there is refused, not guessed at (deny by default).
- A string anywhere that starts with `file:` is a path too.
- A path must be absolute, contain no NUL, and resolve (`os.path.realpath`: symlinks and `..`
  followed as far as the path exists) under one of the roots.
- The call goes on with each path replaced by its resolved real path. A downstream that opens
  the pinned path cannot be redirected by a symlink swapped in after the check. What the gateway
  cannot guarantee: a directory *inside* a root replaced after the check by someone who can
  write there; confining such a downstream for good is the job of its own sandbox (see
  docs/security.md).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from toolscore._glob import matches

__all__ = ["CLIENT_ROOTS", "PATH_WORDS", "Confinement", "PathViolation", "names_path", "roots_of_uris"]

CLIENT_ROOTS = "client"
"""The `roots` entry that stands for the calling client's own roots (MCP `roots/list`)."""

PATH_WORDS = frozenset(
    {
        "path", "paths", "pathname", "pathnames", "filepath", "filepaths",
        "file", "files", "filename", "filenames",
        "dir", "dirs", "dirname", "directory", "directories", "folder", "folders", "cwd",
    }
)  # fmt: skip
"""A key whose last word is one of these holds paths."""

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+")
_MAX_DEPTH = 64


@dataclass(frozen=True, slots=True)
class PathViolation:
    """One path that may not be used, and why."""

    where: str
    reason: str


def names_path(key: str, extra: Iterable[str] = ()) -> bool:
    """Whether argument `key` holds paths: by its last word, or by one of the `extra` globs."""
    return _names_path(key, tuple(extra))


# Argument names repeat on every call; hostile ones only churn a bounded cache.
@functools.lru_cache(maxsize=4096)
def _names_path(key: str, extra: tuple[str, ...]) -> bool:
    words = _WORD.findall(key)
    if words and words[-1].lower() in PATH_WORDS:
        return True
    return matches(key.casefold(), [pattern.casefold() for pattern in extra])


def roots_of_uris(uris: Iterable[str]) -> tuple[str, ...]:
    """A client's roots (`file:` URIs) as resolved real paths; other URIs and relative paths are no roots."""
    found: list[str] = []
    for uri in uris:
        parts = urlsplit(uri)
        path = unquote(parts.path)
        local = parts.scheme.lower() == "file" and parts.netloc in ("", "localhost")
        if local and os.path.isabs(path) and "\0" not in path:
            found.append(os.path.realpath(path))
    return tuple(found)


def _within(real: str, roots: tuple[str, ...]) -> bool:
    return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


class Confinement:
    """Checks and pins the paths of one call's arguments against `roots` (already resolved)."""

    def __init__(self, roots: tuple[str, ...], *, skip: Callable[[str], bool] | None = None) -> None:
        """Args:
        roots: Resolved real paths of the allowed roots.
        skip: Strings to leave alone (a plan's unresolved references, checked again at run time).
        """
        self._roots = roots
        self._skip = skip

    def apply(self, arguments: Any, is_path_key: Callable[[str], bool]) -> tuple[Any, list[PathViolation]]:
        """The arguments with every path pinned, and every violation found.

        Args:
            arguments: The call's arguments.
            is_path_key: Whether an argument name holds paths for this tool.
        """
        violations: list[PathViolation] = []
        pinned = self._walk(arguments, "", False, is_path_key, violations, 0)
        return pinned, violations

    # Its own walk, not `_json.map_strings_at`: whether a string is a path depends on the keys above
    # it, a number or null under a path key is itself a violation, and the depth is bounded.
    def _walk(
        self,
        value: Any,
        where: str,
        is_path: bool,
        is_path_key: Callable[[str], bool],
        out: list[PathViolation],
        depth: int,
    ) -> Any:
        if depth > _MAX_DEPTH:
            out.append(PathViolation(where or "(top level)", "nested too deep to check"))
            return value
        if isinstance(value, str):
            if is_path or value[:5].lower() == "file:":
                return self._path(value, where, out)
            return value
        if isinstance(value, dict):
            return {
                key: self._walk(
                    item, f"{where}.{key}" if where else key, is_path or is_path_key(key), is_path_key, out, depth + 1
                )
                for key, item in value.items()
            }
        if isinstance(value, list):
            return [
                self._walk(item, f"{where}[{n}]", is_path, is_path_key, out, depth + 1) for n, item in enumerate(value)
            ]
        if is_path:
            out.append(PathViolation(where, f"must be a path string, not {type(value).__name__}"))
        return value

    def _path(self, text: str, where: str, out: list[PathViolation]) -> str:
        if self._skip is not None and self._skip(text):
            return text
        uri = text[:5].lower() == "file:"
        path = text
        if uri:
            parts = urlsplit(text)
            if parts.netloc not in ("", "localhost"):
                out.append(PathViolation(where, f"file URI on another host ({parts.netloc}) is not allowed"))
                return text
            path = unquote(parts.path)
        roots = ", ".join(self._roots) or "(none)"
        if "\0" in path:
            out.append(PathViolation(where, "a path must not contain NUL"))
            return text
        if not os.path.isabs(path):
            out.append(PathViolation(where, f"must be an absolute path under {roots}"))
            return text
        real = os.path.realpath(path)
        if not _within(real, self._roots):
            out.append(PathViolation(where, f"({_short(text)}) is outside the allowed roots: {roots}"))
            return text
        return "file://" + quote(real) if uri else real


def _short(text: str) -> str:
    return text if len(text) <= 200 else text[:200] + "…"
