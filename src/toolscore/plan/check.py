"""Static checks of a parsed plan against the live tools, before anything runs; pure.

Every problem is collected (not just the first, and with the parser's when it collected them),
each naming the step, tag or id and what to change: the nearest name for a misspelt one, the
server that has a bare tool, the edge of a cycle to remove. Slips that have one clear meaning are
read so, with a warning: a tool by its exposed name (`fx__echo`), child elements that are the
tool's parameters, `{{x}}` and `$x.path` for `${x}`. A plan that passes is a tree of
`CheckedCall`s: routed, arguments bound to the tool's parameters, literal arguments valid against
its inputSchema, references pointing only at steps that are guaranteed to have finished when the
call starts.

Visibility rule (v1): a call may reference any step of an earlier turn of its episode, and any
node of this turn that completes before it starts, i.e. an earlier item of an enclosing block whose
children are `ordered` (`<sequential>`; the turn itself is one). Siblings in any other block
(`<parallel>`, `<race>`, `<fallback>`: see the block table, `blocks.py`) run concurrently or as
alternatives, so they may not reference each other.

To check that in O(depth) per reference, every call and id records its path from the root: the
(block kind, child index) of each block it sits in. At the first place where the paths of a call
and of its target part, they are children of the same block: the target is visible iff that
block's children are ordered and the target comes first. A target whose path is a prefix of the
call's (a block around the call, or the call itself) finishes later: a forward reference.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Mapping
from typing import Any

from toolscore._json import format_path
from toolscore.config import PlanSettings, Shorthand
from toolscore.downstream.registry import Registry, Route
from toolscore.errors import PlanCheckError, PlanProblem, RefSyntaxError
from toolscore.plan.blocks import SPECS, BlockKind, either, shorthand_table
from toolscore.plan.dialects import DIALECTS, Reading, Targets, read_references
from toolscore.plan.nodes import (
    READ_TOOL,
    Block,
    CallNode,
    CheckedBlock,
    CheckedCall,
    CheckedCapability,
    CheckedNode,
    CheckedPlan,
    ParsedTurn,
    ResourceReader,
)
from toolscore.plan.parse import CAPABILITY_RE
from toolscore.plan.refs import Ref, contains_ref, find_refs, nearest, step_like
from toolscore.plan.values import loads

__all__ = ["check_plan", "shorthand_table"]


def _set_path(target: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    for key in keys[:-1]:
        target = target.setdefault(key, {})
    target[keys[-1]] = value


def _only_required_string(route: Route) -> str | None:
    schema = route.tool.input_schema
    props = schema.get("properties") or {}
    required = [
        k
        for k in schema.get("required") or []
        if (props.get(k) or {}).get("type") == "string" and "default" not in (props.get(k) or {})
    ]
    return required[0] if len(required) == 1 else None


_Path = tuple[tuple[BlockKind, int], ...]
"""(block kind, child index) for each block from the root down to a node."""

_BESIDE = "a " + either(f"<{kind}>" for kind, spec in SPECS.items() if spec.children != "ordered")
"""Where siblings may not reference each other: `a <parallel>, <race> or <fallback>`."""


_STEP_ID = re.compile(r"(?:step|result_of_step_)(\d{1,15})$")
"""An id that references read as a step number (`${step2}` is step 2)."""
_EVIDENCE_ID = re.compile(r"E\d{1,15}$")
"""An id like ReWOO's evidence names (`E2`): then `#E2` names ids, not positions."""
_MAX_HINTS = 16
"""How many problems of one plan get a "did you mean" (each costs a bounded difflib search)."""
_MAX_CYCLE = 64
"""Cycles longer than this (steps) are reported as plain forward references: bounded work."""
_MAX_LISTED = 20
"""Capabilities named in an unknown capability's problem, nearest first."""


def _nearest_first(word: str, names: list[str]) -> list[str]:
    """`names` ordered by likeness to `word` (the parser bounds a capability to 32 characters)."""
    return sorted(names, key=lambda n: (-difflib.SequenceMatcher(None, word, n[:64]).ratio(), n))


_SHOWN_READINGS = 3
"""References of one dialect quoted in its warning."""


def _ranges(steps: list[int]) -> str:
    """`1-3, 5`: sorted step numbers as ranges."""
    spans: list[list[int]] = []
    for step in steps:
        if spans and step == spans[-1][1] + 1:
            spans[-1][1] = step
        else:
            spans.append([step, step])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _calls_in(block: Block) -> list[CallNode]:
    found: list[CallNode] = []
    for child in block.children:
        found.extend([child] if isinstance(child, CallNode) else _calls_in(child))
    return found


def _parting(a: _Path, b: _Path) -> int:
    """Where two paths part: the depth of the block that holds both, in different children."""
    for n, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return n
    return min(len(a), len(b))


class _Checker:
    def __init__(
        self,
        turn: ParsedTurn,
        registry: Registry,
        shorthands: Mapping[str, tuple[str, Shorthand]],
        limits: PlanSettings,
        earlier_steps: Mapping[int, str | None],
        earlier_ids: Mapping[str, int | None],
        capabilities: Mapping[str, tuple[str, ...]] | None = None,
        reads: ResourceReader | None = None,
    ) -> None:
        self.turn = turn
        self.capabilities = capabilities
        self.reads = reads
        self.registry = registry
        self.shorthands = shorthands
        self.limits = limits
        self.earlier_steps = earlier_steps
        self.earlier_ids = earlier_ids
        self.problems: list[PlanProblem] = []
        self.ids: dict[str, int | Block] = {}
        self.paths: dict[int | str, _Path] = {}  # this turn's targets -> where they are
        self.calls: list[CheckedCall] = []
        self.capability_steps: list[CheckedCapability] = []
        self.warnings: list[str] = []
        self.refs_of: dict[int, tuple[Ref, ...]] = {}
        """Each call's references, to name the edge of a cycle."""
        self.hints = _MAX_HINTS
        """Suggestions of a near name left to make (`nearest`)."""
        self.forwards: list[tuple[CallNode, Ref]] = []
        """Forward references, reported after pass 2 (a cycle's other edge is not known before)."""
        self.readings: dict[str, list[tuple[int, Reading]]] = {}
        """References written in another dialect and read as canonical ones, by dialect: one warning each."""
        self.targets = Targets(self.known)
        self.refused: tuple[str, ...] = ()
        """The dialect references of the call being checked that were refused."""

    def dialect_warnings(self) -> None:
        """One warning per dialect read: its first references as read, and the steps that used it."""
        for dialect, found in self.readings.items():
            shown = ", ".join(f"{r.written} as {r.canonical}" for _, r in found[:_SHOWN_READINGS])
            more = f" and {len(found) - _SHOWN_READINGS} more" if len(found) > _SHOWN_READINGS else ""
            steps = sorted({step for step, _ in found})
            where = f"step {steps[0]}" if len(steps) == 1 else f"steps {_ranges(steps)}"
            self.warnings.append(
                f"{where}: read {shown}{more} ({DIALECTS[dialect]}); write references as ${{id.path}} or ${{N.path}}"
            )

    def problem(self, code: str, message: str, node: CallNode | Block | None = None, **where: Any) -> None:
        if isinstance(node, CallNode):
            where = {"step": node.step, "tag": node.tag, "id": node.id, "line": node.line, **where}
        elif isinstance(node, Block):
            where = {"tag": node.kind, "id": node.id, "line": node.line, **where}
        self.problems.append(PlanProblem(code, message, **where))

    # -- pass 1: ids and paths ------------------------------------------------------------------

    def index(self, node: CallNode | Block, path: _Path) -> None:
        if isinstance(node, CallNode):
            self.paths[node.step] = path
        ident = node.id
        if ident is not None:
            numbered = _STEP_ID.match(ident)
            if ident in self.ids or ident in self.earlier_ids:
                self.problem(
                    "duplicate_id", f"id '{ident}' is used twice; ids are unique per episode: rename one", node
                )
            elif numbered and (not isinstance(node, CallNode) or int(numbered.group(1)) != node.step):
                # `${step2}` is step 2: an id spelt so, on another step, would hand its references
                # step 2's data (a model numbering from 0, or from 1 in a later turn).
                this = f"step {node.step}" if isinstance(node, CallNode) else f"a <{node.kind}>"
                self.problem(
                    "bad_id",
                    f"id '{ident}' reads as step {int(numbered.group(1))} in references, but this is {this}: "
                    "choose another id",
                    node,
                )
            else:
                self.ids[ident] = node.step if isinstance(node, CallNode) else node
                self.paths[ident] = path
        if isinstance(node, Block):
            for n, child in enumerate(node.children):
                self.index(child, (*path, (node.kind, n)))

    # -- pass 2: routes, arguments, references ----------------------------------------------------

    def node(self, node: CallNode | Block) -> CheckedNode | None:
        if isinstance(node, CallNode):
            return self.call(node) if node.capability is None else self.capability(node)
        if SPECS[node.kind].children == "alternatives":
            if not node.children:
                self.problem("empty_block", f"<{node.kind}> needs at least one alternative", node)
            elif len(node.children) > self.limits.max_alternatives:
                self.problem(
                    "too_many_alternatives",
                    f"<{node.kind}> has {len(node.children)} alternatives; the limit is {self.limits.max_alternatives}",
                    node,
                )
        children = [checked for child in node.children if (checked := self.node(child)) is not None]
        return CheckedBlock(node, tuple(children))

    def nearest(self, word: str, candidates: list[str]) -> str | None:
        """`refs.nearest`, for the first `_MAX_HINTS` problems: a plan of many misspelt names
        costs no more than a few."""
        if self.hints == 0:
            return None
        self.hints -= 1
        return nearest(word, candidates)

    def named(self, name: str) -> Route | None:
        """A tool named whole: as clients see it (`fx__echo`), or `server.tool`."""
        route = self.registry.get(name)
        if route is None and "." in name:
            server, _, tool = name.partition(".")
            route = self.registry.find(server, tool)
        return route

    def servers_of(self, tool: str) -> list[str]:
        """The servers that have a tool of this (downstream) name."""
        return [server for server in self.registry.servers if self.registry.find(server, tool) is not None]

    def public(self, node: CallNode, name: str) -> Route | None:
        """A call naming its tool whole (`<call tool="fx__echo">`, `<tool_call>`), read with a warning."""
        route = self.named(name)
        if route is not None:
            self.warnings.append(
                f'step {node.step}: {name!r} read as server "{route.server}", tool "{route.remote_name}"; '
                f'write <call server="{route.server}" tool="{route.remote_name}">'
            )
            return route
        owners = self.servers_of(name)
        if owners:
            fix = " or ".join(f'<call server="{o}" tool="{name}">' for o in owners)
            self.problem("unknown_tool", f"tool '{name}' needs its server: write {fix}", node)
        else:
            near = self.nearest(name, list(self.registry.routes))
            hint = f" (did you mean '{near}'?)" if near else ""
            self.problem("unknown_tool", f'no tool \'{name}\'{hint}; name it <call server="S" tool="T">', node)
        return None

    def route(self, node: CallNode) -> tuple[Route | None, Shorthand | None]:
        servers = ", ".join(self.registry.servers) or "none"
        if node.public is not None:
            if node.public == READ_TOOL and self.registry.get(READ_TOOL) is None:
                return self.read(node, None), None
            return self.public(node, node.public), None
        if node.shorthand is not None:
            binding = self.shorthands.get(node.shorthand)
            if binding is None:
                name = node.shorthand
                if (route := self.named(name)) is not None:
                    self.warnings.append(
                        f"step {node.step}: <{name}> read as <{route.server}><{route.remote_name}>; "
                        f"write <{route.server}><{route.remote_name}>{{...}}</{route.remote_name}></{route.server}>"
                    )
                    return route, None
                tags = ", ".join(f"<{t}>" for t in sorted(self.shorthands)) or "none configured"
                if name in self.registry.servers:
                    hint = f"server '{name}' has no shorthand configured; write <{name}><tool>{{...}}</tool></{name}>"
                elif owners := self.servers_of(name):
                    hint = "a tool needs its server: write " + " or ".join(
                        f"<{o}><{name}>...</{name}></{o}>" for o in owners
                    )
                else:
                    near = self.nearest(name, [*self.shorthands, *self.registry.servers])
                    hint = f"unknown tag{f' (did you mean <{near}>?)' if near else ''}; servers: {servers}; "
                    hint += f"shorthand tags: {tags}"
                self.problem("unknown_tag", f"<{name}>: {hint}", node)
                return None, None
            server, shorthand = binding
            route = self.registry.find(server, shorthand.tool)
            if route is None:
                self.problem(
                    "unknown_tool",
                    f"<{node.shorthand}> is bound to {server}.{shorthand.tool}, which is not available",
                    node,
                )
            return route, shorthand
        if node.server is None or node.tool is None:
            return None, None  # a <call> without its route: the parser said so (`bad_call`)
        route = self.registry.find(node.server, node.tool)
        if route is None and node.tool == READ_TOOL and node.server in self.registry.servers:
            return self.read(node, node.server), None
        if route is None and (named := self.named(node.tool)) is not None and named.server == node.server:
            return self.public(node, node.tool), None  # `tool="fx__echo"` inside server `fx`
        if route is None:
            if node.server not in self.registry.servers:
                if owners := self.servers_of(node.server):
                    # `<echo><text>hi</text></echo>`: a bare tool read as a server block.
                    fix = " or ".join(f"<{o}><{node.server}>{{...}}</{node.server}></{o}>" for o in owners)
                    message = f"'{node.server}' is a tool, not a server: write {fix}"
                elif (binding := self.shorthands.get(node.server)) is not None:
                    server, shorthand = binding
                    message = (
                        f"<{node.server}> is a shorthand for {server}.{shorthand.tool}, which takes text for "
                        f"'{shorthand.primary}': write <{node.server}>text</{node.server}>, or "
                        f"<{server}><{shorthand.tool}>{{...}}</{shorthand.tool}></{server}>"
                    )
                else:
                    near = self.nearest(node.server, list(self.registry.servers))
                    hint = f" (did you mean '{near}'?)" if near else ""
                    message = f"no server '{node.server}' is connected{hint}; servers: {servers}"
                self.problem("unknown_server", message, node)
            else:
                names = sorted(t for s, t in self.registry.by_remote if s == node.server)
                near = self.nearest(node.tool, names)
                hint = f" (did you mean '{near}'?)" if near else ""
                self.problem(
                    "unknown_tool",
                    f"server '{node.server}' has no tool '{node.tool}'{hint}; its tools: {', '.join(names)}",
                    node,
                )
        return route, None

    def read(self, node: CallNode, server: str | None) -> Route | None:
        """A resource read (`<call tool="resources/read">URI</call>`, or with `server=`): the
        pseudo-tool `resources/read` of the server that owns the URI, as a client's read is."""
        where = f'step {node.step} <call tool="{READ_TOOL}">'
        if self.reads is None:
            self.problem("unknown_tool", f"{where}: plans cannot read resources here", node)
            return None
        spec = node.args
        uri = spec.value.get("uri") if spec.kind == "json" and isinstance(spec.value, dict) else spec.value
        literal = uri if isinstance(uri, str) and spec.kind in ("json", "text") and not contains_ref(uri) else None
        owner = self.reads.owner(literal) if literal is not None else None
        if literal is not None and owner is None:
            self.problem("unknown_resource", f"{where}: no server serves '{literal[:200]}'", node)
            return None
        if server is None:
            if owner is None:
                servers = ", ".join(self.registry.servers) or "none"
                self.problem(
                    "unknown_resource",
                    f'{where}: a URI known only when the step runs needs its server: write <call server="S" '
                    f'tool="{READ_TOOL}"> (servers: {servers})',
                    node,
                )
                return None
            server = owner[0]
        elif owner is not None and owner[0] != server:
            message = f"{where}: '{str(literal)[:200]}' belongs to server '{owner[0]}', not '{server}'"
            self.problem("unknown_resource", message, node)
            return None
        route = self.reads.route(server)
        if route is None:
            self.problem("unknown_resource", f"{where}: server '{server}' serves no resources", node)
        return route

    def bind(self, node: CallNode, route: Route, shorthand: Shorthand | None) -> dict[str, Any] | None:
        spec = node.args
        if spec.kind == "invalid":
            return None  # already reported
        if spec.kind == "empty":
            return {}
        if spec.kind in ("json", "args"):
            return dict(spec.value)
        if spec.kind in ("elements", "parameters"):
            return self.elements(node, route, spec.value, spec.raw, named=spec.kind == "parameters")
        primary = shorthand.primary if shorthand is not None else _only_required_string(route)
        if primary is None:
            why = (
                f"shorthand <{node.tag}> has no 'primary' parameter configured"
                if shorthand is not None
                else f"tool '{route.remote_name}' has no single required string parameter"
            )
            self.problem("no_primary", f"text content needs a parameter to go to: {why}; pass a JSON object", node)
            return None
        arguments: dict[str, Any] = {}
        _set_path(arguments, primary, spec.value)
        return arguments

    def elements(
        self, node: CallNode, route: Route, values: dict[str, str], raw: str, *, named: bool = False
    ) -> dict[str, Any] | None:
        """`<echo><text>hi</text></echo>`: child elements read as arguments when each is a parameter;
        `named`: `<invoke>`'s `<parameter name="text">`, read so with no warning of their own."""
        props = route.tool.input_schema.get("properties") or {}
        unknown = [name for name in values if name not in props]
        if unknown and named:
            listed = ", ".join(f"'{n}'" for n in list(props)[:_MAX_LISTED]) or "none"
            self.problem(
                "bad_arg",
                f"step {node.step} <invoke name={route.public_name!r}>: "
                f"{', '.join(repr(n) for n in unknown)} is no parameter of it; its parameters: {listed}",
                node,
            )
            return None
        if unknown:
            shown = raw if len(raw) <= 60 else raw[:57] + "..."
            example = ", ".join(f'"{name}": ...' for name in list(props)[:3])
            self.problem(
                "bad_arg",
                f"step {node.step} <{node.tag}>: its content {shown!r} is markup, and "
                f"{', '.join(f'<{n}>' for n in unknown)} is no parameter of '{route.public_name}'; "
                f"write a JSON object ({{{example}}}), or wrap markup meant as text in <![CDATA[...]]>",
                node,
            )
            return None
        arguments: dict[str, Any] = {}
        for name, text in values.items():
            arguments[name] = text
            if (props.get(name) or {}).get("type", "string") != "string":
                with contextlib.suppress(ValueError):  # else left as text: the schema check says what is wrong
                    arguments[name] = loads(text)
        if not named:
            listed = ", ".join(f"<{n}>" for n in values)
            self.warnings.append(f"step {node.step}: child elements {listed} read as arguments; write a JSON object")
        return arguments

    def call(self, node: CallNode) -> CheckedCall | None:
        route, shorthand = self.route(node)
        if route is None:
            return None
        arguments = self.bind(node, route, shorthand)
        if arguments is None:
            return None
        found = self.references(node, arguments)
        if found is None:
            return None
        arguments, refs = found
        for err in route.schema_errors(arguments):
            if contains_ref(err.instance):
                continue  # a reference's value is known when its step has run
            if isinstance(err.instance, str) and any(written in err.instance for written in self.refused):
                continue  # a reference in another dialect, refused above: one problem is enough
            where = format_path(err.absolute_path)
            self.problem("invalid_arguments", f"{route.public_name}: {where}: {err.message}", node)
        reads = route.remote_name == READ_TOOL and route.public_name == READ_TOOL  # never a listed tool's name
        if node.retries:
            hints = route.tool.annotations
            safe = reads or node.idempotent or (hints is not None and (hints.read_only_hint or hints.idempotent_hint))
            if not safe:
                self.problem(
                    "unsafe_retries",
                    f"retries on '{route.public_name}', which is not annotated readOnly or idempotent; "
                    'add idempotent="true" if repeating it is harmless',
                    node,
                )
        checked = CheckedCall(node, route, arguments, refs, reads)
        self.calls.append(checked)
        return checked

    def capability(self, node: CallNode) -> CheckedCapability | None:
        """`<call capability="search">{...}</call>`: a capability the ToolHub offers, its arguments as JSON."""
        name = node.capability
        assert name is not None
        if not CAPABILITY_RE.fullmatch(name):
            return None  # the parser said what is wrong with it (`bad_attribute`)
        where = f'step {node.step} <call capability="{name}">'
        if self.capabilities is None:
            self.problem(
                "no_toolhub",
                f"{where}: capability steps need the ToolHub, which is not configured here; declare capabilities "
                'in servers.json (a server\'s "capabilities") or name the tool: <call server="S" tool="T">{...}</call>',
                node,
            )
            return None
        candidates = self.capabilities.get(name)
        if not candidates:
            known = _nearest_first(name, list(self.capabilities))
            shown = ", ".join(known[:_MAX_LISTED]) + (", ..." if len(known) > _MAX_LISTED else "")
            self.problem(
                "unknown_capability",
                f"{where}: no tool offers capability '{name}'; capabilities, nearest first: {shown or 'none'}",
                node,
            )
            return None
        if node.retries:
            self.problem(
                "bad_attribute",
                f"{where}: retries do not apply to a capability step (its candidates are the alternatives); "
                "remove retries, or set the capability's strategy to 'fallback'",
                node,
            )
        spec = node.args
        if spec.kind == "invalid":
            return None  # already reported
        if spec.kind not in ("empty", "json", "args"):
            self.problem(
                "bad_arg",
                f'{where}: a capability step takes a JSON object: <call capability="{name}">{{"query": "..."}}</call>',
                node,
            )
            return None
        found = self.references(node, dict(spec.value or {}))
        if found is None:
            return None
        arguments, refs = found
        checked = CheckedCapability(node, name, arguments, refs, candidates)
        self.capability_steps.append(checked)
        return checked

    def references(self, node: CallNode, arguments: dict[str, Any]) -> tuple[dict[str, Any], tuple[Ref, ...]] | None:
        """The arguments with references in other dialects read as canonical ones (`dialects.py`),
        and their references, each checked."""
        arguments, readings, refusals = read_references(arguments, self.targets)
        for reading in readings:
            self.readings.setdefault(reading.dialect, []).append((node.step, reading))
        for refusal in refusals:
            self.problem(
                refusal.code, f"step {node.step} uses {refusal.written}{refusal.why}", node, ref=refusal.written
            )
        self.refused = tuple(refusal.written for refusal in refusals)
        try:
            refs = tuple(find_refs(arguments))
        except RefSyntaxError as exc:
            literal = " (a JavaScript template literal or a shell ${VAR} meant as text is written $${...})"
            self.problem("bad_reference", str(exc) + literal, node)
            return None
        self.refs_of[node.step] = refs
        for ref in refs:
            self.reference(node, ref)
        return arguments, refs

    def meant(self, ref: Ref) -> str:
        """What a reference to nothing may have meant: a step (`${step_1}`), a near id, or text."""
        target = ref.target
        rest = ref.raw[2 + len(str(target)) :] if ref.raw.startswith("${") else "}"
        if isinstance(target, str) and (number := step_like(target)) is not None and self.known(number):
            return f"; step {number} is ${{{number}{rest}"
        ids = [str(i) for i in (*self.ids, *self.earlier_ids)]
        if isinstance(target, str) and (near := self.nearest(target, ids)) is not None:
            return f" (did you mean ${{{near}{rest}?)"
        literal = "$$" + ref.raw[1:]
        return f"; if {ref.raw} is meant as text (a JavaScript template literal, a shell variable), write {literal}"

    def forward(self, node: CallNode, ref: Ref) -> str:
        """Why a reference to a later step fails, and the fix: for a cycle, the edge to remove."""
        source = self.step_of(ref.target)
        if source is not None and source != node.step:
            back = next((r for r in self.refs_of.get(source, ()) if self.reaches(r.target, node.step)), None)
            if back is not None:
                return (
                    f"step {node.step} uses {ref.raw} (step {source}), and step {source} uses {back.raw}: a cycle; "
                    f"remove {ref.raw} from step {node.step} (or {back.raw} from step {source}) and split the work "
                    "over two turns if both are needed"
                )
            return (
                f"step {node.step} uses {ref.raw}, which is step {source} and runs later; "
                f"move step {node.step} after it"
            )
        return f"step {node.step} uses {ref.raw}, which runs later (or is this step); move it after its source"

    def step_of(self, target: int | str) -> int | None:
        """The step a target of this turn names (a block: its first step)."""
        found = self.ids.get(target) if isinstance(target, str) else target
        if isinstance(found, Block):
            found = next((c.step for c in _calls_in(found)), None)
        return found if isinstance(found, int) and found in self.paths else None

    def reaches(self, target: int | str, goal: int) -> bool:
        """Whether `target` (or what it uses, transitively) is step `goal`; bounded by the turn's steps."""
        todo: list[int | str] = [target]
        seen: set[int] = set()
        while todo and len(seen) < _MAX_CYCLE:
            step = self.step_of(todo.pop())
            if step is None or step in seen:
                continue
            if step == goal:
                return True
            seen.add(step)
            todo.extend(r.target for r in self.refs_of.get(step, ()))
        return False

    def known(self, target: int | str) -> bool:
        return target in self.paths or target in self.earlier_steps or target in self.earlier_ids

    def reference(self, node: CallNode, ref: Ref) -> None:
        target = ref.target
        if (isinstance(target, int) and target in self.earlier_steps) or (
            isinstance(target, str) and target in self.earlier_ids
        ):
            return
        where = self.paths.get(target)
        if where is None:
            self.problem(
                "unknown_reference",
                f"step {node.step} uses {ref.raw}: no step or id '{target}'{self.meant(ref)}",
                node,
                ref=ref.raw,
            )
            return
        here = self.paths[node.step]
        n = _parting(where, here)
        # Past the end of the target's path: it holds this call (or is it), so it ends later.
        if n == len(where) or where[n][1] > here[n][1]:
            self.forwards.append((node, ref))  # worded once every call's references are known
        elif SPECS[where[n][0]].children != "ordered":
            self.problem(
                "sibling_reference",
                f"step {node.step} uses {ref.raw}, which runs beside it in {_BESIDE}; put the source before that block",
                node,
                ref=ref.raw,
            )


def check_plan(
    turn: ParsedTurn,
    registry: Registry,
    *,
    shorthands: Mapping[str, tuple[str, Shorthand]],
    limits: PlanSettings,
    earlier_steps: Mapping[int, str | None] | None = None,
    earlier_ids: Mapping[str, int | None] | None = None,
    capabilities: Mapping[str, tuple[str, ...]] | None = None,
    reads: ResourceReader | None = None,
) -> CheckedPlan:
    """Check a parsed turn against the exposed tools.

    Args:
        turn: The parsed turn.
        registry: The tools exposed now (a plan can only call what a direct call could).
        shorthands: tag -> (server, binding).
        limits: Plan limits from the config.
        earlier_steps: Step numbers of earlier turns in the episode -> their ids.
        earlier_ids: Ids of earlier turns -> their step numbers (None for blocks).
        capabilities: Capability -> the tools offering it, best first (the ToolHub's); None
            where there is no ToolHub, and a capability step is then refused.
        reads: The resources plans may read (`<call tool="resources/read">`); None: no reads.

    Raises:
        PlanCheckError: with every problem found.
    """
    if over := [p for p in turn.problems if p.code == "too_many_steps"]:
        raise PlanCheckError(over)  # alone, as below: the parser stopped reading at the limit
    if len(turn.calls) > limits.max_steps:
        # Alone and at once: checking thousands of steps would only bury this one problem.
        message = f"the plan has {len(turn.calls)} steps; the limit is {limits.max_steps}: split it over several turns"
        raise PlanCheckError([PlanProblem("too_many_steps", message)])
    checker = _Checker(turn, registry, shorthands, limits, earlier_steps or {}, earlier_ids or {}, capabilities, reads)
    checker.index(turn.root, ())
    checker.targets = Targets(
        checker.known,
        calls=[call.step for call in turn.calls],
        labelled=any(_EVIDENCE_ID.match(ident) for ident in (*checker.ids, *checker.earlier_ids)),
    )
    root = checker.node(turn.root)
    checker.dialect_warnings()
    for node, ref in checker.forwards:
        checker.problem("forward_reference", checker.forward(node, ref), node, ref=ref.raw)
    if checker.problems or turn.problems:
        # One round: the parser's problems (collected, see `parse_turn`) and the checker's, in
        # the order they appear in the plan.
        problems = sorted([*turn.problems, *checker.problems], key=lambda p: (p.line or 0, p.step or 0))
        raise PlanCheckError(problems)
    assert isinstance(root, CheckedBlock)
    calls = tuple(sorted(checker.calls, key=lambda c: c.step))
    capability_steps = tuple(sorted(checker.capability_steps, key=lambda c: c.step))
    return CheckedPlan(root, calls, checker.ids, tuple(checker.warnings), capability_steps)
