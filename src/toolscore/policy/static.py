"""The static rules: which tools may be called, destructive tools, and what arguments may hold.

They judge a call by its tool and arguments alone, so they also run over a whole plan before any
of its steps does (`StaticRules.plan_problems`): a plan can never do what a direct call may not.
`violations` is the pure core; the hook adds what needs the user (confirming a destructive call).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mcp_types

from toolscore._engine import ExecutionContext
from toolscore._glob import matches
from toolscore._json import iter_strings
from toolscore.config import ArgumentRules, PathRules, ToolRules
from toolscore.downstream.registry import Route
from toolscore.errors import PlanProblem, Rejected
from toolscore.plan.nodes import CheckedPlan
from toolscore.policy.paths import CLIENT_ROOTS, Confinement, names_path, roots_of_uris
from toolscore.policy.scope import PerServer, Scope

__all__ = ["CompiledRules", "StaticRules", "Violation", "compile_rules", "violations"]

Violation = tuple[str, str]
"""(rule, reason): the rule names the hook in `Rejected` and the audit record."""


@dataclass(frozen=True, slots=True)
class CompiledRules:
    """One scope's static rules, with patterns compiled and roots resolved once, at start-up."""

    tools_global: ToolRules
    tools_server: ToolRules | None
    destructive: str
    arguments: ArgumentRules
    deny_patterns: tuple[re.Pattern[str], ...]
    paths: PathRules | None
    roots: tuple[str, ...]
    client_roots: bool
    """Whether the calling client's own roots are allowed too (the `roots` entry `"client"`)."""
    # Per tool, the argument-name globs that hold paths: filled on the tool's first call.
    path_globs: dict[str, tuple[str, ...]] = field(default_factory=dict)


def compile_rules(scope: Scope) -> CompiledRules:
    """The static rules in force in `scope`, ready to check calls."""
    rules = scope.rules
    paths = rules.arguments.paths
    return CompiledRules(
        tools_global=rules.tools,
        tools_server=scope.own.tools,
        destructive=rules.destructive,
        arguments=rules.arguments,
        deny_patterns=tuple(re.compile(p) for p in rules.arguments.deny_patterns),
        paths=paths,
        roots=tuple(os.path.realpath(r) for r in paths.roots if r != CLIENT_ROOTS) if paths else (),
        client_roots=paths is not None and CLIENT_ROOTS in paths.roots,
    )


def _allowed(names: tuple[str, ...], rules: ToolRules) -> bool:
    """Deny wins when any name matches it, folded; allow needs one exact match."""
    if any(matches(name, rules.deny, fold=True) for name in names):
        return False
    return rules.allow is None or any(matches(name, rules.allow) for name in names)


def _tool_allowed(route: Route, rules: CompiledRules) -> bool:
    """Global rules see the exposed and the canonical name; per-server ones the downstream and renamed name."""
    if not _allowed((route.public_name, route.canonical), rules.tools_global):
        return False
    return rules.tools_server is None or _allowed((route.remote_name, route.local_name), rules.tools_server)


def _path_key_test(route: Route, rules: CompiledRules) -> Callable[[str], bool]:
    paths = rules.paths
    assert paths is not None
    extra = rules.path_globs.get(route.public_name)
    if extra is None:
        names = list(paths.arguments)
        for pattern, keys in paths.tools.items():
            if matches(route.public_name, pattern) or matches(route.canonical, pattern):
                names.extend(keys)
        extra = rules.path_globs[route.public_name] = tuple(names)
    schema_keys = route.path_keys
    return lambda key: key in schema_keys or names_path(key, extra)


def violations(
    route: Route, arguments: dict[str, Any], rules: CompiledRules, *, plan: bool, client_roots: tuple[str, ...] = ()
) -> tuple[list[Violation], Any]:
    """Every static rule a call breaks, and the arguments with their paths pinned.

    With `plan=True` (a plan, before it runs) strings holding references are skipped and so is
    the size limit: each step is checked again when it runs, with its values resolved. So are
    paths, where the client's roots count: they are asked of the client when the step runs.

    Args:
        client_roots: The calling client's roots (resolved), where `rules.client_roots`.
    """
    found: list[Violation] = []
    skip: Callable[[str], bool] | None = None
    if plan:  # the reference syntax is the plan parser's, loaded with the first plan
        from toolscore.plan.approval import NEEDS_APPROVAL
        from toolscore.plan.refs import contains_ref

        skip = contains_ref
    if not _tool_allowed(route, rules):
        found.append(("tools", f"tool '{route.public_name}' is not allowed by the gateway's policy"))
    hints = route.tool.annotations
    if hints is not None and hints.destructive_hint and rules.destructive != "allow":
        if rules.destructive == "deny":
            found.append(("destructive", f"'{route.public_name}' is marked destructive and such tools are denied"))
        elif plan:  # lifted by the user's approval of the whole plan, where the client can give one
            found.append((NEEDS_APPROVAL, f"'{route.public_name}' needs the user's confirmation: {_NO_APPROVAL}"))
    limits = rules.arguments
    if limits.max_bytes is not None and not plan:
        size = len(json.dumps(arguments, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))
        if size > limits.max_bytes:
            found.append(("arguments", f"the arguments are {size} bytes; the limit is {limits.max_bytes}"))
    if rules.deny_patterns:
        # Object keys too: a downstream may read a key as data (`{"rm -rf /": true}`).
        for text in iter_strings(arguments, keys=True):
            if skip is not None and skip(text):
                continue
            for pattern in rules.deny_patterns:
                if pattern.search(text):
                    found.append(("arguments", f"an argument matches the denied pattern {pattern.pattern!r}"))
                    break
    pinned: Any = arguments
    if rules.paths is not None and not (plan and rules.client_roots):
        roots = rules.roots + client_roots if rules.client_roots else rules.roots
        confinement = Confinement(roots, skip=skip)
        pinned, confined = confinement.apply(arguments, _path_key_test(route, rules))
        note = " (the client declared no roots)" if rules.client_roots and not client_roots else ""
        found.extend(("paths", f"argument '{v.where}' {v.reason}{note}") for v in confined)
    return found, pinned


_NO_APPROVAL = (
    "a plan with such steps is shown to the user once, before it runs, which needs a client that can ask "
    "(elicitation); call it directly otherwise"
)


class StaticRules:
    """Pre-execution: `tools`, `destructive` and `arguments`; and the same rules over whole plans."""

    name = "policy"

    def __init__(self, scopes: PerServer[Scope]) -> None:
        self._rules = scopes.map(compile_rules)

    async def __call__(self, ctx: ExecutionContext) -> mcp_types.CallToolResult | None:
        route = ctx.route
        assert route is not None
        rules = self._rules.of(route.server)
        client = await _client_roots(ctx, route.server) if rules.paths is not None and rules.client_roots else ()
        found, pinned = violations(route, ctx.arguments, rules, plan=False, client_roots=client)
        if found:
            rule, reason = found[0]
            raise Rejected(reason, hook=rule)
        written = ctx.arguments  # as the plan's approval showed them, before paths are pinned
        ctx.arguments = pinned  # the call goes on with the real paths that were checked
        hints = route.tool.annotations
        if hints is not None and hints.destructive_hint and rules.destructive == "confirm":
            await _confirm(ctx, route.public_name, written)
        return None

    def plan_problems(self, plan: CheckedPlan) -> list[PlanProblem]:
        """Every static rule a plan's steps break, before any of them runs."""
        from toolscore.plan.approval import NEEDS_APPROVAL

        problems: list[PlanProblem] = []
        for call in plan.calls:
            found, _ = violations(call.route, call.arguments, self._rules.of(call.route.server), plan=True)
            node = call.node
            problems.extend(
                PlanProblem(NEEDS_APPROVAL, f"destructive: {reason}", step=node.step, tag=node.tag, id=node.id)
                if rule == NEEDS_APPROVAL
                else PlanProblem("policy", f"{rule}: {reason}", step=node.step, tag=node.tag, id=node.id)
                for rule, reason in found
            )
        return problems

    def tool_denied(self, route: Route) -> bool:
        """Whether the `tools` rules refuse this downstream tool whatever its arguments."""
        return not _tool_allowed(route, self._rules.of(route.server))

    def gateway_tool_refusal(self, name: str) -> str | None:
        """Why the gateway's own tool `name` (e.g. `orchestrate`) may not be used, or None."""
        if not _allowed((name,), self._rules.gateway.tools_global):
            return f"tool '{name}' is not allowed by the gateway's policy"
        return None


async def _client_roots(ctx: ExecutionContext, server: str) -> tuple[str, ...]:
    """The roots of the client whose request this call serves: none if it has none or cannot say."""
    peer = ctx.scope.peer
    if peer is None:
        return ()
    answer = await peer.list_roots(server)
    if isinstance(answer, mcp_types.ErrorData):
        return ()
    return roots_of_uris(str(root.uri) for root in answer.roots)


async def _confirm(ctx: ExecutionContext, tool: str, written: Any) -> None:
    """Ask the user to allow a destructive call; refuse it unless they do. A plan's step was
    asked for with its plan: it runs only with arguments that fit what the user was shown."""
    if ctx.plan_id is not None:
        approval = ctx.scope.approval
        if approval is not None and approval.plan_id == ctx.plan_id:
            if tool not in approval.shown:  # a capability step's candidate, say: never shown
                raise Rejected(f"'{tool}' is not among the plan's steps the user approved", hook="destructive")
            if not approval.allows(tool, written):
                raise Rejected(
                    f"'{tool}' was approved with the plan, but its resolved arguments differ from what the "
                    "user was shown",
                    hook="destructive",
                )
            return
    if ctx.confirm is None:
        raise Rejected(
            f"'{tool}' is destructive and needs the user's confirmation, which this client cannot give "
            "(no elicitation support)",
            hook="destructive",
        )
    if not await ctx.confirm(f"Allow the destructive tool '{tool}' with arguments {json.dumps(ctx.arguments)[:500]}?"):
        raise Rejected(f"the user did not confirm '{tool}'", hook="destructive")
