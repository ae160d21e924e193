"""Walking JSON values, and keeping text that cannot be encoded out of replies; pure.

JSON decoded by Python's `json` module may hold unpaired UTF-16 surrogates (`"\\ud800"` is valid
JSON text), which no UTF-8 encoder accepts: one such string in a reply makes its serialisation
fail. Everything that goes back to a client and holds model-written text is checked here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

__all__ = [
    "JsonPath",
    "format_path",
    "holds_unpaired_surrogate",
    "iter_strings",
    "map_strings",
    "map_strings_at",
    "nested_deeper_than",
    "repaired_json_line",
    "scrub_unpaired_surrogates",
    "unpaired_surrogate_free",
]

M = TypeVar("M", bound=BaseModel)
JsonPath = tuple[str | int, ...]
"""Where a value sits in a JSON document: object keys and array indices from the top."""


def format_path(path: Sequence[str | int], *, top: str = "(top level)") -> str:
    """`a.b[0].c`: how every message names a place in arguments or a config file."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or top


def iter_strings(value: Any, *, keys: bool = False) -> Iterator[str]:
    """Every string in a JSON value, depth first; object keys too when `keys`."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            if keys:
                yield from item
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than `limit` levels in a JSON value (walked without recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth >= limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def map_strings(value: Any, fn: Callable[[str], Any]) -> Any:
    """A copy of a JSON value with every string value replaced by `fn(string)` (keys are left alone).

    `fn` may return any JSON value: a reference that is a whole string becomes a typed value.
    """
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {key: map_strings(item, fn) for key, item in value.items()}
    if isinstance(value, list):
        return [map_strings(item, fn) for item in value]
    return value


def map_strings_at(value: Any, fn: Callable[[str, JsonPath], Any], path: JsonPath = ()) -> Any:
    """`map_strings`, with each string's place passed to `fn` (for messages that name it)."""
    if isinstance(value, str):
        return fn(value, path)
    if isinstance(value, dict):
        return {key: map_strings_at(item, fn, (*path, key)) for key, item in value.items()}
    if isinstance(value, list):
        return [map_strings_at(item, fn, (*path, n)) for n, item in enumerate(value)]
    return value


def holds_unpaired_surrogate(value: Any) -> bool:
    """Whether a string in a JSON value (object keys included) cannot be written as UTF-8."""
    for text in iter_strings(value, keys=True):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return True
    return False


def unpaired_surrogate_free(text: str) -> str:
    """`text` with every unpaired surrogate replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def repaired_json_line(line: bytes) -> bytes | None:
    """A JSON line with invalid UTF-8 and unpaired surrogates (raw or `\\ud800` escapes) replaced
    by U+FFFD, written again as compact UTF-8 JSON; None if it is not JSON or needs no repair.

    Real pages give browsers such text, and a server that passes it on writes valid JSON that no
    strict reader (pydantic, msgspec) accepts: repaired, the message is read instead of dropped.
    """
    try:
        value = json.loads(line.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):
        return None
    if not holds_unpaired_surrogate(value) and not _replaced(line):
        return None
    try:
        fixed = _scrub_value(value)
        return json.dumps(fixed, ensure_ascii=False, separators=(",", ":")).encode()
    except RecursionError:
        return None


def _replaced(line: bytes) -> bool:
    """Whether `line` is not valid UTF-8 (decoding it replaced something)."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _scrub_value(value: Any) -> Any:
    if isinstance(value, str):
        return unpaired_surrogate_free(value)
    if isinstance(value, dict):
        return {unpaired_surrogate_free(k): _scrub_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_value(item) for item in value]
    return value


def scrub_unpaired_surrogates(model: M) -> M:
    """`model` itself when it serialises, else a copy with every unpaired surrogate replaced."""
    try:
        model.model_dump_json(by_alias=True)
    except PydanticSerializationError:
        data = map_strings(model.model_dump(by_alias=True), unpaired_surrogate_free)
        return type(model).model_validate(data)
    return model
