"""Pinned tool definitions: the first definition seen of each tool, and any change held for approval.

A pin is keyed by `server/tool` with the *downstream* tool name, so `tools.rename` (or a changed
prefix) never unpins a tool; its digest covers the whole definition as the server sent it
(description, input and output schema, annotations, title, `_meta`). Pins live in a JSON file in
the state directory (`pins.json`, mode 600), so they survive restarts. A changed definition is
kept as *pending* beside its pin until `toolscore pins approve` makes it the pin, or `reset`
forgets both.

`PinBook` holds the file's content in memory: the registry judges definitions against it (no
I/O), and the hub saves it after a rebuild when something was first seen or changed.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any, Literal

from toolscore.errors import ConfigError
from toolscore.trust.verdict import canonical_json, digest_of_text

__all__ = ["Pin", "PinBook", "definition_diff", "pin_of"]

Judgement = Literal["new", "same", "changed"]


@dataclass(frozen=True, slots=True)
class Pin:
    """One definition and when it was first seen."""

    digest: str
    definition: dict[str, Any]
    seen: str
    canonical: str = field(default="", compare=False, repr=False)
    """The definition's canonical JSON when the judge was given it: the file embeds it as it is."""

    def as_dict(self) -> dict[str, Any]:
        """As the file stores it."""
        return {"digest": self.digest, "seen": self.seen, "definition": self.definition}

    def as_json(self) -> str:
        """`as_dict` as JSON text, the definition written once (its canonical JSON, when known)."""
        definition = self.canonical or canonical_json(self.definition)
        return f'{{"definition":{definition},"digest":{_string(self.digest)},"seen":{_string(self.seen)}}}'


class PinBook:
    """The pins of one state directory (or one file), in memory, saved on demand."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.pinned: dict[str, Pin] = {}
        self.pending: dict[str, Pin] = {}
        self._dirty = False
        self.changes: dict[tuple[str, str], Pin | None] = {}
        """(`pinned`/`pending`, key) -> the new entry or None (removed) since the last save: what a
        shared store writes (`state/redis_store.RedisPinBook`); a file is written whole."""
        self.first_seen: set[str] = set()
        """Keys pinned on first sight since the last save: a shared store pins them only where no
        other replica pinned the tool first."""
        self._stamp: tuple[int, int] | None = None
        self.refresh()

    def refresh(self) -> None:
        """Read the file again if it changed since (a `pins approve` from the command line).

        Raises:
            ConfigError: The file is not a pin file.
        """
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self._stamp:
            return
        try:
            data = json.loads(self.path.read_bytes())
            self.pinned = {k: _pin(v) for k, v in data.get("pinned", {}).items()}
            self.pending = {k: _pin(v) for k, v in data.get("pending", {}).items()}
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            raise ConfigError(f"{self.path}: not a pin file ({exc}); move it aside to pin afresh") from None
        self._stamp = stamp

    def judge(
        self, server: str, tool: str, definition: dict[str, Any], canonical: str | None = None
    ) -> tuple[Judgement, str]:
        """Whether this definition is the pinned one, recording a first sight or a change (in memory).

        Args:
            canonical: The definition's `canonical_json`, when the caller made it already.

        Returns:
            The judgement and the definition's digest.
        """
        key = f"{server}/{tool}"
        canonical = canonical or canonical_json(definition)
        digest = digest_of_text(canonical)
        pin = self.pinned.get(key)
        if pin is None:
            self._put("pinned", key, Pin(digest, definition, _now(), canonical))
            self.first_seen.add(key)
            return "new", digest
        if pin.digest == digest:
            if key in self.pending:  # changed back: nothing to approve any more
                self._put("pending", key, None)
            return "same", digest
        if (waiting := self.pending.get(key)) is None or waiting.digest != digest:
            self._put("pending", key, Pin(digest, definition, _now(), canonical))
        return "changed", digest

    def _put(self, section: str, key: str, pin: Pin | None) -> None:
        entries = self.pinned if section == "pinned" else self.pending
        if pin is None:
            entries.pop(key, None)
        else:
            entries[key] = pin
        self.changes[(section, key)] = pin
        self._dirty = True

    def diff(self, key: str) -> str:
        """What changed between the pin and the pending definition of `server/tool`."""
        pin, pending = self.pinned.get(key), self.pending.get(key)
        if pin is None or pending is None:
            return ""
        return definition_diff(pin.definition, pending.definition, key)

    def select(self, selector: str | None, *, pending: bool = False) -> list[str]:
        """The keys `SERVER` or `SERVER/TOOL` names (all for None), sorted."""
        keys = self.pending if pending else self.pinned
        return sorted(k for k in keys if selector is None or k == selector or k.startswith(f"{selector}/"))

    def approve(self, selector: str | None) -> list[str]:
        """Make each selected pending definition the pin; the keys approved."""
        keys = self.select(selector, pending=True)
        for key in keys:
            self._put("pinned", key, self.pending[key])
            self._put("pending", key, None)
        return keys

    def reset(self, selector: str | None) -> list[str]:
        """Forget the selected pins (and what was pending for them): the next definition seen is pinned."""
        keys = sorted(set(self.select(selector)) | set(self.select(selector, pending=True)))
        for key in keys:
            self._put("pinned", key, None)
            self._put("pending", key, None)
        return keys

    def save(self) -> None:
        """Write the file if anything changed (atomically: a temporary file renamed over it, mode 600)."""
        if not self._dirty:
            return
        if not self.path.parent.is_dir():  # a look costs less than a `mkdir` that fails
            self.path.parent.mkdir(parents=True, exist_ok=True)
        # One pin a line, each written by the C encoder (an indented dump runs the pure-Python one,
        # which cost more than hashing every definition), and the whole joined once.
        parts = ["{"]
        for name, pins in (("pending", self.pending), ("pinned", self.pinned)):
            parts.append(f'"{name}": {{' if name == "pending" else f',\n"{name}": {{')
            lines = [f" {_string(k)}: {p.as_json()}" for k, p in sorted(pins.items())]
            if lines:
                parts.extend(("\n", ",\n".join(lines), "\n"))
            parts.append("}")
        parts.append("}\n")
        body = "".join(parts).encode("utf-8")  # written as bytes: no text layer to make and go through
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(body)
            os.replace(temporary, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise
        stat = self.path.stat()
        self._stamp = (stat.st_mtime_ns, stat.st_size)
        self._dirty = False
        self.changes.clear()
        self.first_seen.clear()


_string = encode_basestring_ascii
"""`json.dumps` of a string, without the encoder object's round trip (the same text: its default
`ensure_ascii` calls this)."""


def pin_of(value: Any) -> Pin:
    """A pin from its stored form (raises KeyError, TypeError or ValueError when it is not one)."""
    return _pin(value)


def _pin(value: Any) -> Pin:
    return Pin(str(value["digest"]), dict(value["definition"]), str(value.get("seen", "")))


def _now() -> str:
    """The time, to the second (a catalog's first sight pins its tools within one)."""
    global _CLOCK
    second = int(time.time())
    if _CLOCK[0] != second:
        _CLOCK = (second, datetime.fromtimestamp(second, UTC).isoformat(timespec="seconds"))
    return _CLOCK[1]


_CLOCK: tuple[int, str] = (0, "")


def definition_diff(old: Mapping[str, Any], new: Mapping[str, Any], label: str = "") -> str:
    """A person's view of a changed definition: a unified diff of the description, the schema
    paths added and removed, and every other field that changed. A skill's (SEP-2640) description
    is its frontmatter's; its other frontmatter fields and its files (by URI: digest and size) are
    named one by one."""
    lines: list[str] = []
    before, after = _description(old), _description(new)
    if before != after:
        lines.extend(
            difflib.unified_diff(
                before.splitlines(), after.splitlines(), f"{label} description (pinned)", f"{label} description (now)",
                lineterm="",
            )
        )  # fmt: skip
    for key in ("inputSchema", "outputSchema"):
        was, now = set(_paths(old.get(key))), set(_paths(new.get(key)))
        lines.extend(f"+ {key}{path}" for path in sorted(now - was))
        lines.extend(f"- {key}{path}" for path in sorted(was - now))
    skill = isinstance(old.get("frontmatter"), Mapping) and isinstance(new.get("frontmatter"), Mapping)
    if skill:
        lines.extend(_changed(old["frontmatter"], new["frontmatter"], "frontmatter.", skip={"description"}))
        lines.extend(_changed(_files(old), _files(new), "file "))
    done = {"description", "inputSchema", "outputSchema", *(("frontmatter", "resources") if skill else ())}
    lines.extend(_changed(old, new, "", skip=done))
    return "\n".join(lines)


def _description(definition: Mapping[str, Any]) -> str:
    text = definition.get("description")
    frontmatter = definition.get("frontmatter")
    if text is None and isinstance(frontmatter, Mapping):
        text = frontmatter.get("description")
    return str(text or "")


def _files(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A skill entry's files by URI (`"dynamic"` as it is)."""
    resources = entry.get("resources")
    if not isinstance(resources, list):
        return {"(files)": resources}
    return {
        str(item.get("uri")): {k: v for k, v in item.items() if k != "uri"}
        for item in resources
        if isinstance(item, Mapping)
    }


def _changed(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str, skip: Collection[str] = ()) -> list[str]:
    """`~ key: was -> now` for every key whose value differs (absent reads as null)."""
    return [
        f"~ {prefix}{key}: {json.dumps(old.get(key))[:200]} -> {json.dumps(new.get(key))[:200]}"
        for key in sorted((set(old) | set(new)) - set(skip))
        if old.get(key) != new.get(key)
    ]


def _paths(node: Any, at: str = "", depth: int = 0) -> Iterator[str]:
    """Every path in a schema, with its leaf value (`.properties.x.type = "string"`), 32 deep at most."""
    if depth > 32:
        return
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, f"{at}.{key}", depth + 1)
    elif isinstance(node, list):
        for n, value in enumerate(node):
            yield from _paths(value, f"{at}[{n}]", depth + 1)
    else:
        yield f"{at} = {json.dumps(node)[:120]}"
