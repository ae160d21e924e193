"""A yes-only check of tool arguments, compiled once per tool for the shapes most schemas have; pure.

`jsonschema` walks a schema for every call (about 30 us for a one-property object). Most tool
schemas are a flat object of typed properties, which a few Python checks decide exactly. `compile_check`
turns such a schema into a function that answers True only for arguments the schema accepts; False
means "not sure", and the engine then asks `jsonschema`, which also words the errors. A schema with
any keyword outside the subset below gets no check at all (None): jsonschema alone decides.

Supported: `type` (one or several), `properties`, `required`, `additionalProperties` (bool or a
schema), `items` (one schema), `enum` of strings, `minimum`/`maximum`, `minLength`/`maxLength`, and
the annotations that never reject (`title`, `description`, `default`, `format`, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Check", "compile_check"]

Check = Callable[[Any], bool]
"""True: the value is valid. False: unknown (ask jsonschema)."""

_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "format",
        "$schema",
        "$comment",
        "$id",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentMediaType",
        "contentEncoding",
    }
)
_MAX_DEPTH = 16


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_TYPES: dict[str, Check] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": _is_integer,
    "number": _is_number,
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def compile_check(schema: Any, depth: int = 0) -> Check | None:
    """A check for `schema`, or None when it uses anything outside the supported subset."""
    if schema is True or schema == {}:
        return lambda _: True
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        return None
    checks: list[Check] = []
    for key, rule in schema.items():
        if key in _ANNOTATIONS:
            continue
        check = _keyword(key, rule, schema, depth)
        if check is None:
            return None
        checks.append(check)
    if len(checks) == 1:
        return checks[0]
    return lambda value: all(check(value) for check in checks)


def _keyword(key: str, rule: Any, schema: Mapping[str, Any], depth: int) -> Check | None:
    if key == "type":
        names = [rule] if isinstance(rule, str) else rule
        if not isinstance(names, list) or not names or any(n not in _TYPES for n in names):
            return None
        tests = [_TYPES[n] for n in names]
        return tests[0] if len(tests) == 1 else lambda v: any(t(v) for t in tests)
    if key == "properties":
        return _properties(rule, schema.get("additionalProperties", True), depth)
    if key == "additionalProperties":
        return (lambda _: True) if "properties" in schema else _properties({}, rule, depth)
    if key == "required":
        if not isinstance(rule, list) or not all(isinstance(n, str) for n in rule):
            return None
        names = tuple(rule)
        return lambda v: not isinstance(v, dict) or all(n in v for n in names)
    if key == "items":
        item = compile_check(rule, depth + 1)
        if item is None:
            return None
        return lambda v: not isinstance(v, list) or all(item(x) for x in v)
    if key == "enum":
        if not isinstance(rule, list) or not all(isinstance(x, str) for x in rule):
            return None
        allowed = frozenset(rule)
        return lambda v: isinstance(v, str) and v in allowed
    return _bound(key, rule)


def _bound(key: str, rule: Any) -> Check | None:
    if key in ("minimum", "maximum"):
        if not _is_number(rule):
            return None
        if key == "minimum":
            return lambda v: not _is_number(v) or v >= rule
        return lambda v: not _is_number(v) or v <= rule
    if key in ("minLength", "maxLength"):
        if not _is_integer(rule):
            return None
        # jsonschema counts code points, as len() does.
        if key == "minLength":
            return lambda v: not isinstance(v, str) or len(v) >= rule
        return lambda v: not isinstance(v, str) or len(v) <= rule
    return None


def _never(_: Any) -> bool:
    return False


def _properties(properties: Any, additional: Any, depth: int) -> Check | None:
    if not isinstance(properties, Mapping):
        return None
    compiled: dict[str, Check] = {}
    for name, sub in properties.items():
        rule = compile_check(sub, depth + 1)
        if rule is None:
            return None
        compiled[name] = rule
    extra: Check | None
    if additional is True:
        extra = None
    elif additional is False:
        extra = _never
    else:
        extra = compile_check(additional, depth + 1)
        if extra is None:
            return None

    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return True  # `type` decides about non-objects
        for name, item in value.items():
            test = compiled.get(name, extra)
            if test is not None and not test(item):
                return False
        return True

    return check
