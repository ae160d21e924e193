"""The constraint policy: servers.json's `constraints` as engine hooks, composed once at start-up.

This module is the composition table. Each rule lives in its own module, as a builder from the
per-server scopes (`scope.py`: the global sections, each one a server overrides replaced by its
own) to an engine hook, or to None when the config leaves the rule off:

| rule | module | phase | refuses |
|---|---|---|---|
| `tools` allow/deny | static | pre | tools not allowed (globs over exposed names; per server, downstream names) |
| `principals` | principals | pre, wrap, post | tools a principal or role may not call; calls over its quota |
| `destructive` | static | pre | tools annotated `destructiveHint`: `deny`, or `confirm` by asking the user |
| `flow` | taint | pre, post | labelled data (`untrusted`, `server:NAME`) reaching the tools the rule names |
| `arguments` | static, paths | pre | arguments over `max_bytes`, matching `deny_patterns`, with paths outside `roots` |
| `rate_limits` | rate | pre | calls beyond a token bucket per tool, server or client session |
| `batching` | flow | pre + wrap | nothing: identical concurrent read-only calls share one downstream call |
| `concurrency` | flow | wrap | calls beyond `per_server` running plus `queue` waiting |
| `results` | results, redact | post | results over `max_bytes` (truncated with a marker, or refused); redacts secrets |
| `plugins` | toolscore.plugins | pre, wrap, post | whatever third-party hooks decide |

Every refusal is a `Rejected` naming the rule: the model gets the reason, the audit log a
violation. The static rules also run over a whole plan before any of its steps does
(`Policy.plan_problems`), so a plan can never do what a direct call may not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from toolscore._engine import PostExecutionHook, PreExecutionHook, WrapHook
from toolscore.config import Config
from toolscore.downstream.registry import Route
from toolscore.errors import PlanProblem
from toolscore.plan.nodes import CheckedPlan
from toolscore.plugins import load_plugins
from toolscore.policy.flow import concurrency_cap, mark_batchable, single_flight
from toolscore.policy.principals import Directory, PrincipalHooks, principal_hooks
from toolscore.policy.rate import rate_limits
from toolscore.policy.redact import RedactingAuditSink, Redactor
from toolscore.policy.results import result_rules
from toolscore.policy.scope import resolve_scopes
from toolscore.policy.static import StaticRules
from toolscore.policy.taint import FlowHooks, flow_hooks
from toolscore.scope import CallScope
from toolscore.state import SharedState

__all__ = ["Policy", "RedactingAuditSink", "build_policy"]

H = TypeVar("H")


@dataclass(frozen=True, slots=True)
class Policy:
    """The hooks built from servers.json's constraints, and the whole-plan check (all empty when off)."""

    pre: tuple[PreExecutionHook, ...] = ()
    wrap: tuple[WrapHook, ...] = ()
    """The first is outermost."""
    post: tuple[PostExecutionHook, ...] = ()
    static: StaticRules | None = None
    redactor: Redactor | None = None
    """Redacts audit records (the global `results.redact`)."""
    principals: PrincipalHooks | None = None
    """The rules of `constraints.principals`."""
    flow: FlowHooks | None = None
    """The `flow` rule (labels by reference in plans are checked whole, too)."""

    def gateway_tool_refusal(self, name: str) -> str | None:
        """Why the gateway's own tool `name` (e.g. `orchestrate`) may not be used, or None."""
        return None if self.static is None else self.static.gateway_tool_refusal(name)

    def plan_problems(self, plan: CheckedPlan, caller: str | None = None) -> list[PlanProblem]:
        """Every static rule a plan's steps break for `caller`, before any of them runs."""
        problems = [] if self.static is None else self.static.plan_problems(plan)
        if self.principals is not None:
            problems += self.principals.tools.plan_problems(plan, caller)
        if self.flow is not None:
            problems += self.flow.plan_problems(plan)
        return problems

    async def admit_task(self, scope: CallScope) -> str | None:
        """Why the caller of `scope` may not start a `delegate` task now (its principal's
        `delegate_tasks_per_hour`), or None."""
        return None if self.principals is None else await self.principals.quotas.admit_task(scope)

    def hidden_for(self, caller: str) -> Callable[[Route], bool] | None:
        """The routed tools `caller`'s own rules refuse (`constraints.principals`), left out of its
        `tools/list`; None where it has no rules of its own."""
        return None if self.principals is None else self.principals.tools.hidden_for(caller)

    def tool_denied(self, route: Route) -> bool:
        """Whether the `tools` rules refuse every call of this tool, whatever its arguments: it is
        then neither listed nor found by search (a call still gets the policy's refusal)."""
        return self.static is not None and self.static.tool_denied(route)


def build_policy(config: Config, *, state: SharedState | None = None, directory: Directory | None = None) -> Policy:
    """Compose the constraint hooks once, from the config (an empty policy when constraints are off).

    `state`: where rate-limit buckets, concurrency slots and batching flights live when replicas share
    them (`toolscore.state`). `directory`: the principals' roles, as the HTTP front saw them.
    """
    constraints = config.constraints
    if not constraints.enabled:
        return Policy()
    scopes = resolve_scopes(config)
    static = StaticRules(scopes)
    # The composition table: the built-in rules of each phase, in the order they run.
    principals = principal_hooks(config, directory or Directory(), state)
    flow, flow_pre, flow_post = flow_hooks(config) or (None, None, None)
    pre: tuple[PreExecutionHook, ...] = _on(
        static, flow_pre, *(principals.pre if principals else ()), rate_limits(scopes, state), mark_batchable(scopes)
    )
    wrap: tuple[WrapHook, ...] = _on(
        single_flight(scopes, state),  # outermost: a call that shares another's result takes no concurrency slot
        principals.wrap if principals else None,  # a principal's running calls, before any per-server slot
        concurrency_cap(scopes, state),
    )
    # A principal's result bytes are counted as the client gets them: after the result rules.
    # Untrusted results are kept for the passthrough check as the client gets them: after the result rules.
    post: tuple[PostExecutionHook, ...] = _on(result_rules(scopes), flow_post, *(principals.post if principals else ()))
    # Plugins run after the built-in checks, inside the built-in wraps (they see only calls that
    # will run), and before the built-in post hooks (a plugin's output is still size-limited and redacted).
    plugin_pre, plugin_wrap, plugin_post = load_plugins(
        constraints.plugins, source=str(config.path) if config.path else None
    )
    results = constraints.results
    return Policy(
        pre=(*pre, *plugin_pre),
        wrap=(*wrap, *plugin_wrap),
        post=(*plugin_post, *post),
        static=static,
        redactor=Redactor(results.redact_patterns) if results.redact else None,
        principals=principals,
        flow=flow,
    )


def _on(*hooks: H | None) -> tuple[H, ...]:
    """The hooks the config turns on, in table order."""
    return tuple(h for h in hooks if h is not None)
