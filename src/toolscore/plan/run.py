"""Running a checked plan over the downstream servers, every step through the engine.

Theory of operation. In plan language v1 a call may only reference nodes that structurally
finish before it starts (see `check.py`), so the block tree already holds every data edge: a
recursive walk with anyio task groups starts each node the moment its structural predecessors
finish, which is exactly the event-driven dataflow order, with no polling and no layer barriers.

How a block runs its children is its kind's strategy in the block table (`blocks.py`): given
`_node` as the callback that runs one child, `<sequential>` awaits them in order, `<parallel>`
and `<race>` start them in one task group and cancel it when their outcome is decided,
`<fallback>` awaits alternatives in turn. A child that never ran keeps the status `skipped`.

Deadlines nest: a call's `timeout` is passed to the engine (which cancels the downstream call);
a block's `timeout` and the plan budget are cancel scopes. A step cancelled after its effective
deadline passed is a `timeout`, otherwise `cancelled`. A step whose reference points at a failed
step is `skipped` (its source's `on_error="continue"` lets it run and see `${x.error}`); a
reference that does not resolve is a `ref_error`. Whatever happens, every finished step's result
is kept: references use the full result, the model sees a capped view.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol

import anyio
import mcp_types

from toolscore._engine import CallOutcome, ToolExecutionEngine
from toolscore.errors import RefError
from toolscore.plan.blocks import SPECS
from toolscore.plan.encoding import json_value, loads_result
from toolscore.plan.nodes import (
    READ_TOOL,
    Block,
    CheckedBlock,
    CheckedCall,
    CheckedCapability,
    CheckedNode,
    CheckedPlan,
    CheckedStep,
    ResourceReader,
    Status,
)
from toolscore.plan.refs import Ref, resolve, value_of
from toolscore.scope import NO_CLIENT, CallScope
from toolscore.trust.labels import StepTaint, Taint, block_steps, identifier, join
from toolscore.types import ProgressFn

__all__ = [
    "CAPABILITY_SERVER",
    "BlockOutcome",
    "CapabilityHub",
    "Episode",
    "PlanRunner",
    "StepGate",
    "StepRecord",
]

CAPABILITY_SERVER = "capability"
"""What a capability step's record names as its server (its tool is the capability)."""


class CapabilityHub(Protocol):
    """What plans need of the ToolHub (`toolscore.toolhub.ToolHub` is one)."""

    @property
    def offers_capabilities(self) -> bool:
        """Whether the config declares capabilities (then the plan contract names them)."""
        ...

    def candidate_table(self) -> dict[str, tuple[str, ...]]:
        """Capability -> the tools offering it, in the order a call tries them."""
        ...

    async def call_capability(
        self,
        capability: str,
        arguments: Mapping[str, Any],
        *,
        plan_id: str | None = None,
        scope: CallScope = NO_CLIENT,
    ) -> mcp_types.CallToolResult:
        """One capability call: candidates, argument maps, strategy, fan-out, policy and audit per candidate."""
        ...


_RETRY_KINDS = frozenset({"timeout", "unavailable", "protocol"})
_BACKOFF_FIRST, _BACKOFF_MAX = 0.25, 5.0


@dataclass
class StepRecord:
    """The outcome of one step; its `value()` is what references see."""

    step: int
    id: str | None
    server: str
    tool: str
    status: Status = "skipped"
    text: str = ""
    json: Any = None
    error: str | None = None
    ms: float = 0.0
    attempts: int = 0
    result: mcp_types.CallToolResult | None = None
    """The result as the SDK's model, where the step decoded one (None where it was read from the
    server's bytes, or never came)."""
    on_error: str = "skip_dependents"
    labels: Taint = field(default_factory=dict)
    """Its result's data-flow labels and their origins (`toolscore.trust.labels`): those of what its
    arguments referenced and, where the `flow` rule is on, its server's."""

    @property
    def bytes(self) -> int:
        return len(self.text.encode())

    def value(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "text": self.text,
            "json": self.json,
            "error": self.error,
            "ms": round(self.ms, 1),
            "attempts": self.attempts,
            "server": self.server,
            "tool": self.tool,
        }


@dataclass
class BlockOutcome:
    """A block that failed or timed out, for its `<result block=…>` line."""

    kind: str
    id: str | None
    status: Status
    error: str | None = None


@dataclass
class Episode:
    """The turns of one `orchestrate` conversation: step numbers continue, references reach back."""

    id: str
    next_step: int = 1
    steps: dict[int, StepRecord] = field(default_factory=dict)
    ids: dict[str, int | None] = field(default_factory=dict)
    """id -> step number (None for a block id, whose value is in `block_values`)."""
    block_values: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    block_steps: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Block id -> the steps inside it: a reference to the block carries their labels."""

    def lookup(self, target: int | str) -> dict[str, Any] | None:
        """A target's value record, for reference resolution."""
        if isinstance(target, int):
            record = self.steps.get(target)
            return record.value() if record else None
        if target in self.block_values:
            return self.block_values[target]
        step = self.ids.get(target)
        record = self.steps.get(step) if step is not None else None
        return record.value() if record else None


def _calls(node: CheckedBlock) -> list[CheckedStep]:
    """Every step inside a block, in document order."""
    found: list[CheckedStep] = []
    for child in node.children:
        found.extend(_calls(child) if isinstance(child, CheckedBlock) else [child])
    return found


def _named(record: StepRecord) -> str:
    return f" ({record.id})" if record.id else ""


def _outcome(record: StepRecord) -> str:
    """`error: <the first of its error>`, for a step that another's reason names."""
    error = (record.error or "").strip().replace("\n", " ")
    return f"{record.status}: {error[:160]}{'…' if len(error) > 160 else ''}" if error else record.status


def _text_of(result: mcp_types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, mcp_types.TextContent))


def _read(run: CallOutcome, record: StepRecord) -> bool:
    """A call's result into its step's record (`text`, `json`, `result`); whether it is an error.

    A result the server's bytes carried whole (`CallOutcome.raw`: no hook read it) is read from
    them, without building the SDK's model; `record.result` then stays None.
    """
    raw = run.raw
    readable = raw.readable() if raw is not None else None
    if raw is not None and readable is not None:
        record.result = None
        record.text, structured = readable
        record.json = _json_from(structured, record.text)
        return raw.is_error
    result = raw.model() if raw is not None else run.result
    record.result = result
    record.text = _text_of(result)
    record.json = _json_of(result, record.text)
    return bool(result.is_error)


def _contents(result: mcp_types.CallToolResult, record: StepRecord) -> None:
    """A read step's `text` (the texts read) and `json` (`{"contents": [...]}`, as `resources/read`
    answers: each item's public URI, MIME type, and text or base64 blob)."""
    items = [b.resource for b in result.content if isinstance(b, mcp_types.EmbeddedResource)]
    record.text = "\n".join(i.text for i in items if isinstance(i, mcp_types.TextResourceContents))
    record.json = {"contents": [i.model_dump(by_alias=True, mode="json", exclude_none=True) for i in items]}


def _json_of(result: mcp_types.CallToolResult, text: str) -> Any:
    """A step's `json`: its structured content, else its text as JSON, else the text; values that
    are not JSON (NaN, bytes, integer keys) in the documented encoding (`encoding.py`)."""
    return _json_from(result.structured_content, text)


def _json_from(structured: dict[str, Any] | None, text: str) -> Any:
    if structured is not None:
        try:
            return json_value(structured)
        except (TypeError, ValueError):
            return text  # a value no encoding covers (an object a hook put there): the text stands
    try:
        return loads_result(text)
    except (ValueError, RecursionError):
        return text


class StepGate(Protocol):
    """A budget kept as steps run, not only between plans (`delegate`'s)."""

    def retry(self, server: str) -> bool:
        """Whether one more attempt may go to `server` (counted if so)."""
        ...

    def finished(self, record: StepRecord) -> None:
        """A step ended: its result is in `record` (the gate may cancel what is still running)."""
        ...


class PlanRunner:
    """Runs one checked turn of an episode."""

    def __init__(
        self,
        *,
        engine: ToolExecutionEngine,
        episode: Episode,
        plan_id: str,
        limiters: Callable[[str], anyio.CapacityLimiter],
        progress: ProgressFn | None,
        total: int,
        max_argument_bytes: int | None = None,
        capabilities: CapabilityHub | None = None,
        gate: StepGate | None = None,
        scope: CallScope = NO_CLIENT,
        reads: ResourceReader | None = None,
    ) -> None:
        """Args:
        scope: The front request the plan serves: its caller's, whose client receives the steps'
            server requests.
        max_argument_bytes: The most a step's arguments may grow to once references are resolved.
        capabilities: Runs the capability steps (the checker refuses them where there is none).
        gate: Budgets kept step by step (`delegate`'s): retries counted, each result's bytes seen.
        reads: Runs the read steps (`<call tool="resources/read">`; the checker refuses them without it).
        """
        self._reads = reads
        self._gate = gate
        self._capabilities = capabilities
        self._max_argument_bytes = max_argument_bytes
        self._engine = engine
        self._episode = episode
        self._plan_id = plan_id
        self._limiters = limiters
        self._progress = progress
        self._total = total
        self._scope = scope
        self._done = 0
        self.blocks: list[BlockOutcome] = []
        # The plan's own outcome once `run` returns: `ok` when its blocks' rules say it
        # succeeded, which a `<fallback>` that rescued a failed step still does.
        self.status: Status = "skipped"
        self._block_status: dict[int, Status] = {}

    async def run(self, plan: CheckedPlan, budget: float) -> bool:
        """Run the plan within `budget` seconds; returns False if the budget ran out."""
        for call in plan.steps:
            node = call.node
            server, tool = (
                (CAPABILITY_SERVER, call.capability)
                if isinstance(call, CheckedCapability)
                else (call.route.server, call.route.remote_name)
            )
            self._episode.steps[call.step] = StepRecord(call.step, node.id, server, tool, on_error=node.on_error)
            if node.id:
                self._episode.ids[node.id] = call.step
        for ident, target in plan.ids.items():
            if isinstance(target, Block):
                self._episode.ids[ident] = None
        self._episode.block_steps.update(block_steps(plan))
        # One reading of the clock for the scope and the deadline its steps compare against: two
        # readings could differ by more than the tolerance on a busy loop, and a step the budget
        # cut short would show as `cancelled`.
        deadline = anyio.current_time() + budget
        with anyio.CancelScope(deadline=deadline) as scope:
            self.status = await self._node(plan.root, deadline)
        if scope.cancelled_caught:
            self.status = "timeout"
            self.explain_budget(plan)
        return not scope.cancelled_caught

    # -- nodes ------------------------------------------------------------------------------------

    async def _node(self, node: CheckedNode, deadline: float) -> Status:
        """Run a node; `deadline` is the effective one (blocks and budget), to tell timeouts apart."""
        if not isinstance(node, CheckedBlock):
            return await self._call(node, deadline)
        block = node.block
        spec = SPECS[block.kind]
        timed_out = False
        if block.timeout is None:
            status = await spec.run(node, self._node, deadline)
        else:
            own = anyio.current_time() + block.timeout
            with anyio.CancelScope(deadline=own) as scope:
                status = await spec.run(node, self._node, min(deadline, own))
            if scope.cancelled_caught:
                status, timed_out = "timeout", True
        self._block_status[id(node)] = status
        self._explain_unrun(node, status)
        value = self._block_value(node, status)
        if block.id:
            self._episode.block_values[block.id] = value
        # Only the block's own timeout makes it "ran past its timeout": a step's own `timeout`
        # is that step's `timeout` status, and the plan budget is reported for the whole plan.
        if (status != "ok" and spec.failure is not None) or timed_out:
            self.blocks.append(BlockOutcome(block.kind, block.id, status, self._block_error(node, status, timed_out)))
        return status

    # -- calls ------------------------------------------------------------------------------------

    async def _call(self, call: CheckedStep, deadline: float) -> Status:
        record = self._episode.steps[call.step]
        began = time.perf_counter()
        try:
            await self._attempts(call, record)
        except anyio.get_cancelled_exc_class():
            # Inside a cancelled scope anyio reports the deadline as -inf whatever the cause, so
            # the effective deadline is passed down the tree to tell a timeout from a decision.
            expired = anyio.current_time() >= deadline - 0.001
            record.status = "timeout" if expired else "cancelled"
            record.error = (
                "the enclosing deadline expired" if expired else "cancelled: another branch decided the block"
            )
            record.ms = (time.perf_counter() - began) * 1000
            await self._finished(record)
            raise
        record.ms = (time.perf_counter() - began) * 1000
        await self._finished(record)
        return record.status

    async def _attempts(self, call: CheckedStep, record: StepRecord) -> None:
        for ref in call.refs:
            source = self._episode.lookup(ref.target)
            source_record = self._source_record(ref.target)
            if source is not None and source["status"] != "ok":
                on_error = source_record.on_error if source_record else "skip_dependents"
                if on_error != "continue":
                    record.status = "skipped"
                    if source_record is not None:
                        cause = f"step {source_record.step}{_named(source_record)} ended {_outcome(source_record)}"
                    else:
                        cause = f"the block '{ref.target}' ended {source['status']}"
                    record.error = f"skipped: it uses {ref.raw}, and {cause}"
                    return
        try:
            arguments = resolve(call.arguments, self._episode.lookup, max_bytes=self._max_argument_bytes)
        except RefError as exc:
            record.status, record.error = "ref_error", str(exc)
            return
        # The labels its references bring, in the step's own scope for the flow hook to judge (and
        # complete with its server's); the calls of a capability step carry them too.
        labels, text = self._labels(call)
        taint = StepTaint(call.step, labels, text=text)
        try:
            await self._step(call, arguments, record, replace(self._scope, taint=taint))
        finally:
            record.labels = taint.result if taint.result is not None else taint.arguments

    def _labels(self, call: CheckedStep) -> tuple[dict[str, str], dict[str, str]]:
        """The union of the labels of every result a step's references read, and of those read
        with a value that is no identifier (a rule may let identifiers through)."""
        found: dict[str, str] = {}
        text: dict[str, str] = {}
        for ref in call.refs:
            target = ref.target
            if isinstance(target, str) and target in self._episode.block_steps:
                steps: tuple[int, ...] = self._episode.block_steps[target]
            else:
                record = self._source_record(target)
                steps = (record.step,) if record is not None else ()
            labels = join(*(self._episode.steps[s].labels for s in steps if s in self._episode.steps))
            found = join(found, labels)
            if labels and not self._identifier(ref):
                text = join(text, labels)
        return found, text

    def _identifier(self, ref: Ref) -> bool:
        """Whether the reference reads an identifier (one that reads nothing counts as text)."""
        try:
            return identifier(value_of(ref, self._episode.lookup))
        except RefError:
            return False

    async def _step(self, call: CheckedStep, arguments: dict[str, Any], record: StepRecord, scope: CallScope) -> None:
        if isinstance(call, CheckedCapability):
            await self._capability(call, arguments, record, scope)
            return
        if call.reads:
            execute = self._resource(call, arguments, record, scope)
            if execute is None:
                return  # the record says why
        else:
            # read as bytes (`_read`) where no hook needs the model
            execute = partial(self._engine.execute, call.route.public_name, arguments, keep_bytes=True)
        retries = call.node.retries
        delay = _BACKOFF_FIRST
        for attempt in range(1, retries + 2):
            record.attempts = attempt
            async with self._limiters(call.route.server):
                run = await execute(plan_id=self._plan_id, timeout=call.node.timeout, scope=scope)
            is_error = _read(run, record)
            if run.error is None and not is_error:
                if call.reads and record.result is not None:
                    _contents(record.result, record)
                record.status, record.error = "ok", None
                return
            kind = run.error.kind if run.error is not None else "tool_error"
            record.status = "timeout" if kind == "timeout" else "error"
            record.error = record.text or kind
            if kind not in _RETRY_KINDS or attempt > retries:
                return
            if self._gate is not None and not self._gate.retry(call.route.server):
                record.error = f"{record.error}; not retried: {call.route.server} reached this task's call limit"
                return
            await anyio.sleep(min(delay, _BACKOFF_MAX) * random.uniform(0.8, 1.2))
            delay *= 2

    def _resource(
        self, call: CheckedCall, arguments: dict[str, Any], record: StepRecord, scope: CallScope
    ) -> Callable[..., Awaitable[CallOutcome]] | None:
        """A read step's call: the engine running the pseudo-tool `resources/read` of the server that
        owns the URI (policy, deadline, audit, as a client's read), which the reader sends; None,
        with the record saying why, where the URI resolved to one of another server or of none."""
        uri, server = arguments.get("uri"), call.route.server
        owner = self._reads.owner(uri) if self._reads is not None and isinstance(uri, str) else None
        if owner is None or owner[0] != server:
            record.attempts, record.status = 1, "error"
            record.error = record.text = (
                f"no server serves '{str(uri)[:200]}'"
                if owner is None
                else f"'{str(uri)[:200]}' belongs to server '{owner[0]}', not '{server}': not read"
            )
            return None
        assert self._reads is not None
        original = owner[1]
        invoke = partial(self._reads.read, server, original, f"the read of '{uri}'", scope)
        return partial(self._engine.execute, READ_TOOL, {"uri": original}, route=call.route, invoke=invoke)

    async def _capability(
        self, call: CheckedCapability, arguments: dict[str, Any], record: StepRecord, scope: CallScope
    ) -> None:
        """A capability step: one ToolHub call, its candidates' own calls each through the engine."""
        record.attempts = 1
        if self._capabilities is None:  # the checker refuses capability steps without a hub
            record.status, record.error = "error", "no ToolHub: capability steps cannot run here"
            return
        timeout = call.node.timeout
        with anyio.move_on_after(timeout) as deadline:
            result = await self._capabilities.call_capability(
                call.capability, arguments, plan_id=self._plan_id, scope=scope
            )
        if deadline.cancelled_caught:
            record.status, record.error = "timeout", f"the capability call ran past the step's timeout ({timeout} s)"
            return
        record.result = result
        record.text = _text_of(result)
        # The hub closes an answer with a note on its candidates (also in _meta): the JSON is the answer's.
        answer = result.model_copy(update={"content": result.content[:-1]}) if not result.is_error else result
        record.json = _json_of(answer, _text_of(answer))
        if result.is_error:
            record.status, record.error = "error", record.text or "tool_error"
        else:
            record.status, record.error = "ok", None

    def _explain_unrun(self, node: CheckedBlock, status: Status) -> None:
        """Give the steps a block never started the reason it did not."""
        records = [self._episode.steps[call.step] for call in _calls(node)]
        unrun = [r for r in records if r.status == "skipped" and r.error is None]
        if not unrun:
            return
        kind = node.block.kind
        failed = self._failure_in(node)
        winner = next((r for r in records if r.status == "ok"), None)
        if status == "ok" and winner is not None:
            reason = f"not run: step {winner.step}{_named(winner)} succeeded first and decided the <{kind}>"
        elif failed is not None:
            reason = f"not run: the <{kind}> stopped after step {failed.step}{_named(failed)} ended {_outcome(failed)}"
        else:
            reason = f"not run: the <{kind}> stopped before it"
        for record in unrun:
            record.error = reason

    def _failure_in(self, node: CheckedBlock) -> StepRecord | None:
        """The first failed step that counted in `node`: not one inside a child block that still
        ended `ok` (a `<fallback>` rescued it), and one with `on_error="continue"` only if no other."""
        failures: list[StepRecord] = []
        for child in node.children:
            if isinstance(child, CheckedBlock):
                if self._block_status.get(id(child), "ok") != "ok":
                    inner = self._failure_in(child)
                    failures.extend([inner] if inner is not None else [])
            else:
                record = self._episode.steps[child.step]
                if record.status not in ("ok", "skipped", "cancelled"):
                    failures.append(record)
        return next((r for r in failures if r.on_error != "continue"), failures[0] if failures else None)

    def explain_budget(self, plan: CheckedPlan) -> None:
        """After the budget ran out: the steps that never started say so."""
        for call in plan.steps:
            record = self._episode.steps[call.step]
            if record.status == "skipped" and record.error is None:
                record.error = "not run: the plan's time budget ran out first"

    def _source_record(self, target: int | str) -> StepRecord | None:
        step = target if isinstance(target, int) else self._episode.ids.get(target)
        return self._episode.steps.get(step) if step is not None else None

    async def _finished(self, record: StepRecord) -> None:
        self._done += 1
        if self._gate is not None:
            self._gate.finished(record)
        if self._progress is not None:
            message = f"step {record.step} {record.server}.{record.tool} {record.status} {record.ms:.0f} ms"
            with anyio.CancelScope(shield=True):
                await self._progress(self._done, self._total, message)

    # -- block values -----------------------------------------------------------------------------

    def _child_values(self, node: CheckedBlock) -> list[tuple[str | None, dict[str, Any] | None]]:
        out: list[tuple[str | None, dict[str, Any] | None]] = []
        for child in node.children:
            if not isinstance(child, CheckedBlock):
                out.append((child.node.id, self._episode.steps[child.step].value()))
            else:
                ident = child.block.id
                out.append((ident, self._episode.block_values.get(ident) if ident else self._block_value(child, "ok")))
        return out

    def _block_value(self, node: CheckedBlock, status: Status) -> dict[str, Any] | None:
        return SPECS[node.block.kind].value(self._child_values(node), status)

    def _block_error(self, node: CheckedBlock, status: Status, timed_out: bool) -> str:
        kind = node.block.kind
        if timed_out:
            return f"<{kind}> ran past its timeout; unfinished steps were cancelled"
        failed = [
            f"step {c.step}: {self._episode.steps[c.step].status}"
            for c in node.children
            if not isinstance(c, CheckedBlock) and self._episode.steps[c.step].status != "ok"
        ]
        return f"<{kind}>: {SPECS[kind].failure}" + (f" ({'; '.join(failed)})" if failed else "")
