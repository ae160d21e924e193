"""The circuit breaker of one downstream connection: pure state, the clock passed in.

Health checks (a ping with its own deadline, every `health_interval` seconds) report here. After
`breaker_failures` failed checks in a row the breaker opens: calls to the server fail at once,
saying why and when it is checked next, instead of each waiting out its timeout on a wedged
server. After `breaker_cooldown` seconds it is half-open: the next check is the probe, and calls
still fail fast until it answers. An answered probe closes the breaker; a failed one opens it
again. After `health_failures` failed checks in a row the server is restarted, and a new
connection starts closed.

    closed --(breaker_failures in a row)--> open --(cooldown)--> half-open --(probe answered)--> closed
                                              ^                      |
                                              +----(probe failed)----+
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Breaker", "BreakerState", "Verdict"]


class BreakerState(StrEnum):
    """Whether calls go through."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


class Verdict(StrEnum):
    """What the supervisor does after a health check."""

    HEALTHY = "healthy"
    """Answered: nothing to do (a breaker that was open is closed again)."""
    FAILING = "failing"
    """Failed, but neither the breaker nor a restart is due yet; or the breaker was open already."""
    OPENED = "opened"
    """Failed, and the breaker has just opened: calls fail fast from now on."""
    RESTART = "restart"
    """Failed `restart_after` times in a row: restart the server."""


@dataclass(slots=True)
class Breaker:
    """Consecutive failed health checks, and whether calls may go through because of them."""

    open_after: int
    """Failed checks in a row that open the breaker."""
    cooldown: float
    """Seconds open before the next check probes (half-open)."""
    restart_after: int
    """Failed checks in a row that restart the server."""
    state: BreakerState = BreakerState.CLOSED
    failures: int = 0
    """Failed checks in a row."""
    opened_at: float = 0.0
    problem: str | None = None
    """What the latest failed check said."""

    def __post_init__(self) -> None:
        if self.open_after < 1 or self.restart_after < 1 or self.cooldown < 0:
            raise ValueError("open_after and restart_after must be at least 1, cooldown not negative")

    def refusal(self, now: float) -> str | None:
        """Why a call must fail fast now, or None when it may go through."""
        if self.state is BreakerState.CLOSED:
            return None
        checks = f"{self.failures} health check{'s' if self.failures != 1 else ''} in a row failed"
        if self.state is BreakerState.HALF_OPEN:
            when = "being checked again now"
        else:
            when = f"checked again in {max(0.0, self.opened_at + self.cooldown - now):.1f} s"
        return f"unhealthy: {checks} ({self.problem}); calls fail fast, {when}"

    def next_check_in(self, now: float, interval: float) -> float:
        """Seconds until the next health check: the interval, or the end of the cooldown when open."""
        if self.state is BreakerState.OPEN:
            return min(interval, max(0.0, self.opened_at + self.cooldown - now))
        return interval

    def checking(self, now: float) -> None:
        """A health check starts: once the cooldown is over it is the half-open probe."""
        if self.state is BreakerState.OPEN and now >= self.opened_at + self.cooldown:
            self.state = BreakerState.HALF_OPEN

    def record(self, problem: str | None, now: float) -> Verdict:
        """The outcome of a health check: None if the server answered, else what went wrong."""
        if problem is None:
            self.reset()
            return Verdict.HEALTHY
        self.failures += 1
        self.problem = problem
        if self.failures >= self.restart_after:
            self._open(now)
            return Verdict.RESTART
        if self.state is BreakerState.HALF_OPEN or (
            self.state is BreakerState.CLOSED and self.failures >= self.open_after
        ):
            self._open(now)
            return Verdict.OPENED
        return Verdict.FAILING

    def reset(self) -> None:
        """Closed, with no failures counted (an answered check, or a new connection)."""
        self.state = BreakerState.CLOSED
        self.failures = 0
        self.problem = None

    def _open(self, now: float) -> None:
        self.state = BreakerState.OPEN
        self.opened_at = now
