"""A task's limits and what it has spent; each limit reached is its own stop reason; pure."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Budget", "Limits", "StopReason", "describe"]

StopReason = Literal[
    "answer",
    "implicit_answer",
    "max_turns",
    "wall_time",
    "result_bytes",
    "tokens",
    "server_calls",
    "cancelled",
    "model_error",
]
"""Why a task ended: an answer, or the limit or failure that ended it."""


@dataclass(frozen=True, slots=True)
class Limits:
    """The most one task may use."""

    max_turns: int = 12
    wall_seconds: float = 600.0
    result_bytes: int = 1 << 20
    tokens: int = 200_000
    server_calls: int = 64
    """Calls to any one server."""
    max_actions_per_step: int = 4
    max_tokens_per_turn: int = 4096


@dataclass
class Budget:
    """What one task has spent against its limits."""

    limits: Limits
    turns: int = 0
    tokens: int = 0
    result_bytes: int = 0
    calls: Counter[str] = field(default_factory=Counter)

    def exceeded(self) -> StopReason | None:
        """The first limit reached, if any (checked between turns)."""
        if self.tokens >= self.limits.tokens:
            return "tokens"
        if self.result_bytes >= self.limits.result_bytes:
            return "result_bytes"
        if self.turns >= self.limits.max_turns:
            return "max_turns"
        return None

    def take_calls(self, servers: list[str]) -> str | None:
        """Count calls about to start; the server whose limit they would pass (nothing counted then)."""
        wanted = Counter(servers)
        for server, n in wanted.items():
            if self.calls[server] + n > self.limits.server_calls:
                return server
        self.calls.update(wanted)
        return None


def describe(reason: StopReason, limits: Limits) -> str:
    """The stop reason as the answer says it."""
    return {
        "answer": "the model answered",
        "implicit_answer": "the model's turn had neither calls nor an answer after a reminder: taken as the answer",
        "max_turns": f"stopped: the task reached its limit of {limits.max_turns} turns",
        "wall_time": f"stopped: the task ran past its wall-time limit of {limits.wall_seconds:g} s",
        "result_bytes": f"stopped: tool results reached the limit of {limits.result_bytes} bytes",
        "tokens": f"stopped: the task reached its limit of {limits.tokens} tokens (estimated)",
        "server_calls": f"stopped: a server would get more than {limits.server_calls} calls in this task",
        "cancelled": "stopped: the client cancelled the task",
        "model_error": "stopped: the model could not be asked",
    }[reason]
