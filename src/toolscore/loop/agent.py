"""The agent loop: the model proposes, the gateway executes, until an answer or a limit.

Each turn the model's text streams through an `ItemScanner`; every call item starts the moment
its closing tag arrives (`TurnCalls`), and the model's stream is cut at `<execute_tools />` or
`</answer>` even if the endpoint ignores stop sequences. Once the stream and every call have
ended, the results go back as one user message of `<result>` blocks and the next turn starts.
Limits are checked between turns; wall time and the client's cancellation cancel everything in
flight at once. Each turn is one trajectory record; the episode's `end` record says how it ended.

Multi-action steps: `<step goal="…">calls</step>` runs its calls, then each following turn is
asked (`<step_check>`) whether the goal is met. One model turn plays both deciders: `<step_done />`
is the step decider's yes; calls are the action decider's next action. A step gets at most
`max_actions_per_step` actions.
"""

from __future__ import annotations

import re
import secrets
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio

from toolscore._tokens import tokens_for_chars
from toolscore.errors import InputRequired
from toolscore.loop.contract import STOP_SEQUENCES, action_prompt, reminder, task_message
from toolscore.loop.execute import PlanContext, TurnCalls
from toolscore.loop.limits import Budget, Limits, StopReason, describe
from toolscore.loop.models import Message, ModelClient, ModelError, ModelReply
from toolscore.loop.scan import Item, ItemScanner
from toolscore.loop.stops import TurnEnd, classify, strip_think
from toolscore.loop.store import episode_from_dict, episode_to_dict
from toolscore.loop.trajectory import TrajectoryLog, state_hash
from toolscore.plan.run import Episode
from toolscore.scope import NO_CLIENT, CallScope
from toolscore.types import ProgressFn

__all__ = ["AgentLoop", "LoopState", "TaskOutcome"]

_SLACK = 4
"""A turn may run to this many times `max_tokens_per_turn` (at 4 characters a token) before it is cut."""
_GOAL = re.compile(r"""\bgoal\s*=\s*(?:"([^"]*)"|'([^']*)')""")


@dataclass
class TaskOutcome:
    """How a task ended."""

    episode: Episode
    stop_reason: StopReason
    answer: str | None
    turns: int
    tokens: int
    result_bytes: int
    error: str | None = None
    messages: list[Message] = field(default_factory=list)
    pending: dict[str, Any] | None = None
    """Set when the loop paused for the client's model (2026-07-28 sampling): the input requests
    to ask it (the sampling request under `MODEL_TURN`)."""
    state: LoopState | None = None
    """The paused loop, to resume with the client's answer."""


@dataclass
class _Goal:
    text: str
    actions: int = 1


@dataclass
class LoopState:
    """Everything a task's loop needs to go on: kept across round trips when the client's model
    answers through input-required results."""

    episode: Episode
    budget: Budget
    messages: list[Message]
    goals: deque[_Goal] = field(default_factory=deque)
    reminded: bool = False
    started: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {
            "episode": episode_to_dict(self.episode),
            "budget": {
                "turns": self.budget.turns,
                "tokens": self.budget.tokens,
                "result_bytes": self.budget.result_bytes,
                "calls": dict(self.budget.calls),
            },
            "messages": [[m.role, m.content] for m in self.messages],
            "goals": [[g.text, g.actions] for g in self.goals],
            "reminded": self.reminded,
            "started": self.started,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], limits: Limits) -> LoopState:
        spent = data["budget"]
        budget = Budget(limits, spent["turns"], spent["tokens"], spent["result_bytes"])
        budget.calls.update(spent["calls"])
        return cls(
            episode_from_dict(data["episode"]),
            budget,
            [Message("user" if role == "user" else "assistant", str(content)) for role, content in data["messages"]],
            deque(_Goal(str(text), int(actions)) for text, actions in data["goals"]),
            bool(data["reminded"]),
            float(data["started"]),
        )


@dataclass
class _Turn:
    text: str
    end: TurnEnd
    calls: TurnCalls
    reply: ModelReply | None
    timings: dict[str, Any]
    goals: list[str]


def _step_parts(item: Item) -> tuple[str, str]:
    """A `<step goal=…>` item's goal and inner calls."""
    open_end = item.text.find(">")
    head = item.text[: open_end + 1]
    match = _GOAL.search(head)
    goal = (match.group(1) or match.group(2) or "") if match else ""
    inner = item.text[open_end + 1 :] if not head.endswith("/>") else ""
    return goal, inner.removesuffix("</step>")


class AgentLoop:
    """Runs tasks with one model over the gateway's tools."""

    def __init__(
        self,
        *,
        ctx: PlanContext,
        model: ModelClient,
        system: str,
        limits: Limits,
        log: TrajectoryLog,
        progress: ProgressFn | None = None,
        scope: CallScope = NO_CLIENT,
        servers: frozenset[str] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        on_event: Callable[[str, Any], None] | None = None,
    ) -> None:
        self._ctx = ctx
        self._scope = scope
        self._model = model
        self._system = system
        self._limits = limits
        self._log = log
        self._progress = progress
        self._servers = servers
        self._clock = clock
        self._on_event = on_event

    def _event(self, kind: str, data: Any = None) -> None:
        if self._on_event is not None:
            self._on_event(kind, data)

    async def run(self, task: str, resume: LoopState | None = None) -> TaskOutcome:
        """Run `task` to an answer or a limit (never raises for what the model or tools do).

        With `resume`, go on from a paused loop (its model's next turn is what the client sent);
        the outcome's `pending` is set when the loop paused again for the client's model.
        """
        state = resume
        if state is None:
            state = LoopState(
                Episode(secrets.token_hex(16)), Budget(self._limits), [Message("user", task_message(task))]
            )
            self._log.write(
                {
                    "type": "start",
                    "episode": state.episode.id,
                    "time": time.time(),
                    "model": self._model.name,
                    "task": task,
                    "system": self._system,
                    "limits": asdict(self._limits),
                }
            )
        episode, budget = state.episode, state.budget
        elapsed = time.time() - state.started  # wall time counts from the task's first call
        began = self._clock() - elapsed
        outcome = TaskOutcome(episode, "max_turns", None, 0, 0, 0, messages=state.messages)
        try:
            with anyio.move_on_after(self._limits.wall_seconds - elapsed) as wall:
                await self._turns(state, outcome)
            if wall.cancelled_caught:
                outcome.stop_reason = "wall_time"
        except InputRequired as need:  # the client's model takes this turn (`InputRequiredModel`)
            outcome.pending, outcome.state = need.requests, state
            outcome.turns, outcome.tokens, outcome.result_bytes = budget.turns, budget.tokens, budget.result_bytes
            return outcome
        except anyio.get_cancelled_exc_class():
            outcome.stop_reason = "cancelled"
            await self._end(outcome, budget, began)
            raise
        except ModelError as exc:
            outcome.stop_reason, outcome.error = "model_error", str(exc)
        await self._end(outcome, budget, began)
        return outcome

    async def _end(self, outcome: TaskOutcome, budget: Budget, began: float) -> None:
        outcome.turns, outcome.tokens, outcome.result_bytes = budget.turns, budget.tokens, budget.result_bytes
        self._log.write(
            {
                "type": "end",
                "episode": outcome.episode.id,
                "time": time.time(),
                "stop_reason": outcome.stop_reason,
                "reason": describe(outcome.stop_reason, self._limits),
                "answer": outcome.answer,
                "error": outcome.error,
                "turns": budget.turns,
                "tokens": budget.tokens,
                "result_bytes": budget.result_bytes,
                "calls": dict(budget.calls),
                "wall_ms": round((self._clock() - began) * 1000, 3),
            }
        )

    async def _turns(self, state: LoopState, outcome: TaskOutcome) -> None:
        episode, budget, messages, goals = state.episode, state.budget, state.messages, state.goals
        while True:
            if (reason := budget.exceeded()) is not None:
                outcome.stop_reason = reason
                return
            deciding = goals[0] if goals else None
            digest = state_hash(self._system, messages)
            turn = await self._turn(messages, episode, budget)
            budget.turns += 1
            if turn.reply is not None:
                budget.tokens += turn.reply.input_tokens + turn.reply.output_tokens
            budget.result_bytes += turn.calls.result_bytes
            end = turn.end
            observation: str | None = None
            decider: str | None = None
            if deciding is not None:
                decider = "step" if end.step_done or end.kind != "calls" else "action"
                if end.step_done:
                    goals.popleft()
                elif end.kind == "calls":
                    deciding.actions += 1
            goals.extend(_Goal(g) for g in turn.goals)
            stop: StopReason | None = None
            if end.kind == "calls" or (end.kind == "none" and end.step_done):
                observation = turn.calls.render() or "<step_done acknowledged />"
                if turn.calls.refused_server is not None:
                    stop = "server_calls"
                if goals and goals[0].actions >= self._limits.max_actions_per_step and decider == "action":
                    dropped = goals.popleft()
                    observation += (
                        f'\n<warning>step "{dropped.text[:200]}" used its {dropped.actions} actions '
                        "without <step_done />: go on with the task</warning>"
                    )
                if goals:
                    observation += "\n" + action_prompt(
                        goals[0].text, goals[0].actions, self._limits.max_actions_per_step
                    )
            elif end.kind == "answer":
                outcome.answer, stop = end.answer, "answer"
            elif not state.reminded:
                observation, state.reminded = reminder(), True
            else:
                outcome.answer, stop = strip_think(turn.text).strip(), "implicit_answer"
            messages.append(Message("assistant", turn.text))
            if observation is not None:
                messages.append(Message("user", observation))
            self._log.write(
                {
                    "type": "turn",
                    "episode": episode.id,
                    "turn": budget.turns,
                    "S": {"sha256": digest, "episode": episode.id, "turn": budget.turns, "messages": len(messages)},
                    "A": turn.text,
                    "O": observation,
                    "end": end.kind,
                    "decider": decider,
                    "goal": deciding.text if deciding is not None else None,
                    "model_stop": turn.reply.stop_reason if turn.reply is not None else "stop_sequence_seen",
                    "tokens": {
                        "input": turn.reply.input_tokens if turn.reply else None,
                        "output": turn.reply.output_tokens if turn.reply else None,
                        "estimated": turn.reply.estimated if turn.reply else True,
                    },
                    "calls": len(turn.calls.steps),
                    "plan_errors": len(turn.calls.problems),
                    "timings": turn.timings,
                }
            )
            if self._progress is not None:
                with anyio.CancelScope(shield=True):
                    await self._progress(
                        budget.turns,
                        self._limits.max_turns,
                        f"turn {budget.turns}: {len(turn.calls.steps)} call(s), {end.kind}",
                    )
            if stop is not None:
                outcome.stop_reason = stop
                return

    async def _turn(self, messages: list[Message], episode: Episode, budget: Budget) -> _Turn:
        """One model turn, its calls started as they stream in, and run to their end."""
        scanner = ItemScanner()
        goals: list[str] = []
        items: list[Item] = []
        clock = self._clock
        began = clock()
        self._event("turn_start", None)
        first_token: float | None = None
        reply: ModelReply | None = None
        failure: ModelError | InputRequired | None = None
        async with anyio.create_task_group() as tg:
            calls = TurnCalls(
                self._ctx,
                episode,
                budget,
                tg,
                plan_id=uuid.uuid4().hex[:12],
                servers=self._servers,
                clock=clock,
                on_event=self._on_event,
                scope=self._scope,
            )

            def take(found: list[Item]) -> None:
                for item in found:
                    items.append(item)
                    if item.kind not in ("call", "cut") or item.name == "step_done":
                        continue
                    self._event("item_closed", item.name)
                    text = item.text
                    if item.name == "step" and item.kind == "call":
                        goal, text = _step_parts(item)
                        goals.append(goal)
                        if not text.strip():
                            continue
                    calls.submit(text, clock())

            most_chars = self._limits.max_tokens_per_turn * 4 * _SLACK
            with anyio.CancelScope() as model_scope:

                async def on_text(delta: str) -> None:
                    nonlocal first_token
                    if model_scope.cancel_called:
                        return  # text still buffered after the turn was cut: not part of it
                    if first_token is None:
                        first_token = clock()
                    take(scanner.feed(delta))
                    if len(scanner.text) > most_chars:
                        # An endpoint that ignores max_tokens must not grow a turn without bound.
                        model_scope.cancel()
                    if scanner.stopped or any(i.kind == "answer" for i in items):
                        # Done: don't wait for (or pay for) what an endpoint that ignores stop sequences adds.
                        model_scope.cancel()

                try:
                    reply = await self._model.reply(
                        self._system,
                        messages,
                        stop=STOP_SEQUENCES,
                        max_tokens=self._limits.max_tokens_per_turn,
                        on_text=on_text,
                    )
                except (ModelError, InputRequired) as exc:
                    # Raised after the task group, or it would arrive wrapped in an exception group.
                    failure = exc
                    tg.cancel_scope.cancel()
            model_done = clock()
            self._event("model_end", None)
            take(scanner.close())
        if failure is not None:
            raise failure
        done = clock()
        self._event("turn_end", None)
        text = scanner.text
        stop_items = [i for i in items if i.kind == "stop"]
        if stop_items:
            # Keep the marker as written (up to its `>`), drop whatever the endpoint streamed after it.
            end = stop_items[0].end
            close = text.find(">", end, end + 8)
            text = text[: close + 1] if close >= 0 else text[:end] + " />"
        elif any(i.kind == "answer" and not i.text.endswith("</answer>") for i in items):
            text += "</answer>"  # the stop sequence the endpoint consumed: the record shows the turn whole
        if reply is None:  # the stream was cut at the marker: estimate its tokens
            reply = ModelReply(
                text,
                "stop_sequence",
                tokens_for_chars(len(self._system) + sum(len(m.content) for m in messages)),
                tokens_for_chars(len(text)),
                estimated=True,
            )
        timings = {
            "model_ms": round((model_done - began) * 1000, 3),
            "first_token_ms": round((first_token - began) * 1000, 3) if first_token is not None else None,
            "calls_after_model_ms": round((done - model_done) * 1000, 3),
            "turn_ms": round((done - began) * 1000, 3),
            "call_start_latency_ms": [round(x, 3) for x in calls.latencies_ms],
        }
        return _Turn(text, classify(text, items), calls, reply, timings, goals)
