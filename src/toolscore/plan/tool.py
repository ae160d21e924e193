"""The `orchestrate` front tool: parse a plan, check all of it, run it, answer with `<result>`s.

The parser, the checker and the runner are imported with the first plan: a gateway that is only
asked for passthrough calls (and `tools/list`, which shows this tool) never loads them.
"""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from collections import Counter, OrderedDict
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types

from toolscore._engine import ToolExecutionEngine, error_result
from toolscore.audit.sinks import AuditRecord, AuditSink
from toolscore.config import Config
from toolscore.errors import InputRequired, PlanCheckError, PlanProblem, PlanSyntaxError, Rejected
from toolscore.plan.blocks import SPECS, shorthand_table
from toolscore.plan.nodes import (
    READ_TOOL,
    CheckedBlock,
    CheckedCapability,
    CheckedNode,
    CheckedPlan,
    ParsedTurn,
    PlanPolicy,
    ResourceReader,
)
from toolscore.scope import NO_CLIENT, CallScope
from toolscore.telemetry import tracing
from toolscore.types import ProgressFn, ToolSource

if TYPE_CHECKING:
    from toolscore.plan.approval import Approve
    from toolscore.plan.run import CapabilityHub, Episode
    from toolscore.trust.labels import Seen

__all__ = ["ORCHESTRATE", "Orchestrator"]

ORCHESTRATE = "orchestrate"

_CONTRACT = """\
Run several tool calls in one turn: write an XML plan; toolscore checks the whole plan, runs it and \
answers with one <result step= status=> per call.
- Call: <SERVER><TOOL>{{"json": "args"}}</TOOL></SERVER>, or <call server="S" tool="T">{{...}}</call>.
- Shorthand tags take text for their main parameter: {shorthands}.
- Blocks: {blocks}. Call attributes: id="name", timeout="20s", retries="2" (read-only/idempotent tools), \
on_error="continue".
- Use earlier results: ${{id}}, ${{3}}, $result_of_step_3, with paths ${{id.items[0].url}}, ${{id.text}}, \
${{id.status}}; a JSON string that is exactly one reference gets the typed value. $$ is a literal $.
- A step may only use steps that finish before it starts (earlier in a sequence, or an earlier turn of the same \
episode). End the plan with <execute_tools />. Put reasoning in <think>...</think>.
Servers: {servers}."""

_BLOCKS = ", ".join(spec.summary for spec in SPECS.values())
"""Every block tag as the contract lists it, from the block table."""

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "plan": {"type": "string", "description": "The XML plan (see the tool description)."},
        "episode": {
            "type": "string",
            "description": "Continue an episode: its id from an earlier answer; references may then use its steps.",
        },
        "dry_run": {"type": "boolean", "description": "Check the plan and describe it without running anything."},
    },
    "required": ["plan"],
    "additionalProperties": False,
}


def _text(text: str, *, is_error: bool = False, structured: dict[str, Any] | None = None) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text=text)], structured_content=structured, is_error=is_error
    )


def _referenced_steps(plan: CheckedPlan) -> frozenset[int]:
    """Steps of this plan whose results later steps take by reference."""
    steps: set[int] = set()
    for call in plan.steps:
        for ref in call.refs:
            target = plan.ids.get(ref.target, ref.target) if isinstance(ref.target, str) else ref.target
            if isinstance(target, int):
                steps.add(target)
    return frozenset(steps)


class EpisodeStore:
    """Episodes per caller: a caller sees only its own, and evicts only its own.

    Each caller keeps its `per_caller` most recently used episodes; past `max_callers` callers,
    the least recently active caller's episodes go. Ids are random, so a leaked one is still
    useless to another caller.
    """

    def __init__(self, *, per_caller: int, max_callers: int) -> None:
        self._per_caller = per_caller
        self._max_callers = max_callers
        self._by_caller: OrderedDict[str, OrderedDict[str, Episode]] = OrderedDict()

    def get(self, caller: str, ident: str) -> Episode | None:
        """The caller's episode `ident`, marked as recently used; None if it has none by that id."""
        episodes = self._by_caller.get(caller)
        if episodes is None or ident not in episodes:
            return None
        self._by_caller.move_to_end(caller)
        episodes.move_to_end(ident)
        return episodes[ident]

    def held_by_another(self, caller: str, ident: str) -> bool:
        """Whether a caller other than `caller` holds episode `ident` in memory now."""
        return any(ident in episodes for other, episodes in self._by_caller.items() if other != caller)

    def new(self, caller: str, episode: Episode | None = None) -> Episode:
        """A fresh episode of the caller's (or `episode`, restored from the durable store)."""
        from toolscore.plan.run import Episode

        episode = episode or Episode(secrets.token_hex(16))
        episodes = self._by_caller.setdefault(caller, OrderedDict())
        self._by_caller.move_to_end(caller)
        episodes[episode.id] = episode
        while len(episodes) > self._per_caller:
            episodes.popitem(last=False)
        while len(self._by_caller) > self._max_callers:
            self._by_caller.popitem(last=False)
        return episode

    def end(self, caller: str, ident: str) -> None:
        """Forget one episode (it reached its answer)."""
        episodes = self._by_caller.get(caller)
        if episodes is not None:
            episodes.pop(ident, None)

    def forget(self, caller: str) -> None:
        """Forget every episode of a caller that has gone away."""
        self._by_caller.pop(caller, None)


_MAX_CALLERS = 256
_LISTED_CAPABILITIES = 12
"""Capabilities the contract names (those most tools offer)."""
_ANONYMOUS = "principal:anonymous"
_OFFLOAD_BYTES = 4096
"""Plans larger than this are parsed and checked in a worker thread, off the event loop."""


def _read_before(episode: Episode, first: int) -> Seen:
    """The untrusted results of an episode's turns before step `first`, which the model read
    before it wrote the plan that starts there: arguments that quote them carry their label, as a
    `delegate` call's do (`toolscore.policy.taint`)."""

    def seen() -> list[tuple[str, str]]:
        from toolscore.trust.labels import UNTRUSTED  # asked only where a flow rule is on

        return [
            (record.text, f"{record.labels[UNTRUSTED]}, read in an earlier turn")
            for step, record in episode.steps.items()
            if step < first and record.text and UNTRUSTED in record.labels
        ]

    return seen


class Orchestrator:
    """Owns the episodes and per-server plan concurrency; one per gateway."""

    def __init__(
        self,
        *,
        tools: ToolSource,
        engine: ToolExecutionEngine,
        config: Config,
        audit: AuditSink,
        policy: PlanPolicy | None = None,
        refusal: str | None = None,
        capabilities: CapabilityHub | None = None,
        reads: ResourceReader | None = None,
    ) -> None:
        """Args:
        refusal: Why policy forbids `orchestrate` itself, if it does: every call is refused.
        capabilities: The ToolHub, for `<call capability="...">` steps; without it they are refused.
        reads: The servers' resources, for `<call tool="resources/read">` steps; without it they are refused.
        """
        self.reads = reads
        self._tools = tools
        self._policy = policy
        self._engine = engine
        self._config = config
        self._limits = config.settings.plan
        self._audit = audit
        self.refusal = refusal
        self._shorthands = shorthand_table([(s.name, s.shorthands) for s in config.enabled_servers])
        self.episodes = EpisodeStore(per_caller=self._limits.episodes, max_callers=_MAX_CALLERS)
        self._limiters: dict[str, anyio.CapacityLimiter] = {}
        self.capabilities = capabilities

    def reconfigure(
        self,
        config: Config,
        *,
        policy: PlanPolicy | None,
        refusal: str | None,
    ) -> None:
        """Plans checked from now on follow `config` and `policy` (a live reload); a plan running
        goes on with what it was checked under. Episodes are kept."""
        self._config, self._limits, self._policy, self.refusal = config, config.settings.plan, policy, refusal
        self._shorthands = shorthand_table([(s.name, s.shorthands) for s in config.enabled_servers])

    def tool(self) -> mcp_types.Tool:
        """The tool definition, listing the shorthand tags and servers available now."""
        registry = self._tools.registry
        shorthands = ", ".join(
            f"<{tag}> ({server}.{binding.tool})"
            for tag, (server, binding) in sorted(self._shorthands.items())
            if registry.find(server, binding.tool) is not None
        )
        description = _CONTRACT.format(
            shorthands=shorthands or "none configured",
            servers=", ".join(registry.servers) or "none",
            blocks=_BLOCKS,
        )
        reads = self.reads
        if reads is not None and any(reads.route(server) is not None for server in registry.servers):
            description += (
                f'\n- Read a resource or skill file: <call tool="{READ_TOOL}">skill://S/NAME/SKILL.md</call> '
                f'(a URI by reference: <call server="S" tool="{READ_TOOL}">{{"uri": "${{id.text}}"}}</call>).'
            )
        hub = self.capabilities
        if hub is not None and hub.offers_capabilities and (table := hub.candidate_table()):
            common = sorted(table, key=lambda tag: (-len(table[tag]), tag))[:_LISTED_CAPABILITIES]
            description += (
                '\n- Capability step: <call capability="C">{"json": "args"}</call> calls the tools offering C '
                f"(raced, merged or in turn, as configured); capabilities: {', '.join(common)}."
            )
        return mcp_types.Tool(
            name=ORCHESTRATE,
            title="Run a plan of tool calls",
            description=description,
            input_schema=_SCHEMA,
            annotations=mcp_types.ToolAnnotations(read_only_hint=False, open_world_hint=True),
            # A handshake-era client may run a plan as a task (toolscore.front.plan_tasks).
            execution=mcp_types.ToolExecution(task_support="optional"),
        )

    def _limiter(self, server: str) -> anyio.CapacityLimiter:
        if server not in self._limiters:
            self._limiters[server] = anyio.CapacityLimiter(self._limits.server_concurrency)
        return self._limiters[server]

    async def __call__(
        self,
        arguments: dict[str, Any] | None,
        *,
        progress: ProgressFn | None = None,
        request_id: Any = None,
        scope: CallScope = NO_CLIENT,
        approve: Approve | None = None,
    ) -> mcp_types.CallToolResult:
        """Answer one `orchestrate` call made in `scope` (its caller's episodes it may use).

        `approve`: asks the user once to approve a plan with confirm steps (`toolscore.plan.approval`);
        without it, such a plan is refused."""
        from toolscore.plan.approval import approval_request
        from toolscore.plan.run import PlanRunner
        from toolscore.plan.transcript import render_plan_errors, render_results

        args = arguments or {}
        plan, episode_id, dry_run = args.get("plan"), args.get("episode"), args.get("dry_run", False)
        if not isinstance(plan, str) or not isinstance(episode_id, str | None) or not isinstance(dry_run, bool):
            return error_result("orchestrate takes {'plan': string, 'episode'?: string, 'dry_run'?: boolean}.")
        began = time.perf_counter()
        if self.refusal is not None:
            self._audit_plan(plan, request_id, None, began, {}, success=False, violation=f"tools: {self.refusal}")
            return error_result(f"Call rejected by policy 'tools': {self.refusal}")
        caller = scope.caller or _ANONYMOUS
        if episode_id is None:
            episode = self.episodes.new(caller)
        elif (found := self.episodes.get(caller, episode_id)) is not None:
            episode = found
        else:
            return error_result(
                f"Episode '{episode_id[:64]}' is unknown or has expired; leave out 'episode' to start a new one."
            )
        # A snapshot: the episode may change while a worker thread checks against it.
        earlier = ({n: r.id for n, r in episode.steps.items()}, dict(episode.ids), episode.next_step)
        # The capabilities and their candidates, ranked now on the event loop (the scores change
        # under it); only for a plan that may hold a capability step.
        table = (
            self.capabilities.candidate_table()
            if self.capabilities is not None and "capability" in plan.lower()
            else None
        )
        try:
            if len(plan) > _OFFLOAD_BYTES:
                # Parsing and checking are linear, but a large plan still takes milliseconds:
                # a worker thread keeps every other client's calls moving meanwhile.
                turn, checked, held = await anyio.to_thread.run_sync(self._prepare, plan, *earlier, table, caller)
            else:
                turn, checked, held = self._prepare(plan, *earlier, table, caller)
            if held and approve is None:  # the user cannot be asked: refused, as any other problem
                raise PlanCheckError(held)
        except (PlanSyntaxError, PlanCheckError) as exc:
            self._audit_plan(plan, request_id, None, began, {"plan_error": len(exc.problems)}, success=False)
            tracing.plan_event("refused", {"toolscore.problems": len(exc.problems)})
            return _text(render_plan_errors(exc.problems), is_error=True)
        tracing.plan_event(
            "checked",
            {
                "toolscore.steps": len(checked.steps) if checked is not None else 0,
                "toolscore.warnings": len(turn.warnings) + (len(checked.warnings) if checked is not None else 0),
                "toolscore.ms": round((time.perf_counter() - began) * 1000, 3),
            },
        )
        if checked is None:
            return self._no_calls(turn, episode, caller)
        if dry_run:
            return self._describe(checked, turn, episode, approval=[p.step for p in held if p.step is not None])

        plan_id = uuid.uuid4().hex[:12]
        approval = None
        if held and approve is not None:  # asked once, before anything runs
            asked = approval_request(checked, plan, {p.step for p in held if p.step is not None})
            try:
                approved = await approve(asked.question, asked.binding)
            except (InputRequired, Rejected) as stopped:
                if episode_id is None:  # nothing ran in the episode made for this plan
                    self.episodes.end(caller, episode.id)
                if isinstance(stopped, InputRequired):  # the client asks its user and sends the plan again
                    raise
                violation = f"destructive: {stopped.reason}"
                self._audit_plan(plan, request_id, None, began, {}, success=False, violation=violation)
                return error_result(f"{stopped} Nothing was run.")
            if not approved:
                if episode_id is None:
                    self.episodes.end(caller, episode.id)
                declined = "destructive: the user declined the plan"
                self._audit_plan(plan, request_id, None, began, {}, success=False, violation=declined)
                return error_result("The user declined the plan: nothing was run.")
            approval = asked.approval(plan_id)
        first = episode.next_step
        episode.next_step += len(turn.calls)
        runner = PlanRunner(
            engine=self._engine,
            episode=episode,
            plan_id=plan_id,
            limiters=self._limiter,
            progress=progress,
            total=len(checked.steps),
            # The confirm steps' own check finds the approval in their scope (`toolscore.policy.static`);
            # the flow rule finds what the model had read of the episode before writing this plan.
            scope=replace(scope, approval=approval, seen=_read_before(episode, first)),
            # A step's resolved arguments may be no larger than what a client may send directly.
            max_argument_bytes=self._config.settings.max_request_bytes,
            capabilities=self.capabilities,
            reads=self.reads,
        )
        finished = await runner.run(checked, self._limits.budget_seconds)
        tracing.plan_event("ran", {"toolscore.completed": finished})
        records = [episode.steps[c.step] for c in checked.steps]
        text, steps = render_results(
            records,
            runner.blocks,
            per_result=self._limits.result_view_bytes,
            per_turn=self._limits.turn_view_bytes,
            warnings=(*turn.warnings, *checked.warnings),
            episode=episode.id,
            budget_expired=not finished,
            intermediate=_referenced_steps(checked),
        )
        outcome: Counter[str] = Counter(r.status for r in records)
        # The plan's own outcome, not every step's: a failed alternative a `<fallback>` recovered
        # from, or a step with `on_error="continue"`, leaves a solved task solved.
        success = finished and runner.status == "ok"
        self._audit_plan(plan, request_id, plan_id, began, dict(outcome), success=success)
        structured = {"episode": episode.id, "plan_id": plan_id, "completed": finished, "steps": steps}
        return _text(text, structured=structured)

    def _prepare(
        self,
        plan: str,
        earlier_steps: dict[int, str | None],
        earlier_ids: dict[str, int | None],
        first_step: int,
        capabilities: dict[str, tuple[str, ...]] | None = None,
        caller: str | None = None,
    ) -> tuple[ParsedTurn, CheckedPlan | None, tuple[PlanProblem, ...]]:
        """Parse and check a plan (pure: safe in a worker thread); no checked plan if it has no calls.
        With it, the problems the user's approval of the plan lifts (its confirm steps).

        `capabilities`: the ToolHub's capabilities and candidates, or None where there is no hub.
        `caller`: whose plan it is (its principal's rules apply, `constraints.principals`).

        Raises:
            PlanSyntaxError, PlanCheckError: every problem found.
        """
        from toolscore.plan.approval import NEEDS_APPROVAL
        from toolscore.plan.check import check_plan
        from toolscore.plan.parse import parse_turn

        turn = parse_turn(
            plan,
            first_step=first_step,
            max_bytes=self._limits.max_bytes,
            max_steps=self._limits.max_steps,
            max_depth=self._limits.max_depth,
            collect=True,
        )
        if not turn.calls:
            if turn.problems:
                raise PlanSyntaxError(turn.problems)
            return turn, None, ()
        checked = check_plan(
            turn,
            self._tools.registry,
            shorthands=self._shorthands,
            limits=self._limits,
            earlier_steps=earlier_steps,
            earlier_ids=earlier_ids,
            capabilities=capabilities if self.capabilities is not None else None,
            reads=self.reads,
        )
        problems = self._policy(checked, caller) if self._policy is not None else []
        if any(problem.code != NEEDS_APPROVAL for problem in problems):
            raise PlanCheckError(problems)
        return turn, checked, tuple(problems)

    def _no_calls(self, turn: ParsedTurn, episode: Episode, caller: str) -> mcp_types.CallToolResult:
        from toolscore.plan.transcript import render_plan_errors

        if turn.answer is not None:
            self.episodes.end(caller, episode.id)
            return _text(
                f'<episode id="{episode.id}" ended="true" />\nAnswer received.',
                structured={"episode": episode.id, "answer": turn.answer},
            )
        problem = PlanProblem(
            "empty_plan",
            "no tool calls found: write <server><tool>{...}</tool></server> items and end with <execute_tools />",
        )
        return _text(render_plan_errors([problem]), is_error=True)

    def _describe(
        self, plan: CheckedPlan, turn: ParsedTurn, episode: Episode, approval: list[int] | None = None
    ) -> mcp_types.CallToolResult:
        def node(n: CheckedNode) -> dict[str, Any]:
            if isinstance(n, CheckedCapability):
                return {
                    "step": n.step,
                    "id": n.node.id,
                    "capability": n.capability,
                    "candidates": list(n.candidates),
                    "arguments": n.arguments,
                    "depends_on": sorted({str(r.target) for r in n.refs}),
                    "timeout": n.node.timeout,
                }
            if not isinstance(n, CheckedBlock):
                return {
                    "step": n.step,
                    "id": n.node.id,
                    "server": n.route.server,
                    "tool": n.route.remote_name,
                    "exposed_as": n.route.public_name,
                    "arguments": n.arguments,
                    "depends_on": sorted({str(r.target) for r in n.refs}),
                    "timeout": n.node.timeout,
                    "retries": n.node.retries,
                }
            block = n.block
            return {"block": str(block.kind), "id": block.id, "children": [node(c) for c in n.children]}

        tree = node(plan.root)
        lines = [f'<plan steps="{len(plan.steps)}" episode="{episode.id}" dry_run="true">']
        for call in plan.steps:
            deps = ", ".join(sorted({str(r.target) for r in call.refs})) or "-"
            what = (
                f"capability {call.capability} (candidates, best first: {', '.join(call.candidates)})"
                if isinstance(call, CheckedCapability)
                else f"{call.route.server}.{call.route.remote_name}"
            )
            named = f" ({call.node.id})" if call.node.id else ""
            lines.append(f"  step {call.step}{named}: {what} depends on {deps}")
        lines.append("</plan>")
        lines.extend(f"<warning>{w}</warning>" for w in (*turn.warnings, *plan.warnings))
        if approval:
            steps = f"step {approval[0]} needs" if len(approval) == 1 else f"steps {', '.join(map(str, approval))} need"
            note = f"{steps} the user's approval: the plan is shown to them once before it runs"
            lines.append(f"<warning>{note}</warning>")
        return _text("\n".join(lines), structured={"episode": episode.id, "plan": tree})

    def _audit_plan(
        self,
        plan: str,
        request_id: Any,
        plan_id: str | None,
        began: float,
        outcome: dict[str, int],
        *,
        success: bool,
        violation: str | None = None,
    ) -> None:
        self._audit.write(
            AuditRecord(
                time=datetime.now(UTC),
                call_id=plan_id or uuid.uuid4().hex[:12],
                request_id=None if request_id is None else str(request_id),
                plan_id=plan_id,
                tool=ORCHESTRATE,
                phase="plan",
                duration_ms=round((time.perf_counter() - began) * 1000, 3),
                success=success,
                error_kind=(
                    None
                    if success
                    else "rejected"
                    if violation
                    else "plan_error"
                    if "plan_error" in outcome
                    else "step_failed"
                ),
                violations=(violation,) if violation else (),
                plan_hash=hashlib.sha256(plan.encode("utf-8", "surrogatepass")).hexdigest()[:16],
                steps=sum(v for k, v in outcome.items() if k != "plan_error"),
                outcome=outcome,
            )
        )
