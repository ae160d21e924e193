"""JSON with comments and trailing commas (VS Code, Cursor, Gemini), read and edited in place; pure.

Reading blanks comments and trailing commas out (same length, newlines kept), so every offset in
the cleaned text is an offset in the file, then decodes with the standard library. Editing
changes only the text of the members it adds, replaces or removes: every other key, comment,
indent and blank line of the file stays as it was. Callers check an edit by decoding the result
and comparing it with what they meant (`edit_object`), so a layout this editor misreads is an
error, never a damaged file. Every scan is one linear pass without recursion.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from toolscore._json import nested_deeper_than

__all__ = ["MAX_DEPTH", "JsoncError", "Member", "clean", "edit_object", "loads"]

MAX_DEPTH = 64
"""Arrays and objects nested deeper than this are refused: no client's file needs more, and the
code that walks an entry afterwards may recurse."""


class JsoncError(ValueError):
    """The text is not JSON (with comments), or an edit did not give what was meant."""


def _string_end(text: str, start: int) -> int:
    """The index just past the string literal opening at `start`."""
    i = start + 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        else:
            i += 1
    raise JsoncError("a string is not closed")


def clean(text: str) -> str:
    """`text` with `//` and `/* */` comments and trailing commas blanked to spaces (newlines kept)."""
    out = list(text)
    i, n = 0, len(text)
    last_comma = -1  # a comma not yet followed by anything but blanks
    while i < n:
        c = text[i]
        if c == '"':
            i = _string_end(text, i)
            last_comma = -1
        elif c == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out[i:end] = " " * (end - i)
            i = end
        elif c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise JsoncError("a /* comment is not closed")
            end += 2
            out[i:end] = ["\n" if ch == "\n" else " " for ch in text[i:end]]
            i = end
        else:
            if c in "}]" and last_comma >= 0:
                out[last_comma] = " "
            if c == ",":
                last_comma = i
            elif not c.isspace():
                last_comma = -1
            i += 1
    return "".join(out)


def loads(text: str) -> Any:
    """Decode JSON with comments and trailing commas.

    Raises:
        JsoncError: with the line and column of the problem.
    """
    try:
        value = json.loads(clean(text))
    except json.JSONDecodeError as exc:
        raise JsoncError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise JsoncError(f"nested too deeply (more than {MAX_DEPTH} levels)") from None
    if nested_deeper_than(value, MAX_DEPTH):
        raise JsoncError(f"nested too deeply (more than {MAX_DEPTH} levels)")
    return value


@dataclass(frozen=True, slots=True)
class Member:
    """One `"key": value` of an object, by offsets into the text."""

    key: str
    start: int
    value_start: int
    value_end: int


def _skip_blank(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _value_end(text: str, i: int) -> int:
    if text[i] == '"':
        return _string_end(text, i)
    if text[i] in "{[":
        depth = 0
        while True:
            c = text[i]
            if c == '"':
                i = _string_end(text, i)
                continue
            if c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
    while i < len(text) and text[i] not in ",}] \t\r\n":
        i += 1
    return i


def _members(cleaned: str, open_at: int) -> tuple[list[Member], int]:
    """The members of the (valid) object opening at `open_at`, and the offset of its `}`."""
    members: list[Member] = []
    i = _skip_blank(cleaned, open_at + 1)
    while cleaned[i] != "}":
        key_end = _string_end(cleaned, i)
        key = json.loads(cleaned[i:key_end])
        value_start = _skip_blank(cleaned, _skip_blank(cleaned, key_end) + 1)  # past the colon
        value_end = _value_end(cleaned, value_start)
        members.append(Member(key, i, value_start, value_end))
        i = _skip_blank(cleaned, value_end)
        if cleaned[i] == ",":
            i = _skip_blank(cleaned, i + 1)
    return members, i


def _line_indent(text: str, at: int) -> str:
    line_start = text.rfind("\n", 0, at) + 1
    return re.match(r"[ \t]*", text[line_start:]).group(0)  # type: ignore[union-attr]  # always matches


def _file_unit(text: str) -> str:
    """The file's indent step: the leading blanks of its first indented line (two spaces if none)."""
    found = re.search(r"\n([ \t]+)\S", text)
    return found.group(1) if found else "  "


def _render(value: Any, indent: str | None, unit: str) -> str:
    if indent is None:
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, indent=unit, ensure_ascii=False).replace("\n", "\n" + indent)


class _Object:
    """An object of the text: its members and how they are laid out."""

    def __init__(self, text: str, cleaned: str, open_at: int) -> None:
        self.text = text
        self.cleaned = cleaned
        self.open_at = open_at
        self.members, self.close_at = _members(cleaned, open_at)
        base = _line_indent(text, open_at)
        if self.members:
            first = self.members[0].start
            self.inline = "\n" not in text[open_at:first]
            self.indent = _line_indent(text, first)
        else:
            # An empty `{}` follows the file: one line stays one line, an indented file gets indented members.
            self.inline = "\n" not in text.strip()
            self.indent = base + _file_unit(text)
        self.unit = self.indent[len(base) :] if self.indent.startswith(base) and self.indent != base else "  "
        self.base = base

    def find(self, key: str) -> Member | None:
        # The last one wins, as in the decoder.
        return next((m for m in reversed(self.members) if m.key == key), None)

    def rendered(self, key: str, value: Any) -> str:
        indent = None if self.inline else self.indent
        return f"{json.dumps(key, ensure_ascii=False)}: {_render(value, indent, self.unit)}"

    def add(self, key: str, value: Any) -> str:
        text = self.text
        if self.members:
            at = self.members[-1].value_end
            if self.inline:
                return text[:at] + ", " + self.rendered(key, value) + text[at:]
            # After the last member's line, so a comment at its end stays on it.
            line_end = text.find("\n", at)
            line_end = len(text) if line_end < 0 else line_end
            tail = self.cleaned[at:line_end]
            if tail.strip() not in ("", ","):
                return text[:at] + ",\n" + self.indent + self.rendered(key, value) + text[at:]
            # Read the comma from the text: cleaning blanks a trailing one.
            comma = "" if text[at:line_end].lstrip().startswith(",") else ","
            added = "\n" + self.indent + self.rendered(key, value)
            return text[:at] + comma + text[at:line_end] + added + text[line_end:]
        inner = (
            " " + self.rendered(key, value) + " "
            if self.inline
            else "\n" + self.indent + self.rendered(key, value) + "\n" + self.base
        )
        return text[: self.open_at + 1] + inner + text[self.close_at :]

    def replace(self, member: Member, value: Any) -> str:
        indent = None if self.inline else self.indent
        return self.text[: member.value_start] + _render(value, indent, self.unit) + self.text[member.value_end :]

    def remove(self, member: Member) -> str:
        text, members = self.text, self.members
        index = members.index(member)
        if len(members) == 1:
            return text[: self.open_at + 1] + text[self.close_at :]
        if index + 1 < len(members):
            return text[: member.start] + text[members[index + 1].start :]
        # The last one: the comma before it goes, a comment after that comma stays with its line.
        comma = text.index(",", members[index - 1].value_end)
        gap = text[comma + 1 : member.start]
        gap = gap[: gap.rfind("\n")] if "\n" in gap else gap.rstrip()
        rest = text[member.value_end :]
        if rest.lstrip().startswith(","):  # its own trailing comma
            rest = rest.lstrip()[1:] if not rest[: len(rest) - len(rest.lstrip())].count("\n") else rest
        return text[:comma] + gap + rest


def _object_at(text: str, cleaned: str, open_at: int, path: Sequence[str]) -> tuple[_Object, int]:
    """The deepest object along `path` that exists, and how many keys of `path` it got through."""
    current = _Object(text, cleaned, open_at)
    for depth, key in enumerate(path):
        member = current.find(key)
        if member is None or cleaned[member.value_start] != "{":
            return current, depth
        current = _Object(text, cleaned, member.value_start)
    return current, len(path)


def _nest(path: Sequence[str], value: dict[str, Any]) -> dict[str, Any]:
    for key in reversed(path):
        value = {key: value}
    return value


def edit_object(text: str, path: Sequence[str], changes: dict[str, Any | None]) -> str:
    """`text` with the object at `path` changed: a key to a value sets it, a key to None removes it.

    The object (and the objects leading to it) is created when missing; only the changed members'
    text is written. The result is decoded and compared with the intended value before it is
    returned.

    Raises:
        JsoncError: the text is not JSON with an object at the top, a step of `path` is not an
            object, or the edit would not give the intended value.
    """
    document = loads(text) if text.strip() else {}
    if not isinstance(document, dict):
        raise JsoncError("the top level is not a JSON object")
    intended = json.loads(json.dumps(document))
    target = intended
    for key in path:
        step = target.setdefault(key, {})
        if not isinstance(step, dict):
            raise JsoncError(f"'{key}' is not an object")
        target = step
    for key, value in changes.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    if not text.strip():
        return json.dumps(intended, indent=2, ensure_ascii=False) + "\n"

    for key, value in changes.items():
        cleaned = clean(text)
        obj, depth = _object_at(text, cleaned, _skip_blank(cleaned, 0), path)
        if depth < len(path):
            if value is not None:
                text = obj.add(path[depth], _nest(path[depth + 1 :], {key: value}))
            continue
        member = obj.find(key)
        if value is None:
            if member is not None:
                text = obj.remove(member)
        elif member is None:
            text = obj.add(key, value)
        else:
            text = obj.replace(member, value)
    if loads(text) != intended:
        raise JsoncError("editing this file in place would change more than meant; edit it by hand")
    return text
