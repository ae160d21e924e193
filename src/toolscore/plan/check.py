"""Static checks of a parsed plan against the live tools, before anything runs; pure.

Every problem is collected (not just the first), each naming the step, tag or id and what to
change. A plan that passes is a tree of `CheckedCall`s: routed, arguments bound to the tool's
parameters, literal arguments valid against its inputSchema, references pointing only at steps
that are guaranteed to have finished when the call starts.

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

from collections.abc import Mapping, Sequence
from typing import Any

from toolscore._json import format_path
from toolscore.config import PlanSettings, Shorthand
from toolscore.downstream.registry import Registry, Route
from toolscore.errors import PlanCheckError, PlanProblem, RefSyntaxError
from toolscore.plan.blocks import SPECS, BlockKind, either
from toolscore.plan.nodes import Block, CallNode, CheckedBlock, CheckedCall, CheckedNode, CheckedPlan, ParsedTurn
from toolscore.plan.refs import Ref, contains_ref, find_refs, repair_mustache

__all__ = ["check_plan", "shorthand_table"]


def _set_path(target: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    for key in keys[:-1]:
        target = target.setdefault(key, {})
    target[keys[-1]] = value


def _only_required_string(route: Route) -> str | None:
    schema = route.tool.input_schema
    props = schema.get("properties") or {}
    required = [k for k in schema.get("required") or [] if (props.get(k) or {}).get("type") == "string"]
    return required[0] if len(required) == 1 else None


_Path = tuple[tuple[BlockKind, int], ...]
"""(block kind, child index) for each block from the root down to a node."""

_BESIDE = "a " + either(f"<{kind}>" for kind, spec in SPECS.items() if spec.children != "ordered")
"""Where siblings may not reference each other: `a <parallel>, <race> or <fallback>`."""


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
    ) -> None:
        self.turn = turn
        self.registry = registry
        self.shorthands = shorthands
        self.limits = limits
        self.earlier_steps = earlier_steps
        self.earlier_ids = earlier_ids
        self.problems: list[PlanProblem] = []
        self.ids: dict[str, int | Block] = {}
        self.paths: dict[int | str, _Path] = {}  # this turn's targets -> where they are
        self.calls: list[CheckedCall] = []
        self.warnings: list[str] = []

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
            if ident in self.ids or ident in self.earlier_ids:
                self.problem("duplicate_id", f"id '{ident}' is used twice; ids are unique per episode", node)
            else:
                self.ids[ident] = node.step if isinstance(node, CallNode) else node
                self.paths[ident] = path
        if isinstance(node, Block):
            for n, child in enumerate(node.children):
                self.index(child, (*path, (node.kind, n)))

    # -- pass 2: routes, arguments, references ----------------------------------------------------

    def node(self, node: CallNode | Block) -> CheckedNode | None:
        if isinstance(node, CallNode):
            return self.call(node)
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

    def route(self, node: CallNode) -> tuple[Route | None, Shorthand | None]:
        servers = ", ".join(self.registry.servers) or "none"
        if node.shorthand is not None:
            binding = self.shorthands.get(node.shorthand)
            if binding is None:
                tags = ", ".join(f"<{t}>" for t in sorted(self.shorthands)) or "none configured"
                if node.shorthand in self.registry.servers:
                    name = node.shorthand
                    hint = f"server '{name}' has no shorthand configured; write <{name}><tool>{{...}}</tool></{name}>"
                else:
                    hint = f"unknown tag; servers: {servers}; shorthand tags: {tags}"
                self.problem("unknown_tag", f"<{node.shorthand}>: {hint}", node)
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
        assert node.server is not None and node.tool is not None
        route = self.registry.find(node.server, node.tool)
        if route is None:
            if node.server not in self.registry.servers:
                self.problem("unknown_server", f"no server '{node.server}' is connected; servers: {servers}", node)
            else:
                tools = ", ".join(sorted(t for s, t in self.registry.by_remote if s == node.server))
                self.problem(
                    "unknown_tool", f"server '{node.server}' has no tool '{node.tool}'; its tools: {tools}", node
                )
        return route, None

    def bind(self, node: CallNode, route: Route, shorthand: Shorthand | None) -> dict[str, Any] | None:
        spec = node.args
        if spec.kind == "empty":
            return {}
        if spec.kind in ("json", "args"):
            return dict(spec.value)
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

    def call(self, node: CallNode) -> CheckedCall | None:
        route, shorthand = self.route(node)
        if route is None:
            return None
        arguments = self.bind(node, route, shorthand)
        if arguments is None:
            return None
        arguments, repaired = repair_mustache(arguments, self.known)
        for raw in repaired:
            self.warnings.append(f"step {node.step}: read {raw} as ${{...}}; write references as ${{id}}")
        try:
            refs = tuple(find_refs(arguments))
        except RefSyntaxError as exc:
            self.problem("bad_reference", str(exc), node)
            return None
        for ref in refs:
            self.reference(node, ref)
        errors = [e for e in route.validator.iter_errors(arguments) if not contains_ref(e.instance)]
        for err in sorted(errors, key=lambda e: list(map(str, e.absolute_path))):
            where = format_path(err.absolute_path)
            self.problem("invalid_arguments", f"{route.public_name}: {where}: {err.message}", node)
        if node.retries:
            hints = route.tool.annotations
            safe = node.idempotent or (hints is not None and (hints.read_only_hint or hints.idempotent_hint))
            if not safe:
                self.problem(
                    "unsafe_retries",
                    f"retries on '{route.public_name}', which is not annotated readOnly or idempotent; "
                    'add idempotent="true" if repeating it is harmless',
                    node,
                )
        checked = CheckedCall(node, route, arguments, refs)
        self.calls.append(checked)
        return checked

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
                "unknown_reference", f"step {node.step} uses {ref.raw}: no step or id '{target}'", node, ref=ref.raw
            )
            return
        here = self.paths[node.step]
        n = _parting(where, here)
        # Past the end of the target's path: it holds this call (or is it), so it ends later.
        if n == len(where) or where[n][1] > here[n][1]:
            self.problem(
                "forward_reference",
                f"step {node.step} uses {ref.raw}, which runs later (or is this step); move it after its source",
                node,
                ref=ref.raw,
            )
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
) -> CheckedPlan:
    """Check a parsed turn against the exposed tools.

    Args:
        turn: The parsed turn.
        registry: The tools exposed now (a plan can only call what a direct call could).
        shorthands: tag -> (server, binding).
        limits: Plan limits from the config.
        earlier_steps: Step numbers of earlier turns in the episode -> their ids.
        earlier_ids: Ids of earlier turns -> their step numbers (None for blocks).

    Raises:
        PlanCheckError: with every problem found.
    """
    if len(turn.calls) > limits.max_steps:
        # Alone and at once: checking thousands of steps would only bury this one problem.
        message = f"the plan has {len(turn.calls)} steps; the limit is {limits.max_steps}"
        raise PlanCheckError([PlanProblem("too_many_steps", message)])
    checker = _Checker(turn, registry, shorthands, limits, earlier_steps or {}, earlier_ids or {})
    checker.index(turn.root, ())
    root = checker.node(turn.root)
    if checker.problems:
        raise PlanCheckError(checker.problems)
    assert isinstance(root, CheckedBlock)
    calls = tuple(sorted(checker.calls, key=lambda c: c.step))
    return CheckedPlan(root, calls, checker.ids, tuple(checker.warnings))


def shorthand_table(servers: Sequence[tuple[str, tuple[Shorthand, ...]]]) -> dict[str, tuple[str, Shorthand]]:
    """tag -> (server, binding) from the configured servers (first server wins a tag)."""
    table: dict[str, tuple[str, Shorthand]] = {}
    for server, bindings in servers:
        for binding in bindings:
            assert binding.tag is not None
            table.setdefault(binding.tag, (server, binding))
    return table
