"""Public tool names: `<prefix><separator><tool>`, safe for every MCP client; pure.

SEP-986 allows `^[A-Za-z0-9._-]{1,128}$`, but several LLM APIs are stricter (no dots, at most 64
characters), so exposed names keep to `[A-Za-z0-9_-]` and at most 64 characters. A name that
needs shortening keeps a readable head and gets a hash of the full name as its tail, so the same
downstream tool always gets the same public name.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["MAX_NAME_LENGTH", "public_name", "sanitize"]

MAX_NAME_LENGTH = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_HASH_LENGTH = 8


def sanitize(name: str) -> str:
    """Replace every character outside `[A-Za-z0-9_-]` with `_`."""
    return _UNSAFE.sub("_", name)


def public_name(prefix: str, tool: str, separator: str) -> tuple[str, bool]:
    """The exposed name of `tool` under `prefix`.

    Returns:
        The name, and whether it had to be shortened to fit `MAX_NAME_LENGTH`.
    """
    full = f"{sanitize(prefix)}{separator}{sanitize(tool)}" if prefix else sanitize(tool)
    if len(full) <= MAX_NAME_LENGTH:
        return full, False
    digest = hashlib.sha256(f"{prefix}\0{tool}".encode()).hexdigest()[:_HASH_LENGTH]
    return f"{full[: MAX_NAME_LENGTH - _HASH_LENGTH - 1]}_{digest}", True
