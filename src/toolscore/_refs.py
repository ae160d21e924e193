"""References into earlier step results: parsing and resolution; pure.

Theory of operation. A string in a call's arguments may hold references:

    $result_of_step_3            ${3}  ${result_of_step_3}  ${step3}  ${hits}
    ${r.sources[0].url}  ${r.items[-1]}  ${r['odd key']}  ${r.items[*].name}  ${r.missing?}

`parse_template` splits a string into literal text and `Ref`s (`$$` is a literal `$`; bare `$3`
and `$name` stay text in v1; `|filters` are v2 and refused). `resolve` substitutes after JSON
parsing, so nothing needs escaping: a string that is exactly one reference becomes the referenced
value with its type; a reference inside longer text is interpolated (strings raw, anything else
as compact JSON). A step's value is the record `{status, text, json, error, ms, attempts, server,
tool}`; a path starts at `json` unless its first key names one of those fields.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "STAR",
    "VALUE_FIELDS",
    "Ref",
    "RefError",
    "RefSyntaxError",
    "contains_ref",
    "find_refs",
    "parse_template",
    "repair_mustache",
    "resolve",
]

VALUE_FIELDS = frozenset({"status", "text", "json", "error", "ms", "attempts", "server", "tool"})
_IDENT = r"[A-Za-z_][A-Za-z0-9_]{0,63}"
_PATH = r"(?:\.[A-Za-z_][A-Za-z0-9_\-]*|\[-?\d+\]|\[\*\]|\['[^']*'\])*"
_BARE = re.compile(rf"\$result_of_step_(\d+)({_PATH})(\??)")
_BRACED = re.compile(r"\$\{([^{}]*)\}")
_TARGET = re.compile(rf"^(?:result_of_step_(\d+)|step(\d+)|(\d+)|({_IDENT}))({_PATH})(\??)$")
_SEGMENT = re.compile(r"\.([A-Za-z_][A-Za-z0-9_\-]*)|\[(-?\d+)\]|\[(\*)\]|\['([^']*)'\]")


class _Star:
    def __repr__(self) -> str:
        return "[*]"


STAR = _Star()
"""Path segment `[*]`: apply the rest of the path to every element."""

PathSegment = str | int | _Star


class RefSyntaxError(ValueError):
    """A `${...}` that is not a valid v1 reference."""


class RefError(LookupError):
    """A reference that does not resolve (missing step, key or index)."""


@dataclass(frozen=True, slots=True)
class Ref:
    """One reference: its target (a step number or an id), a path, and whether it is optional."""

    raw: str
    target: int | str
    path: tuple[PathSegment, ...] = ()
    optional: bool = False


def _parse_path(text: str) -> tuple[PathSegment, ...]:
    segments: list[PathSegment] = []
    for key, index, star, quoted in _SEGMENT.findall(text):
        if key:
            segments.append(key)
        elif index:
            segments.append(int(index))
        elif star:
            segments.append(STAR)
        else:
            segments.append(quoted)
    return tuple(segments)


def _braced(inner: str, raw: str) -> Ref:
    body = inner.strip()
    if "|" in body:
        raise RefSyntaxError(f"{raw}: filters ('|...') are not available yet (plan language v2)")
    match = _TARGET.match(body)
    if match is None:
        raise RefSyntaxError(f"{raw}: not a reference; write ${{N}}, ${{id}} or ${{id.path[0]}}")
    n1, n2, n3, ident, path, optional = match.groups()
    number = n1 or n2 or n3
    target: int | str = int(number) if number else ident
    return Ref(raw, target, _parse_path(path), bool(optional))


def parse_template(text: str) -> tuple[str | Ref, ...]:
    """Split `text` into literal parts and references.

    Raises:
        RefSyntaxError: a `${...}` that is not a v1 reference.
    """
    parts: list[str | Ref] = []
    literal: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("$$", i):
            literal.append("$")
            i += 2
            continue
        if text[i] == "$":
            bare = _BARE.match(text, i)
            braced = _BRACED.match(text, i) if bare is None else None
            if bare is not None:
                number, path, optional = bare.groups()
                ref: Ref | None = Ref(bare.group(0), int(number), _parse_path(path), bool(optional))
                end = bare.end()
            elif braced is not None:
                ref = _braced(braced.group(1), braced.group(0))
                end = braced.end()
            elif text.startswith("${", i):
                raise RefSyntaxError(f"unclosed '${{' in {text[i : i + 40]!r}")
            else:
                ref, end = None, i + 1
            if ref is not None:
                if literal:
                    parts.append("".join(literal))
                    literal = []
                parts.append(ref)
                i = end
                continue
        literal.append(text[i])
        i += 1
    if literal:
        parts.append("".join(literal))
    return tuple(parts)


_MUSTACHE = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")


def repair_mustache(value: Any, known: Callable[[int | str], bool]) -> tuple[Any, list[str]]:
    """Rewrite `{{x.path}}` (a common slip for `${x.path}`) where `x` is a known step or id.

    Only when the inner text is a valid reference to a target that exists, so template syntax
    that happens to appear in code is left alone. Returns the value and what was rewritten.
    """
    repaired: list[str] = []

    def fix(text: str) -> str:
        def sub(match: re.Match[str]) -> str:
            inner = _TARGET.match(match.group(1))
            if inner is None:
                return match.group(0)
            n1, n2, n3, ident = inner.group(1), inner.group(2), inner.group(3), inner.group(4)
            number = n1 or n2 or n3
            if not known(int(number) if number else ident):
                return match.group(0)
            repaired.append(match.group(0))
            return "${" + match.group(1) + "}"

        return _MUSTACHE.sub(sub, text)

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return fix(item)
        if isinstance(item, list):
            return [walk(i) for i in item]
        if isinstance(item, dict):
            return {k: walk(v) for k, v in item.items()}
        return item

    return walk(value), repaired


def find_refs(value: Any) -> list[Ref]:
    """Every reference in a JSON value's strings (keys are not templates)."""
    found: list[Ref] = []
    if isinstance(value, str):
        found.extend(p for p in parse_template(value) if isinstance(p, Ref))
    elif isinstance(value, list):
        for item in value:
            found.extend(find_refs(item))
    elif isinstance(value, dict):
        for item in value.values():
            found.extend(find_refs(item))
    return found


def contains_ref(value: Any) -> bool:
    """Whether a JSON value holds a reference anywhere (syntax errors count as references)."""
    try:
        return bool(find_refs(value))
    except RefSyntaxError:
        return True


def _walk(value: Any, path: tuple[PathSegment, ...], ref: Ref) -> Any:
    for n, segment in enumerate(path):
        if segment is STAR:
            if not isinstance(value, list):
                raise RefError(f"{ref.raw}: [*] needs an array, found {type(value).__name__}")
            return [_walk(item, path[n + 1 :], ref) for item in value]
        if isinstance(segment, int):
            if not isinstance(value, list) or not -len(value) <= segment < len(value):
                raise RefError(f"{ref.raw}: no index [{segment}]")
            value = value[segment]
        else:
            if not isinstance(value, dict) or segment not in value:
                raise RefError(f"{ref.raw}: no key '{segment}'")
            value = value[segment]
    return value


def _value_of(ref: Ref, lookup: Callable[[int | str], Mapping[str, Any] | None]) -> Any:
    record = lookup(ref.target)
    if record is None:
        raise RefError(f"{ref.raw}: no finished step '{ref.target}'")
    path = ref.path
    if path and isinstance(path[0], str) and path[0] in VALUE_FIELDS:
        value, path = record[path[0]], path[1:]
    else:
        value = record["json"]
    try:
        return _walk(value, path, ref)
    except RefError:
        if ref.optional:
            return None
        raise


def _render(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def resolve(value: Any, lookup: Callable[[int | str], Mapping[str, Any] | None]) -> Any:
    """Substitute every reference in a JSON value.

    Args:
        value: Arguments as parsed from the plan.
        lookup: A step number or id -> that step's value record, or None if it has none.

    Raises:
        RefError: a non-optional reference does not resolve.
    """
    if isinstance(value, str):
        parts = parse_template(value)
        if len(parts) == 1 and isinstance(parts[0], Ref):
            return _value_of(parts[0], lookup)
        if not any(isinstance(p, Ref) for p in parts):
            return "".join(p for p in parts if isinstance(p, str))
        return "".join(p if isinstance(p, str) else _render(_value_of(p, lookup)) for p in parts)
    if isinstance(value, list):
        return [resolve(item, lookup) for item in value]
    if isinstance(value, dict):
        return {key: resolve(item, lookup) for key, item in value.items()}
    return value
