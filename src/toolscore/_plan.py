"""The plan language v1: one model turn of text -> a tree of blocks and calls; pure.

Theory of operation. Models write XML-ish text: prose around the plan, code full of `<` and `&`
inside calls, a forgotten `<execute_tools />`. So this is a small tokenizer, not an XML parser
(which would also expand entities: no DTD is ever honoured here). It scans for tags; a known
block (`sequential parallel race fallback`) nests; any other element is a call whose content is
the raw text up to its matching close tag, so `x < y` in code is just text. An element whose
content starts with a child element other than `<arg>` is a server block (`<search><find_files>
{...}</find_files></search>`); otherwise it is a shorthand (`<search>pattern</search>`). Names are
not resolved here: `_plan_check` does that against the live tools.

Everything the parser had to repair or ignore is returned as a warning; anything it cannot
understand is a `PlanProblem` with a stable code, naming the tag and line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "MAX_DEPTH",
    "MAX_PLAN_BYTES",
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
_NAME = r"[A-Za-z_][A-Za-z0-9_.\-]*"
_ATTR_RE = re.compile(r"""([A-Za-z_][A-Za-z0-9_\-]*)\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_OPEN_RE = re.compile(rf"""<({_NAME})((?:\s+[A-Za-z_][A-Za-z0-9_\-]*\s*=\s*(?:"[^"]*"|'[^']*'))*)\s*(/?)>""")
_CLOSE_RE = re.compile(rf"</({_NAME})\s*>")
_ID_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$")
_ENTITY_RE = re.compile(r"&(amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);")
_BAD_AMP_RE = re.compile(r"&(?!(?:amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);)")
_FINAL_ANSWER_RE = re.compile(r"^[ \t]*Final Answer:[ \t]*(.*)$", re.MULTILINE)
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


@dataclass
class _State:
    text: str
    next_step: int
    calls: list[CallNode] = field(default_factory=list)
    thoughts: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    problems: list[PlanProblem] = field(default_factory=list)
    answer: str | None = None
    stopped: bool = False
    max_depth: int = 0

    def line(self, pos: int) -> int:
        return self.text.count("\n", 0, pos) + 1

    def problem(self, code: str, message: str, pos: int, **where: Any) -> None:
        self.problems.append(PlanProblem(code, message, line=self.line(pos), **where))


def decode_text(text: str, state: _State, where: str) -> str:
    """Character data: the five entities decoded when well formed, else taken verbatim."""
    if "<" in text or _BAD_AMP_RE.search(text):
        if "&" in text and _ENTITY_RE.search(text):
            state.warnings.append(f"{where}: text has a bare '<' or '&', taken verbatim (entities not decoded)")
        return text

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("#x"):
            return chr(int(name[2:], 16))
        if name.startswith("#"):
            return chr(int(name[1:]))
        return _ENTITIES[name]

    return _ENTITY_RE.sub(sub, text)


def _parse_json(raw: str, state: _State, where: str, pos: int, tag: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as first:
        repaired = re.sub(r",\s*([}\]])", r"\1", raw)
        if '"' not in repaired:
            repaired = repaired.replace("'", '"')
        try:
            value = json.loads(repaired)
        except json.JSONDecodeError:
            state.problem(
                "invalid_json",
                f"{where}: arguments are not valid JSON ({first.msg} at column {first.colno})",
                pos,
                tag=tag,
            )
            return None
        state.warnings.append(f"{where}: repaired JSON (trailing commas or single quotes)")
        return value


def _find_close(text: str, name: str, start: int) -> tuple[int, int] | None:
    """(start, end) of the close tag matching an open `<name>` whose content begins at `start`."""
    depth = 1
    pos = start
    open_re = re.compile(rf"<{re.escape(name)}(?=[\s/>])")
    close_re = re.compile(rf"</{re.escape(name)}\s*>")
    while pos < len(text):
        cdata = text.find(_CDATA_OPEN, pos)
        close = close_re.search(text, pos)
        if close is None:
            return None
        if cdata != -1 and cdata < close.start():
            end = text.find(_CDATA_CLOSE, cdata)
            if end == -1:
                return None
            pos = end + len(_CDATA_CLOSE)
            continue
        opened = open_re.search(text, pos, close.start())
        while opened is not None:
            tag = _OPEN_RE.match(text, opened.start())
            if tag is not None and not tag.group(3):
                depth += 1
            opened = open_re.search(text, opened.end(), close.start())
        depth -= 1
        if depth == 0:
            return close.start(), close.end()
        pos = close.end()
    return None


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


class _Parser:
    def __init__(self, text: str, first_step: int) -> None:
        self.s = _State(text, first_step)

    # -- scanning ---------------------------------------------------------------------------------

    def items(self, pos: int, end_tag: str | None, depth: int) -> tuple[list[Node], int]:
        """Parse plan items from `pos` until `</end_tag>` (or the end of text at the top)."""
        s, text = self.s, self.s.text
        s.max_depth = max(s.max_depth, depth)
        nodes: list[Node] = []
        while pos < len(text) and not s.stopped:
            lt = text.find("<", pos)
            if lt == -1:
                self._prose(text[pos:], end_tag, pos)
                pos = len(text)
                break
            self._prose(text[pos:lt], end_tag, pos)
            if text.startswith("<!--", lt):
                end = text.find("-->", lt)
                pos = len(text) if end == -1 else end + 3
                continue
            if text.startswith("<!", lt):
                if text.startswith(_CDATA_OPEN, lt):
                    end = text.find(_CDATA_CLOSE, lt)
                    pos = len(text) if end == -1 else end + 3
                    continue
                s.problem("dtd_refused", "DTDs and entity declarations are not allowed in a plan", lt)
                return nodes, len(text)
            if text.startswith("<?", lt):
                end = text.find("?>", lt)
                pos = len(text) if end == -1 else end + 2
                continue
            close = _CLOSE_RE.match(text, lt)
            if close is not None:
                if close.group(1) == end_tag:
                    return nodes, close.end()
                s.warnings.append(f"line {s.line(lt)}: stray </{close.group(1)}> ignored")
                pos = close.end()
                continue
            tag = _OPEN_RE.match(text, lt)
            if tag is None:
                self._prose("<", end_tag, lt)
                pos = lt + 1
                continue
            pos = self.element(tag, nodes, depth)
        if end_tag is not None and not s.stopped:
            s.problem("unclosed_tag", f"<{end_tag}> is never closed: add </{end_tag}>", len(text), tag=end_tag)
        return nodes, pos

    def _prose(self, chunk: str, end_tag: str | None, pos: int) -> None:
        if end_tag is None:
            return  # prose around the plan is allowed
        if chunk.strip():
            self.s.warnings.append(f"line {self.s.line(pos)}: text inside <{end_tag}> ignored: {chunk.strip()[:40]!r}")

    def element(self, tag: re.Match[str], nodes: list[Node], depth: int) -> int:
        s, text = self.s, self.s.text
        name, attrs, self_closing = tag.group(1), _attrs(tag.group(2)), bool(tag.group(3))
        start, content_start = tag.start(), tag.end()
        if name == "execute_tools":
            s.stopped = True
            return content_start
        if name in ("think", "answer", "result", "plan_error"):
            if self_closing:
                return content_start
            close = _find_close(text, name, content_start)
            if close is None:
                if name != "think":
                    s.problem("unclosed_tag", f"<{name}> is never closed", start, tag=name)
                    return len(text)
                # Repair: an unclosed <think> ends where the next line starts with a tag.
                nxt = re.compile(r"^[ \t]*<(?!/?think)", re.MULTILINE).search(text, content_start)
                end = nxt.start() if nxt else len(text)
                s.thoughts.append(text[content_start:end].strip())
                s.warnings.append(f"line {s.line(start)}: <think> was not closed; it ends at line {s.line(end)}")
                return end
            body = text[content_start : close[0]]
            if name == "think":
                s.thoughts.append(body.strip())
            elif name == "answer":
                s.answer = body.strip()
            else:
                s.warnings.append(
                    f"line {s.line(start)}: a <{name}> written in the plan is ignored (only toolscore writes those)"
                )
            return close[1]
        if name in V2_BLOCKS:
            s.problem("unsupported", f"<{name}> is plan language v2 and not available yet", start, tag=name)
            close = _find_close(text, name, content_start) if not self_closing else None
            return close[1] if close else content_start
        if name == "arg":
            s.problem("misplaced_arg", "<arg> belongs inside a call or shorthand", start, tag="arg")
            close = _find_close(text, "arg", content_start)
            return close[1] if close else content_start
        if name in BLOCKS:
            return self.block(name, attrs, tag, nodes, depth)
        if name == "call":
            return self.call(tag, attrs, nodes, server=attrs.get("server"), tool=attrs.get("tool"), explicit=True)
        # A server block or a shorthand: look at the content.
        if self_closing:
            return self.call(tag, attrs, nodes, shorthand=name)
        close = _find_close(text, name, content_start)
        if close is None:
            s.problem("unclosed_tag", f"<{name}> is never closed: add </{name}>", start, tag=name)
            return len(text)
        body = text[content_start : close[0]]
        first = _OPEN_RE.match(body, len(body) - len(body.lstrip()))
        if first is not None and first.group(1) != "arg":
            self.server_block(name, attrs, content_start, close, nodes, depth)
        else:
            self.call(tag, attrs, nodes, shorthand=name, close=close)
        return close[1]

    # -- constructs -------------------------------------------------------------------------------

    def block(self, kind: str, attrs: dict[str, str], tag: re.Match[str], nodes: list[Node], depth: int) -> int:
        s = self.s
        line = s.line(tag.start())
        if depth + 1 > MAX_DEPTH:
            s.problem("too_deep", f"blocks nest deeper than {MAX_DEPTH} levels", tag.start(), tag=kind)
            close = _find_close(s.text, kind, tag.end())
            return close[1] if close else len(s.text)
        options = self.block_options(kind, attrs, tag.start())
        if tag.group(3):
            children, end = [], tag.end()
        else:
            children, end = self.items(tag.end(), kind, depth + 1)
        nodes.append(Block(kind, tuple(children), line, **options))  # type: ignore[arg-type]
        return end

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

    def server_block(
        self, server: str, attrs: dict[str, str], start: int, close: tuple[int, int], nodes: list[Node], depth: int
    ) -> None:
        s, text = self.s, self.s.text
        timeout = None
        for key, value in attrs.items():
            if key == "timeout":
                timeout = self.duration(value, server, start)
            else:
                s.problem(
                    "unknown_attribute", f"server block <{server}> takes only 'timeout', not '{key}'", start, tag=server
                )
        pos = start
        while pos < close[0]:
            lt = text.find("<", pos, close[0])
            if lt == -1:
                break
            if text[pos:lt].strip():
                s.warnings.append(f"line {s.line(pos)}: text inside <{server}> ignored: {text[pos:lt].strip()[:40]!r}")
            tag = _OPEN_RE.match(text, lt)
            if text.startswith("<!--", lt):
                end = text.find("-->", lt, close[0])
                pos = close[0] if end == -1 else end + 3
                continue
            if tag is None or tag.end() > close[0]:
                s.problem(
                    "bad_tool_tag",
                    f"inside <{server}>, expected a tool element like <tool_name>{{...}}</tool_name>",
                    lt,
                    tag=server,
                )
                return
            name = tag.group(1)
            if name in RESERVED:
                if name == "think":
                    inner = _find_close(text, "think", tag.end())
                    pos = inner[1] if inner else close[0]
                    continue
                s.problem(
                    "bad_tool_tag",
                    f'<{name}> cannot be a tool of server <{server}>; use <call server="{server}" tool="{name}">',
                    lt,
                    tag=name,
                )
                return
            pos = self.call(
                tag, _attrs(tag.group(2)), nodes, server=server, tool=name, default_timeout=timeout, limit=close[0]
            )

    def call(
        self,
        tag: re.Match[str],
        attrs: dict[str, str],
        nodes: list[Node],
        *,
        server: str | None = None,
        tool: str | None = None,
        shorthand: str | None = None,
        explicit: bool = False,
        default_timeout: float | None = None,
        close: tuple[int, int] | None = None,
        limit: int | None = None,
    ) -> int:
        s, text = self.s, self.s.text
        name = tag.group(1)
        start = tag.start()
        if explicit and (not server or not tool):
            s.problem("bad_call", '<call> needs server="..." and tool="..."', start, tag="call")
        if tag.group(3):
            body, end = "", tag.end()
        else:
            if close is None:
                close = _find_close(text, name, tag.end())
            if close is None or (limit is not None and close[1] > limit):
                s.problem("unclosed_tag", f"<{name}> is never closed: add </{name}>", start, tag=name)
                return limit if limit is not None else len(text)
            body, end = text[tag.end() : close[0]], close[1]
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
        args = self.arguments(body, name, tag.end(), step)
        node = CallNode(step, name, s.line(start), args, server=server, tool=tool, shorthand=shorthand, **options)
        s.calls.append(node)
        nodes.append(node)
        return end

    def arguments(self, body: str, tag: str, pos: int, step: int) -> ArgsSpec:
        s = self.s
        where = f"step {step} <{tag}>"
        stripped = body.strip()
        if not stripped:
            return ArgsSpec("empty")
        if stripped.startswith(_CDATA_OPEN) and stripped.endswith(_CDATA_CLOSE):
            return ArgsSpec("text", stripped[len(_CDATA_OPEN) : -len(_CDATA_CLOSE)])
        if stripped.startswith("{"):
            value = _parse_json(decode_text(stripped, s, where), s, where, pos, tag)
            if value is not None and not isinstance(value, dict):
                s.problem("invalid_json", f"{where}: arguments must be a JSON object", pos, step=step, tag=tag)
            return ArgsSpec("json", value if isinstance(value, dict) else {})
        first = _OPEN_RE.match(stripped)
        if first is not None and first.group(1) == "arg":
            return ArgsSpec("args", self.arg_elements(stripped, where, pos, step))
        return ArgsSpec("text", decode_text(body.strip("\n"), s, where))

    def arg_elements(self, body: str, where: str, pos: int, step: int) -> dict[str, Any]:
        s = self.s
        values: dict[str, Any] = {}
        cursor = 0
        while (tag := _OPEN_RE.search(body, cursor)) is not None:
            if tag.group(1) != "arg":
                s.problem(
                    "bad_arg",
                    f"{where}: only <arg> elements may sit beside <arg>, found <{tag.group(1)}>",
                    pos,
                    step=step,
                )
                break
            attrs = _attrs(tag.group(2))
            close = _find_close(body, "arg", tag.end()) if not tag.group(3) else (tag.end(), tag.end())
            if close is None:
                s.problem("unclosed_tag", f"{where}: <arg> is never closed", pos, step=step, tag="arg")
                break
            raw = body[tag.end() : close[0]]
            name, kind = attrs.get("name"), attrs.get("type", "string")
            if not name:
                s.problem("bad_arg", f'{where}: <arg> needs name="..."', pos, step=step, tag="arg")
            elif kind not in ("string", "json"):
                s.problem("bad_arg", f"{where}: <arg type='{kind}'>: use 'string' or 'json'", pos, step=step, tag="arg")
            else:
                stripped = raw.strip()
                if stripped.startswith(_CDATA_OPEN) and stripped.endswith(_CDATA_CLOSE):
                    text = stripped[len(_CDATA_OPEN) : -len(_CDATA_CLOSE)]
                else:
                    text = decode_text(raw, s, f"{where} <arg name='{name}'>")
                if kind == "json":
                    try:
                        values[name] = json.loads(text)
                    except json.JSONDecodeError as exc:
                        s.problem(
                            "invalid_json",
                            f"{where} <arg name='{name}' type='json'>: {exc.msg}",
                            pos,
                            step=step,
                            tag="arg",
                        )
                else:
                    values[name] = text.strip("\n") if not stripped.startswith(_CDATA_OPEN) else text
            cursor = close[1]
        return values

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
        if not value.strip().isdigit() or not low <= int(value) <= high:
            self.s.problem(
                "bad_attribute", f"{key}='{value}': use a whole number from {low} to {high}", pos, step=step, tag=tag
            )
            return None
        return int(value)


def parse_turn(text: str, *, first_step: int = 1, max_bytes: int = MAX_PLAN_BYTES) -> ParsedTurn:
    """Parse one model turn.

    Args:
        text: The turn as the model wrote it.
        first_step: The number of the turn's first call (steps continue across an episode).
        max_bytes: The size cap.

    Raises:
        PlanSyntaxError: with every problem found; nothing of the plan may run.
    """
    size = len(text.encode("utf-8", errors="replace"))
    if size > max_bytes:
        raise PlanSyntaxError([PlanProblem("too_large", f"the plan is {size} bytes; the limit is {max_bytes}")])
    parser = _Parser(text, first_step)
    nodes, _ = parser.items(0, None, 0)
    s = parser.s
    if s.problems:
        raise PlanSyntaxError(s.problems)
    answer = s.answer
    if answer is None and (final := _FINAL_ANSWER_RE.search(text)) is not None:
        answer = final.group(1).strip()
    warnings = list(s.warnings)
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
