"""Argument values from model text: character data and bounded JSON; pure.

Model text is hostile, so everything here is linear in its input and says what is wrong instead of
raising something unexpected: digits in character references and numbers are bounded, JSON
nesting is measured before `json.loads` recurses, and values that no UTF-8 encoder accepts (a lone
surrogate) are found before they reach a tool.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from toolscore._json import iter_strings

__all__ = [
    "MAX_JSON_DEPTH",
    "CharData",
    "char_data",
    "has_surrogate",
    "loads",
    "relaxed_json",
    "repair_json",
    "snippet",
    "surrogate_at",
]

MAX_JSON_DEPTH = 64
"""How deep a call's JSON arguments may nest."""
_MAX_NUMBER_DIGITS = 1000
"""Longer numbers in JSON arguments are refused (decoding a big int is quadratic in its digits)."""
_ENTITY_RE = re.compile(r"&(amp|lt|gt|quot|apos|#\d++|#x[0-9a-fA-F]++);")
_BAD_AMP_RE = re.compile(r"&(?!(?:amp|lt|gt|quot|apos|#\d++|#x[0-9a-fA-F]++);)")
_ENTITIES = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_JSON_STRING_RE = re.compile(r'"(?:[^"\\]++|\\.)*+"?', re.DOTALL)
_LONG_NUMBER_RE = re.compile(rf"(?<![0-9])[0-9]{{{_MAX_NUMBER_DIGITS + 1}}}")
_NOT_BRACKET_RE = re.compile(r"[^\[\]{}]++")
_NESTING = {"[": 1, "{": 1, "]": -1, "}": -1}
# One token of JSON-ish text at a time, so nothing inside a string is ever repaired: a double- or
# single-quoted string (an unclosed one runs to the end: no retry at every later position), a `//`
# comment, a Python literal, a `<ref .../>` element as a value, a comma before a closing bracket.
_REPAIR_RE = re.compile(
    r"""("(?:[^"\\]++|\\.)*+"?)|('(?:[^'\\]++|\\.)*+'?)|(//[^\n]*+)|\b(True|False|None)\b"""
    r"""|(<[Rr][Ee][Ff]\s(?:[^<>/]++|/(?!>))*+/>)|,(?=\s*+[}\]])""",
    re.DOTALL,
)
_PYTHON = {"True": "true", "False": "false", "None": "null"}
_SINGLE_INNER_RE = re.compile(r"\\'|\\.|\"", re.DOTALL)


def _requote(match: re.Match[str]) -> str:
    """One piece of a single-quoted string, as it goes inside a double-quoted one."""
    piece = match.group(0)
    return "'" if piece == "\\'" else '\\"' if piece == '"' else piece


@dataclass(frozen=True, slots=True)
class CharData:
    """Character data as it reaches a tool."""

    text: str
    verbatim: bool = False
    """The text has a bare `<` or `&` and was taken as written, though it also holds entities."""
    bad_reference: str | None = None
    """The first character reference to no character (`#xD800`), cut for a message; it became U+FFFD."""


def _char(reference: str) -> str | None:
    """The character of `#123` or `#x7B`, or None if it is no Unicode scalar value."""
    digits = reference[2:] if reference.startswith("#x") else reference[1:]
    significant = digits.lstrip("0") or "0"
    if len(significant) > (6 if reference.startswith("#x") else 7):
        return None
    code = int(significant, 16 if reference.startswith("#x") else 10)
    return None if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF else chr(code)


def char_data(text: str) -> CharData:
    """Character data: the five entities and character references decoded when the text is well
    formed, else the text verbatim (code is full of `<` and `&`)."""
    if "<" in text or _BAD_AMP_RE.search(text):
        return CharData(text, verbatim="&" in text and _ENTITY_RE.search(text) is not None)
    bad: list[str] = []

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if not name.startswith("#"):
            return _ENTITIES[name]
        char = _char(name)
        if char is None:
            bad.append(name if len(name) <= 12 else name[:12] + "…")
            return "\ufffd"
        return char

    decoded = _ENTITY_RE.sub(sub, text)
    return CharData(decoded, bad_reference=bad[0] if bad else None)


def _refuse_constant(name: str) -> Any:
    """Python's json reads NaN and Infinity, which are not JSON (and would reach a tool as null)."""
    raise ValueError(f"{name} is not JSON")


def loads(raw: str) -> Any:
    """`json.loads` for model input: nesting and number length are checked first, in linear time.

    Raises:
        ValueError: not JSON (`json.JSONDecodeError`; NaN and Infinity are not JSON either), or
            nested or numbered beyond the limits.
    """
    skeleton = _JSON_STRING_RE.sub("", raw)
    if _LONG_NUMBER_RE.search(skeleton):
        raise ValueError(f"a number has more than {_MAX_NUMBER_DIGITS} digits")
    brackets = _NOT_BRACKET_RE.sub("", skeleton)
    if len(brackets) > MAX_JSON_DEPTH and max(accumulate(map(_NESTING.__getitem__, brackets))) > MAX_JSON_DEPTH:
        raise ValueError(f"it nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError:  # the scanner recursed on a stack already deep: still the input's fault
        raise ValueError("it nests too deeply") from None


def repair_json(raw: str) -> tuple[str, tuple[str, ...]]:
    """The slips models make in JSON repaired, in one linear pass, and what was repaired.

    Outside strings only: `True`/`False`/`None` become `true`/`false`/`null`, `//` comments and
    trailing commas go, single-quoted strings become double-quoted ones, and a `<ref .../>` element
    written as a value becomes a string holding it.
    """
    repairs: dict[str, None] = {}

    def sub(match: re.Match[str]) -> str:
        double, single, comment, literal, element = match.groups()
        if double is not None:
            return double
        if single is not None:
            repairs["single quotes"] = None
            inner = single[1:-1] if len(single) > 1 and single.endswith("'") else single[1:]
            # Escapes stay as written (`\n` is still a newline), but `\'` needs none and `"` one.
            return '"' + _SINGLE_INNER_RE.sub(_requote, inner) + '"'
        if comment is not None:
            repairs["// comments"] = None
            return ""
        if literal is not None:
            repairs[f"Python {literal}"] = None
            return _PYTHON[literal]
        if element is not None:
            # `{"url": <ref id="s1" path="items[0]"/>}`: the element as a string, which the
            # reference reader reads as a whole value (`dialects.py`).
            repairs["<ref/> as a string"] = None
            return json.dumps(element)
        repairs["trailing commas"] = None
        return ""

    # Twice: a comma is trailing only once the comment after it is gone.
    repaired = _REPAIR_RE.sub(sub, _REPAIR_RE.sub(sub, raw))
    return repaired, tuple(repairs)


def relaxed_json(raw: str) -> str:
    """`raw` with the slips models make in JSON repaired (`repair_json`)."""
    return repair_json(raw)[0]


def snippet(raw: str, pos: int, width: int = 24) -> str:
    """The text around `raw[pos]`, quoted for a message (`…"b": Tru|e…`, cut at `width` each side)."""
    head, tail = raw[max(pos - width, 0) : pos], raw[pos : pos + width]
    return ("…" if pos > width else "") + head + "⟨here⟩" + tail + ("…" if pos + width < len(raw) else "")


def has_surrogate(value: Any) -> bool:
    """Whether a decoded JSON value holds a lone surrogate (`"\\ud800"`), which cannot be sent on."""
    return any(_SURROGATE_RE.search(text) is not None for text in iter_strings(value, keys=True))


def surrogate_at(text: str) -> int | None:
    """Where `text` holds an unpaired surrogate code point, if it does."""
    found = _SURROGATE_RE.search(text)
    return None if found is None else found.start()
