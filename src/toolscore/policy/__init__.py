"""The built-in constraint rules of servers.json, as engine hooks, plus the whole-plan check.

Rules (each optional, global in `constraints`, most overridable per server):

| rule | phase | refuses |
|---|---|---|
| `tools` allow/deny | pre | tools not allowed (globs: exposed names globally, downstream names per server) |
| `destructive` | pre | tools annotated `destructiveHint`: `deny`, or `confirm` by asking the user (elicitation) |
| `arguments` | pre | arguments over `max_bytes`, strings matching `deny_patterns`, paths outside `roots` |
| `rate_limits` | pre | calls beyond a token bucket per tool, server or client session |
| `concurrency` | wrap | calls beyond `per_server` running plus `queue` waiting |
| `results` | post | results over `max_bytes` (truncated with a marker, or refused); secrets are redacted |
| `batching` | pre + wrap | nothing: identical concurrent read-only calls share one downstream call |
| `plugins` | pre / post | whatever third-party hooks decide (see `toolscore.plugins`) |

Every refusal is a `Rejected` naming the rule: the model gets the reason, the audit log a
violation. The static rules (tools, destructive, arguments) also run over a whole plan before any
of its steps does (`plan_problems`), so a plan can never do what a direct call may not.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types

from toolscore._engine import CallNext, ExecutionContext, PostExecutionHook, PreExecutionHook, WrapHook
from toolscore.audit.sinks import AuditRecord, AuditSink
from toolscore.config import (
    ArgumentRules,
    Config,
    ConstraintsConfig,
    PathRules,
    ResultRules,
    ServerConstraints,
    ToolRules,
)
from toolscore.downstream.registry import Route
from toolscore.errors import Rejected
from toolscore.plan.check import CheckedPlan
from toolscore.plan.parse import PlanProblem
from toolscore.plan.refs import contains_ref
from toolscore.plugins import load_plugins
from toolscore.policy.paths import Confinement, names_path
from toolscore.policy.redact import Redactor

__all__ = ["Policy", "RedactingAuditSink", "build_policy"]

TRUNCATION_MARKER = "\n…[truncated by toolscore: {n} more bytes]"


@dataclass(frozen=True, slots=True)
class _Rules:
    """The rules in force for one server, global sections replaced by its overrides."""

    tools_global: ToolRules
    tools_server: ToolRules | None
    destructive: str
    arguments: ArgumentRules
    results: ResultRules
    deny_patterns: tuple[re.Pattern[str], ...]
    paths: PathRules | None
    roots: tuple[str, ...]


def _rules(constraints: ConstraintsConfig, override: ServerConstraints | None) -> _Rules:
    own = override or ServerConstraints()
    arguments = own.arguments or constraints.arguments
    paths = arguments.paths
    return _Rules(
        tools_global=constraints.tools,
        tools_server=own.tools,
        destructive=own.destructive or constraints.destructive,
        arguments=arguments,
        results=own.results or constraints.results,
        deny_patterns=tuple(re.compile(p) for p in arguments.deny_patterns),
        paths=paths,
        roots=tuple(os.path.realpath(r) for r in paths.roots) if paths else (),
    )


def _fold(name: str) -> str:
    """A name as deny rules compare it: compatibility-normalised and case-folded."""
    return unicodedata.normalize("NFKC", name).casefold()


def _allowed(names: tuple[str, ...], rules: ToolRules) -> bool:
    """Deny wins when any name matches (case-insensitively); allow needs one exact match."""
    folded = [_fold(n) for n in names]
    if any(fnmatch.fnmatchcase(name, _fold(p)) for p in rules.deny for name in folded):
        return False
    return rules.allow is None or any(fnmatch.fnmatchcase(name, p) for p in rules.allow for name in names)


def _tool_allowed(route: Route, rules: _Rules) -> bool:
    """Global rules see the exposed and the canonical name; per-server ones the downstream and renamed name."""
    if not _allowed((route.public_name, route.canonical), rules.tools_global):
        return False
    return rules.tools_server is None or _allowed((route.remote_name, route.local_name), rules.tools_server)


def _strings(value: Any) -> Iterator[str]:
    """Every string of a JSON value, object keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)


def _path_key_test(route: Route, paths: PathRules) -> Callable[[str], bool]:
    extra = list(paths.arguments)
    for pattern, names in paths.tools.items():
        if fnmatch.fnmatchcase(route.public_name, pattern) or fnmatch.fnmatchcase(route.canonical, pattern):
            extra.extend(names)
    schema_keys = route.path_keys
    return lambda key: key in schema_keys or names_path(key, extra)


def _static_violations(
    route: Route, arguments: dict[str, Any], rules: _Rules, *, plan: bool
) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """(rule, reason) for every static rule a call breaks, and the arguments with paths pinned.

    With `plan=True` (checking a plan before it runs) strings holding references are skipped and
    so is the size limit: those are checked on each step when it runs, with values resolved.
    """
    found: list[tuple[str, str]] = []
    if not _tool_allowed(route, rules):
        found.append(("tools", f"tool '{route.public_name}' is not allowed by the gateway's policy"))
    hints = route.tool.annotations
    if hints is not None and hints.destructive_hint and rules.destructive != "allow":
        if rules.destructive == "deny":
            found.append(("destructive", f"'{route.public_name}' is marked destructive and such tools are denied"))
        elif plan:
            found.append(("destructive", f"'{route.public_name}' needs the user's confirmation: call it directly"))
    limits = rules.arguments
    if limits.max_bytes is not None and not plan:
        size = len(json.dumps(arguments, separators=(",", ":"), ensure_ascii=False).encode())
        if size > limits.max_bytes:
            found.append(("arguments", f"the arguments are {size} bytes; the limit is {limits.max_bytes}"))
    if rules.deny_patterns:
        for text in _strings(arguments):
            if plan and contains_ref(text):
                continue
            for pattern in rules.deny_patterns:
                if pattern.search(text):
                    found.append(("arguments", f"an argument matches the denied pattern {pattern.pattern!r}"))
                    break
    if rules.paths is not None:
        confinement = Confinement(rules.roots, skip=contains_ref if plan else None)
        arguments, violations = confinement.apply(arguments, _path_key_test(route, rules.paths))
        found.extend(("paths", f"argument '{v.where}' {v.reason}") for v in violations)
    return found, arguments


class _StaticRules:
    """Pre-execution: tools, destructive, arguments."""

    name = "policy"

    def __init__(self, rules: dict[str | None, _Rules]) -> None:
        self._rules = rules

    async def __call__(self, ctx: ExecutionContext) -> mcp_types.CallToolResult | None:
        route = ctx.route
        assert route is not None
        rules = self._rules.get(route.server, self._rules[None])
        violations, pinned = _static_violations(route, ctx.arguments, rules, plan=False)
        for rule, reason in violations:
            raise Rejected(reason, hook=rule)
        ctx.arguments = pinned  # paths go on as the real paths that were checked
        hints = route.tool.annotations
        if hints is not None and hints.destructive_hint and rules.destructive == "confirm":
            question = (
                f"Allow the destructive tool '{route.public_name}' with arguments {json.dumps(ctx.arguments)[:500]}?"
            )
            if ctx.confirm is None:
                raise Rejected(
                    f"'{route.public_name}' is destructive and needs the user's confirmation, which this client "
                    "cannot give (no elicitation support)",
                    hook="destructive",
                )
            if not await ctx.confirm(question):
                raise Rejected(f"the user did not confirm '{route.public_name}'", hook="destructive")
        return None


class _RateLimits:
    """Pre-execution: token buckets; a call finding its bucket empty is refused with the wait time."""

    name = "rate_limits"

    def __init__(self, constraints: ConstraintsConfig) -> None:
        self._limits = constraints.rate_limits
        self._buckets: dict[tuple[int, str], tuple[float, float]] = {}  # (limit, key) -> (tokens, at)

    async def __call__(self, ctx: ExecutionContext) -> mcp_types.CallToolResult | None:
        now = anyio.current_time()
        for n, limit in enumerate(self._limits):
            if not fnmatch.fnmatchcase(ctx.tool, limit.match):
                continue
            key = {"tool": ctx.tool, "server": ctx.server or "", "session": ctx.session_id or ""}[limit.scope]
            tokens, at = self._buckets.get((n, key), (float(limit.burst), now))
            tokens = min(float(limit.burst), tokens + (now - at) * limit.rate)
            if tokens < 1:
                wait = (1 - tokens) / limit.rate
                self._buckets[(n, key)] = (tokens, now)
                raise Rejected(
                    f"rate limit of {limit.rate:g} calls/s per {limit.scope} reached for '{ctx.tool}'; retry in "
                    f"{wait:.1f} s",
                    hook="rate_limits",
                )
            self._buckets[(n, key)] = (tokens - 1, now)
        return None


class _ConcurrencyCap:
    """Wrap: at most `per_server` calls running per server, `queue` more waiting, the rest refused."""

    name = "concurrency"

    def __init__(self, caps: dict[str, tuple[int, int]]) -> None:
        self._caps = caps
        self._limiters = {server: anyio.CapacityLimiter(cap) for server, (cap, _) in caps.items()}
        self._waiting = dict.fromkeys(caps, 0)

    async def __call__(self, ctx: ExecutionContext, call_next: CallNext) -> mcp_types.CallToolResult:
        server = ctx.server
        if server not in self._limiters:
            return await call_next(ctx)
        limiter, (cap, queue) = self._limiters[server], self._caps[server]
        if limiter.available_tokens == 0 and self._waiting[server] >= queue:
            raise Rejected(
                f"server '{server}' is at its concurrency limit ({cap} running, {queue} waiting); try again shortly",
                hook="concurrency",
            )
        self._waiting[server] += 1
        try:
            await limiter.acquire()
        finally:
            self._waiting[server] -= 1
        try:
            return await call_next(ctx)
        finally:
            limiter.release()


class _ResultRules:
    """Post-execution: result size, and secret redaction."""

    name = "results"

    def __init__(self, rules: dict[str | None, _Rules]) -> None:
        self._rules = rules
        self._redactors = {
            server: Redactor(r.results.redact_patterns) for server, r in rules.items() if r.results.redact
        }

    async def __call__(self, ctx: ExecutionContext, result: mcp_types.CallToolResult) -> mcp_types.CallToolResult:
        server = ctx.server
        rules = self._rules.get(server, self._rules[None]).results
        redactor = self._redactors.get(server if server in self._rules else None)
        if redactor is not None:
            result = _redacted(result, redactor)
        if rules.max_bytes is not None:
            size = sum(len(b.text.encode()) for b in result.content if isinstance(b, mcp_types.TextContent))
            if size > rules.max_bytes:
                if rules.on_exceed == "reject":
                    raise Rejected(f"the result is {size} bytes; the limit is {rules.max_bytes}", hook="results")
                result = _truncate(result, rules.max_bytes)
        return result


def _redacted(result: mcp_types.CallToolResult, redactor: Redactor) -> mcp_types.CallToolResult:
    """`result` with secrets replaced; the same object when there were none (the common case)."""
    blocks: list[mcp_types.ContentBlock] = []
    changed = False
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            text = redactor.text(block.text)
            if text != block.text:
                block, changed = block.model_copy(update={"text": text}), True
        blocks.append(block)
    structured = result.structured_content
    if structured is not None:
        redacted = redactor.json(structured)
        changed = changed or redacted != structured
        structured = redacted
    if not changed:
        return result
    return result.model_copy(update={"content": blocks, "structured_content": structured})


def _truncate(result: mcp_types.CallToolResult, limit: int) -> mcp_types.CallToolResult:
    blocks: list[mcp_types.ContentBlock] = []
    room = limit
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            data = block.text.encode()
            if len(data) > room:
                kept = data[:room].decode(errors="ignore")
                block = block.model_copy(update={"text": kept + TRUNCATION_MARKER.format(n=len(data) - room)})
                room = 0
            else:
                room -= len(data)
        blocks.append(block)
    # structuredContent would carry the untruncated data past the limit.
    return result.model_copy(update={"content": blocks, "structured_content": None})


class _MarkBatchable:
    """Pre-execution: identical concurrent calls to read-only tools may share one downstream call."""

    name = "batching"

    async def __call__(self, ctx: ExecutionContext) -> mcp_types.CallToolResult | None:
        hints = ctx.route.tool.annotations if ctx.route else None
        if hints is not None and hints.read_only_hint:
            ctx.should_batch = True
        return None


class _SingleFlight:
    """Wrap: calls marked `should_batch` with the same tool and arguments share one downstream call.

    The first caller (the leader) makes the call; identical calls arriving while it runs wait for
    its result and are audited as `batched`. If the leader fails or is cancelled, each waiting
    call makes its own call, so one caller's cancellation never fails another.
    """

    name = "batching"

    def __init__(self) -> None:
        self._flights: dict[str, tuple[anyio.Event, list[mcp_types.CallToolResult]]] = {}

    async def __call__(self, ctx: ExecutionContext, call_next: CallNext) -> mcp_types.CallToolResult:
        if not ctx.should_batch:
            return await call_next(ctx)
        key = ctx.tool + "\0" + json.dumps(ctx.arguments, sort_keys=True, separators=(",", ":"))
        flight = self._flights.get(key)
        if flight is not None:
            done, outcome = flight
            await done.wait()
            if outcome:
                ctx.batched = True
                return outcome[0]
            return await call_next(ctx)
        done, outcome = anyio.Event(), []
        self._flights[key] = (done, outcome)
        try:
            result = await call_next(ctx)
            outcome.append(result)
            return result
        finally:
            del self._flights[key]
            done.set()


class RedactingAuditSink:
    """Redacts argument values and error texts before they reach the audit file."""

    def __init__(self, inner: AuditSink, redactor: Redactor) -> None:
        self._inner = inner
        self._redactor = redactor

    def write(self, record: AuditRecord) -> None:
        """Redact, then pass on."""
        update: dict[str, Any] = {}
        if record.arguments is not None:
            update["arguments"] = self._redactor.json(record.arguments)
        if record.error is not None:
            update["error"] = self._redactor.text(record.error)
        self._inner.write(record.model_copy(update=update) if update else record)

    def close(self) -> None:
        """Close the wrapped sink."""
        self._inner.close()


@dataclass(frozen=True, slots=True)
class Policy:
    """The hooks built from servers.json's constraints, and the plan check."""

    pre: tuple[PreExecutionHook, ...]
    wrap: tuple[WrapHook, ...]
    post: tuple[PostExecutionHook, ...]
    rules: dict[str | None, _Rules]
    redactor: Redactor | None

    def gateway_tool_refusal(self, name: str) -> str | None:
        """Why the gateway's own tool `name` (e.g. `orchestrate`) may not be used, or None."""
        if self.rules and not _allowed((name,), self.rules[None].tools_global):
            return f"tool '{name}' is not allowed by the gateway's policy"
        return None

    def plan_problems(self, plan: CheckedPlan) -> list[PlanProblem]:
        """Every static rule a plan's steps break, before any of them runs."""
        problems: list[PlanProblem] = []
        if not self.rules:  # constraints are off
            return problems
        for call in plan.calls:
            rules = self.rules.get(call.route.server, self.rules[None])
            for rule, reason in _static_violations(call.route, call.arguments, rules, plan=True)[0]:
                node = call.node
                problems.append(PlanProblem("policy", f"{rule}: {reason}", step=node.step, tag=node.tag, id=node.id))
        return problems


def build_policy(config: Config) -> Policy:
    """Compose the constraint hooks once, from the config (empty when constraints are off)."""
    constraints = config.constraints
    if not constraints.enabled:
        return Policy((), (), (), {}, None)
    rules: dict[str | None, _Rules] = {None: _rules(constraints, None)}
    for server in config.enabled_servers:
        rules[server.name] = _rules(constraints, server.constraints)
    pre: list[PreExecutionHook] = [_StaticRules(rules)]
    if constraints.rate_limits:
        pre.append(_RateLimits(constraints))
    caps = {
        s.name: (c.per_server, c.queue)
        for s in config.enabled_servers
        if (c := s.constraints.concurrency or constraints.concurrency).per_server is not None
    }
    wrap: list[WrapHook] = [_ConcurrencyCap(caps)] if caps else []
    if constraints.batching:
        pre.append(_MarkBatchable())
        wrap.insert(0, _SingleFlight())  # outside the cap: a batched call takes no slot
    plugin_pre, plugin_wrap, plugin_post = load_plugins(
        constraints.plugins, source=str(config.path) if config.path else None
    )
    pre.extend(plugin_pre)
    wrap.extend(plugin_wrap)  # inside the built-in wraps: a plugin sees only calls that will run
    post: list[PostExecutionHook] = [*plugin_post, _ResultRules(rules)]
    redactor = Redactor(constraints.results.redact_patterns) if constraints.results.redact else None
    return Policy(tuple(pre), tuple(wrap), tuple(post), rules, redactor)
