"""The `delegate` front tool: one task in, one answer out, the whole loop run by the gateway.

A separate tool rather than a mode of `orchestrate`: the two take different arguments (a task,
not a plan), answer differently (a final answer, not `<result>`s) and have different costs (a
model's turns, not one plan), so each keeps one input schema and one contract a model can read,
and policy can allow one without the other.

The loop itself (the agent, the model clients, the episode database, the trajectory log) is
imported and opened with the first task or plan: `tools/list` and passthrough calls need only
the tool's definition.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mcp_types

from toolscore._engine import ToolExecutionEngine, error_result
from toolscore.config import Config, ModelConfig, state_dir, trajectory_path
from toolscore.loop.contract import system_prompt
from toolscore.loop.limits import Limits, describe
from toolscore.plan.blocks import shorthand_table
from toolscore.plan.nodes import PlanPolicy
from toolscore.plan.tool import EpisodeStore
from toolscore.scope import NO_CLIENT, CallScope
from toolscore.state import EpisodeRecords
from toolscore.types import ProgressFn, ToolSource

if TYPE_CHECKING:
    import httpx2

    from toolscore.loop.agent import TaskOutcome
    from toolscore.loop.execute import PlanContext
    from toolscore.loop.models import ModelClient, SendRequest
    from toolscore.loop.store import DurableEpisodes
    from toolscore.loop.trajectory import TrajectoryLog

__all__ = ["DELEGATE", "Delegator", "trajectory_path"]

DELEGATE = "delegate"

Admit = Callable[[CallScope], Awaitable[str | None]]
"""Why a caller may not start another task now (`Policy.admit_task`), or None."""
_ANTHROPIC = "https://api.anthropic.com"
_MAX_TASK = 64 * 1024
_PENDING = "pending"
"""Store kind of tasks paused for the client's model (2026-07-28 sampling)."""

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "description": "What to do, in words: the loop runs until it has the answer."},
        "servers": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Only these servers' tools (default: all).",
        },
        "max_steps": {"type": "integer", "minimum": 1, "description": "Most model turns (capped by the config)."},
        "max_actions_per_step": {"type": "integer", "minimum": 1, "description": "Most actions per <step goal>."},
        "budget": {"type": "number", "exclusiveMinimum": 0, "description": "Wall-time budget in seconds (capped)."},
    },
    "required": ["task"],
    "additionalProperties": False,
}


def _episodes_path(config: Config) -> Path | str:
    path = config.settings.loop.episodes_db
    if path == "":
        return ":memory:"
    return Path(path).expanduser() if path else state_dir() / "episodes.sqlite3"


def _configured(model: ModelConfig, http: httpx2.AsyncClient) -> ModelClient:
    from toolscore.loop.models import AnthropicModel, OpenAICompatibleModel

    if model.provider == "anthropic":
        return AnthropicModel(http, url=model.url or _ANTHROPIC, model=model.model, api_key=model.api_key)
    assert model.url is not None  # the config requires it for this provider
    return OpenAICompatibleModel(http, url=model.url, model=model.model, api_key=model.api_key)


class Delegator:
    """Runs `delegate` tasks; one per gateway."""

    def __init__(
        self,
        *,
        tools: ToolSource,
        engine: ToolExecutionEngine,
        config: Config,
        contract: Callable[[], str],
        policy: PlanPolicy | None = None,
        refusal: str | None = None,
        admit: Admit | None = None,
        plan_episodes: EpisodeStore | None = None,
        records: EpisodeRecords | None = None,
    ) -> None:
        """Args:
        contract: The plan language as `orchestrate` describes it now (live shorthands and servers).
        refusal: Why policy forbids `delegate`, if it does.
        admit: Why a caller may not start another task now (its quota), or None.
        plan_episodes: `orchestrate`'s episodes, kept in the same store (`durable`) across restarts.
        records: Where paused tasks, finished tasks and episodes are kept (replicas share one, see
            `toolscore.state`); default: the SQLite file `loop.episodes_db`.
        """
        self._tools = tools
        self._engine = engine
        self._config = config
        self._settings = config.settings.loop
        self._contract = contract
        self._policy = policy
        self.refusal = refusal
        self._admit = admit
        self._plan_episodes = plan_episodes
        self._records = records
        self._durable: DurableEpisodes | None = None
        self._http: httpx2.AsyncClient | None = None

    def reconfigure(
        self,
        config: Config,
        *,
        policy: PlanPolicy | None,
        refusal: str | None,
        admit: Admit | None = None,
    ) -> None:
        """Tasks started from now on follow `config` and `policy` (a live reload); the loop's own
        settings (`toolscore.loop`, `toolscore.model`) change only at restart."""
        self._config, self._policy, self.refusal, self._admit = config, policy, refusal, admit
        self.__dict__.pop("_ctx", None)  # the plan context is made again, from the new config

    @cached_property
    def _ctx(self) -> PlanContext:
        from toolscore.loop.execute import PlanContext

        config = self._config
        return PlanContext(
            tools=self._tools,
            engine=self._engine,
            limits=config.settings.plan,
            shorthands=shorthand_table([(s.name, s.shorthands) for s in config.enabled_servers]),
            policy=self._policy,
            max_argument_bytes=config.settings.max_request_bytes,
        )

    @cached_property
    def log(self) -> TrajectoryLog:
        """The trajectory log (`loop.trajectories`)."""
        from toolscore.loop.trajectory import TrajectoryLog

        return TrajectoryLog(trajectory_path(self._config))

    @cached_property
    def store(self) -> EpisodeRecords:
        """Paused tasks, finished tasks and episodes: the shared records, else the SQLite file, opened on first use."""
        if self._records is not None:
            return self._records
        from toolscore.loop.store import EpisodeDB

        return EpisodeDB(_episodes_path(self._config), ttl_seconds=self._settings.episode_ttl_seconds)

    @property
    def durable(self) -> DurableEpisodes | None:
        """`orchestrate`'s episodes kept in `store` across restarts (None without `plan_episodes`):
        shared by every replica with `records` (any replica continues any episode), else this
        process's SQLite file."""
        if self._durable is None and self._plan_episodes is not None:
            if self._records is not None:
                from toolscore.state.episodes import SharedEpisodes

                self._durable = SharedEpisodes(self._records, self._plan_episodes)
            else:
                from toolscore.loop.store import DurableEpisodes

                self._durable = DurableEpisodes(self.store, self._plan_episodes)
        return self._durable

    def tool(self) -> mcp_types.Tool:
        """The tool definition."""
        model = self._config.settings.model
        who = "your own model (sampling)" + (f", else {model.provider} {model.model}" if model else "")
        return mcp_types.Tool(
            name=DELEGATE,
            title="Run a whole task with tools",
            description=(
                f"Hand over a task: toolscore runs the agent loop with {who}, calling tools as the model writes "
                f"them, and answers with the final answer and why it stopped. Servers: "
                f"{', '.join(self._tools.registry.servers) or 'none'}."
            ),
            input_schema=_SCHEMA,
            annotations=mcp_types.ToolAnnotations(read_only_hint=False, open_world_hint=True),
        )

    @property
    def has_model(self) -> bool:
        """Whether servers.json configures a model (else only clients that sample can delegate)."""
        return self._config.settings.model is not None

    async def aclose(self) -> None:
        """Close the model endpoint's connections and the episode store."""
        if self._http is not None:
            await self._http.aclose()
        if "store" in self.__dict__:  # opened
            self.store.close()

    def _client(self, timeout: float) -> httpx2.AsyncClient:
        # One client for every task, made on first use: building one costs 60-120 ms (its TLS
        # context), and its pool keeps the endpoint's connection open from turn to turn.
        if self._http is None:
            import httpx2  # a configured model's endpoint: loaded with the first task that needs it

            self._http = httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=timeout))
        return self._http

    def _limits(self, args: dict[str, Any]) -> Limits:
        s = self._settings
        turns = args.get("max_steps")
        actions = args.get("max_actions_per_step")
        budget = args.get("budget")
        return Limits(
            max_turns=min(turns, s.max_turns) if isinstance(turns, int) and turns > 0 else s.max_turns,
            wall_seconds=min(float(budget), s.wall_seconds)
            if isinstance(budget, int | float) and budget > 0
            else s.wall_seconds,
            result_bytes=s.result_bytes,
            tokens=s.tokens,
            server_calls=s.server_calls,
            max_actions_per_step=min(actions, s.max_actions_per_step)
            if isinstance(actions, int) and actions > 0
            else s.max_actions_per_step,
            max_tokens_per_turn=s.max_tokens_per_turn,
        )

    async def __call__(
        self,
        arguments: dict[str, Any] | None,
        *,
        progress: ProgressFn | None = None,
        scope: CallScope = NO_CLIENT,
        sampler: SendRequest | None = None,
        input_sampling: bool = False,
        input_responses: dict[str, Any] | None = None,
        request_state: str | None = None,
        on_event: Callable[[str, Any], None] | None = None,
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        """Run one task for `scope`'s caller: with the client's own model if it can sample, else the configured one.

        Args:
            sampler: Sends `sampling/createMessage` to the client (handshake era).
            input_sampling: The client samples through input-required results (2026-07-28 era).
            input_responses, request_state: A retried call's answers to our input-required result.
        """
        from toolscore.loop.agent import AgentLoop
        from toolscore.loop.models import InputRequiredModel, SamplingModel

        args = arguments or {}
        task, servers = args.get("task"), args.get("servers")
        if not isinstance(task, str) or not task.strip():
            return error_result("delegate takes {'task': string, 'servers'?: [string], 'max_steps'?: integer, ...}.")
        if len(task) > _MAX_TASK:
            return error_result(f"the task is longer than {_MAX_TASK} characters")
        if self.refusal is not None:
            return error_result(f"Call rejected by policy 'tools': {self.refusal}")
        if request_state is not None:
            return await self._resume(task, request_state, input_responses, progress, on_event, scope)
        registry = self._tools.registry
        allowed: frozenset[str] | None = None
        if servers is not None:
            if not isinstance(servers, list) or not all(isinstance(s, str) for s in servers):
                return error_result("'servers' must be a list of server names")
            unknown = sorted(set(servers) - set(registry.servers))
            if unknown:
                return error_result(
                    f"unknown server(s): {', '.join(unknown)}; connected: {', '.join(registry.servers)}"
                )
            allowed = frozenset(servers)
        catalog = [
            (r.server, r.remote_name, r.tool)
            for r in registry.listed()  # the model is shown no tool the policy refuses
            if allowed is None or r.server in allowed
        ]
        system = system_prompt(self._contract(), catalog)
        configured = self._config.settings.model
        model: ModelClient
        if sampler is not None:
            model = SamplingModel(sampler)
        elif input_sampling:
            model = InputRequiredModel()
        elif configured is not None:
            model = _configured(configured, self._client(configured.timeout))
        else:
            return error_result(
                "delegate needs a model: this client cannot answer sampling requests, and servers.json sets no "
                "toolscore.model (docs/agent-loop.md)"
            )
        # A task starts here (a resumed one is not a new task): its caller's quota of tasks counts it.
        if self._admit is not None and (over := await self._admit(scope)) is not None:
            return error_result(f"Call rejected by policy 'principals': {over}")
        limits = self._limits(args)
        loop = AgentLoop(
            ctx=self._ctx,
            model=model,
            system=system,
            limits=limits,
            log=self.log,
            progress=progress,
            servers=allowed,
            on_event=on_event,
            scope=scope,
        )
        outcome = await loop.run(task)
        return await self._finish(outcome, task, system, limits, allowed, scope.caller)

    async def _resume(
        self,
        task: str,
        request_state: str,
        input_responses: dict[str, Any] | None,
        progress: ProgressFn | None,
        on_event: Callable[[str, Any], None] | None,
        scope: CallScope,
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        """Go on with a paused task: the client's model has answered the turn we asked for."""
        from toolscore.loop.agent import AgentLoop, LoopState
        from toolscore.loop.models import MODEL_TURN, InputRequiredModel
        from toolscore.loop.store import owner_of

        caller = scope.caller
        owner = owner_of(caller or "")
        # The state is a random id into our own store, never data the client could forge.
        # Taken in one step: a retry sent twice (to two replicas) resumes the task once.
        data = await self.store.take(_PENDING, request_state, owner) if len(request_state) <= 64 else None
        if data is not None and data.get("task") != task:
            await self.store.put(_PENDING, request_state, owner, data)  # not this task's: left for its own retry
            data = None
        if data is None:
            return error_result("this task's requestState is unknown or has expired: call delegate again without it")
        answer = (input_responses or {}).get(MODEL_TURN)
        if answer is None:
            return error_result(f"the retried call has no inputResponses['{MODEL_TURN}'] (the model's turn)")
        limits = Limits(**data["limits"])
        allowed = frozenset(data["servers"]) if data["servers"] is not None else None
        loop = AgentLoop(
            ctx=self._ctx,
            model=InputRequiredModel(answer),
            system=data["system"],
            limits=limits,
            log=self.log,
            progress=progress,
            servers=allowed,
            on_event=on_event,
            scope=scope,
        )
        outcome = await loop.run(task, resume=LoopState.from_dict(data["state"], limits))
        return await self._finish(outcome, task, data["system"], limits, allowed, caller)

    async def _finish(
        self,
        outcome: TaskOutcome,
        task: str,
        system: str,
        limits: Limits,
        allowed: frozenset[str] | None,
        caller: str | None,
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        from toolscore.loop.store import episode_to_dict, owner_of

        owner = owner_of(caller or "")
        if outcome.pending is not None and outcome.state is not None:
            ident = secrets.token_hex(16)
            paused = {
                "task": task,
                "system": system,
                "limits": asdict(limits),
                "servers": sorted(allowed) if allowed is not None else None,
                "state": outcome.state.to_dict(),
            }
            await self.store.put(_PENDING, ident, owner, paused)
            return mcp_types.InputRequiredResult(input_requests=outcome.pending, request_state=ident)
        # The task's steps stay referenceable: `orchestrate` with this episode id continues from them.
        await self.store.put("plan", outcome.episode.id, owner, episode_to_dict(outcome.episode))
        await self.store.put(
            "delegate",
            outcome.episode.id,
            owner,
            {
                "task": task,
                "stop_reason": outcome.stop_reason,
                "answer": outcome.answer,
                "turns": outcome.turns,
                "plan": episode_to_dict(outcome.episode),
            },
        )
        reason = describe(outcome.stop_reason, limits)
        structured = {
            "episode": outcome.episode.id,
            "answer": outcome.answer,
            "stop_reason": outcome.stop_reason,
            "turns": outcome.turns,
            "tokens": outcome.tokens,
            "result_bytes": outcome.result_bytes,
            "error": outcome.error,
        }
        solved = outcome.stop_reason in ("answer", "implicit_answer")
        text = outcome.answer if solved and outcome.answer is not None else reason
        if outcome.error:
            text += f": {outcome.error}"
        header = f'<task episode="{outcome.episode.id}" turns="{outcome.turns}" stop="{outcome.stop_reason}" />'
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(text=f"{header}\n{text}")],
            structured_content=structured,
            is_error=not solved,
        )
