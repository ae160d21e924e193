"""The ToolExecutionEngine: every downstream call, in four phases, with one audit record.

Theory of operation. A call goes through

1. **pre_validation**: the tool is routed, its server is connected, the arguments validate
   against the tool's inputSchema (an invalid call never reaches the downstream);
2. **pre_execution**: the constraint hooks, in config order, only when constraints are enabled.
   A hook raises `Rejected` to refuse the call, or returns a result to answer in its place;
3. **execution**: the downstream call under a deadline (the call's, else the server's, else the
   gateway default). Expiry cancels the awaiting scope, and the SDK sends the downstream
   `notifications/cancelled`;
4. **post_execution**: the post hooks, token accounting, the slow-call warning.

Any `ToolscoreError` moves the call to **error_handling**, where it becomes a tool error result
(`isError: true`) with a message a model can act on. Every path, a cancellation by the front
client included, ends by writing exactly one audit record. The hook chains are fixed when the
engine is built; nothing is resolved per call.

The phases are written once (`_phases`), for two drivers: `execute` awaits each step that waits
(a hook, the downstream call); `fly` returns a `Flight` whose caller sends the downstream call
itself and resumes the phases from the server's reader (the front's express lane).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

import anyio
import mcp_types
import structlog

from toolscore._json import format_path
from toolscore._tokens import arguments_tokens, result_tokens, tokens_for_chars
from toolscore.audit.sinks import AuditRecord, AuditSink
from toolscore.config import DEFAULT_SEPARATOR, DEFAULT_SLOW_CALL_SECONDS, DEFAULT_TIMEOUT, Config
from toolscore.downstream.raw import RawResult
from toolscore.downstream.registry import Route
from toolscore.errors import (
    CallTimeout,
    DownstreamUnavailable,
    InputRequired,
    InvalidArguments,
    Rejected,
    TaskStarted,
    ToolNotFound,
    ToolscoreError,
)
from toolscore.scope import NO_CLIENT, CallScope
from toolscore.spill import ResultStore, owner_of_caller, preview
from toolscore.telemetry import tracing
from toolscore.types import Arguments, CallDownstream, ProgressFn, ToolSource

__all__ = [
    "DEFAULT_OUTPUT_TOKENS",
    "CallOutcome",
    "EngineSettings",
    "ExecutionContext",
    "ExecutionPhase",
    "Flight",
    "PostExecutionHook",
    "PreExecutionHook",
    "ToolExecutionEngine",
    "WrapHook",
    "error_result",
]

log = structlog.get_logger("toolscore.engine")

DEFAULT_OUTPUT_TOKENS = 256
"""Predicted result size of a tool never called before; later calls use a running average."""
_EMA_WEIGHT = 0.3
_call_ids = itertools.count(1)
_process_tag = f"{os.getpid():x}"


class ExecutionPhase(StrEnum):
    """Where a call is, or where it stopped."""

    PRE_VALIDATION = "pre_validation"
    PRE_EXECUTION = "pre_execution"
    EXECUTION = "execution"
    POST_EXECUTION = "post_execution"
    ERROR_HANDLING = "error_handling"


@dataclass(kw_only=True)
class ExecutionContext:
    """One call as it moves through the engine; hooks read and annotate it."""

    call_id: str
    tool: str
    arguments: Arguments
    request_id: str | None = None
    scope: CallScope = NO_CLIENT
    """Who the call is for (`toolscore.scope`): its caller, for per-caller rules and the audit
    record, and its client, which receives the server's requests and logs during the call."""
    confirm: ConfirmFn | None = field(default=None, repr=False)
    """Asks the user a yes/no question, when the front client can (elicitation)."""
    timeout: float | None = None
    """The deadline of the downstream call, in seconds (set when execution starts)."""
    progress: ProgressFn | None = field(default=None, repr=False)
    plan_id: str | None = None
    """The plan this call is a step of (`orchestrate`), else None."""
    invoke: Invoke | None = field(default=None, repr=False)
    """Sends the request in place of `tools/call` (a resource read), when not None."""
    keep_bytes: bool = False
    """Whether the result may stay the bytes the server wrote (`raw`), for the client's version."""
    raw: RawResult | None = field(default=None, repr=False)
    """The server's result as it wrote it; `result` is then a stand-in carrying only `isError`."""
    spill: bool = False
    """Whether a result over its server's `spill_bytes` is kept by the gateway and previewed
    (`toolscore.spill`): a client's passthrough call that did not ask for whole results."""
    spilled: str | None = None
    """Where the whole result was kept, when it was (`toolscore://results/<id>`)."""
    route: Route | None = None
    phase: ExecutionPhase = ExecutionPhase.PRE_VALIDATION
    started: float = field(default_factory=time.perf_counter)
    ended: float | None = None
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    violations: list[str] = field(default_factory=list)
    should_batch: bool = False
    """Set by a batching hook when this call may share one downstream call with identical ones."""
    batched: bool = False
    answered_by: str | None = None
    result: mcp_types.CallToolResult | None = None
    error: ToolscoreError | None = None
    cancelled: bool = False
    estimated_tokens: int | None = None
    actual_tokens: int | None = None
    input_tokens: int = 0
    """What the arguments count for in the token figures (set in pre-validation)."""
    trace: Callable[[str], object] | None = field(default=None, repr=False)
    """Adds an event to the call's span, while tracing is on (`toolscore.telemetry.tracing`)."""

    @property
    def server(self) -> str | None:
        """The downstream server, once the tool is routed."""
        return self.route.server if self.route else None

    @property
    def duration(self) -> float:
        """Seconds from start to end (or to now, while running)."""
        return (self.ended if self.ended is not None else time.perf_counter()) - self.started

    @property
    def success(self) -> bool:
        """The call produced a result and the tool did not report an error."""
        return self.error is None and not self.cancelled and self.result is not None and not self.result.is_error

    @property
    def token_estimation_accuracy(self) -> float | None:
        """min/max of estimated and actual tokens: 1.0 is a perfect estimate."""
        if not self.estimated_tokens or not self.actual_tokens:
            return None
        return min(self.estimated_tokens, self.actual_tokens) / max(self.estimated_tokens, self.actual_tokens)

    def to_audit_record(self, *, include_arguments: bool = False) -> AuditRecord:
        """The audit record of this call."""
        kind: str | None
        message: str | None
        if self.cancelled:
            kind, message = "cancelled", "cancelled by the client"
        elif self.error is not None:
            kind, message = self.error.kind, str(self.error)
        else:
            kind, message = ("tool_error", None) if self.result is not None and self.result.is_error else (None, None)
        route = self.route
        return AuditRecord.of_checked(
            time=self.started_at,
            call_id=self.call_id,
            request_id=self.request_id,
            caller=self.scope.caller,
            plan_id=self.plan_id,
            tool=self.tool,
            server=route.server if route is not None else None,
            remote_tool=route.remote_name if route is not None else None,
            phase=self.phase.value,
            duration_ms=round(self.duration * 1000, 3),
            success=self.success,
            error_kind=kind,
            error=message,
            estimated_tokens=self.estimated_tokens,
            actual_tokens=self.actual_tokens,
            violations=tuple(self.violations),
            batched=self.batched,
            answered_by=self.answered_by,
            argument_names=tuple(self.arguments),
            arguments=self.arguments if include_arguments else None,
            plan_hash=None,
            steps=None,
            outcome=None,
        )


class PreExecutionHook(Protocol):
    """A constraint hook (phase 2).

    Raise `toolscore.errors.Rejected` to refuse the call (the reason goes to the model and the
    audit log), return a `CallToolResult` to answer in place of the downstream call, or return
    None to let the call go on. Hooks may annotate `ctx` (violations, should_batch).
    """

    name: str

    async def __call__(self, ctx: ExecutionContext) -> mcp_types.CallToolResult | None: ...


CallNext = Callable[[ExecutionContext], Awaitable[mcp_types.CallToolResult]]
Invoke = Callable[[], Awaitable[mcp_types.CallToolResult]]
ConfirmFn = Callable[[str], Awaitable[bool]]


class WrapHook(Protocol):
    """A hook around the execution phase (3): concurrency caps, timing, caching.

    Call `call_next(ctx)` to proceed; raise `Rejected` to refuse. Wraps nest in config order, the
    first outermost. A hook that returns what `call_next` gave without reading it may say so with a
    class attribute `passes_results_through = True`: results then stay the server's bytes while
    only such hooks are installed (the zero-copy path, docs/performance.md).
    """

    name: str

    async def __call__(self, ctx: ExecutionContext, call_next: CallNext) -> mcp_types.CallToolResult: ...


class PostExecutionHook(Protocol):
    """A post-execution hook (phase 4): sees, and may replace, the downstream result."""

    name: str

    async def __call__(self, ctx: ExecutionContext, result: mcp_types.CallToolResult) -> mcp_types.CallToolResult: ...


def error_result(message: str) -> mcp_types.CallToolResult:
    """A tool error result carrying `message` for the model."""
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=message)], is_error=True)


_STAND_IN = {flag: mcp_types.CallToolResult(content=[], is_error=flag) for flag in (False, True)}
"""What the wraps see of a result kept as bytes (`ExecutionContext.raw`): only whether it is an error."""


def _received(ctx: ExecutionContext, answer: RawResult | mcp_types.CallToolResult) -> mcp_types.CallToolResult:
    """The server's answer as the later phases see it: bytes kept aside (`ctx.raw`), a stand-in read."""
    if isinstance(answer, RawResult):
        ctx.raw = answer
        return _STAND_IN[answer.is_error]
    return answer


Step = Callable[[], Awaitable[Any]]
"""A step of a call's phases that waits (a hook, the downstream call), for its driver to run."""
CallFlow = Generator[Step, Any, "CallOutcome"]
"""A call's phases (`ToolExecutionEngine._phases`): yields the steps that wait, returns the outcome."""


async def _drive(flow: CallFlow) -> CallOutcome:
    """The awaiting driver: each step awaited, its value sent back or its exception thrown in
    (a cancellation included: the phases record it and raise it on)."""
    try:
        step = next(flow)
        while True:
            try:
                value = await step()
            except BaseException as exc:
                step = flow.throw(exc)
            else:
                step = flow.send(value)
    except StopIteration as done:
        outcome: CallOutcome = done.value
        return outcome


class _Withdrawn(BaseException):
    """Thrown into a flight's phases when its caller ends it as cancelled (`Flight.cancel`)."""


def _describe_schema_error(err: Any) -> str:
    return f"{format_path(list(err.absolute_path))}: {err.message}"


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineSettings:
    """What the engine needs to know of the configuration."""

    default_timeout: float = DEFAULT_TIMEOUT
    """Seconds a call may take when neither the call nor its server sets a deadline."""
    server_timeouts: Mapping[str, float] = field(default_factory=dict)
    """Per-server deadlines."""
    separator: str = DEFAULT_SEPARATOR
    """Between server and tool in exposed names (for the unknown-tool message)."""
    slow_call_seconds: float = DEFAULT_SLOW_CALL_SECONDS
    include_arguments: bool = False
    """Audit argument values, not just their names."""
    max_calls_in_flight: int | None = None
    """Front calls one caller may have in flight (None: no limit)."""
    spill_bytes: Mapping[str, int] = field(default_factory=dict)
    """Per server, the result size over which a passthrough result is kept and previewed."""

    @classmethod
    def from_config(cls, config: Config) -> EngineSettings:
        """The engine's part of a servers.json."""
        settings = config.settings
        return cls(
            default_timeout=settings.default_timeout,
            server_timeouts={s.name: s.timeout for s in config.servers.values() if s.timeout is not None},
            separator=settings.separator,
            slow_call_seconds=settings.slow_call_seconds,
            include_arguments=settings.audit.include_arguments,
            max_calls_in_flight=settings.max_calls_in_flight,
            spill_bytes={
                s.name: limit
                for s in config.servers.values()
                if (limit := s.spill_bytes if s.spill_bytes is not None else settings.spill_bytes) is not None
            },
        )


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """What `execute` returns: the result for the client, and the finished context."""

    result: mcp_types.CallToolResult
    """Always set: the downstream's result, or an error result naming what went wrong."""
    context: ExecutionContext

    @property
    def error(self) -> ToolscoreError | None:
        """Why the gateway failed the call (None if a result came back, even an isError one)."""
        return self.context.error

    @property
    def raw(self) -> RawResult | None:
        """The server's result bytes, when the call asked for them (`keep_bytes`) and they stayed whole;
        `result` is then only a stand-in."""
        return self.context.raw


class Flight:
    """A call between its phases while its caller sends the downstream call itself: the callback
    driver of `ToolExecutionEngine._phases` (the front's express lane). `ToolExecutionEngine.fly`
    makes one; exactly one of `land`, `expire`, `cancel` or `abandon` ends it."""

    __slots__ = ("_engine", "_flow", "ctx")

    def __init__(self, ctx: ExecutionContext, flow: CallFlow, engine: ToolExecutionEngine) -> None:
        self.ctx = ctx
        """The call; `ctx.timeout` is the deadline its sender keeps."""
        self._flow = flow
        self._engine = engine

    def land(self, outcome: RawResult | mcp_types.CallToolResult | ToolscoreError) -> CallOutcome:
        """The server's answer, or the error that ended the call: the phases finish, the call is
        audited, and the client's answer returned."""
        try:
            if isinstance(outcome, ToolscoreError):
                self._flow.throw(outcome)
            else:
                self._flow.send(outcome)
        except StopIteration as done:
            result: CallOutcome = done.value
            return result
        raise RuntimeError("a call without hooks has no step after the downstream call")

    def expire(self) -> CallOutcome:
        """The deadline passed: the call ends with the timeout error (its server checked for being wedged)."""
        return self.land(self._engine.timed_out(self.ctx))

    def cancel(self) -> None:
        """The client cancelled the call, or is gone: audited as cancelled, nothing to answer."""
        with contextlib.suppress(_Withdrawn):
            self._flow.throw(_Withdrawn())

    def abandon(self) -> None:
        """The call was never sent (`execute` runs it instead): nothing audited, its slot given back."""
        self._flow.close()


class ToolExecutionEngine:
    """Runs every downstream call through the four phases and audits it."""

    def __init__(
        self,
        *,
        tools: ToolSource,
        call: CallDownstream,
        audit: AuditSink,
        settings: EngineSettings | None = None,
        pre_hooks: Sequence[PreExecutionHook] = (),
        wrap_hooks: Sequence[WrapHook] = (),
        post_hooks: Sequence[PostExecutionHook] = (),
        redact: Callable[[str], str] | None = None,
        results: ResultStore | None = None,
    ) -> None:
        """Args:
        tools: What the engine knows of the downstream servers (the registry, who is up).
        call: The I/O seam: sends a call to a server (and keeps its result's bytes where asked and
            the connection allows).
        audit: Receives one record per call.
        settings: Deadlines, names and audit options (default: `EngineSettings()`).
        pre_hooks: Constraint hooks (phase 2), in order.
        wrap_hooks: Hooks around the downstream call (phase 3), the first outermost.
        post_hooks: Hooks over the result (phase 4), in order.
        redact: Applied to the gateway's own error texts before a client sees them (they may quote
            a server's stderr); results are redacted by the post hooks.
        results: Keeps the results over their server's `spill_bytes` (None: every result goes whole).
        """
        self._results = results
        self._tools = tools
        self._call = call
        self._audit = audit
        self.reconfigure(settings or EngineSettings(), pre_hooks, wrap_hooks, post_hooks, redact)
        self._predicted_output: dict[str, float] = {}
        self._in_flight: dict[str, int] = {}
        """Front calls in flight per caller (plan steps are their plan's), for the cap."""
        self.audit_lost = 0
        """Audit records the sink raised on (and so lost) since the engine was built."""
        self._audit_failing = False

    def reconfigure(
        self,
        settings: EngineSettings,
        pre_hooks: Sequence[PreExecutionHook] = (),
        wrap_hooks: Sequence[WrapHook] = (),
        post_hooks: Sequence[PostExecutionHook] = (),
        redact: Callable[[str], str] | None = None,
    ) -> None:
        """Put new settings and hooks in place (at start, and on a live reload of the config).

        All at once, with nothing awaited: a call reads the settings and the three chains together
        as its phases begin (`_run`), so a call in flight finishes under the rules it started with.
        """
        # The chains are fixed here, once: nothing is resolved per call.
        chain: CallNext = self._downstream
        for wrap in reversed(tuple(wrap_hooks)):  # built once: the first wrap is the outermost
            chain = functools.partial(wrap, call_next=chain)
        self._settings = settings
        self._pre: tuple[PreExecutionHook, ...] = tuple(pre_hooks)
        self._post: tuple[PostExecutionHook, ...] = tuple(post_hooks)
        self._execute_chain = chain
        self._redact = redact
        # Bytes can pass only hooks that never look at a result.
        self.keeps_raw_results = not self._post and all(getattr(w, "passes_results_through", False) for w in wrap_hooks)
        """Whether a call asking for it (`keep_bytes`) can get the server's result bytes."""
        self.hookless = not self._pre and not wrap_hooks and not self._post
        """Whether no hook is installed: a caller may then send a call itself (`fly`)."""

    async def execute(
        self,
        tool: str,
        arguments: Arguments | None = None,
        *,
        scope: CallScope = NO_CLIENT,
        request_id: str | int | None = None,
        plan_id: str | None = None,
        timeout: float | None = None,
        progress: ProgressFn | None = None,
        confirm: ConfirmFn | None = None,
        route: Route | None = None,
        invoke: Invoke | None = None,
        keep_bytes: bool = False,
        spill: bool = False,
    ) -> CallOutcome:
        """Run one call; never raises for anything a model could cause. The awaiting driver of
        the call's phases (`_phases`): each step that waits is awaited here.

        Args:
            tool: The public tool name.
            arguments: The call's arguments (None is `{}`).
            scope: Who the call is for (`toolscore.scope`): its caller (per-caller rules, the cap
                on calls in flight, the audit record) and its client's back-channel.
            request_id: The front request this call serves, for the audit log.
            plan_id: The plan this call is a step of.
            timeout: Seconds for this call, overriding the server's timeout.
            progress: Receives the downstream's progress notifications.
            confirm: Asks the user a yes/no question, if the front client can.
            route: The route, for a request that is not a listed tool (a resource read, as the
                pseudo-tool `resources/read` of its server); with `invoke`, which sends it.
            invoke: Sends the request in place of `tools/call`; its result, shaped as a tool
                result, goes through the post hooks like any other.
            keep_bytes: The result may stay the bytes the server wrote (`CallOutcome.raw`), when no
                hook needs to read it and they mean the same to the client (`scope.version`).
            spill: A result over its server's `spill_bytes` is kept and previewed (`ExecutionContext.spill`).

        Returns:
            The result (an error result on failure) and the finished context.
        """
        ctx = ExecutionContext(
            call_id=f"{_process_tag}-{next(_call_ids)}",
            tool=tool,
            arguments=dict(arguments or {}),
            request_id=None if request_id is None else str(request_id),
            plan_id=plan_id,
            confirm=confirm,
            progress=progress,
            invoke=invoke,
            route=route,
            keep_bytes=keep_bytes and self.keeps_raw_results,
            spill=spill,
            scope=scope,
        )
        flow = self._phases(ctx, timeout, held=plan_id is None)  # a plan's steps are its one call's
        traced = tracing.tracer  # None unless tracing is on: then this read is the whole cost
        if traced is None:
            return await _drive(flow)
        with traced.call(ctx):
            return await _drive(flow)

    def fly(
        self, tool: str, route: Route, arguments: Arguments, *, request_id: str | int, scope: CallScope, spill: bool
    ) -> Flight | CallOutcome:
        """Begin a call whose downstream step its caller sends itself (the front's express lane):
        the callback driver of the call's phases. Only while `hookless`, so the one step that
        waits is the downstream call.

        Returns:
            The call at its downstream step (`Flight`: send it with `ctx.timeout` as its deadline,
            then end it with one of its methods), or the call's outcome where it ended before
            (over the caller's cap, arguments refused), audited and ready to answer.
        """
        if not self.hookless:
            raise RuntimeError("a call with hooks installed is driven by `execute`")
        ctx = ExecutionContext(
            call_id=f"{_process_tag}-{next(_call_ids)}",
            tool=tool,
            arguments=arguments,
            request_id=str(request_id),
            route=route,
            keep_bytes=True,
            spill=spill,
            scope=scope,
        )
        flow = self._phases(ctx, None, held=True)
        try:
            next(flow)
        except StopIteration as done:
            outcome: CallOutcome = done.value
            return outcome
        return Flight(ctx, flow, self)

    def take_slot(self, caller: str) -> bool:
        """Hold one of `caller`'s calls in flight (a passthrough call, or a front call such as
        `orchestrate` whose steps are its own). False, and nothing held: the caller has as many as
        allowed (`over_cap_text` says so). `give_slot` gives it back. No cap: always True."""
        cap = self._settings.max_calls_in_flight
        if cap is None:
            return True
        count = self._in_flight.get(caller, 0)
        if count >= cap:
            return False
        self._in_flight[caller] = count + 1
        return True

    def give_slot(self, caller: str) -> None:
        """The end of a call `take_slot` admitted."""
        if self._settings.max_calls_in_flight is None:
            return
        count = self._in_flight.get(caller, 0) - 1
        if count > 0:
            self._in_flight[caller] = count
        else:
            self._in_flight.pop(caller, None)  # callers come and go: keep only those with calls in flight

    def over_cap_text(self) -> str:
        """What a call over its caller's cap is answered."""
        return (
            f"this client has {self._settings.max_calls_in_flight} calls in flight, the most "
            "toolscore.max_calls_in_flight allows; retry once some have finished"
        )

    def _phases(self, ctx: ExecutionContext, timeout: float | None, *, held: bool) -> CallFlow:
        """The four phases of one call, written once for the engine's two drivers.

        The phases do not wait themselves: each step that waits (a hook, the downstream call) is
        yielded as a zero-argument coroutine function, and its driver sends back the step's value
        or throws its exception in. `execute` awaits each step; a `Flight` (the express lane)
        sends the downstream call itself and resumes the phases from the server's reader. The
        value returned is the call's outcome, its audit record written.

        Args:
            ctx: The call.
            timeout: Seconds for the downstream call, overriding the server's.
            held: The call counts against its caller's cap on calls in flight.
        """
        # The rules this call runs under, read together (`reconfigure` replaces them as a whole).
        settings, pre, chain, post_hooks = self._settings, self._pre, self._execute_chain, self._post
        caller = ctx.scope.caller if held else None
        holding: str | None = None  # the caller whose slot this call holds
        try:
            # 1. pre-validation
            route = self._validate(ctx)
            if caller is not None:
                # Over the cap, the call is answered at once: nothing waits, nothing is queued
                # (the caller's other calls may be waiting on this same client, for its sampling answer).
                if not self.take_slot(caller):
                    raise Rejected(self.over_cap_text(), hook="in_flight")
                holding = caller
            self._estimate(ctx)

            # 2. pre-execution: constraint hooks
            self._enter(ctx, ExecutionPhase.PRE_EXECUTION)
            result: mcp_types.CallToolResult | None = None
            for hook in pre:
                result = yield functools.partial(hook, ctx)
                if result is not None:
                    ctx.answered_by = hook.name
                    break

            # 3. execution, inside the wrap hooks
            if result is None:
                self._enter(ctx, ExecutionPhase.EXECUTION)
                ctx.timeout = (
                    timeout
                    if timeout is not None
                    else settings.server_timeouts.get(route.server, settings.default_timeout)
                )
                result = _received(ctx, (yield functools.partial(chain, ctx)))

            # 4. post-execution
            self._enter(ctx, ExecutionPhase.POST_EXECUTION)
            for post in post_hooks:
                result = yield functools.partial(post, ctx, result)
            self._account(ctx, result)
            ctx.result = result
        except (InputRequired, TaskStarted) as exc:
            # The front answers with the question (the client's retry is a new call), or the task.
            ctx.error = exc
            self._finish(ctx)
            raise
        except ToolscoreError as exc:
            if isinstance(exc, Rejected):
                ctx.violations.append(f"{exc.hook}: {exc.reason}")
            return self._failed(ctx, exc)
        except Exception as exc:
            # A bug in toolscore or a hook: audit it, and let the front's boundary answer it.
            ctx.error = ToolscoreError(f"internal error: {type(exc).__name__}")
            self._finish(ctx)
            raise
        except GeneratorExit:
            raise  # given back unsent by its driver (`Flight.abandon`): whoever runs it audits it
        except BaseException:
            # A cancellation, by the client or an enclosing scope (or `Flight.cancel`).
            ctx.cancelled = True
            self._finish(ctx)
            raise
        finally:
            if holding is not None:
                self.give_slot(holding)
        if ctx.spill:
            self._spill(ctx)  # the result may become its preview
        self._finish(ctx)
        return CallOutcome(ctx.result, ctx)

    def _enter(self, ctx: ExecutionContext, phase: ExecutionPhase) -> None:
        ctx.phase = phase
        if ctx.trace is not None:
            ctx.trace(phase.value)

    def _failed(self, ctx: ExecutionContext, exc: ToolscoreError) -> CallOutcome:
        """The end of a call the gateway failed: error handling, the error result, the audit record."""
        ctx.error = exc
        self._enter(ctx, ExecutionPhase.ERROR_HANDLING)
        message = str(exc)
        ctx.result = error_result(message if self._redact is None else self._redact(message))
        self._finish(ctx)
        return CallOutcome(ctx.result, ctx)

    def timed_out(self, ctx: ExecutionContext) -> CallTimeout:
        """The error of a call whose downstream step ran past `ctx.timeout`; its server is checked
        for being wedged."""
        assert ctx.route is not None and ctx.timeout is not None
        self._tools.call_timed_out(ctx.route.server, ctx.scope.caller)
        return CallTimeout(
            f"Tool '{ctx.tool}' did not answer within {ctx.timeout:g} s; the call was cancelled on server "
            f"'{ctx.route.server}'."
        )

    def _spill(self, ctx: ExecutionContext) -> None:
        """Keep a result over its server's `spill_bytes` and answer with its preview (`toolscore.spill`)."""
        results, route, result = self._results, ctx.route, ctx.result
        if results is None or route is None or result is None or ctx.error is not None:
            return
        limit = self._settings.spill_bytes.get(route.server)
        if limit is None:
            return
        raw = ctx.raw
        size = len(raw.data) if raw is not None else None
        if size is not None and size <= limit:
            return  # the common case: measured on the bytes, nothing decoded
        model = raw.model() if raw is not None else result
        body = (
            raw.data.decode("utf-8", "replace")
            if raw is not None
            else model.model_dump_json(by_alias=True, exclude_none=True)
        )
        size = len(body.encode()) if size is None else size
        if size <= limit:
            return
        uri = results.put(owner_of_caller(ctx.scope.caller), body)
        if uri is None:
            return  # over the store's whole cap: it goes as it is
        ctx.raw, ctx.spilled = None, uri
        ctx.result = preview(model, uri, size)

    def _estimate(self, ctx: ExecutionContext) -> None:
        ctx.input_tokens = arguments_tokens(ctx.arguments)
        ctx.estimated_tokens = ctx.input_tokens + round(self._predicted_output.get(ctx.tool, DEFAULT_OUTPUT_TOKENS))

    def _account(self, ctx: ExecutionContext, result: mcp_types.CallToolResult) -> None:
        """The call's actual tokens, and the tool's output estimate moved toward them."""
        output_tokens = tokens_for_chars(ctx.raw.chars) if ctx.raw is not None else result_tokens(result)
        ctx.actual_tokens = ctx.input_tokens + output_tokens
        previous = self._predicted_output.get(ctx.tool)
        self._predicted_output[ctx.tool] = (
            output_tokens if previous is None else previous + _EMA_WEIGHT * (output_tokens - previous)
        )

    async def _downstream(self, ctx: ExecutionContext) -> mcp_types.CallToolResult:
        """The innermost step of phase 3: the downstream call under its deadline."""
        assert ctx.route is not None and ctx.timeout is not None
        # A bare cancel scope: `fail_after` is the same scope inside a generator-based context
        # manager, which costs more than the scope itself on every call.
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + ctx.timeout):
                if ctx.invoke is not None:
                    return await ctx.invoke()
                answer = await self._call(
                    ctx.route.server,
                    ctx.route.remote_name,
                    ctx.arguments,
                    progress=ctx.progress,
                    scope=ctx.scope,
                    keep_bytes=ctx.keep_bytes,
                )
                return _received(ctx, answer)
        except TimeoutError:  # a deadline inside the call, as the SDK's own
            pass
        # Here the deadline passed: a cancellation from outside passes through this scope.
        raise self.timed_out(ctx)

    def _validate(self, ctx: ExecutionContext) -> Route:
        registry = self._tools.registry
        route = ctx.route or registry.get(ctx.tool)
        if route is None:
            if (held := registry.held.get(ctx.tool)) is not None:  # quarantined or changed since pinned
                raise Rejected(held, hook="trust")
            server = registry.server_named_by(ctx.tool)
            if server is not None and server not in registry.servers and server not in registry.down:
                # A server that never listed its tools (a wrong command, a crash at start): say
                # so, and why, rather than "unknown tool", which reads as a typo.
                why = self._tools.unavailable_reason(server) or "it has not listed its tools"
                raise DownstreamUnavailable(
                    f"Server '{server}' is not available ({why}); tool '{ctx.tool}' was not called.",
                    server=server,
                )
            known = ", ".join(registry.servers) or "none connected"
            raise ToolNotFound(
                f"Unknown tool '{ctx.tool}'. Servers: {known}. Tools are named '<server>"
                f"{self._settings.separator}<tool>'; list them with tools/list."
            )
        # Routed: whatever stops the call from here on, its audit record names the server.
        ctx.route = route
        if (reason := self._tools.unavailable_reason(route.server)) is not None:
            raise DownstreamUnavailable(
                f"Server '{route.server}' is not available ({reason}); tool '{ctx.tool}' was not called.",
                server=route.server,
            )
        errors = route.schema_errors(ctx.arguments)
        if errors:
            raise InvalidArguments(ctx.tool, [_describe_schema_error(e) for e in errors])
        return route

    def _finish(self, ctx: ExecutionContext) -> None:
        ctx.ended = time.perf_counter()
        record = ctx.to_audit_record(include_arguments=self._settings.include_arguments)
        self._write_audit(record)
        slow = ctx.ended - ctx.started >= self._settings.slow_call_seconds
        if not slow and record.error_kind is None and not log.is_enabled_for(logging.DEBUG):
            return  # the common case: nothing to log, and no fields built for it
        fields = {
            "tool": ctx.tool,
            "server": ctx.server,
            "ms": record.duration_ms,
            "ok": record.success,
            "phase": record.phase,
        }
        if slow:
            log.warning("slow call", threshold_s=self._settings.slow_call_seconds, **fields)
        elif record.error_kind is not None:
            log.info("call failed", error_kind=record.error_kind, error=record.error, **fields)
        else:
            log.debug("call", **fields)

    def _write_audit(self, record: AuditRecord) -> None:
        """Hand `record` to the sink; a sink that fails loses the record, never the call's answer.

        The call may already have run downstream: answering it with an error would make the
        client retry it. So a failure is counted (`audit_lost`) and logged, once per burst.
        """
        try:
            self._audit.write(record)
        except Exception as exc:
            self.audit_lost += 1
            if not self._audit_failing:
                self._audit_failing = True
                log.error(
                    "audit record lost: the audit sink failed; calls go on unaudited",
                    error=f"{type(exc).__name__}: {exc}",
                    lost=self.audit_lost,
                )
            return
        if self._audit_failing:
            self._audit_failing = False
            log.warning("audit sink writes again", lost=self.audit_lost)
