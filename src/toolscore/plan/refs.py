"""References into earlier step results: parsing and resolution; pure.

Theory of operation. A string in a call's arguments may hold references:

    $result_of_step_3            ${3}  ${result_of_step_3}  ${step3}  ${hits}
    ${r.sources[0].url}  ${r.items[-1]}  ${r['odd key']}  ${r.items[*].name}  ${r.missing?}

`parse_template` splits a string into literal text and `Ref`s (`$$` is a literal `$`; bare `$3`
and `$name` stay text: `dialects.py` reads them, and other dialects, as canonical references
before this where they are unambiguous; `|filters` are v2 and refused). `resolve` substitutes after JSON
parsing, so nothing needs escaping: a string that is exactly one reference becomes the referenced
value with its type; a reference inside longer text is interpolated (strings raw, anything else
as compact JSON). A step's value is the record `{status, text, json, error, ms, attempts, server,
tool}`; a path starts at `json` unless its first key names one of those fields. Where a path leads
nowhere, it looks once inside a JSON-string wrapper (a string holding JSON, or a one-field object
whose field is one, as `{"result": "{...}"}`) before failing.

Every string may be hostile: matching is linear (possessive quantifiers only), step numbers and
indices have at most 15 digits and a path at most 64 segments, and `resolve` can bound what it
builds (`max_bytes`), since one reference repeated can copy a large value many times.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from toolscore._json import iter_strings, map_strings
from toolscore.errors import RefError, RefSyntaxError
from toolscore.plan.values import loads

__all__ = [
    "STAR",
    "VALUE_FIELDS",
    "Ref",
    "contains_ref",
    "find_refs",
    "nearest",
    "parse_template",
    "resolve",
    "step_like",
    "value_of",
]

VALUE_FIELDS = frozenset({"status", "text", "json", "error", "ms", "attempts", "server", "tool"})
_MAX_DIGITS = 15
"""Step numbers and indices: longer than any real one, far shorter than what makes int() slow."""
_MAX_SEGMENTS = 64
_IDENT = r"[A-Za-z_][A-Za-z0-9_]{0,63}+"
_PATH = r"(?:\.[A-Za-z_][A-Za-z0-9_\-]*+|\[-?\d++\]|\[\*\]|\['[^']*+'\])*+"
_BARE = re.compile(rf"\$result_of_step_(\d++)({_PATH})(\??)")
_BRACED = re.compile(r"\$\{([^{}]*+)\}")
_TARGET = re.compile(rf"^(?:result_of_step_(\d++)|step(\d++)|(\d++)|({_IDENT}))({_PATH})(\??)$")
_SEGMENT = re.compile(r"\.([A-Za-z_][A-Za-z0-9_\-]*+)|\[(-?\d++)\]|\[(\*)\]|\['([^']*+)'\]")
_STEP_LIKE = re.compile(r"^(?:step|result|output)_?(\d{1,15})$", re.IGNORECASE)


class _Star:
    def __repr__(self) -> str:
        return "[*]"


STAR = _Star()
"""Path segment `[*]`: apply the rest of the path to every element."""

PathSegment = str | int | _Star


@dataclass(frozen=True, slots=True)
class Ref:
    """One reference: its target (a step number or an id), a path, and whether it is optional."""

    raw: str
    target: int | str
    path: tuple[PathSegment, ...] = ()
    optional: bool = False


def _show(raw: str) -> str:
    """A reference as quoted in a message: model input, so not all of it."""
    return raw if len(raw) <= 80 else raw[:77] + "..."


def _number(digits: str, raw: str) -> int:
    if len(digits.lstrip("-")) > _MAX_DIGITS:
        raise RefSyntaxError(f"{_show(raw)}: a number of more than {_MAX_DIGITS} digits")
    return int(digits)


def _parse_path(text: str, raw: str) -> tuple[PathSegment, ...]:
    segments: list[PathSegment] = []
    for match in _SEGMENT.finditer(text):
        if len(segments) == _MAX_SEGMENTS:
            raise RefSyntaxError(f"{_show(raw)}: a path of more than {_MAX_SEGMENTS} segments")
        key, index, star, quoted = match.groups()
        if key:
            segments.append(key)
        elif index:
            segments.append(_number(index, raw))
        elif star:
            segments.append(STAR)
        else:
            segments.append(quoted)
    return tuple(segments)


def _target(match: re.Match[str], raw: str) -> int | str:
    """The step number or id of a `_TARGET` match."""
    number = match.group(1) or match.group(2) or match.group(3)
    return _number(number, raw) if number else match.group(4)


def _braced(inner: str, raw: str) -> Ref:
    body = inner.strip()
    if "|" in body:
        raise RefSyntaxError(f"{_show(raw)}: filters ('|...') are not available yet (plan language v2)")
    match = _TARGET.match(body)
    if match is None:
        raise RefSyntaxError(f"{_show(raw)}: not a reference; write ${{N}}, ${{id}} or ${{id.path[0]}}")
    return Ref(raw, _target(match, raw), _parse_path(match.group(5), raw), bool(match.group(6)))


def _ref_at(text: str, i: int) -> tuple[Ref | None, int]:
    """The reference starting at the `$` at `i` (None if none does) and where it ends."""
    if (bare := _BARE.match(text, i)) is not None:
        raw = bare.group(0)
        return Ref(raw, _number(bare.group(1), raw), _parse_path(bare.group(2), raw), bool(bare.group(3))), bare.end()
    if (braced := _BRACED.match(text, i)) is not None:
        return _braced(braced.group(1), braced.group(0)), braced.end()
    if text.startswith("${", i):
        raise RefSyntaxError(f"unclosed '${{' in {text[i : i + 40]!r}")
    return None, i + 1


def parse_template(text: str) -> tuple[str | Ref, ...]:
    """Split `text` into literal parts and references.

    Raises:
        RefSyntaxError: a `${...}` that is not a v1 reference.
    """
    parts: list[str | Ref] = []
    literal: list[str] = []
    i = 0
    while (dollar := text.find("$", i)) != -1:
        literal.append(text[i:dollar])
        if text.startswith("$$", dollar):
            literal.append("$")
            i = dollar + 2
            continue
        ref, i = _ref_at(text, dollar)
        if ref is None:
            literal.append("$")
            continue
        if joined := "".join(literal):
            parts.append(joined)
        literal = []
        parts.append(ref)
    if rest := "".join(literal) + text[i:]:
        parts.append(rest)
    return tuple(parts)


def step_like(name: str) -> int | None:
    """The step a name like `step_1`, `result2` or `output_3` seems to mean, if it is one."""
    match = _STEP_LIKE.match(name)
    return int(match.group(1)) if match else None


def find_refs(value: Any) -> list[Ref]:
    """Every reference in a JSON value's strings, in document order (keys are not templates).

    Raises:
        RefSyntaxError: a `${...}` that is not a v1 reference.
    """
    return [part for text in iter_strings(value) for part in parse_template(text) if isinstance(part, Ref)]


def contains_ref(value: Any) -> bool:
    """Whether a JSON value holds a reference anywhere (syntax errors count as references)."""
    try:
        return any(isinstance(part, Ref) for text in iter_strings(value) for part in parse_template(text))
    except RefSyntaxError:
        return True


def _applies(value: Any, segment: PathSegment) -> bool:
    """Whether one path segment leads somewhere in `value`."""
    if segment is STAR:
        return isinstance(value, list)
    if isinstance(segment, int):
        return isinstance(value, list) and -len(value) <= segment < len(value)
    return isinstance(value, dict) and segment in value


def _wrapped(value: Any) -> Any:
    """The JSON array or object inside a wrapper: `value` itself a string holding JSON, or the only
    field of a one-field object (`{"result": [...]}`, `{"result": "{...}"}`); None if neither."""
    if isinstance(value, dict) and len(value) == 1:
        (value,) = value.values()
        if isinstance(value, dict | list):
            return value
    if not isinstance(value, str):
        return None
    try:
        inner = loads(value)  # bounded: the text is a tool's output
    except ValueError:
        return None
    return inner if isinstance(inner, dict | list) else None


_MAX_KEYS_SHOWN = 20


def _what(value: Any) -> str:
    """What a value is, for a path that leads nowhere: its keys, its length or its type."""
    if isinstance(value, dict):
        if not value:
            return "an empty object"
        keys = [str(k) for k in list(value)[:_MAX_KEYS_SHOWN]]
        more = f" and {len(value) - len(keys)} more" if len(value) > len(keys) else ""
        return "an object with keys " + ", ".join(_show(k) for k in keys) + more
    if isinstance(value, list):
        return f"an array of {len(value)} item{'' if len(value) == 1 else 's'}"
    if isinstance(value, str):
        return f"a string of {len(value)} characters"
    kind = {bool: "a boolean", int: "an integer", float: "a number"}.get(type(value), "a value")
    return "null" if value is None else f"{kind} ({_show(_render(value))})"


def _missing(value: Any, segment: PathSegment, ref: Ref, at: tuple[PathSegment, ...]) -> RefError:
    """Why `segment` leads nowhere in `value`, with what is there and the nearest key."""
    where = _show(ref.raw) if not at else f"{_show(ref.raw)}: at {_format(at)}"
    inner = _wrapped(value)
    shown = value if inner is None else inner
    there = _what(value) + (f" wrapping {_what(inner)}" if inner is not None else "")
    if isinstance(segment, _Star):
        return RefError(f"{where}: [*] needs an array, found {there}")
    if isinstance(segment, int):
        return RefError(f"{where}: no index [{segment}]: found {there}")
    hint = ""
    if isinstance(shown, dict) and (near := nearest(segment, [str(k) for k in shown])) is not None:
        hint = f" (did you mean '{near}'?)"
    elif not at and isinstance(value, str) and inner is None:
        # `${first.output}` on a tool that answered plain text: the text is the record's field.
        hint = f" (the result is plain text: write ${{{ref.target}.text}})"
    return RefError(f"{where}: no key '{_show(segment)}'{hint}: found {there}")


def _format(path: tuple[PathSegment, ...]) -> str:
    return "".join(
        "[*]" if isinstance(s, _Star) else f"[{s}]" if isinstance(s, int) else f".{s}" if _KEY.match(s) else f"['{s}']"
        for s in path
    )


_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


_MAX_CANDIDATES = 64
"""Names compared per suggestion at most: difflib is quadratic in the lengths, so each is bounded."""


def nearest(word: str, candidates: list[str]) -> str | None:
    """The candidate closest to `word` (a misspelt id or key), if one is close; bounded work.

    Case-blind equality first, then difflib among the first `_MAX_CANDIDATES` names of at most 64
    characters. Callers that may ask many times (one per problem) bound how often they ask.
    """
    if len(word) > 64:
        return None
    pool = [c for c in candidates[:_MAX_CANDIDATES] if len(c) <= 64]
    folded = {c.lower(): c for c in pool}
    if word.lower() in folded:
        return folded[word.lower()]
    found = difflib.get_close_matches(word, pool, n=1, cutoff=0.6)
    return found[0] if found else None


def _walk(
    value: Any, path: tuple[PathSegment, ...], ref: Ref, *, see_through: bool = True, at: tuple[PathSegment, ...] = ()
) -> Any:
    for n, segment in enumerate(path):
        # A tool that wraps its data (the sandbox's `{"result": "{...}"}`, a search's
        # `{"result": [...]}`): when the path leads nowhere, look once inside before giving up.
        if see_through and not _applies(value, segment):
            inner = _wrapped(value)
            if inner is not None and _applies(inner, segment):
                value, see_through = inner, False
        if not _applies(value, segment):
            raise _missing(value, segment, ref, (*at, *path[:n]))
        if segment is STAR:
            return [
                _walk(item, path[n + 1 :], ref, see_through=see_through, at=(*at, *path[: n + 1])) for item in value
            ]
        value = value[segment]
    return value


def value_of(ref: Ref, lookup: Callable[[int | str], Mapping[str, Any] | None]) -> Any:
    """What one reference reads (`RefError` where it reads nothing; None for an optional one)."""
    return _value_of(ref, lookup)


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


def _size(value: Any) -> int:
    """UTF-8 bytes of a value as compact JSON (a string as its text)."""
    text = (
        value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    )
    return len(text.encode("utf-8", "surrogatepass"))


def resolve(
    value: Any, lookup: Callable[[int | str], Mapping[str, Any] | None], *, max_bytes: int | None = None
) -> Any:
    """Substitute every reference in a JSON value.

    Args:
        value: Arguments as parsed from the plan.
        lookup: A step number or id -> that step's value record, or None if it has none.
        max_bytes: The most that the strings and substituted values may take together (UTF-8;
            values as compact JSON). Counted while building, so one reference repeated to a large
            value stops at the limit instead of copying the value each time.

    Raises:
        RefError: a non-optional reference does not resolve, or the result would exceed `max_bytes`.
    """
    left = max_bytes

    def spend(item: Any, source: str) -> Any:
        nonlocal left
        if left is not None:
            left -= _size(item)
            if left < 0:
                raise RefError(
                    f"{_show(source)}: the resolved arguments would exceed {max_bytes} bytes; "
                    "reference less data (a path into it), or fewer times"
                )
        return item

    def substitute(text: str) -> Any:
        parts = parse_template(text)
        if len(parts) == 1 and isinstance(parts[0], Ref):
            return spend(_value_of(parts[0], lookup), parts[0].raw)
        pieces: list[str] = []
        for part in parts:
            if isinstance(part, str):
                pieces.append(spend(part, "literal text"))
            else:
                pieces.append(spend(_render(_value_of(part, lookup)), part.raw))
        return "".join(pieces)

    # Strings are substituted in document order, so `spend` stops at the first one past the limit.
    return map_strings(value, substitute)
