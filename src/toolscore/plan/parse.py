"""The plan language v1: one model turn of text -> a tree of blocks and calls; pure.

Theory of operation. Models write XML-ish text: prose around the plan, code full of `<` and `&`
inside calls, a forgotten `<execute_tools />`. So this is a small tokenizer, not an XML parser
(which would also expand entities: no DTD is ever honoured here). The text may be hostile, so
parsing is total (problems, never exceptions) and linear in its size, in three steps:

1. Lex (`_lex`): one left-to-right scan finds every markup token: open, self-closing and close
   tags, comments, CDATA sections, processing instructions and `<!` (a DTD). Text between tokens,
   and a `<` that starts none, stays text. `_TOKEN_RE` has only possessive quantifiers and an
   attribute value cannot hold `<` (as in XML), so an attempt that fails never reads past the next
   `<`. Comments and CDATA are opaque: the scan resumes after them, so markup inside never counts.
   A processing instruction, or a `<!--` that is never closed, is transparent (`List<? extends T>`
   in code is not a PI); only the item level below skips what it covers.
2. Match, during the same scan: one stack per tag name pairs each open tag with its close tag, the
   first `</name>` after it where the `<name>`s and `</name>`s in between balance, whatever other
   tags lie between.
3. Build: a walk over the tokens. A known block (`sequential parallel race fallback`) nests: its
   items are read in order up to its `</kind>`. Any other element is a call whose content is the
   raw text up to its matched close tag, so `x < y` in code is just text, and the walk goes on
   after that close tag. An element whose content starts with a child element other than `<arg>`
   is a server block (`<search><find_files>{...}</find_files></search>`); otherwise it is a
   shorthand (`<search>pattern</search>`). Names are not resolved here: `_plan_check` does that
   against the live tools.

Everything the parser had to repair or ignore is returned as a warning; anything it cannot
understand is a `PlanProblem` with a stable code, naming the tag and line. Work that model input
could repeat is bounded: digits in character references and numbers, JSON nesting (`_loads`),
warnings kept, and line numbers (counted from the last one asked for, not from the start).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Literal

__all__ = [
    "MAX_DEPTH",
    "MAX_JSON_DEPTH",
    "MAX_PLAN_BYTES",
    "MAX_STEPS",
    "ArgsSpec",
    "Block",
    "CallNode",
    "Node",
    "ParsedTurn",
    "PlanProblem",
    "PlanSyntaxError",
    "parse_turn",
]

MAX_PLAN_BYTES = 64 * 1024
MAX_DEPTH = 8
MAX_STEPS = 1000
"""Calls read from one turn at most (the ceiling of `PlanSettings.max_steps`)."""
MAX_JSON_DEPTH = 64
"""How deep a call's JSON arguments may nest."""
_MAX_NUMBER_DIGITS = 1000
"""Longer numbers in JSON arguments are refused (decoding a big int is quadratic in its digits)."""
_MAX_ATTR_DIGITS = 9
_MAX_WARNINGS = 32

BLOCKS = frozenset({"sequential", "parallel", "race", "fallback"})
V2_BLOCKS = frozenset({"dag", "if", "else", "foreach"})
RESERVED = BLOCKS | V2_BLOCKS | {"think", "arg", "call", "answer", "result", "execute_tools", "plan_error"}
CALL_ATTRS = frozenset({"id", "timeout", "retries", "on_error", "idempotent"})
V2_CALL_ATTRS = frozenset({"backoff", "cache", "view"})
BLOCK_ATTRS = {
    "sequential": frozenset({"id", "timeout", "stop_on_error"}),
    "parallel": frozenset({"id", "timeout", "max_concurrency", "policy"}),
    "race": frozenset({"id", "timeout"}),
    "fallback": frozenset({"id", "timeout"}),
}
_NAME = r"[A-Za-z_][A-Za-z0-9_.\-]*+"
_ATTR_NAME = r"[A-Za-z_][A-Za-z0-9_\-]*+"
_ATTRS = rf"""(?:\s++{_ATTR_NAME}\s*+=\s*+(?:"[^"<]*+"|'[^'<]*+'))*+"""
# Groups: 1 comment, 2 CDATA, 3 other `<!`, 4 PI, 5 close tag's name, 6 open tag's name, 7 its
# attributes, 8 "/" when self-closing.
_TOKEN_RE = re.compile(rf"<(?:(!--)|(!\[CDATA\[)|(!)|(\?)|/({_NAME})\s*+>|({_NAME})({_ATTRS})\s*+(/?)>)")
_ATTR_RE = re.compile(rf"""({_ATTR_NAME})\s*+=\s*+(?:"([^"]*+)"|'([^']*+)')""")
# A block's open tag that did not lex (say `<if test="a < b">`): refused rather than read as text,
# or the calls inside it would run unconditionally.
_MALFORMED_BLOCK_RE = re.compile(rf"<({'|'.join(sorted(BLOCKS | V2_BLOCKS))})\s[^<>=]*+=")
_THINK_END_RE = re.compile(r"^[ \t]*+<(?!/?think)", re.MULTILINE)
_ID_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_DURATION_RE = re.compile(r"^\s*+(\d{1,18}+(?:\.\d{1,18}+)?)\s*+(ms|s|m)?\s*+$")
_ENTITY_RE = re.compile(r"&(amp|lt|gt|quot|apos|#\d++|#x[0-9a-fA-F]++);")
_BAD_AMP_RE = re.compile(r"&(?!(?:amp|lt|gt|quot|apos|#\d++|#x[0-9a-fA-F]++);)")
_FINAL_ANSWER_RE = re.compile(r"^[ \t]*+Final Answer:[ \t]*+(.*)$", re.MULTILINE)
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_JSON_STRING_RE = re.compile(r'"(?:[^"\\]++|\\.)*+"?', re.DOTALL)
_LONG_NUMBER_RE = re.compile(rf"(?<![0-9])[0-9]{{{_MAX_NUMBER_DIGITS + 1}}}")
_NOT_BRACKET_RE = re.compile(r"[^\[\]{}]++")
_NESTING = {"[": 1, "{": 1, "]": -1, "}": -1}
_ENTITIES = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
_CDATA_OPEN, _CDATA_CLOSE = "<![CDATA[", "]]>"


@dataclass(frozen=True, slots=True)
class PlanProblem:
    """One reason a plan cannot run, with a stable `code` and where it is."""

    code: str
    message: str
    step: int | None = None
    tag: str | None = None
    id: str | None = None
    ref: str | None = None
    line: int | None = None


class PlanSyntaxError(Exception):
    """The turn could not be parsed; carries every problem found."""

    def __init__(self, problems: list[PlanProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(p.message for p in problems))


@dataclass(frozen=True, slots=True)
class ArgsSpec:
    """A call's arguments as written, before they are bound to the tool's schema."""

    kind: Literal["empty", "json", "args", "text"]
    value: Any = None
    """`json`: the object; `args`: a dict of the <arg> values; `text`: the primary parameter's text."""


@dataclass(frozen=True, slots=True)
class CallNode:
    """One tool call: explicit (`<call>`, a server block's child) or a shorthand."""

    step: int
    tag: str
    line: int
    args: ArgsSpec
    server: str | None = None
    """Given by `<call server=>` or the enclosing server block; None for a shorthand."""
    tool: str | None = None
    shorthand: str | None = None
    id: str | None = None
    timeout: float | None = None
    retries: int = 0
    on_error: Literal["skip_dependents", "continue"] = "skip_dependents"
    idempotent: bool = False


@dataclass(frozen=True, slots=True)
class Block:
    """A control block; the turn itself is an implicit `sequential`."""

    kind: Literal["sequential", "parallel", "race", "fallback"]
    children: tuple[Node, ...]
    line: int = 1
    id: str | None = None
    timeout: float | None = None
    stop_on_error: bool = True
    policy: Literal["all", "fail_fast"] = "all"
    max_concurrency: int | None = None


Node = CallNode | Block


@dataclass(frozen=True, slots=True)
class ParsedTurn:
    """What one model turn said."""

    root: Block
    calls: tuple[CallNode, ...]
    thoughts: tuple[str, ...] = ()
    answer: str | None = None
    warnings: tuple[str, ...] = ()
    depth: int = 0


# -- lexing ---------------------------------------------------------------------------------------

_TokenKind = Literal["open", "empty", "close", "comment", "cdata", "pi", "open_comment", "dtd"]
"""`empty` is a self-closing tag; `open_comment` a `<!--` never closed; `dtd` any other `<!`."""


@dataclass(slots=True)
class _Token:
    kind: _TokenKind
    start: int
    end: int
    """Where the token ends; for `pi` and `open_comment`, where the item level goes on."""
    name: str = ""
    attrs: str = ""
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


def _lex(text: str) -> list[_Token]:
    """Every markup token of `text`, open tags paired with their close tags."""
    tokens: list[_Token] = []
    opened: dict[str, list[_Token]] = {}
    comment_end, pi_end = _finder(text, "-->"), _finder(text, "?>")
    pos = 0
    while (m := _TOKEN_RE.search(text, pos)) is not None:
        start, pos, group = m.start(), m.end(), m.lastindex
        if group == 1:
            end = comment_end(start + 2)
            if end == -1:
                tokens.append(_Token("open_comment", start, len(text)))
            else:
                pos = end + 3
                tokens.append(_Token("comment", start, pos))
        elif group == 2:
            end = text.find(_CDATA_CLOSE, pos)
            pos = len(text) if end == -1 else end + 3
            tokens.append(_Token("cdata", start, pos))
        elif group == 3:
            tokens.append(_Token("dtd", start, pos))
        elif group == 4:
            end = pi_end(start + 1)
            tokens.append(_Token("pi", start, len(text) if end == -1 else end + 2))
        elif group == 5:
            name = m.group(5)
            tokens.append(_Token("close", start, pos, name))
            if stack := opened.get(name):
                stack.pop().close = len(tokens) - 1
        else:
            name, attrs, slash = m.group(6, 7, 8)
            token = _Token("empty" if slash else "open", start, pos, name, attrs)
            if not slash:
                opened.setdefault(name, []).append(token)
            tokens.append(token)
    return tokens


# -- values ---------------------------------------------------------------------------------------


@dataclass
class _State:
    text: str
    next_step: int
    calls: list[CallNode] = field(default_factory=list)
    thoughts: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dropped_warnings: int = 0
    problems: list[PlanProblem] = field(default_factory=list)
    answer: str | None = None
    stopped: bool = False
    max_depth: int = 0
    _line_pos: int = 0
    _line: int = 1

    def line(self, pos: int) -> int:
        # Lines are asked for roughly in document order: count from the last answer, not from 0.
        if pos >= self._line_pos:
            self._line += self.text.count("\n", self._line_pos, pos)
        else:
            self._line -= self.text.count("\n", pos, self._line_pos)
        self._line_pos = pos
        return self._line

    def warn(self, message: str) -> None:
        if len(self.warnings) < _MAX_WARNINGS:
            self.warnings.append(message)
        else:
            self.dropped_warnings += 1

    def problem(self, code: str, message: str, pos: int, **where: Any) -> None:
        self.problems.append(PlanProblem(code, message, line=self.line(pos), **where))


def _char(reference: str) -> str | None:
    """The character of `#123` or `#x7B`, or None if it is no Unicode scalar value."""
    digits = reference[2:] if reference.startswith("#x") else reference[1:]
    significant = digits.lstrip("0") or "0"
    if len(significant) > (6 if reference.startswith("#x") else 7):
        return None
    code = int(significant, 16 if reference.startswith("#x") else 10)
    return None if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF else chr(code)


def decode_text(text: str, state: _State, where: str, *, pos: int = 0, **at: Any) -> str:
    """Character data: the five entities decoded when well formed, else taken verbatim.

    A character reference to no character (`&#xD800;`, `&#x110000;`) is a `bad_character` problem.
    """
    if "<" in text or _BAD_AMP_RE.search(text):
        if "&" in text and _ENTITY_RE.search(text):
            state.warn(f"{where}: text has a bare '<' or '&', taken verbatim (entities not decoded)")
        return text
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
    if bad:
        state.problem(
            "bad_character",
            f"{where}: &{bad[0]}; is not a Unicode character (surrogates and values above #x10FFFF are not)",
            pos,
            **at,
        )
    return decoded


def _refuse_constant(name: str) -> Any:
    """Python's json reads NaN and Infinity, which are not JSON (and would reach a tool as null)."""
    raise ValueError(f"{name} is not JSON")


def _loads(raw: str) -> Any:
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


def _has_surrogate(value: Any) -> bool:
    """Whether a decoded JSON value holds a lone surrogate (`"\\ud800"`), which cannot be sent on."""
    if isinstance(value, str):
        return _SURROGATE_RE.search(value) is not None
    if isinstance(value, list):
        return any(map(_has_surrogate, value))
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    return False


def _parse_json(raw: str, state: _State, where: str, pos: int, tag: str) -> Any:
    try:
        value = _loads(raw)
    except json.JSONDecodeError as first:
        repaired = re.sub(r",\s*+([}\]])", r"\1", raw)
        if '"' not in repaired:
            repaired = repaired.replace("'", '"')
        try:
            value = _loads(repaired)
        except ValueError:
            state.problem(
                "invalid_json",
                f"{where}: arguments are not valid JSON ({first.msg} at column {first.colno})",
                pos,
                tag=tag,
            )
            return None
        state.warn(f"{where}: repaired JSON (trailing commas or single quotes)")
    except ValueError as exc:
        state.problem("invalid_json", f"{where}: arguments are not valid JSON ({exc})", pos, tag=tag)
        return None
    if "\\u" in raw and _has_surrogate(value):
        state.problem("bad_character", f"{where}: a string holds an unpaired surrogate (\\ud800-\\udfff)", pos, tag=tag)
        return None
    return value


def _attrs(raw: str) -> dict[str, str]:
    return {m.group(1): m.group(2) if m.group(2) is not None else m.group(3) for m in _ATTR_RE.finditer(raw)}


def _duration(value: str) -> float | None:
    match = _DURATION_RE.match(value)
    if match is None:
        return None
    number, unit = float(match.group(1)), match.group(2) or "s"
    return number / 1000 if unit == "ms" else number * 60 if unit == "m" else number


def _bool(value: str) -> bool | None:
    return {"true": True, "false": False}.get(value.strip().lower())


# -- building -------------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str, first_step: int, max_steps: int) -> None:
        self.s = _State(text, first_step)
        self.max_steps = max_steps
        self.tokens = _lex(text)
        self.i = 0
        """The next token to read."""
        self.pos = 0
        """The next character to read; the text before token `i` is prose."""

    def seek(self, pos: int) -> None:
        """Go on at `pos`, past every token that starts before it."""
        self.pos = pos
        while self.i < len(self.tokens) and self.tokens[self.i].start < pos:
            self.i += 1

    def past(self, index: int) -> None:
        """Go on after token `index` (a tag, comment or CDATA: no later token starts inside it)."""
        self.i, self.pos = index + 1, self.tokens[index].end

    # -- items ------------------------------------------------------------------------------------

    def items(self, end_tag: str | None, depth: int) -> list[Node]:
        """Parse plan items up to `</end_tag>` (or the end of text at the top)."""
        s, tokens = self.s, self.tokens
        s.max_depth = max(s.max_depth, depth)
        nodes: list[Node] = []
        while not s.stopped:
            if self.i == len(tokens):
                self.prose(self.pos, len(s.text), end_tag)
                self.pos = len(s.text)
                break
            token = tokens[self.i]
            self.prose(self.pos, token.start, end_tag)
            if token.kind in ("comment", "cdata"):
                self.past(self.i)
            elif token.kind in ("pi", "open_comment"):
                self.seek(token.end)
            elif token.kind == "dtd":
                s.problem("dtd_refused", "DTDs and entity declarations are not allowed in a plan", token.start)
                s.stopped = True  # nothing after a DTD is read
            elif token.kind == "close":
                self.past(self.i)
                if token.name == end_tag:
                    return nodes
                s.warn(f"line {s.line(token.start)}: stray </{token.name}> ignored")
            else:
                self.element(nodes, depth)
        if end_tag is not None and not s.stopped:
            s.problem("unclosed_tag", f"<{end_tag}> is never closed: add </{end_tag}>", len(s.text), tag=end_tag)
        return nodes

    def prose(self, start: int, end: int, end_tag: str | None) -> None:
        """Text between items: allowed around the plan, ignored with a warning inside a block."""
        if start >= end:
            return
        s = self.s
        chunk = s.text[start:end]
        if (bad := _MALFORMED_BLOCK_RE.search(chunk)) is not None:
            name = bad.group(1)
            s.problem(
                "bad_attribute",
                f"<{name}> is not a well-formed tag: attribute values are quoted and may not contain '<'",
                start + bad.start(),
                tag=name,
            )
        if end_tag is not None and chunk.strip():
            s.warn(f"line {s.line(start)}: text inside <{end_tag}> ignored: {chunk.strip()[:40]!r}")

    def element(self, nodes: list[Node], depth: int) -> None:
        s, text, index = self.s, self.s.text, self.i
        token = self.tokens[index]
        name, attrs, self_closing = token.name, _attrs(token.attrs), token.kind == "empty"
        if name == "execute_tools":
            s.stopped = True
            self.past(index)
        elif name in ("think", "answer", "result", "plan_error"):
            self.aside(index)
        elif name in V2_BLOCKS or name == "arg":
            if name == "arg":
                s.problem("misplaced_arg", "<arg> belongs inside a call or shorthand", token.start, tag="arg")
            else:
                s.problem("unsupported", f"<{name}> is plan language v2 and not available yet", token.start, tag=name)
            self.past(token.close if token.close is not None else index)
        elif name in BLOCKS:
            self.block(index, attrs, nodes, depth)
        elif name == "call":
            self.call(index, attrs, nodes, server=attrs.get("server"), tool=attrs.get("tool"), explicit=True)
        elif self_closing:
            self.call(index, attrs, nodes, shorthand=name)
        elif token.close is None:
            s.problem("unclosed_tag", f"<{name}> is never closed: add </{name}>", token.start, tag=name)
            self.seek(len(text))
        else:
            # A server block or a shorthand: look at the content.
            first = self.tokens[index + 1]
            if first.kind in ("open", "empty") and first.name != "arg" and not text[token.end : first.start].strip():
                self.server_block(index, attrs, nodes)
            else:
                self.call(index, attrs, nodes, shorthand=name)

    def aside(self, index: int) -> None:
        """`<think>`, `<answer>`, and `<result>`/`<plan_error>` (which only toolscore writes)."""
        s, text = self.s, self.s.text
        token = self.tokens[index]
        name, start = token.name, token.start
        if token.kind == "empty":
            self.past(index)
            return
        if token.close is None:
            if name != "think":
                s.problem("unclosed_tag", f"<{name}> is never closed", start, tag=name)
                self.seek(len(text))
                return
            # Repair: an unclosed <think> ends where the next line starts with a tag.
            nxt = _THINK_END_RE.search(text, token.end)
            end = nxt.start() if nxt else len(text)
            s.thoughts.append(text[token.end : end].strip())
            s.warn(f"line {s.line(start)}: <think> was not closed; it ends at line {s.line(end)}")
            self.seek(end)
            return
        body = text[token.end : self.tokens[token.close].start]
        if name == "think":
            s.thoughts.append(body.strip())
        elif name == "answer":
            s.answer = body.strip()
        else:
            s.warn(f"line {s.line(start)}: a <{name}> written in the plan is ignored (only toolscore writes those)")
        self.past(token.close)

    # -- constructs -------------------------------------------------------------------------------

    def block(self, index: int, attrs: dict[str, str], nodes: list[Node], depth: int) -> None:
        s = self.s
        token = self.tokens[index]
        kind = token.name
        line = s.line(token.start)
        if depth + 1 > MAX_DEPTH:
            s.problem("too_deep", f"blocks nest deeper than {MAX_DEPTH} levels", token.start, tag=kind)
            if token.kind == "open" and token.close is None:
                self.seek(len(s.text))
            else:
                self.past(token.close if token.close is not None else index)
            return
        options = self.block_options(kind, attrs, token.start)
        self.past(index)
        children = [] if token.kind == "empty" else self.items(kind, depth + 1)
        nodes.append(Block(kind, tuple(children), line, **options))  # type: ignore[arg-type]

    def block_options(self, kind: str, attrs: dict[str, str], pos: int) -> dict[str, Any]:
        s = self.s
        options: dict[str, Any] = {}
        for key, value in attrs.items():
            if key not in BLOCK_ATTRS[kind]:
                s.problem("unknown_attribute", f"<{kind}> has no attribute '{key}'", pos, tag=kind)
            elif key == "id":
                options["id"] = self.ident(value, kind, pos)
            elif key == "timeout":
                options["timeout"] = self.duration(value, kind, pos)
            elif key == "stop_on_error":
                options["stop_on_error"] = self.boolean(value, kind, key, pos)
            elif key == "max_concurrency":
                options["max_concurrency"] = self.integer(value, kind, key, pos, 1, 64)
            elif key == "policy":
                if value.startswith("quorum:"):
                    s.problem(
                        "unsupported", "policy 'quorum:k' is plan language v2 and not available yet", pos, tag=kind
                    )
                elif value not in ("all", "fail_fast"):
                    s.problem("bad_attribute", f"<{kind} policy='{value}'>: use 'all' or 'fail_fast'", pos, tag=kind)
                else:
                    options["policy"] = value
        return options

    def server_block(self, index: int, attrs: dict[str, str], nodes: list[Node]) -> None:
        s, tokens = self.s, self.tokens
        token = tokens[index]
        server, close = token.name, token.close
        assert close is not None
        timeout = None
        for key, value in attrs.items():
            if key == "timeout":
                timeout = self.duration(value, server, token.end)
            else:
                s.problem(
                    "unknown_attribute",
                    f"server block <{server}> takes only 'timeout', not '{key}'",
                    token.end,
                    tag=server,
                )
        self.past(index)
        while self.i < close and not s.stopped:
            item = tokens[self.i]
            if self.server_text(server, item.start, trailing=False) or item.kind == "open_comment":
                break
            if item.kind == "comment":
                self.past(self.i)
                continue
            if item.kind not in ("open", "empty"):
                self.bad_tool_tag(server, item.start)
                break
            name = item.name
            if name == "think":
                if item.kind == "open" and (item.close is None or item.close > close):
                    break
                self.past(item.close if item.close is not None else self.i)
                continue
            if name in RESERVED:
                s.problem(
                    "bad_tool_tag",
                    f'<{name}> cannot be a tool of server <{server}>; use <call server="{server}" tool="{name}">',
                    item.start,
                    tag=name,
                )
                break
            self.call(self.i, _attrs(item.attrs), nodes, server=server, tool=name, default_timeout=timeout, limit=close)
        else:  # no break: the text after the last tool is ignored, but a `<` there is no tool either
            if not s.stopped:
                self.server_text(server, tokens[close].start, trailing=True)
        self.past(close)

    def server_text(self, server: str, end: int, *, trailing: bool) -> bool:
        """Text in a server block up to `end`: ignored, but a `<` there is no tool element."""
        s = self.s
        chunk = s.text[self.pos : end]
        lt = chunk.find("<")
        before = chunk if lt == -1 else chunk[:lt]
        if before.strip() and (lt != -1 or not trailing):
            s.warn(f"line {s.line(self.pos)}: text inside <{server}> ignored: {before.strip()[:40]!r}")
        if lt != -1:
            self.bad_tool_tag(server, self.pos + lt)
        return lt != -1

    def bad_tool_tag(self, server: str, pos: int) -> None:
        self.s.problem(
            "bad_tool_tag",
            f"inside <{server}>, expected a tool element like <tool_name>{{...}}</tool_name>",
            pos,
            tag=server,
        )

    def call(
        self,
        index: int,
        attrs: dict[str, str],
        nodes: list[Node],
        *,
        server: str | None = None,
        tool: str | None = None,
        shorthand: str | None = None,
        explicit: bool = False,
        default_timeout: float | None = None,
        limit: int | None = None,
    ) -> None:
        """One call from its open tag `index`; `limit` is the enclosing server block's close tag."""
        s, text, tokens = self.s, self.s.text, self.tokens
        token = tokens[index]
        name, start, close = token.name, token.start, token.close
        if explicit and (not server or not tool):
            s.problem("bad_call", '<call> needs server="..." and tool="..."', start, tag="call")
        if token.kind == "empty":
            body, close = "", index + 1
            self.past(index)
        elif close is None or (limit is not None and close > limit):
            s.problem("unclosed_tag", f"<{name}> is never closed: add </{name}>", start, tag=name)
            if limit is None:
                self.seek(len(text))
            else:
                self.i, self.pos = limit, tokens[limit].start
            return
        else:
            body = text[token.end : tokens[close].start]
            self.past(close)
        if len(s.calls) == self.max_steps:
            # Reading on would only build calls that can never run.
            message = f"the plan has more than {self.max_steps} steps, the limit; split it over several turns"
            s.problem("too_many_steps", message, start, tag=name)
            s.stopped = True
            return
        step = s.next_step
        s.next_step += 1
        options: dict[str, Any] = {"timeout": default_timeout}
        known = CALL_ATTRS | ({"server", "tool"} if explicit else frozenset())
        for key, value in attrs.items():
            if key in V2_CALL_ATTRS:
                s.problem(
                    "unsupported",
                    f"attribute '{key}' is plan language v2 and not available yet",
                    start,
                    step=step,
                    tag=name,
                )
            elif key not in known:
                s.problem("unknown_attribute", f"<{name}> has no attribute '{key}'", start, step=step, tag=name)
            elif key == "id":
                options["id"] = self.ident(value, name, start, step)
            elif key == "timeout":
                options["timeout"] = self.duration(value, name, start, step)
            elif key == "retries":
                options["retries"] = self.integer(value, name, key, start, 0, 5, step) or 0
            elif key == "on_error":
                if value not in ("skip_dependents", "continue"):
                    s.problem(
                        "bad_attribute",
                        f"on_error='{value}': use 'skip_dependents' or 'continue'",
                        start,
                        step=step,
                        tag=name,
                    )
                else:
                    options["on_error"] = value
            elif key == "idempotent":
                options["idempotent"] = bool(self.boolean(value, name, key, start, step))
        args = self.arguments(body, name, token.end, step, index + 1, close)
        node = CallNode(step, name, s.line(start), args, server=server, tool=tool, shorthand=shorthand, **options)
        s.calls.append(node)
        nodes.append(node)

    def arguments(self, body: str, tag: str, pos: int, step: int, first: int, close: int) -> ArgsSpec:
        """A call's arguments from its `body`, which starts at `pos`; its tokens are `first..close-1`."""
        s = self.s
        where = f"step {step} <{tag}>"
        stripped = body.strip()
        if not stripped:
            return ArgsSpec("empty")
        if stripped.startswith(_CDATA_OPEN) and stripped.endswith(_CDATA_CLOSE):
            return ArgsSpec("text", stripped[len(_CDATA_OPEN) : -len(_CDATA_CLOSE)])
        if stripped.startswith("{"):
            decoded = decode_text(stripped, s, where, pos=pos, step=step, tag=tag)
            value = _parse_json(decoded, s, where, pos, tag)
            if value is not None and not isinstance(value, dict):
                s.problem("invalid_json", f"{where}: arguments must be a JSON object", pos, step=step, tag=tag)
            return ArgsSpec("json", value if isinstance(value, dict) else {})
        head = self.tokens[first] if first < close else None
        if (
            head is not None
            and head.kind in ("open", "empty")
            and head.name == "arg"
            and not s.text[pos : head.start].strip()
        ):
            return ArgsSpec("args", self.arg_elements(first, close, where, pos, step))
        return ArgsSpec("text", decode_text(body.strip("\n"), s, where, pos=pos, step=step, tag=tag))

    def arg_elements(self, first: int, close: int, where: str, pos: int, step: int) -> dict[str, Any]:
        """The `<arg>` elements among tokens `first..close-1`."""
        s, text, tokens = self.s, self.s.text, self.tokens
        values: dict[str, Any] = {}
        index = first
        while index < close:
            tag = tokens[index]
            if tag.kind not in ("open", "empty"):
                index += 1
                continue
            if tag.name != "arg":
                s.problem(
                    "bad_arg", f"{where}: only <arg> elements may sit beside <arg>, found <{tag.name}>", pos, step=step
                )
                break
            attrs = _attrs(tag.attrs)
            if tag.kind == "empty":
                raw, index = "", index + 1
            elif tag.close is None or tag.close >= close:
                s.problem("unclosed_tag", f"{where}: <arg> is never closed", pos, step=step, tag="arg")
                break
            else:
                raw, index = text[tag.end : tokens[tag.close].start], tag.close + 1
            name, kind = attrs.get("name"), attrs.get("type", "string")
            if not name:
                s.problem("bad_arg", f'{where}: <arg> needs name="..."', pos, step=step, tag="arg")
            elif kind not in ("string", "json"):
                s.problem("bad_arg", f"{where}: <arg type='{kind}'>: use 'string' or 'json'", pos, step=step, tag="arg")
            else:
                values[name] = self.arg_value(raw, name, kind, where, pos, step)
        return values

    def arg_value(self, raw: str, name: str, kind: str, where: str, pos: int, step: int) -> Any:
        s = self.s
        stripped = raw.strip()
        cdata = stripped.startswith(_CDATA_OPEN) and stripped.endswith(_CDATA_CLOSE)
        if cdata:
            text = stripped[len(_CDATA_OPEN) : -len(_CDATA_CLOSE)]
        else:
            text = decode_text(raw, s, f"{where} <arg name='{name}'>", pos=pos, step=step, tag="arg")
        if kind == "string":
            return text if cdata else text.strip("\n")
        try:
            value = _loads(text)
        except ValueError as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            where = f"{where} <arg name='{name}' type='json'>"
            s.problem("invalid_json", f"{where}: {reason}", pos, step=step, tag="arg")
            return None
        if "\\u" in text and _has_surrogate(value):
            message = f"{where} <arg name='{name}'>: a string holds an unpaired surrogate (\\ud800-\\udfff)"
            s.problem("bad_character", message, pos, step=step, tag="arg")
            return None
        return value

    # -- attribute values -------------------------------------------------------------------------

    def ident(self, value: str, tag: str, pos: int, step: int | None = None) -> str | None:
        if not _ID_RE.match(value):
            self.s.problem("bad_id", f"id='{value}' must match [A-Za-z_][A-Za-z0-9_]{{0,63}}", pos, step=step, tag=tag)
            return None
        return value

    def duration(self, value: str, tag: str, pos: int, step: int | None = None) -> float | None:
        seconds = _duration(value)
        if seconds is None or seconds <= 0:
            self.s.problem(
                "bad_attribute", f"timeout='{value}': write a duration like 500ms, 20s or 2m", pos, step=step, tag=tag
            )
            return None
        return seconds

    def boolean(self, value: str, tag: str, key: str, pos: int, step: int | None = None) -> bool | None:
        parsed = _bool(value)
        if parsed is None:
            self.s.problem("bad_attribute", f"{key}='{value}': use true or false", pos, step=step, tag=tag)
        return parsed

    def integer(
        self, value: str, tag: str, key: str, pos: int, low: int, high: int, step: int | None = None
    ) -> int | None:
        digits = value.strip()
        # isdecimal, not isdigit: "²" is a digit that int() refuses.
        number = int(digits) if digits.isdecimal() and len(digits) <= _MAX_ATTR_DIGITS else None
        if number is None or not low <= number <= high:
            self.s.problem(
                "bad_attribute", f"{key}='{value}': use a whole number from {low} to {high}", pos, step=step, tag=tag
            )
            return None
        return number


def parse_turn(
    text: str, *, first_step: int = 1, max_bytes: int = MAX_PLAN_BYTES, max_steps: int = MAX_STEPS
) -> ParsedTurn:
    """Parse one model turn, in time linear in its size.

    Args:
        text: The turn as the model wrote it.
        first_step: The number of the turn's first call (steps continue across an episode).
        max_bytes: The size cap.
        max_steps: The most calls the turn may have; reading stops at the first one more.

    Raises:
        PlanSyntaxError: with every problem found; nothing of the plan may run.
    """
    size = len(text.encode("utf-8", errors="replace"))
    if size > max_bytes:
        raise PlanSyntaxError([PlanProblem("too_large", f"the plan is {size} bytes; the limit is {max_bytes}")])
    if (surrogate := _SURROGATE_RE.search(text)) is not None:
        line = text.count("\n", 0, surrogate.start()) + 1
        message = "the plan holds an unpaired surrogate code point, which is no character; send valid Unicode"
        raise PlanSyntaxError([PlanProblem("bad_character", message, line=line)])
    parser = _Parser(text, first_step, max_steps)
    nodes = parser.items(None, 0)
    s = parser.s
    if s.problems:
        raise PlanSyntaxError(s.problems)
    answer = s.answer
    if answer is None and (final := _FINAL_ANSWER_RE.search(text)) is not None:
        answer = final.group(1).strip()
    warnings = list(s.warnings)
    if s.dropped_warnings:
        warnings.append(f"{s.dropped_warnings} more warnings not shown")
    if nodes and not s.stopped:
        warnings.append("the plan does not end with <execute_tools />; it was run anyway")
    if nodes and answer is not None:
        warnings.append("the turn has both plan items and an answer: the plan ran, the answer was dropped")
        answer = None
    return ParsedTurn(
        root=Block("sequential", tuple(nodes)),
        calls=tuple(s.calls),
        thoughts=tuple(s.thoughts),
        answer=answer,
        warnings=tuple(warnings),
        depth=s.max_depth,
    )
