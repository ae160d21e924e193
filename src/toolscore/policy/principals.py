"""Per-principal rules: `constraints.principals`, which tools a principal (or a role) may call and
how much it may use.

A caller's principal is the name its HTTP credentials gave it (a token file's `NAME`, an access
token's subject): `principal:<name>` for its stateless requests, `principal:<name>/c<n>` for a
session it opened (`toolscore.front.callers`). Its roles are those the HTTP front last saw for it
(`Directory`). The sections that apply to a call are the principal's own and one per role; with
none, only the global rules do. A caller without a principal (stdio, an HTTP front without
tokens) is judged by the global rules alone.

- `tools`: deny wins, in any section that applies and in the global rules; where a section has an
  `allow` list, the tool must match one of the allow lists that apply. The same check runs over
  a whole plan before any step does (`plan_problems`).
- `quota`, per principal (a role's quota limits each of its principals alone): calls a minute (a
  bucket), calls at once (in this process), calls and result bytes a day (UTC counters), and
  `delegate` tasks an hour (a bucket); with `toolscore.state`, the buckets and the day's counters
  are shared by every replica. A refusal names the quota and when it frees up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import mcp_types

from toolscore._engine import CallNext, ExecutionContext
from toolscore._glob import matches
from toolscore.config import Config, PrincipalRules, ToolRules
from toolscore.downstream.registry import Route
from toolscore.errors import PlanProblem, Rejected
from toolscore.plan.nodes import CheckedPlan
from toolscore.policy.rate import TokenBucket
from toolscore.scope import CallScope, principal_of
from toolscore.state import SharedState

__all__ = ["Directory", "PrincipalHooks", "PrincipalQuotas", "PrincipalTools", "principal_hooks", "principal_of"]

_DAY = 86400
_HOOK = "principals"


class Directory:
    """Which roles each principal has, as the HTTP front last authenticated it."""

    _MAX = 100_000  # principals remembered; past it the oldest are forgotten (their roles come back next request)

    def __init__(self) -> None:
        self._roles: dict[str, tuple[str, ...]] = {}

    def note(self, principal: str, roles: Iterable[str]) -> None:
        """`principal` presented credentials carrying `roles`."""
        roles = tuple(roles)
        if self._roles.get(principal) == roles:
            return
        self._roles.pop(principal, None)
        if len(self._roles) >= self._MAX:
            del self._roles[next(iter(self._roles))]
        self._roles[principal] = roles

    def roles(self, principal: str) -> tuple[str, ...]:
        """The roles `principal` had when last seen (none if never)."""
        return self._roles.get(principal, ())


@dataclass(frozen=True, slots=True)
class _Sections:
    """The `constraints.principals` sections, and which apply to whom."""

    rules: Mapping[str, PrincipalRules]
    directory: Directory

    def of(self, caller: str | None) -> tuple[str, list[tuple[str, PrincipalRules]]] | None:
        """The principal of `caller` and the sections that apply to it (None: no principal)."""
        principal = principal_of(caller)
        if principal is None:
            return None
        keys = [principal, *(f"role:{r}" for r in self.directory.roles(principal))]
        return principal, [(k, self.rules[k]) for k in keys if k in self.rules]


def _refusal(route: Route, sections: list[tuple[str, PrincipalRules]]) -> str | None:
    """Why these sections refuse a call of `route`, or None."""
    names = (route.public_name, route.canonical)
    allows: list[ToolRules] = []
    for key, section in sections:
        rules = section.tools
        if any(matches(name, rules.deny, fold=True) for name in names):
            return f"tool '{route.public_name}' is denied to {key}"
        if rules.allow is not None:
            allows.append(rules)
    if allows and not any(matches(name, r.allow or ()) for r in allows for name in names):
        keys = ", ".join(key for key, s in sections if s.tools.allow is not None)
        return f"tool '{route.public_name}' is not among those allowed to {keys}"
    return None


class PrincipalTools:
    """Pre-execution: the `tools` rules of the caller's principal and roles."""

    name = _HOOK

    def __init__(self, sections: _Sections) -> None:
        self._sections = sections

    async def __call__(self, ctx: ExecutionContext) -> mcp_types.CallToolResult | None:
        found = self._sections.of(ctx.scope.caller)
        if found is not None and found[1] and ctx.route is not None:
            reason = _refusal(ctx.route, found[1])
            if reason is not None:
                raise Rejected(reason, hook=_HOOK)
        return None

    def hidden_for(self, caller: str) -> Callable[[Route], bool] | None:
        """Which routed tools `caller`'s sections refuse, for its `tools/list` (None: it has none)."""
        found = self._sections.of(caller)
        if found is None or not any(s.tools.allow is not None or s.tools.deny for _, s in found[1]):
            return None
        sections = found[1]
        return lambda route: _refusal(route, sections) is not None

    def plan_problems(self, plan: CheckedPlan, caller: str | None) -> list[PlanProblem]:
        """Every step of `plan` the caller's sections refuse, before any runs."""
        found = self._sections.of(caller)
        if found is None or not found[1]:
            return []
        problems = []
        for call in plan.calls:
            reason = _refusal(call.route, found[1])
            if reason is not None:
                node = call.node
                problems.append(PlanProblem("policy", f"{_HOOK}: {reason}", step=node.step, tag=node.tag, id=node.id))
        return problems


@dataclass(slots=True)
class _Usage:
    """One principal's use under one section's quota."""

    day: int = -1
    today: dict[str, int] = field(default_factory=dict)
    """The day's counters (`calls`, `bytes`), where no shared state keeps them."""
    running: int = 0
    bucket: TokenBucket | None = None


def _until_midnight(now: float) -> str:
    left = int(_DAY - now % _DAY)
    return f"resets at 00:00 UTC, in {left // 3600} h {left % 3600 // 60} min"


@dataclass
class PrincipalQuotas:
    """The `quota` of each section that applies: refused before the call (pre), counted while it
    runs (wrap: `concurrent`) and after it (post: result bytes)."""

    sections: _Sections
    store: SharedState | None = None
    clock: Callable[[], float] = field(default=time.time, repr=False)
    _usage: dict[tuple[str, str], _Usage] = field(default_factory=dict)
    _task_buckets: dict[tuple[str, str], TokenBucket] = field(default_factory=dict)

    name = _HOOK
    passes_results_through = False

    def _quotas(self, ctx: ExecutionContext) -> list[tuple[str, PrincipalRules, _Usage]]:
        found = self.sections.of(ctx.scope.caller)
        if found is None:
            return []
        principal, sections = found
        day = int(self.clock() // _DAY)
        out = []
        for key, section in sections:
            usage = self._usage.setdefault((principal, key), _Usage())
            if usage.day != day:
                usage.day, usage.today = day, {}
            out.append((key, section, usage))
        return out

    async def check(self, ctx: ExecutionContext) -> mcp_types.CallToolResult | None:
        """Pre-execution: refuse a call over a quota; count it against the others."""
        now = self.clock()
        principal = principal_of(ctx.scope.caller)
        for key, section, usage in self._quotas(ctx):
            quota = section.quota
            if quota.result_bytes_per_day is not None and not await self._count(
                usage, f"{principal}:{key}", "bytes", 0, below=quota.result_bytes_per_day, now=now
            ):
                raise Rejected(
                    f"{key}'s quota of {quota.result_bytes_per_day} result bytes a day is used; {_until_midnight(now)}",
                    hook=_HOOK,
                )
            if quota.calls_per_minute is not None:
                wait = await self._take(f"quota:{principal}:{key}", quota.calls_per_minute, usage, now)
                if wait is not None:
                    raise Rejected(
                        f"{key}'s quota of {quota.calls_per_minute} calls a minute is used; try again in {wait:.1f} s",
                        hook=_HOOK,
                    )
            # Counted last, and only if under: a call refused by another quota does not use this one.
            if quota.calls_per_day is not None and not await self._count(
                usage, f"{principal}:{key}", "calls", 1, below=quota.calls_per_day, now=now
            ):
                raise Rejected(
                    f"{key}'s quota of {quota.calls_per_day} calls a day is used; {_until_midnight(now)}", hook=_HOOK
                )
        return None

    async def admit_task(self, scope: CallScope) -> str | None:
        """Whether the caller of `scope` may start another `delegate` task now: None, or why not
        (its `delegate_tasks_per_hour`, a bucket that refills evenly over the hour)."""
        found = self.sections.of(scope.caller)
        if found is None:
            return None
        principal, sections = found
        now = self.clock()
        for key, section in sections:
            per_hour = section.quota.delegate_tasks_per_hour
            if per_hour is None:
                continue
            rate = per_hour / 3600
            if self.store is not None:
                wait = await self.store.take_token(f"tasks:{principal}:{key}", rate, per_hour)
            else:
                bucket = self._task_buckets.get((principal, key))
                if bucket is None:
                    bucket = self._task_buckets[(principal, key)] = TokenBucket.full(rate, per_hour, now)
                wait = bucket.take(now)
            if wait is not None:
                return f"{key}'s quota of {per_hour} delegate tasks an hour is used; try again in {wait:.0f} s"
        return None

    async def _count(self, usage: _Usage, who: str, what: str, amount: int, *, below: int | None, now: float) -> bool:
        """Add `amount` to `who`'s counter `what` of the day unless it holds `below` or more
        (False): in this process, or in one step in the shared state."""
        if self.store is not None:
            ttl = _DAY - now % _DAY + 3600  # outlives its day, whatever the replicas' clocks say
            key = f"day:{int(now // _DAY)}:{who}:{what}"
            return await self.store.count_up(key, amount, below=below, ttl=ttl) is not None
        count = usage.today.get(what, 0)
        if below is not None and count >= below:
            return False
        usage.today[what] = count + amount
        return True

    async def _take(self, key: str, per_minute: int, usage: _Usage, now: float) -> float | None:
        rate = per_minute / 60
        if self.store is not None:
            return await self.store.take_token(key, rate, per_minute)
        if usage.bucket is None:
            usage.bucket = TokenBucket.full(rate, per_minute, now)
        return usage.bucket.take(now)

    async def __call__(self, ctx: ExecutionContext, call_next: CallNext) -> mcp_types.CallToolResult:
        """Wrap: at most `concurrent` calls of a principal run at once; the next is refused at once."""
        held = []
        try:
            for key, section, usage in self._quotas(ctx):
                cap = section.quota.concurrent
                if cap is None:
                    continue
                if usage.running >= cap:
                    raise Rejected(
                        f"{key} already has {cap} calls running, its quota; try again when one ends", hook=_HOOK
                    )
                usage.running += 1
                held.append(usage)
            result = await call_next(ctx)
        finally:
            for usage in held:
                usage.running -= 1
        return result

    async def count(self, ctx: ExecutionContext, result: mcp_types.CallToolResult) -> mcp_types.CallToolResult:
        """Post-execution: the result's bytes count against the day's quota."""
        quotas = [q for q in self._quotas(ctx) if q[1].quota.result_bytes_per_day is not None]
        if quotas:
            size = (
                ctx.raw.chars if ctx.raw is not None else len(result.model_dump_json(by_alias=True, exclude_none=True))
            )
            now = self.clock()
            principal = principal_of(ctx.scope.caller)
            for key, _, usage in quotas:
                await self._count(usage, f"{principal}:{key}", "bytes", size, below=None, now=now)
        return result


class _QuotaCheck:
    """Pre-execution face of `PrincipalQuotas`."""

    name = _HOOK

    def __init__(self, quotas: PrincipalQuotas) -> None:
        self._quotas = quotas

    async def __call__(self, ctx: ExecutionContext) -> mcp_types.CallToolResult | None:
        return await self._quotas.check(ctx)


class _QuotaCount:
    """Post-execution face of `PrincipalQuotas`."""

    name = _HOOK

    def __init__(self, quotas: PrincipalQuotas) -> None:
        self._quotas = quotas

    async def __call__(self, ctx: ExecutionContext, result: mcp_types.CallToolResult) -> mcp_types.CallToolResult:
        return await self._quotas.count(ctx, result)


@dataclass(frozen=True)
class PrincipalHooks:
    """The engine hooks of `constraints.principals`, and its whole-plan check."""

    tools: PrincipalTools
    quotas: PrincipalQuotas

    # Each quota hook is installed only where some section sets what it counts: a config of tool
    # rules alone adds nothing to a call but the tools check.

    @property
    def pre(self) -> tuple[PrincipalTools | _QuotaCheck, ...]:
        return (
            (self.tools, _QuotaCheck(self.quotas))
            if self._any("calls_per_minute", "calls_per_day", "result_bytes_per_day")
            else (self.tools,)
        )

    @property
    def wrap(self) -> PrincipalQuotas | None:
        return self.quotas if self._any("concurrent") else None

    @property
    def post(self) -> tuple[_QuotaCount, ...]:
        return (_QuotaCount(self.quotas),) if self._any("result_bytes_per_day") else ()

    def _any(self, *limits: str) -> bool:
        quotas = [rules.quota for rules in self.quotas.sections.rules.values()]
        return any(getattr(quota, limit) is not None for quota in quotas for limit in limits)


def principal_hooks(config: Config, directory: Directory, store: SharedState | None) -> PrincipalHooks | None:
    """The per-principal rules of `config` (None: it has none)."""
    rules = config.constraints.principals
    if not rules:
        return None
    sections = _Sections(rules, directory)
    return PrincipalHooks(PrincipalTools(sections), PrincipalQuotas(sections, store))
