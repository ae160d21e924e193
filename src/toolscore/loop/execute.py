"""One turn's calls, each started the moment its item has streamed in.

Every item is parsed and checked on its own with `toolscore.plan` (parse, check, run), as one
plan continuing the task's episode, so step numbers and `${…}` references reach across items and
turns. An item starts at once unless it references an item of this turn that has not finished:
then it waits for that one (the plan checker has already refused references to steps that do
not exist). Items therefore run concurrently, as `<parallel>` children would; a `<sequential>`
block is one item and keeps its order. Every call is an ordinary engine call (policy, audit,
deadlines).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
from anyio.abc import TaskGroup

from toolscore._engine import ToolExecutionEngine
from toolscore.config import PlanSettings, Shorthand
from toolscore.errors import PlanCheckError, PlanProblem, PlanSyntaxError
from toolscore.loop.limits import Budget
from toolscore.plan.check import check_plan
from toolscore.plan.nodes import Block, CheckedPlan, PlanPolicy
from toolscore.plan.parse import parse_turn
from toolscore.plan.run import BlockOutcome, Episode, PlanRunner, StepRecord
from toolscore.plan.transcript import render_plan_errors, render_results
from toolscore.scope import NO_CLIENT, CallScope
from toolscore.trust.labels import UNTRUSTED
from toolscore.types import ToolSource

__all__ = ["PlanContext", "TurnCalls"]

_MAX_PROBLEMS = 32
"""Plan problems reported per turn; later items are not read."""


@dataclass(frozen=True)
class PlanContext:
    """What running plan items needs from the gateway, shared by every task."""

    tools: ToolSource
    engine: ToolExecutionEngine
    limits: PlanSettings
    shorthands: Mapping[str, tuple[str, Shorthand]]
    policy: PlanPolicy | None = None
    max_argument_bytes: int | None = None
    limiters: dict[str, anyio.CapacityLimiter] = field(default_factory=dict)

    def limiter(self, server: str) -> anyio.CapacityLimiter:
        if server not in self.limiters:
            self.limiters[server] = anyio.CapacityLimiter(self.limits.server_concurrency)
        return self.limiters[server]


class TurnCalls:
    """Starts a turn's items as they complete; `render` gives the `<result>`s once all have run."""

    def __init__(
        self,
        ctx: PlanContext,
        episode: Episode,
        budget: Budget,
        tg: TaskGroup,
        *,
        plan_id: str,
        scope: CallScope = NO_CLIENT,
        servers: frozenset[str] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        on_event: Callable[[str, Any], None] | None = None,
    ) -> None:
        self._ctx = ctx
        self._scope = scope
        self._episode = episode
        self._budget = budget
        self._tg = tg
        self._plan_id = plan_id
        self._servers = servers
        self._clock = clock
        self._on_event = on_event
        self._done: dict[int | str, anyio.Event] = {}
        self._first_step = episode.next_step
        """Steps before this one are earlier turns': the model has seen their results."""
        self.steps: list[int] = []
        self.problems: list[PlanProblem] = []
        self.warnings: list[str] = []
        self.blocks: list[BlockOutcome] = []
        self.referenced: set[int] = set()
        self.latencies_ms: list[float] = []
        """Per item: from its closing tag to its start (waiting for a reference included)."""
        self.budget_expired = False
        self.refused_server: str | None = None
        self.bytes_reached = False
        """The task's `result_bytes` limit was reached during this turn: the rest was stopped."""
        self._cut_bytes = 0
        """Bytes read but not kept: the part of results past `result_bytes`."""
        self._running: set[anyio.CancelScope] = set()
        self.items = 0
        self.dropped = 0
        """Items not even checked: the turn already had `_MAX_PROBLEMS` problems."""

    def _event(self, kind: str, data: Any) -> None:
        if self._on_event is not None:
            self._on_event(kind, data)

    def _check(self, text: str) -> CheckedPlan:
        limits = self._ctx.limits
        episode = self._episode
        turn = parse_turn(
            text,
            ends_with_stop=False,  # `<execute_tools />` is the stop sequence: never in the model's text
            first_step=episode.next_step,
            max_bytes=limits.max_bytes,
            max_steps=limits.max_steps,
            max_depth=limits.max_depth,
        )
        if not turn.calls:
            raise PlanCheckError([PlanProblem("empty_plan", "this item holds no tool call", tag=text[:40])])
        checked = check_plan(
            turn,
            self._ctx.tools.registry,
            shorthands=self._ctx.shorthands,
            limits=limits,
            earlier_steps={n: r.id for n, r in episode.steps.items()},
            earlier_ids=dict(episode.ids),
        )
        problems = self._ctx.policy(checked, self._scope.caller) if self._ctx.policy is not None else []
        if self._servers is not None:
            problems += [
                PlanProblem(
                    "server_not_allowed",
                    f"this task may only call {', '.join(sorted(self._servers)) or 'no server'}",
                    step=c.step,
                    tag=c.node.tag,
                )
                for c in checked.calls
                if c.route.server not in self._servers
            ]
        if problems:
            raise PlanCheckError(problems)
        self.warnings.extend((*turn.warnings, *checked.warnings))
        return checked

    # -- the step gate: budgets kept as each step runs (`toolscore.plan.run.StepGate`) -------------

    def retry(self, server: str) -> bool:
        """A retry is one more call to `server`: it counts against `server_calls`."""
        if self._budget.take_calls([server]) is None:
            return True
        self.refused_server = server
        return False

    def finished(self, record: StepRecord) -> None:
        """Once the task's results reach `result_bytes`, nothing more of this turn runs or is read."""
        over = self._budget.result_bytes + self.result_bytes - self._budget.limits.result_bytes
        if over < 0:
            return
        if over > 0 and record.text:  # a step with nothing read (skipped, cancelled) has nothing to cut
            self._cut(record, over)
        if self.bytes_reached:
            return
        self.bytes_reached = True
        for scope in self._running:
            scope.cancel()

    def _cut(self, record: StepRecord, over: int) -> None:
        """Keep no more of `record` than the budget allows (one result may be far larger than all of it).

        The bytes read still count: `_cut_bytes` keeps `result_bytes` at what was read.
        """
        before = record.bytes
        keep = max(0, before - over)
        text = record.text.encode()[:keep].decode(errors="ignore")
        record.text = f"{text}\n[cut: this task's result_bytes limit was reached]"
        record.json = None
        record.result = None
        if record.error is not None and len(record.error) > len(record.text):  # a failure's error is its text
            record.error = record.text
        self._cut_bytes += before - record.bytes

    def submit(self, text: str, closed_at: float) -> None:
        """Check one item and start it (or queue it behind what it references)."""
        if self.refused_server is not None or self.bytes_reached:
            return  # a limit already stopped this turn's calls
        self.items += 1
        if len(self.problems) >= _MAX_PROBLEMS:
            self.dropped += 1  # a turn of garbage must not become a huge observation
            return
        try:
            checked = self._check(text)
        except (PlanSyntaxError, PlanCheckError) as exc:
            self.problems.extend(exc.problems)
            # Its step numbers are spent: a later item of the turn must not be numbered the same.
            numbered = [p.step for p in exc.problems if isinstance(p.step, int)]
            self._episode.next_step = max(self._episode.next_step, max(numbered, default=0) + 1)
            self._event("plan_error", len(exc.problems))
            return
        over = self._budget.take_calls([c.route.server for c in checked.calls])
        if over is not None:
            self.refused_server = over
            return
        episode = self._episode
        episode.next_step += len(checked.calls)
        waits: list[anyio.Event] = []
        for call in checked.calls:
            for ref in call.refs:
                step = ref.target if isinstance(ref.target, int) else episode.ids.get(ref.target)
                if step is not None:
                    self.referenced.add(step)
                event = self._done.get(ref.target)
                if event is not None and event not in waits:
                    waits.append(event)
        done = anyio.Event()
        # Registered now, not when the item starts: a later item may reference these ids meanwhile.
        for call in checked.calls:
            node = call.node
            episode.steps[call.step] = StepRecord(
                call.step, node.id, call.route.server, call.route.remote_name, on_error=node.on_error
            )
            self.steps.append(call.step)
            self._done[call.step] = done
            if node.id:
                episode.ids[node.id] = call.step
                self._done[node.id] = done
        for ident, target in checked.ids.items():
            if isinstance(target, Block):
                episode.ids[ident] = None
                self._done[ident] = done
        self._tg.start_soon(self._run, checked, waits, done, closed_at)

    async def _run(self, checked: CheckedPlan, waits: list[anyio.Event], done: anyio.Event, closed_at: float) -> None:
        scope = anyio.CancelScope()
        self._running.add(scope)
        try:
            with scope:
                await self._run_item(checked, waits, closed_at)
        finally:
            self._running.discard(scope)
            done.set()

    async def _run_item(self, checked: CheckedPlan, waits: list[anyio.Event], closed_at: float) -> None:
        for event in waits:
            await event.wait()
        if self.bytes_reached:
            return
        started = self._clock()
        self.latencies_ms.append((started - closed_at) * 1000)
        self._event("call_start", checked.calls[0].step)
        runner = PlanRunner(
            engine=self._ctx.engine,
            episode=self._episode,
            plan_id=self._plan_id,
            limiters=self._ctx.limiter,
            progress=None,
            total=len(checked.calls),
            max_argument_bytes=self._ctx.max_argument_bytes,
            gate=self,
            # Its calls are judged by what the model read (the flow rule's quotation check).
            scope=replace(self._scope, seen=self._seen),
        )
        finished = await runner.run(checked, self._ctx.limits.budget_seconds)
        self.blocks.extend(runner.blocks)
        self.budget_expired |= not finished
        self._event("call_end", checked.calls[0].step)

    def _seen(self) -> list[tuple[str, str]]:
        """The untrusted results of the task's earlier turns, which the model has read, newest first."""
        steps = self._episode.steps
        return [
            (record.text, f"step {n} ({record.server}.{record.tool})")
            for n in sorted(steps, reverse=True)
            if n < self._first_step and UNTRUSTED in (record := steps[n]).labels
        ]

    @property
    def records(self) -> list[StepRecord]:
        return [self._episode.steps[n] for n in sorted(self.steps)]

    @property
    def result_bytes(self) -> int:
        return sum(r.bytes for r in self.records) + self._cut_bytes

    def render(self) -> str:
        """The `<result>`s of every call of the turn, then its plan errors (once all have run)."""
        limits = self._ctx.limits
        parts = []
        if self.steps:
            text, _ = render_results(
                self.records,
                self.blocks,
                per_result=limits.result_view_bytes,
                per_turn=limits.turn_view_bytes,
                warnings=self.warnings,
                budget_expired=self.budget_expired,
                intermediate=frozenset(self.referenced),
            )
            parts.append(text)
        if self.problems:
            errors = render_plan_errors(self.problems).rsplit("\n", 1)[0]
            parts.append(
                errors + "\nThe items with these errors did not run" + ("; the others did." if self.steps else ".")
            )
        if self.dropped:
            parts.append(f"<warning>{self.dropped} more item(s) were not read: fix the errors above first</warning>")
        if self.refused_server is not None:
            parts.append(f"<warning>calls to {self.refused_server} would pass this task's limit: not run</warning>")
        if self.bytes_reached:
            limit = self._budget.limits.result_bytes
            parts.append(
                f"<warning>tool results reached this task's limit of {limit} bytes: the rest was stopped</warning>"
            )
        return "\n".join(parts)
