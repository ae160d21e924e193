"""The plan's lexer: one pass over a model's turn finds every markup token; pure.

Theory of operation. Models write XML-ish text: prose around the plan, code full of `<` and `&`
inside calls, a forgotten `<execute_tools />`. So this is a small tokenizer, not an XML parser
(which would also expand entities: no DTD is ever honoured here). The text may be hostile, so
lexing is total and linear in its size:

1. Lex: one left-to-right scan finds every markup token: open, self-closing and close tags,
   comments, CDATA sections, processing instructions and `<!` (a DTD). Text between tokens, and a
   `<` that starts none, stays text. `_TOKEN_RE` has only possessive quantifiers and an attribute
   value cannot hold `<` (as in XML), so an attempt that fails never reads past the next `<`.
   Comments and CDATA are opaque: the scan resumes after them, so markup inside never counts. A
   processing instruction, or a `<!--` that is never closed, is transparent (`List<? extends T>`
   in code is not a PI); only the parser's item level skips what it covers.
2. Match, during the same scan: one stack per tag name pairs each open tag with its close tag, the
   first `</name>` after it where the `<name>`s and `</name>`s in between balance, whatever other
   tags lie between. Names are compared by a key the parser gives (`<Parallel>` closes with
   `</parallel>`, `<thinking>` is `<think>`).
3. Markdown code is text: tags inside a code span (`` `<parallel>` ``) or a fenced block are not
   markup. `code_regions` finds both in one pass; the scan steps over them.

What the tokens mean (blocks, calls, arguments) is the parser's business (`parse.py`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = ["CDATA_CLOSE", "CDATA_OPEN", "Region", "Token", "TokenKind", "attributes", "code_regions", "lex"]

_NAME = r"[A-Za-z_][A-Za-z0-9_.\-]*+"
_ATTR_NAME = r"[A-Za-z_][A-Za-z0-9_\-]*+"
_ATTRS = rf"""(?:\s++{_ATTR_NAME}\s*+=\s*+(?:"[^"<]*+"|'[^'<]*+'))*+"""
# Groups: 1 comment, 2 CDATA, 3 other `<!`, 4 PI, 5 close tag's name, 6 open tag's name, 7 its
# attributes, 8 "/" when self-closing.
_TOKEN_RE = re.compile(rf"<(?:(!--)|(!\[CDATA\[)|(!)|(\?)|/({_NAME})\s*+>|({_NAME})({_ATTRS})\s*+(/?)>)")
_ATTR_RE = re.compile(rf"""({_ATTR_NAME})\s*+=\s*+(?:"([^"]*+)"|'([^']*+)')""")
CDATA_OPEN, CDATA_CLOSE = "<![CDATA[", "]]>"
# A fence line: up to 3 spaces, then 3 or more backticks or tildes.
_FENCE_RE = re.compile(r"^ {0,3}+(`{3,}+|~{3,}+)([^\n]*+)$", re.MULTILINE)
# An inline code span holding a `<` on one line, single backticks, bounded: a span that fails
# costs at most its bound, so the scan stays linear.
_SPAN_RE = re.compile(r"(?<!`)`([^`\n]{1,160}+)`(?!`)")

Region = tuple[int, int, bool]
"""A stretch of markdown code: start, end, and whether it is a fenced block (else a code span)."""

TokenKind = Literal["open", "empty", "close", "comment", "cdata", "pi", "open_comment", "dtd"]
"""`empty` is a self-closing tag; `open_comment` a `<!--` never closed; `dtd` any other `<!`."""


@dataclass(slots=True)
class Token:
    """One markup token of the text, `text[start:end]`."""

    kind: TokenKind
    start: int
    end: int
    """Where the token ends; for `pi` and `open_comment`, where the item level goes on."""
    name: str = ""
    attrs: str = ""
    """An open tag's attributes as written; `attributes()` reads them."""
    close: int | None = None
    """For an `open` tag: the index of its matching close tag, if any."""


def _finder(text: str, needle: str) -> Callable[[int], int]:
    """`text.find(needle, pos)` for non-decreasing `pos`, reusing the last answer while it holds.

    Many `<?` before one `?>` would otherwise each scan up to it again.
    """
    found: int | None = None

    def find(pos: int) -> int:
        nonlocal found
        if found is None or (found != -1 and found < pos):
            found = text.find(needle, pos)
        return found

    return find


def code_regions(text: str) -> list[Region]:
    """The markdown code of `text` in order: closed fenced blocks, and code spans holding a `<`."""
    regions: list[Region] = []
    if "`" not in text and "~~~" not in text:
        return regions
    opening: re.Match[str] | None = None
    for fence in _FENCE_RE.finditer(text) if "```" in text or "~~~" in text else ():
        if opening is None:
            opening = fence
        elif (
            fence.group(1)[0] == opening.group(1)[0]
            and len(fence.group(1)) >= len(opening.group(1))
            and not fence.group(2).strip()
        ):
            regions.append((opening.start(), fence.end(), True))
            opening = None
    spans: list[Region] = []
    fences = iter(regions)
    current = next(fences, None)
    for span in _SPAN_RE.finditer(text):
        while current is not None and current[1] <= span.start():
            current = next(fences, None)
        if "<" in span.group(1) and (current is None or span.end() <= current[0]):
            spans.append((span.start(), span.end(), False))
    return sorted(regions + spans)


def _same(name: str) -> str:
    return name


def lex(text: str, key: Callable[[str], str] = _same, skip: list[Region] | None = None) -> list[Token]:
    """Every markup token of `text` in order, open tags paired with their close tags.

    Args:
        key: How tag names compare (open and close tags pair when their keys are equal).
        skip: Regions of `text` (in order, not overlapping) whose markup is text.
    """
    tokens: list[Token] = []
    opened: dict[str, list[Token]] = {}
    comment_end, pi_end = _finder(text, "-->"), _finder(text, "?>")
    regions = iter(skip or ())
    region = next(regions, None)
    pos = 0
    while (m := _TOKEN_RE.search(text, pos)) is not None:
        start, pos, group = m.start(), m.end(), m.lastindex
        while region is not None and region[1] <= start:
            region = next(regions, None)
        if region is not None and region[0] <= start:
            pos = region[1]
            continue
        if group == 1:
            end = comment_end(start + 2)
            if end == -1:
                tokens.append(Token("open_comment", start, len(text)))
            else:
                pos = end + 3
                tokens.append(Token("comment", start, pos))
        elif group == 2:
            end = text.find(CDATA_CLOSE, pos)
            pos = len(text) if end == -1 else end + 3
            tokens.append(Token("cdata", start, pos))
        elif group == 3:
            tokens.append(Token("dtd", start, pos))
        elif group == 4:
            end = pi_end(start + 1)
            tokens.append(Token("pi", start, len(text) if end == -1 else end + 2))
        elif group == 5:
            name = m.group(5)
            tokens.append(Token("close", start, pos, name))
            if stack := opened.get(key(name)):
                stack.pop().close = len(tokens) - 1
        else:
            name, attrs, slash = m.group(6, 7, 8)
            token = Token("empty" if slash else "open", start, pos, name, attrs)
            if not slash:
                opened.setdefault(key(name), []).append(token)
            tokens.append(token)
    return tokens


def attributes(raw: str) -> dict[str, str]:
    """An open tag's attributes (`Token.attrs`) by name, values as written (no entities decoded)."""
    return {m.group(1): m.group(2) if m.group(2) is not None else m.group(3) for m in _ATTR_RE.finditer(raw)}
