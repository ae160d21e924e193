"""The `flow` rule as engine hooks: which labelled data may reach which tools (`toolscore.trust.labels`).

A plan step (and so a `delegate` call) brings the labels its scope carries (`CallScope.taint`,
which the plan runner makes per step: what its references read) and, in a `delegate` task, those
of the results the model saw that its arguments quote (`CallScope.seen`); `deny` and `confirm`
refuse it; a `confirm` step runs when the user approved it with its plan (`CallScope.approval`,
its arguments as shown). The hook completes the step's labels with its server's, for the steps
that reference it.

A client's own call (no plan) carries the labels of the client's recent untrusted results that its
arguments quote, kept per caller by the post hook. Under `after_reading: every_call` a call the
model wrote after reading untrusted results (a later turn, a `delegate` call, a client's own call)
carries `untrusted` whether or not it quotes them; under `identifiers: pass` a plan reference whose
value is an identifier brings no label. `flow_passthrough` says what follows: `warn`
(logged, and a violation in the audit record), `enforce` (refused; `confirm` asks the user), or
`off` (nothing kept). Without a `flow` rule neither hook exists, so the engine's express lane stays open.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

import mcp_types
import structlog

from toolscore._engine import ExecutionContext, PostExecutionHook, PreExecutionHook
from toolscore.config import Config
from toolscore.errors import PlanProblem, Rejected
from toolscore.plan.nodes import CheckedPlan
from toolscore.trust.labels import (
    UNTRUSTED,
    FlowRules,
    Trust,
    join,
    plan_problems,
    quoted,
    refusal,
)

__all__ = ["FlowHooks", "flow_hooks"]

log = structlog.get_logger("toolscore.policy")

_RECENT_RESULTS = 16
"""Untrusted results kept per caller for the passthrough check."""
_RECENT_BYTES = 64 * 1024
"""Of each, the characters kept (a quotation from past this is not seen)."""
_CALLERS = 1024
"""Callers whose results are kept; the least recently seen goes first."""
_KEPT_CHARS = 32 * 1024 * 1024
"""All callers' kept text together: past it the least recently seen callers go first (many
sessions each reading large untrusted pages must not hold the gateway's memory)."""


@dataclass
class _Recent:
    """One caller's recent untrusted results: (text, origin), newest last."""

    results: deque[tuple[str, str]] = field(default_factory=lambda: deque(maxlen=_RECENT_RESULTS))

    @property
    def chars(self) -> int:
        return sum(len(text) for text, _ in self.results)


def _text(result: mcp_types.CallToolResult) -> str:
    parts = [block.text for block in result.content if isinstance(block, mcp_types.TextContent)]
    if result.structured_content is not None:
        parts.append(str(result.structured_content))
    return "\n".join(parts)


class FlowHooks:
    """The pre hook (refuses labelled data where the rule says) and the post hook (keeps a caller's
    untrusted results), sharing the servers' trust and the rule."""

    name = "flow"

    def __init__(self, trust: Trust, rules: FlowRules, passthrough: str) -> None:
        self.trust = trust
        self.rules = rules
        self._passthrough = passthrough
        self._callers: OrderedDict[str, _Recent] = OrderedDict()
        self._kept = 0
        """Characters kept over all callers (`_KEPT_CHARS` at most)."""

    def plan_problems(self, plan: CheckedPlan) -> list[PlanProblem]:
        """The steps of a plan that references bring refused labels, before any step runs."""
        return plan_problems(plan, self.trust, self.rules)

    async def __call__(self, ctx: ExecutionContext) -> mcp_types.CallToolResult | None:
        route = ctx.route
        assert route is not None
        names = (route.public_name, route.canonical)
        step = ctx.scope.taint
        if ctx.plan_id is not None:
            taint = {}
            if step is not None:  # a label brought only by identifiers stays behind where its rule says
                text = step.text if step.text is not None else step.arguments
                taint = {k: v for k, v in step.arguments.items() if k in text or not self.rules.passes_identifiers(k)}
            seen = ctx.scope.seen
            read = list(seen()) if seen is not None else []
            if read and self.rules.every_call(UNTRUSTED):
                taint = join(taint, {UNTRUSTED: f"{read[0][1]}, which the model read before it wrote this call"})
            elif read and (origin := quoted(ctx.arguments, read)) is not None:
                taint = join(taint, {UNTRUSTED: f"{origin}, which the model read and these arguments quote"})
            if step is not None:
                own = self.trust.labels(route.server, route.remote_name, f"step {step.step} ({route.public_name})")
                step.result = join(step.result or {}, taint, own)
            verdict = self.rules.verdict(names, taint)
            if verdict is None:
                return None
            approval = ctx.scope.approval
            if (
                verdict[0] == "confirm"
                and approval is not None
                and approval.plan_id == ctx.plan_id
                and approval.allows(route.public_name, ctx.arguments)
            ):
                return None  # the user approved this step with its plan, its arguments as shown
            raise Rejected(refusal(step.step if step else 0, route.public_name, verdict, taint, plan=True), hook="flow")
        if self._passthrough == "off" or ctx.scope.caller is None:
            return None
        recent = self._callers.get(ctx.scope.caller)
        if recent is None or not recent.results:
            return None
        if self.rules.every_call(UNTRUSTED):
            taint = {UNTRUSTED: f"{recent.results[-1][1]}, which this client read before this call"}
        elif (origin := quoted(ctx.arguments, reversed(recent.results))) is not None:
            taint = {UNTRUSTED: f"{origin}, which these arguments quote"}
        else:
            return None
        verdict = self.rules.verdict(names, taint)
        if verdict is None:
            return None
        message = refusal(0, route.public_name, verdict, taint, plan=False)
        if self._passthrough == "warn":
            log.warning("flow: a call quotes an untrusted result", tool=route.public_name, reason=message)
            ctx.violations.append(f"flow (warn): {message}")
            return None
        if verdict[0] == "deny":
            raise Rejected(message, hook="flow")
        if ctx.confirm is None:
            raise Rejected(f"{message}; this client cannot ask the user (no elicitation support)", hook="flow")
        if not await ctx.confirm(f"{message}. Allow this call?"):
            raise Rejected(f"the user did not allow it: {message}", hook="flow")
        return None

    async def keep(self, ctx: ExecutionContext, result: mcp_types.CallToolResult) -> mcp_types.CallToolResult:
        """Post hook: an untrusted result is kept for its caller's later calls (`flow_passthrough`)."""
        route, caller = ctx.route, ctx.scope.caller
        if route is None or caller is None:
            return result
        labels = self.trust.labels(route.server, route.remote_name, "")
        if UNTRUSTED not in labels:
            return result
        text = _text(ctx.raw.model() if ctx.raw is not None else result)[:_RECENT_BYTES]
        recent = self._callers.pop(caller, None) or _Recent()
        self._callers[caller] = recent
        if len(recent.results) == _RECENT_RESULTS:  # the oldest is pushed out
            self._kept -= len(recent.results[0][0])
        recent.results.append((text, f"an earlier result of {route.public_name}"))
        self._kept += len(text)
        while len(self._callers) > _CALLERS or (self._kept > _KEPT_CHARS and len(self._callers) > 1):
            _, gone = self._callers.popitem(last=False)
            self._kept -= gone.chars
        return result


class _Keep:
    """The post half of `FlowHooks`, as a hook of its own name."""

    name = "flow"

    def __init__(self, hooks: FlowHooks) -> None:
        self._hooks = hooks

    async def __call__(self, ctx: ExecutionContext, result: mcp_types.CallToolResult) -> mcp_types.CallToolResult:
        return await self._hooks.keep(ctx, result)


def flow_hooks(config: Config) -> tuple[FlowHooks, PreExecutionHook, PostExecutionHook | None] | None:
    """The flow hooks the config turns on (its `flow` rule), or None."""
    constraints = config.constraints
    if not constraints.flow:
        return None
    hooks = FlowHooks(Trust.of(config), FlowRules(constraints.flow), constraints.flow_passthrough)
    return hooks, hooks, (_Keep(hooks) if constraints.flow_passthrough != "off" else None)
