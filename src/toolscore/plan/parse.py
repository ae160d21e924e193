"""The plan language v1: one model turn of text -> a tree of blocks and calls; pure.

Theory of operation. The text may be hostile, so parsing is total (problems, never exceptions)
and linear in its size. `lex.py` finds every markup token in one scan and pairs each open tag
with its close tag; this module builds the tree in one walk over those tokens:

- A block tag (a `BlockKind`, see `blocks.py`) nests: its items are read in order up to its close
  tag, and its attributes are read with its spec's.
- Any other element is a call whose content is the raw text up to its matched close tag, so
  `x < y` in code is just text, and the walk goes on after that close tag. An element whose
  content starts with a child element other than `<arg>` is a server block
  (`<search><find_files>{...}</find_files></search>`); otherwise it is a shorthand
  (`<search>pattern</search>`). Names are not resolved here: `check.py` does that against the
  live tools.
- Comments and CDATA between items are skipped; so is what a processing instruction or a `<!--`
  never closed covers (inside a call they are just text); a DTD stops the walk.

Plans come from models, so the ordinary slips of model output are read as meant, each with a
warning: reserved tags in any case and `<thinking>` (`canonical`), a Hermes `<tool_call>`, JSON
arguments in an `args='...'` attribute, child elements as arguments (kept as `elements` for the
checker, which knows the parameters), JSON with Python literals or comments (`values.repair_json`).
Tags named in prose are text: inside markdown code (`lex.code_regions`; a plan that is only in a
fence is read from the fence), or an open tag never closed with words before it on its line (a
block tag: or after it).

Everything the parser had to repair or ignore is returned as a warning; anything it cannot
understand is a `PlanProblem` with a stable code, naming the tag and line. With `collect`, the
problems go back in the turn instead of raising, so the checker can add its own: one round.
Work that model input could repeat is bounded: digits in character references, numbers and
attributes, JSON nesting (`values.py`), warnings kept, and line numbers (counted from the last one
asked for, not from the start).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from toolscore.errors import PlanProblem, PlanSyntaxError
from toolscore.plan.blocks import (
    COMMON_ATTRIBUTES,
    SPECS,
    V2_KINDS,
    Attribute,
    BadValue,
    BlockKind,
    Choice,
    Duration,
    Flag,
    Ident,
    IntRange,
)
from toolscore.plan.dialects import REF_ELEMENT_RE
from toolscore.plan.lex import CDATA_CLOSE, CDATA_OPEN, Token, attributes, code_regions, lex
from toolscore.plan.nodes import ArgsSpec, Block, CallNode, Node, ParsedTurn
from toolscore.plan.refs import nearest
from toolscore.plan.values import char_data, has_surrogate, loads, repair_json, snippet, surrogate_at

__all__ = ["CAPABILITY_RE", "MAX_DEPTH", "MAX_DEPTH_CEILING", "MAX_PLAN_BYTES", "MAX_STEPS", "parse_turn"]

MAX_PLAN_BYTES = 64 * 1024
MAX_DEPTH = 8
"""How deep blocks may nest by default (`plan.max_depth`)."""
MAX_DEPTH_CEILING = 32
"""The most `max_depth` may be: the parser recurses once per level."""
MAX_STEPS = 1000
"""Calls read from one turn at most (the ceiling of `PlanSettings.max_steps`)."""
_MAX_WARNINGS = 32

_BLOCKS = frozenset(BlockKind)
_WRAPPERS = frozenset({"plan", "function_calls"})
"""Tags models wrap a whole plan in: ignored (with a warning), their content read as items."""
_RESERVED = (
    _BLOCKS
    | V2_KINDS
    | _WRAPPERS
    | {"think", "arg", "call", "answer", "result", "execute_tools", "plan_error", "tool_call", "invoke", "parameter"}
)
_CALL_FORMS = frozenset({"call", "tool_call", "invoke"})
"""Reserved tags that are calls."""
_ALIASES = {"thinking": "think"}
"""Other names models give a construct, read as it (with a warning)."""
_ARGS_ATTRIBUTES = ("args", "arguments", "params", "parameters", "input")
"""Attributes some models put a call's JSON arguments in."""
_BLOCK_ATTRIBUTES: Mapping[BlockKind, Mapping[str, Attribute]] = {
    kind: {**COMMON_ATTRIBUTES, **spec.attributes} for kind, spec in SPECS.items()
}
_CALL_ATTRIBUTES: Mapping[str, Attribute] = {
    "id": Ident(),
    "timeout": Duration(),
    "retries": IntRange(0, 5, default=0),
    "on_error": Choice(("skip_dependents", "continue")),
    "idempotent": Flag(default=False),
}
_V2_CALL_ATTRS = frozenset({"backoff", "cache", "view"})
_EXPLICIT = frozenset({"server", "tool", "capability"})
"""A `<call>`'s own attributes: its route, read by `element`, not call options."""
CAPABILITY_RE = re.compile(r"[a-z0-9_-]{1,32}")
"""A capability tag as the ToolHub writes them."""
_SERVER_BLOCK_ATTRIBUTES: Mapping[str, Attribute] = {"timeout": Duration()}
# A block's open tag that did not lex (say `<if test="a < b">`): refused rather than read as text,
# or the calls inside it would run unconditionally.
_MALFORMED_BLOCK_RE = re.compile(rf"<({'|'.join(sorted(_BLOCKS | V2_KINDS))})\s[^<>=]*+=", re.IGNORECASE)
_THINK_END_RE = re.compile(r"^[ \t]*+<(?!/?think)", re.MULTILINE | re.IGNORECASE)
_WORDS_RE = re.compile(r"[A-Za-z0-9]")
_ID_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}+$")


def _is_ref(token: Token) -> bool:
    """`<ref id="s1" path="..."/>` in a call's content: a reference (`dialects.py`), not an element."""
    return token.kind == "empty" and token.name.lower() == "ref"


@functools.lru_cache(maxsize=1024)
def canonical(name: str) -> str:
    """The construct a tag name means: reserved names in any case (`<Parallel>`), and aliases
    (`<thinking>`); any other name (a server, tool or shorthand) as written."""
    folded = name.lower()
    folded = _ALIASES.get(folded, folded)
    return folded if folded in _RESERVED else name


_FINAL_ANSWER_RE = re.compile(r"^[ \t]*+Final Answer:[ \t]*+(.*)$", re.MULTILINE)
# ReAct: a line `Action: <tool>` (a name and nothing else), the next line `Action Input: ...`.
_REACT_RE = re.compile(
    r"^[ \t]*+Action[ \t]*+:[ \t]*+`?+([A-Za-z_][A-Za-z0-9_.\-]{0,127}+)`?+[ \t]*+\r?\n"
    r"[ \t]*+Action[ \t]++Input[ \t]*+:",
    re.MULTILINE,
)
# Where an Action Input ends: the next ReAct line, a line starting with a tag, or the end.
_REACT_END_RE = re.compile(
    r"^[ \t]*+(?:(Observation)|Thought|Action|Final Answer)[ \t]*+:|^[ \t]*+<(?=[A-Za-z/!?])", re.MULTILINE
)
_JSON_LIST_RE = re.compile(
    r"\s*+(?:```(?:json)?+\s*+)?+(\[.*\])\s*+(?:```)?+\s*+(?:<execute_tools\s*+/>)?+\s*+$", re.DOTALL | re.IGNORECASE
)
"""A turn that is one JSON array (maybe in a fence): NESTFUL's and function-calling's list of calls."""
_FENCED_RE = re.compile(r"^(`{3,}+|~{3,}+)[^\n]*+\n(.*)\n\1[ \t]*+$", re.DOTALL)
"""An Action Input in a markdown fence: the fence's content."""


@dataclass
class _State:
    text: str
    next_step: int
    calls: list[CallNode] = field(default_factory=list)
    thoughts: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dropped_warnings: int = 0
    hints: int = 16
    """Suggestions of a near attribute name left to make (each a bounded difflib search)."""
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

    def decode(self, text: str, where: str, pos: int, **at: Any) -> str:
        """Character data with entities decoded when well formed (`values.char_data`).

        A character reference to no character (`&#xD800;`, `&#x110000;`) is a `bad_character` problem.
        """
        data = char_data(text)
        if data.verbatim:
            self.warn(f"{where}: text has a bare '<' or '&', taken verbatim (entities not decoded)")
        if data.bad_reference is not None:
            message = (
                f"{where}: &{data.bad_reference}; is not a Unicode character "
                "(surrogates and values above #x10FFFF are not)"
            )
            self.problem("bad_character", message, pos, **at)
        return data.text

    def parse_json(self, raw: str, where: str, pos: int, tag: str, step: int | None = None) -> Any:
        """A call's JSON arguments, repaired if need be (with a warning); None after a problem."""
        try:
            value = loads(raw)
        except json.JSONDecodeError as first:
            repaired, repairs = repair_json(raw)
            try:
                if not repairs:
                    raise first
                value = loads(repaired)
            except ValueError:
                message = (
                    f"{where}: arguments are not valid JSON: {first.msg} at line {first.lineno} column "
                    f"{first.colno}: {snippet(raw, first.pos)!r}; write one JSON object with double-quoted "
                    "keys and strings, true/false/null, no comments"
                )
                self.problem("invalid_json", message, pos, tag=tag, step=step)
                return None
            self.warn(f"{where}: repaired JSON ({', '.join(repairs)})")
        except ValueError as exc:
            self.problem("invalid_json", f"{where}: arguments are not valid JSON ({exc})", pos, tag=tag, step=step)
            return None
        if "\\u" in raw and has_surrogate(value):
            self.problem(
                "bad_character",
                f"{where}: a string holds an unpaired surrogate (\\ud800-\\udfff)",
                pos,
                tag=tag,
                step=step,
            )
            return None
        return value


# -- building -------------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str, first_step: int, max_steps: int, max_depth: int) -> None:
        self.s = _State(text, first_step)
        self.max_steps = max_steps
        self.max_depth = max_depth
        regions = code_regions(text)
        self.tokens: list[Token] = lex(text, canonical, regions)
        if any(fenced for _, _, fenced in regions) and not self.has_structure():
            # Nothing but prose outside the fences: the plan is the fenced code (```xml ... ```).
            self.tokens = lex(text, canonical, [r for r in regions if not r[2]])
        self.spellings: set[str] = set()
        self.unwrapped: set[int] = set()
        """Close tags of ignored wrappers (`</plan>`): skipped where they are met."""
        self.over = 0
        """Calls past `max_steps`, counted without being read (for the message)."""
        self.i = 0
        """The next token to read."""
        self.pos = 0
        """The next character to read; the text before token `i` is prose."""

    def has_structure(self) -> bool:
        """Whether some element (other than <think>/<answer>) is closed: plan structure."""
        return any(
            t.kind == "open" and t.close is not None and canonical(t.name) not in ("think", "answer")
            for t in self.tokens
        )

    def name_of(self, token: Token) -> str:
        """The construct `token` names, with a warning (once per spelling) for a variant."""
        name = canonical(token.name)
        if name != token.name and token.name not in self.spellings:
            self.spellings.add(token.name)
            self.s.warn(f"line {self.s.line(token.start)}: <{token.name}> read as <{name}>")
        return name

    def in_prose(self, index: int) -> bool:
        """Whether the tag `index` sits in running text: words before it on its line."""
        token = self.tokens[index]
        before = self.tokens[index - 1].end if index else 0
        line = self.s.text[before : token.start].rpartition("\n")[2]
        return _WORDS_RE.search(line) is not None

    def block_in_prose(self, index: int) -> bool:
        """Whether the block tag `index` is followed by words on its line (no block starts so)."""
        token = self.tokens[index]
        if canonical(token.name) not in _BLOCKS:
            return False
        after = self.tokens[index + 1].start if index + 1 < len(self.tokens) else len(self.s.text)
        line = self.s.text[token.end : after].partition("\n")[0]
        return _WORDS_RE.search(line) is not None

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
                if (react := _REACT_RE.search(s.text, self.pos)) is not None:
                    self.prose(self.pos, react.start(), end_tag)
                    self.react(react, nodes)
                    continue
                self.prose(self.pos, len(s.text), end_tag)
                self.pos = len(s.text)
                break
            token = tokens[self.i]
            if (react := _REACT_RE.search(s.text, self.pos, token.start)) is not None:
                self.prose(self.pos, react.start(), end_tag)
                self.react(react, nodes)
                continue
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
                if self.i - 1 in self.unwrapped:
                    continue
                if canonical(token.name) == end_tag:
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
        if token.kind == "open" and token.close is None and (self.in_prose(index) or self.block_in_prose(index)):
            # "call the <echo> tool", "<parallel> blocks run together": a tag named in running
            # text, never closed, is text.
            s.warn(f"line {s.line(token.start)}: <{token.name}> in running text, never closed, read as text")
            self.past(index)
            return
        name, attrs, self_closing = self.name_of(token), attributes(token.attrs), token.kind == "empty"
        if name == "execute_tools" and not s.calls and self.in_prose(index):
            # "When done I write <execute_tools />", before any call: running text, not the end.
            s.warn(f"line {s.line(token.start)}: <{token.name}> in running text before any call, read as text")
            self.past(index)
        elif name == "execute_tools":
            s.stopped = True
            self.past(index)
        elif name in ("think", "answer", "result", "plan_error"):
            self.aside(index)
        elif name in _WRAPPERS:
            # `<plan>...</plan>` around the whole plan: not a server named `plan`.
            if token.close is not None:
                self.unwrapped.add(token.close)
            if f"<{name}>" not in self.spellings:
                self.spellings.add(f"<{name}>")
                s.warn(f"line {s.line(token.start)}: the <{token.name}> wrapper is ignored; its content is the plan")
            self.past(index)
        elif name in V2_KINDS or name == "arg":
            if name == "arg":
                s.problem("misplaced_arg", "<arg> belongs inside a call or shorthand", token.start, tag="arg")
            else:
                s.problem("unsupported", f"<{name}> is plan language v2 and not available yet", token.start, tag=name)
            self.past(token.close if token.close is not None else index)
        elif name in _BLOCKS:
            self.block(index, attrs, nodes, depth)
        elif name == "call":
            self.call(
                index,
                attrs,
                nodes,
                server=attrs.get("server"),
                tool=attrs.get("tool"),
                capability=attrs.get("capability"),
                explicit=True,
            )
        elif name == "tool_call":
            self.hermes(index, attrs, nodes)
        elif name == "invoke":
            self.invoke(index, attrs, nodes)
        elif name == "parameter":
            s.problem("bad_arg", '<parameter> belongs inside <invoke name="...">', token.start, tag="parameter")
            self.past(token.close if token.close is not None else index)
        elif self_closing:
            self.call(index, attrs, nodes, shorthand=name)
        elif token.close is None:
            s.problem("unclosed_tag", f"<{name}> is never closed: add </{name}>", token.start, tag=name)
            self.seek(len(text))
        else:
            # A server block or a shorthand: look at the content.
            first = self.tokens[index + 1]
            if (
                first.kind in ("open", "empty")
                and first.name != "arg"
                and not _is_ref(first)
                and not text[token.end : first.start].strip()
            ):
                self.server_block(index, attrs, nodes)
            else:
                self.call(index, attrs, nodes, shorthand=name)

    def aside(self, index: int) -> None:
        """`<think>`, `<answer>`, and `<result>`/`<plan_error>` (which only toolscore writes)."""
        s, text = self.s, self.s.text
        token = self.tokens[index]
        name, start = canonical(token.name), token.start
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
        kind = BlockKind(canonical(token.name))
        line = s.line(token.start)
        if depth + 1 > self.max_depth:
            s.problem(
                "too_deep",
                f"blocks nest deeper than {self.max_depth} levels",
                token.start,
                tag=kind,
            )
            if token.kind == "open" and token.close is None:
                self.seek(len(s.text))
            else:
                self.past(token.close if token.close is not None else index)
            return
        options = self.attribute_values(_BLOCK_ATTRIBUTES[kind], attrs, kind, token.start)
        ident, timeout = options.pop("id", None), options.pop("timeout", None)
        self.past(index)
        children = [] if token.kind == "empty" else self.items(kind, depth + 1)
        nodes.append(Block(kind, tuple(children), line, ident, timeout, MappingProxyType(options)))

    def attribute_values(
        self,
        table: Mapping[str, Attribute],
        attrs: Mapping[str, str],
        tag: str,
        pos: int,
        step: int | None = None,
        *,
        skip: frozenset[str] = frozenset(),
        v2: frozenset[str] = frozenset(),
        unknown: str = "<{tag}> has no attribute '{key}'",
    ) -> dict[str, Any]:
        """`attrs` read with `table`, less those in `skip`; unknown, `v2` and bad ones are problems."""
        s = self.s
        values: dict[str, Any] = {}
        for key, raw in attrs.items():
            if key in skip:
                continue
            if key in v2:
                message = f"attribute '{key}' is plan language v2 and not available yet"
                s.problem("unsupported", message, pos, step=step, tag=tag)
                continue
            attribute = table.get(key)
            if attribute is None:
                message = unknown.format(tag=tag, key=key)
                near = nearest(key, list(table)) if s.hints > 0 else None
                s.hints -= 1
                if near is not None:
                    message += f" (did you mean '{near}'?)"
                elif key in _ARGS_ATTRIBUTES:
                    message += "; arguments go in the content: <tag>{...}</tag>"
                s.problem("unknown_attribute", message, pos, step=step, tag=tag)
                continue
            try:
                values[key] = attribute.parse(raw, key)
            except BadValue as bad:
                s.problem(bad.code, str(bad), pos, step=step, tag=tag)
        return values

    def server_block(self, index: int, attrs: dict[str, str], nodes: list[Node]) -> None:
        s, tokens = self.s, self.tokens
        token = tokens[index]
        server, close = token.name, token.close
        assert close is not None
        unknown = "server block <{tag}> takes only 'timeout', not '{key}'"
        options = self.attribute_values(_SERVER_BLOCK_ATTRIBUTES, attrs, server, token.end, unknown=unknown)
        timeout = options.get("timeout")
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
            name = canonical(item.name)
            if name == "think":
                if item.kind == "open" and (item.close is None or item.close > close):
                    break
                self.past(item.close if item.close is not None else self.i)
                continue
            if name in _RESERVED:
                s.problem(
                    "bad_tool_tag",
                    f'<{name}> cannot be a tool of server <{server}>; use <call server="{server}" tool="{name}">',
                    item.start,
                    tag=name,
                )
                break
            self.call(
                self.i, attributes(item.attrs), nodes, server=server, tool=name, default_timeout=timeout, limit=close
            )
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
        given: ArgsSpec | None = None,
        capability: str | None = None,
    ) -> None:
        """One call from its open tag `index`; `limit` is the enclosing server block's close tag.

        `given`: the arguments, when they were read some other way (`<tool_call>`).
        `capability`: `<call capability="...">`, a step the ToolHub routes (no server, no tool).
        """
        s, text, tokens = self.s, self.s.text, self.tokens
        token = tokens[index]
        name, start, close = canonical(token.name), token.start, token.close
        public = None
        if capability is not None:
            if server is not None or tool is not None:
                message = '<call capability="..."> names no server or tool: the ToolHub picks the tools'
                s.problem("bad_call", message, start, tag="call")
            elif not CAPABILITY_RE.fullmatch(capability):
                message = (
                    f"<call capability={capability[:40]!r}>: a capability is lower-case letters, digits, "
                    "'_' and '-', at most 32 characters"
                )
                s.problem("bad_attribute", message, start, tag="call")
        elif explicit and tool and not server:
            public, tool = tool, None  # `tool="fx__echo"`: a name as clients see it, resolved by the checker
        elif explicit and not tool:
            s.problem("bad_call", '<call> needs server="..." and tool="..."', start, tag="call")
        if given is not None:
            body = ""
            self.past(close if close is not None else index)
            close = index
        elif token.kind == "empty":
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
            # Reading on would only build calls that can never run: the rest are only counted.
            total = self.max_steps + self.count_calls(index)
            message = f"the plan has {total} steps; the limit is {self.max_steps}: split it over several turns"
            s.problem("too_many_steps", message, start, tag=name)
            s.stopped = True
            return
        step = s.next_step
        s.next_step += 1
        options: dict[str, Any] = {"timeout": default_timeout}
        skip = _EXPLICIT if explicit else frozenset()
        where = f"step {step} <{name}>"
        in_attribute = next((key for key in _ARGS_ATTRIBUTES if key in attrs), None)
        if in_attribute is not None and given is None and not body.strip():
            # `<call ... args='{...}'/>`: read as the content, which is where arguments go.
            body = attrs.pop(in_attribute)
            s.warn(
                f"{where}: arguments read from {in_attribute}='...'; they go in the content: <{name}>{{...}}</{name}>"
            )
        ident = attrs.get("id", "")
        if ident[:1] in ("$", "#") and _ID_RE.match(ident[1:]):
            # NESTFUL labels its calls `$var_1`, ReWOO `#E1`: the name is what references use.
            attrs["id"] = ident[1:]
            s.warn(f'{where}: id="{ident}" read as id="{ident[1:]}"; an id is a plain name')
        options |= self.attribute_values(_CALL_ATTRIBUTES, attrs, name, start, step, skip=skip, v2=_V2_CALL_ATTRS)
        problems = len(s.problems)
        if given is not None:
            args = given
        elif in_attribute is not None and in_attribute not in attrs:
            args = self.arguments(body, name, token.end, step, index, index)
        else:
            args = self.arguments(body, name, token.end, step, index + 1, close)
        if len(s.problems) > problems:
            args = ArgsSpec("invalid")  # reported; the checker still checks the rest of the call
        node = CallNode(
            step,
            name,
            s.line(start),
            args,
            server=server,
            tool=tool,
            shorthand=shorthand,
            public=public,
            capability=capability,
            **options,
        )
        s.calls.append(node)
        nodes.append(node)

    def count_calls(self, index: int) -> int:
        """How many calls the tokens from `index` on hold, by the rules `element` reads them with,
        without reading any (a walk over the tokens: a fraction of parsing them)."""
        tokens, text = self.tokens, self.s.text
        count, i = 0, index
        while i < len(tokens):
            token = tokens[i]
            closed = token.close if token.kind == "open" and token.close is not None else i
            name = canonical(token.name)
            if token.kind not in ("open", "empty") or name in _BLOCKS or name in _WRAPPERS:
                i += 1
                continue
            if name == "execute_tools":
                break
            if name in _RESERVED and name not in _CALL_FORMS:
                i = closed + 1  # <think>, <answer>, <arg>, a v2 construct: no call
                continue
            if token.kind == "open" and closed != i and name not in _CALL_FORMS:
                head = tokens[i + 1]
                if (
                    head.kind in ("open", "empty")
                    and head.name != "arg"
                    and not _is_ref(head)
                    and not text[token.end : head.start].strip()
                ):
                    i += 1  # a server block: its tools are the calls
                    continue
            count += 1
            i = closed + 1
        return count

    def hermes(self, index: int, attrs: dict[str, str], nodes: list[Node]) -> None:
        """`<tool_call>{"name": "fx__echo", "arguments": {...}}</tool_call>` (Hermes style)."""
        s, token = self.s, self.tokens[index]
        close = token.close
        if close is None:
            s.problem("unclosed_tag", "<tool_call> is never closed: add </tool_call>", token.start, tag="tool_call")
            self.past(index)
            return
        raw = s.text[token.end : self.tokens[close].start]
        value = None
        if raw.strip().startswith("{"):
            value = s.parse_json(
                s.decode(raw.strip(), "<tool_call>", token.start), "<tool_call>", token.start, "tool_call"
            )
        name = value.get("name") if isinstance(value, dict) else None
        arguments = value.get("arguments", value.get("parameters", {})) if isinstance(value, dict) else None
        if isinstance(arguments, str):  # OpenAI style: the arguments as a JSON string
            arguments = s.parse_json(arguments, "<tool_call> arguments", token.start, "tool_call")
        if not isinstance(name, str) or not isinstance(arguments, dict):
            if value is not None:
                s.problem(
                    "bad_call",
                    '<tool_call> holds {"name": "<tool>", "arguments": {...}}; or write '
                    '<call server="S" tool="T">{...}</call>',
                    token.start,
                    tag="tool_call",
                )
            self.past(close)
            return
        label = value.get("label") if isinstance(value, dict) else None
        if isinstance(label, str) and "id" not in attrs and _ID_RE.match(label.removeprefix("$")):
            attrs["id"] = label.removeprefix("$")  # NESTFUL's `"label": "$var_1"` names the call
        s.warn(
            f"line {s.line(token.start)}: <tool_call> read as a call of {name!r}; "
            f'in a plan write <call tool="{name}">{{...}}</call>'
        )
        # Read as `<call tool="name">` with the arguments as its content.
        self.call(index, attrs, nodes, tool=name, explicit=True, given=ArgsSpec("json", arguments))

    def json_calls(self, raw: str) -> list[Node]:
        """`[{"name": "fx__add", "label": "$var_1", "arguments": {...}}, ...]`: the turn is a JSON list
        of calls, as NESTFUL's gold sequences and function-calling models write them; in order."""
        s = self.s
        value = s.parse_json(raw, "the JSON list of calls", 0, "tool_call")
        nodes: list[Node] = []
        if value is None:
            return nodes
        fix = 'each item is {"name": "<tool>", "arguments": {...}} (and an optional "label")'
        if not isinstance(value, list) or not value:
            s.problem("bad_call", f"the plan is a JSON value but no list of calls: {fix}", 0, tag="tool_call")
            return nodes
        calls = f"{len(value)} call{'' if len(value) == 1 else 's'}"
        s.warn(f"a JSON list of {calls} read as a plan, in order; in a plan write <call tool=...>{{...}}</call>")
        for n, item in enumerate(value, 1):
            name = item.get("name") if isinstance(item, dict) else None
            arguments = item.get("arguments", item.get("parameters", {})) if isinstance(item, dict) else None
            if isinstance(arguments, str):
                arguments = s.parse_json(arguments, f"call {n} arguments", 0, "tool_call")
            label = item.get("label") if isinstance(item, dict) else None
            ident = label.removeprefix("$") if isinstance(label, str) else None
            if not isinstance(name, str) or not isinstance(arguments, dict) or (ident and not _ID_RE.match(ident)):
                s.problem("bad_call", f"item {n} of the JSON list of calls: {fix}", 0, tag="tool_call")
                continue
            if len(s.calls) == self.max_steps:
                total = self.max_steps + len(value) - n + 1
                message = f"the plan has {total} steps; the limit is {self.max_steps}: split it over several turns"
                s.problem("too_many_steps", message, 0, tag="tool_call")
                break
            node = CallNode(s.next_step, "tool_call", 1, ArgsSpec("json", arguments), public=name, id=ident)
            s.next_step += 1
            s.calls.append(node)
            nodes.append(node)
        s.stopped = True  # the list is the whole plan: no `<execute_tools />` is missing
        return nodes

    def invoke(self, index: int, attrs: dict[str, str], nodes: list[Node]) -> None:
        """`<invoke name="fx__add"><parameter name="a">1</parameter>...</invoke>` (Anthropic style)."""
        s, token = self.s, self.tokens[index]
        name = attrs.pop("name", "")
        close = token.close
        if token.kind == "open" and close is None:
            s.problem("unclosed_tag", "<invoke> is never closed: add </invoke>", token.start, tag="invoke")
            self.seek(len(s.text))
            return
        if not name:
            s.problem("bad_call", '<invoke> needs name="<tool>"', token.start, tag="invoke")
            self.past(close if close is not None else index)
            return
        problems = len(s.problems)
        values = self.parameters(index + 1, close, f"step {s.next_step} <invoke name={name!r}>", token.end)
        args = ArgsSpec("invalid") if len(s.problems) > problems else ArgsSpec("parameters", values)
        if "invoke" not in self.spellings:
            self.spellings.add("invoke")
            s.warn(
                f"line {s.line(token.start)}: <invoke> read as a call of {name!r}; "
                f'in a plan write <call tool="{name}">{{"parameter": ...}}</call>'
            )
        self.call(index, attrs, nodes, tool=name, explicit=True, given=args)

    def parameters(self, first: int, close: int | None, where: str, pos: int) -> dict[str, str]:
        """The `<parameter name="...">` elements among tokens `first..close-1`, as text."""
        s, text, tokens = self.s, self.s.text, self.tokens
        values: dict[str, str] = {}
        if close is None:
            return values
        index = first
        while index < close:
            tag = tokens[index]
            between = text[pos : tag.start]
            attrs = attributes(tag.attrs) if tag.kind in ("open", "empty") else {}
            name = attrs.get("name")
            if between.strip() or canonical(tag.name) != "parameter" or not name or name in values:
                what = "a name given twice" if name in values else f"{between.strip()[:20] or '<' + tag.name + '>'!r}"
                message = f'{where}: holds only <parameter name="...">value</parameter> elements, not {what}'
                s.problem("bad_arg", message, tag.start, tag="invoke")
                return values
            if tag.kind == "empty":
                values[name], index = "", index + 1
            elif tag.close is None or tag.close >= close:
                s.problem("unclosed_tag", f"{where}: <parameter> is never closed", tag.start, tag="parameter")
                return values
            else:
                raw = text[tag.end : tokens[tag.close].start]
                stripped = raw.strip()
                if stripped.startswith(CDATA_OPEN) and stripped.endswith(CDATA_CLOSE):
                    values[name] = stripped[len(CDATA_OPEN) : -len(CDATA_CLOSE)]
                else:
                    values[name] = s.decode(raw.strip("\n"), f"{where} <parameter name={name!r}>", tag.end)
                index = tag.close + 1
            pos = tokens[index - 1].end
        if rest := text[pos : tokens[close].start].strip():
            message = f'{where}: holds only <parameter name="...">value</parameter> elements, not {rest[:20]!r}'
            s.problem("bad_arg", message, pos, tag="invoke")
        return values

    def react(self, match: re.Match[str], nodes: list[Node]) -> None:
        """A ReAct `Action: <tool>` line and its `Action Input: ...` (a JSON object, or text for the
        tool's primary parameter), read as `<call tool="<tool>">...</call>`."""
        s, text = self.s, self.s.text
        name, start, begin = match.group(1), match.start(), match.end()
        end_match = _REACT_END_RE.search(text, begin)
        end = len(text) if end_match is None else end_match.start()
        raw = text[begin:end].strip()
        if (fenced := _FENCED_RE.match(raw)) is not None:
            raw = fenced.group(2).strip()
        self.seek(end)
        if end_match is not None and end_match.group(1) and "Observation:" not in self.spellings:
            self.spellings.add("Observation:")
            s.warn(
                f"line {s.line(end)}: an Observation: written in the plan is ignored (the tool's answer is the result)"
            )
        if len(s.calls) == self.max_steps:
            total = self.max_steps + 1 + self.count_calls(self.i)
            message = f"the plan has {total} steps; the limit is {self.max_steps}: split it over several turns"
            s.problem("too_many_steps", message, start, tag="Action")
            s.stopped = True
            return
        step = s.next_step
        s.next_step += 1
        where = f"step {step} Action: {name}"
        problems = len(s.problems)
        args = ArgsSpec("empty")
        if raw.startswith("{"):
            value = s.parse_json(raw, where, begin, "Action", step)  # `{` and valid: an object
            args = ArgsSpec("json", value if isinstance(value, dict) else {})
        elif raw:
            args = ArgsSpec("text", raw)
        if len(s.problems) > problems:
            args = ArgsSpec("invalid")
        if "Action:" not in self.spellings:
            self.spellings.add("Action:")
            s.warn(
                f"line {s.line(start)}: ReAct Action: {name} read as a call of {name!r}; "
                f'in a plan write <call tool="{name}">{{...}}</call>'
            )
        node = CallNode(step, "Action", s.line(start), args, public=name)
        s.calls.append(node)
        nodes.append(node)

    def arguments(self, body: str, tag: str, pos: int, step: int, first: int, close: int) -> ArgsSpec:
        """A call's arguments from its `body`, which starts at `pos`; its tokens are `first..close-1`."""
        s = self.s
        where = f"step {step} <{tag}>"
        stripped = body.strip()
        if not stripped:
            return ArgsSpec("empty")
        if stripped.startswith(CDATA_OPEN) and stripped.endswith(CDATA_CLOSE):
            return ArgsSpec("text", stripped[len(CDATA_OPEN) : -len(CDATA_CLOSE)])
        if stripped.startswith("{"):
            decoded = s.decode(stripped, where, pos, step=step, tag=tag)
            value = s.parse_json(decoded, where, pos, tag, step)
            if value is not None and not isinstance(value, dict):
                s.problem("invalid_json", f"{where}: arguments must be a JSON object", pos, step=step, tag=tag)
            return ArgsSpec("json", value if isinstance(value, dict) else {})
        head = self.tokens[first] if first < close else None
        if (
            head is not None
            and head.kind in ("open", "empty")
            and not _is_ref(head)
            and not s.text[pos : head.start].strip()
        ):
            if head.name == "arg":
                return ArgsSpec("args", self.arg_elements(first, close, where, pos, step))
            if (elements := self.child_elements(first, close, where, pos, step)) is not None:
                # `<echo><text>hi</text></echo>`: the checker reads them as arguments if the tool
                # has those parameters, and refuses otherwise (never sent on as markup).
                return ArgsSpec("elements", elements, body.strip("\n"))
        return ArgsSpec("text", s.decode(body.strip("\n"), where, pos, step=step, tag=tag))

    def child_elements(self, first: int, close: int, where: str, pos: int, step: int) -> dict[str, str] | None:
        """Tokens `first..close-1` as `<name>text</name>` elements with only blanks between, or None."""
        s, text, tokens = self.s, self.s.text, self.tokens
        values: dict[str, str] = {}
        index, pos = first, tokens[first].start
        while index < close:
            tag = tokens[index]
            if text[pos : tag.start].strip() or tag.kind not in ("open", "empty") or tag.name in values:
                return None
            if tag.kind == "empty":
                values[tag.name], index = "", index + 1
            elif tag.close is None or tag.close >= close:
                return None
            else:
                raw = text[tag.end : tokens[tag.close].start]
                stripped = raw.strip()
                if stripped.startswith(CDATA_OPEN) and stripped.endswith(CDATA_CLOSE):
                    values[tag.name] = stripped[len(CDATA_OPEN) : -len(CDATA_CLOSE)]
                else:
                    values[tag.name] = s.decode(raw.strip("\n"), f"{where} <{tag.name}>", pos, step=step, tag=tag.name)
                index = tag.close + 1
            pos = tokens[index - 1].end
        if text[pos : tokens[close].start if close < len(tokens) else len(text)].strip():
            return None
        return values

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
            attrs = attributes(tag.attrs)
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
        cdata = stripped.startswith(CDATA_OPEN) and stripped.endswith(CDATA_CLOSE)
        if cdata:
            text = stripped[len(CDATA_OPEN) : -len(CDATA_CLOSE)]
        else:
            text = s.decode(raw, f"{where} <arg name='{name}'>", pos, step=step, tag="arg")
        if kind == "string":
            return text if cdata else text.strip("\n")
        if not cdata and REF_ELEMENT_RE.fullmatch(text.strip()):
            return text.strip()  # `<ref id="a"/>`: a reference, read with its type when it resolves
        try:
            value = loads(text)
        except ValueError as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            where = f"{where} <arg name='{name}' type='json'>"
            s.problem("invalid_json", f"{where}: {reason}", pos, step=step, tag="arg")
            return None
        if "\\u" in text and has_surrogate(value):
            message = f"{where} <arg name='{name}'>: a string holds an unpaired surrogate (\\ud800-\\udfff)"
            s.problem("bad_character", message, pos, step=step, tag="arg")
            return None
        return value


def parse_turn(
    text: str,
    *,
    first_step: int = 1,
    max_bytes: int = MAX_PLAN_BYTES,
    max_steps: int = MAX_STEPS,
    max_depth: int = MAX_DEPTH,
    collect: bool = False,
    ends_with_stop: bool = True,
) -> ParsedTurn:
    """Parse one model turn, in time linear in its size.

    Args:
        text: The turn as the model wrote it.
        first_step: The number of the turn's first call (steps continue across an episode).
        max_bytes: The size cap.
        max_steps: The most calls the turn may have; reading stops at the first one more.
        max_depth: How deep blocks may nest (`plan.max_depth`, at most `MAX_DEPTH_CEILING`).
        ends_with_stop: Whether the text should end with `<execute_tools />` (a plan's does; one
            item of a `delegate` turn never does: the stop sequence ended the model's text).
        collect: Return the problems in the turn (`ParsedTurn.problems`) rather than raise them,
            so that the checker can add its own and a model sees them all in one round; a call
            whose arguments are broken gets `ArgsSpec("invalid")`.

    Raises:
        PlanSyntaxError: with every problem found (only the size and an unpaired surrogate when
            `collect`); nothing of the plan may run.
    """
    size = len(text.encode("utf-8", errors="replace"))
    if size > max_bytes:
        raise PlanSyntaxError([PlanProblem("too_large", f"the plan is {size} bytes; the limit is {max_bytes}")])
    if (surrogate := surrogate_at(text)) is not None:
        line = text.count("\n", 0, surrogate) + 1
        message = "the plan holds an unpaired surrogate code point, which is no character; send valid Unicode"
        raise PlanSyntaxError([PlanProblem("bad_character", message, line=line)])
    parser = _Parser(text, first_step, max_steps, min(max_depth, MAX_DEPTH_CEILING))
    # Only markup that closes nothing (a `<ref/>` in a string, the stop tag) beside the list.
    listed = _JSON_LIST_RE.match(text) if not parser.has_structure() else None
    nodes = parser.json_calls(listed.group(1)) if listed is not None else parser.items(None, 0)
    s = parser.s
    if s.problems and not collect:
        raise PlanSyntaxError(s.problems)
    answer = s.answer
    if answer is None and (final := _FINAL_ANSWER_RE.search(text)) is not None:
        answer = final.group(1).strip()
    warnings = list(s.warnings)
    if s.dropped_warnings:
        warnings.append(f"{s.dropped_warnings} more warnings not shown")
    if nodes and not s.stopped and ends_with_stop:
        # Said the same for a run and a dry run: whether anything ran is the answer's to say.
        warnings.append("the plan does not end with <execute_tools />; it was read to the end of the text")
    if nodes and answer is not None:
        warnings.append("the turn has both plan items and an answer: the answer was dropped")
        answer = None
    return ParsedTurn(
        root=Block(BlockKind.SEQUENTIAL, tuple(nodes)),
        calls=tuple(s.calls),
        thoughts=tuple(s.thoughts),
        answer=answer,
        warnings=tuple(warnings),
        depth=s.max_depth,
        problems=tuple(s.problems),
    )
