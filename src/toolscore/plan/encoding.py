"""Values that are not JSON, as the JSON a step's result and a reference carry; pure.

A tool's answer reaches a plan as JSON, but not every value a function computes is JSON: bytes
from a sandboxed function, a float that is NaN or infinite, a dict keyed by integers. Such a value
in a step's `json` either broke the step ("not JSON serializable"), or became `null` on its way to
the client while the next step saw the float: data nobody meant. Every value a step holds is
instead written in one documented encoding, the same wherever the value goes (the `<result>` text
and `structuredContent.steps[].result` the model reads, and what a reference passes on):

    bytes, bytearray, memoryview   {"$bytes": "<standard base64>"}
    NaN, +inf, -inf                "NaN", "Infinity", "-Infinity" (as JavaScript spells them)
    dict keys 1, 2.5, True, None   "1", "2.5", "true", "null" (as JSON text writes them)
    tuples, sets                   arrays (a set sorted when its items sort)

`decode` reads `{"$bytes": ...}` back to bytes (a tool written in Python that takes bytes uses it);
the other encodings are one-way: `"NaN"` stays a string, a key stays a string.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import math
from typing import Any

__all__ = ["BYTES_KEY", "decode", "encode", "json_value", "loads_result"]

BYTES_KEY = "$bytes"
_CONSTANTS = {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity"}
_MAX_DEPTH = 256
"""Deeper values are refused (`ValueError`): the walk recurses once per level."""


def _float(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool | int):
        return json.dumps(key)
    if isinstance(key, float):
        encoded = _float(key)
        return encoded if isinstance(encoded, str) else json.dumps(key)
    raise TypeError(f"a dict key of type {type(key).__name__} is not representable as JSON")


def _encode(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return _float(value)
    if depth > _MAX_DEPTH:
        raise ValueError(f"nested deeper than {_MAX_DEPTH} levels")
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = _key(key)
            if name in out:
                raise ValueError(f"the dict keys {name!r} and {key!r} are the same once written as JSON")
            out[name] = _encode(item, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [_encode(item, depth + 1) for item in value]
    if isinstance(value, set | frozenset):
        items = list(value)
        with contextlib.suppress(TypeError):  # items of kinds that do not compare: the set's order
            items.sort()
        return [_encode(item, depth + 1) for item in items]
    if isinstance(value, bytes | bytearray | memoryview):
        return {BYTES_KEY: base64.b64encode(bytes(value)).decode("ascii")}
    raise TypeError(f"a value of type {type(value).__name__} is not representable as JSON")


def encode(value: Any) -> Any:
    """`value` in the encoding above: JSON that `json.dumps(..., allow_nan=False)` writes.

    Raises:
        TypeError: a value (or key) of another type (a datetime, an object).
        ValueError: two keys that are the same once written (`1` and `"1"`), or nesting past 256.
    """
    return _encode(value, 0)


def json_value(value: Any) -> Any:
    """`value` itself when it is JSON already (checked in C: the common case costs one dump), else
    `encode(value)`."""
    try:
        json.dumps(value, allow_nan=False, check_circular=False)
    except (TypeError, ValueError, RecursionError):
        return encode(value)
    if _non_string_keys(value):
        return encode(value)
    return value


def _non_string_keys(value: Any) -> bool:
    """Whether a dict anywhere in `value` has a key that is not a string (no recursion)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if any(not isinstance(key, str) for key in item):
                return True
            stack.extend(v for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, dict | list))
    return False


def loads_result(text: str) -> Any:
    """A tool's text parsed as JSON, `NaN` and `Infinity` (which Python's json reads as floats, and
    no JSON writer writes back) read as the strings of the encoding.

    Raises:
        ValueError: the text is not JSON.
    """
    return json.loads(text, parse_constant=_CONSTANTS.__getitem__)


def decode(value: Any) -> Any:
    """`value` with every `{"$bytes": "<base64>"}` (that object alone) read back as bytes."""
    if isinstance(value, dict):
        if len(value) == 1 and isinstance(encoded := value.get(BYTES_KEY), str):
            try:
                return base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                return value
        return {key: decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [decode(item) for item in value]
    return value
