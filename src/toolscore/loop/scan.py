"""Top-level items of a model turn as it streams in: each call the moment its closing tag arrives; pure.

The scanner only finds where each top-level element ends; `toolscore.plan.parse` still reads each
one. It is incremental and linear: every character is looked at a bounded number of times however
the text is split into chunks, so a hostile stream cannot make it quadratic.

- `<think>…</think>` and `<answer>…</answer>` are read to their close tag (a tag inside them is
  text); an `<answer>` still open when the turn ends is the answer (the model stopped on `</answer>`).
- `<execute_tools />` (any spelling of the tag: `<execute_tools>`, `</execute_tools>`) ends the turn.
- Any other element is one item, read to the close tag that balances it (same name, nesting
  counted), or to `/>`. `<!-- … -->` and stray close tags between items are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["EXECUTE", "Item", "ItemScanner"]

EXECUTE = "execute_tools"
_NAME_END = frozenset(" \t\r\n/>")
_SPECIAL = re.compile("[<>\"']")
_MAX_NAME = 128
"""A tag name longer than this is prose, not a tag (bounds the look-ahead)."""

Kind = Literal["call", "think", "answer", "stop", "cut"]


@dataclass(frozen=True, slots=True)
class Item:
    """One top-level item of a turn: its kind, tag name and text (tags included)."""

    kind: Kind
    name: str
    text: str
    end: int
    """Offset just past the item in the turn's text."""


class ItemScanner:
    """Feed text chunks; get each top-level item once it is complete."""

    def __init__(self) -> None:
        self.text = ""
        self._pos = 0  # start of what is not yet consumed
        self._start = -1  # start of the open element, -1 when between items
        self._name = ""
        self._cursor = 0  # how far inside the open element has been scanned
        self._depth = 0
        self._hold: tuple[int, int, str] | None = None
        """(tag start, where its scan stopped, open quote): resumes a tag or comment still streaming
        in, so no part of it is scanned twice."""
        self.stopped = False

    def feed(self, chunk: str) -> list[Item]:
        """Add a chunk; the items it completed, in order. Nothing after a stop is read."""
        if self.stopped:
            return []
        self.text += chunk
        out: list[Item] = []
        while not self.stopped:
            item = self._next()
            if item is None:
                break
            out.append(item)
        return out

    def close(self) -> list[Item]:
        """The turn ended: an open `<answer>` is the answer; any other open element was cut off."""
        if self.stopped:
            return []
        if self._start < 0:
            if self._hold is None or self.text.startswith("<!--", self._hold[0]):
                return []
            # An open tag that never closed: a call cut off.
            self._start = self._hold[0]
            self._name = _tag_name(self.text, self._start + 1)[0] or ""
        rest = self.text[self._start :]
        kind: Kind = "answer" if self._name == "answer" else "think" if self._name == "think" else "cut"
        self._start = -1
        return [Item(kind, self._name, rest, len(self.text))]

    # -- scanning ---------------------------------------------------------------------------------

    def _next(self) -> Item | None:
        text = self.text
        while self._start < 0:
            lt = text.find("<", self._pos)
            if lt < 0:
                self._pos = len(text)
                return None
            self._pos = lt
            if len(text) - lt < 4 and "<!--".startswith(text[lt:]):
                return None  # maybe a comment: wait for its 4th character
            if text.startswith("<!--", lt):
                held = self._hold[1] if self._hold is not None and self._hold[0] == lt else lt + 4
                end = text.find("-->", held)
                if end < 0:
                    self._hold = (lt, max(lt + 4, len(text) - 2), "")
                    return None
                self._hold = None
                self._pos = end + 3
                continue
            name, after = _tag_name(text, lt + 1)
            if name is None:
                return None  # the name is still streaming in
            if name.lstrip("/") == EXECUTE:
                self.stopped = True
                return Item("stop", EXECUTE, text[lt:after], after)
            if not name or name.startswith("/"):
                # Prose (`a < b`) or a stray close tag: skip past its `<`.
                self._pos = lt + 1
                continue
            tag_end = self._end_of_tag(lt, after)
            if tag_end is None:
                return None
            if tag_end < 0:  # `a<b and c<d`: prose, not a tag
                self._pos = lt + 1
                continue
            if text[tag_end - 2 : tag_end] == "/>":
                self._pos = tag_end
                return Item("call", name, text[lt:tag_end], tag_end)
            self._start, self._name, self._cursor, self._depth = lt, name, tag_end, 1
        return self._inside()

    def _inside(self) -> Item | None:
        text, name = self.text, self._name
        opaque = name in ("think", "answer")
        close = f"</{name}"
        while True:
            lt = text.find("<", self._cursor)
            if lt < 0:
                self._cursor = len(text)
                return None
            # Wait until the tag name is in, so `</thi` + `nk>` is seen as one tag.
            tag, after = _tag_name(text, lt + 1)
            if tag is None:
                self._cursor = lt
                return None
            closing = text.startswith(close, lt) and tag == "/" + name
            if not closing and (opaque or tag != name):  # not this element's tag: text
                self._cursor = lt + 1
                continue
            tag_end = self._end_of_tag(lt, after)
            if tag_end is None:
                self._cursor = lt
                return None
            if tag_end < 0:
                self._cursor = lt + 1
                continue
            if not closing:  # the same element nested (a self-closed one does not count)
                if text[tag_end - 2 : tag_end] != "/>":
                    self._depth += 1
                self._cursor = tag_end
                continue
            self._depth -= 1
            if self._depth == 0:
                start, self._start = self._start, -1
                self._pos = tag_end
                kind: Kind = "call" if not opaque else "think" if name == "think" else "answer"
                return Item(kind, name, text[start:tag_end], tag_end)
            self._cursor = tag_end

    def _end_of_tag(self, lt: int, after: int) -> int | None:
        """`_tag_end` for the tag at `lt`, resumed where the last feed left it."""
        if self._hold is not None and self._hold[0] == lt:
            pos, quote = self._hold[1], self._hold[2]
        else:
            pos, quote = after, ""
        end, pos, quote = _tag_end(self.text, pos, quote)
        self._hold = (lt, pos, quote) if end is None else None
        return end


def _tag_name(text: str, at: int) -> tuple[str | None, int]:
    """The tag name starting at `at` ("" if none), and where it ends; None while it may continue."""
    end = at
    limit = min(len(text), at + _MAX_NAME)
    while end < limit and text[end] not in _NAME_END:
        end += 1
    if end == len(text) and end < at + _MAX_NAME:
        return None, end
    if end == at and end < len(text) and text[end] == "/":
        # a close tag: the slash belongs to the name
        name, after = _tag_name(text, at + 1)
        return (None, after) if name is None else ("/" + name if name else "", after)
    name = text[at:end]
    return (name if name and (name[0].isalpha() or name[0] == "_") else ""), end


def _tag_end(text: str, at: int, quote: str) -> tuple[int | None, int, str]:
    """Scan a start tag's attributes from `at` (inside `quote` if one is open) for its `>`.

    Returns just past the `>` (None while it may still come, -1 if a `<` outside quotes shows this
    is no tag), where the scan stopped, and the quote still open there.
    """
    i = at
    while True:
        if quote:
            j = text.find(quote, i)
            if j < 0:
                return None, len(text), quote
            quote, i = "", j + 1
            continue
        match = _SPECIAL.search(text, i)
        if match is None:
            return None, len(text), ""
        ch, i = match.group(), match.end()
        if ch == ">":
            return i, i, ""
        if ch == "<":
            return -1, i, ""
        quote = ch
