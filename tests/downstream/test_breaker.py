"""The circuit breaker's state machine, on a clock the test moves."""

from __future__ import annotations

import pytest

from toolscore.downstream.breaker import Breaker, BreakerState, Verdict

PING = "no answer to ping within 5 s"


def test_it_opens_after_enough_failures_in_a_row_and_an_answer_resets_the_count() -> None:
    breaker = Breaker(open_after=2, cooldown=5.0, restart_after=4)
    assert breaker.record(PING, 0.0) is Verdict.FAILING and breaker.refusal(0.0) is None
    assert breaker.record(None, 1.0) is Verdict.HEALTHY and breaker.failures == 0
    assert breaker.record(PING, 2.0) is Verdict.FAILING
    assert breaker.record(PING, 3.0) is Verdict.OPENED
    assert breaker.refusal(4.0) == (
        f"unhealthy: 2 health checks in a row failed ({PING}); calls fail fast, checked again in 4.0 s"
    )


def test_after_the_cooldown_the_next_check_is_a_half_open_probe() -> None:
    breaker = Breaker(open_after=1, cooldown=5.0, restart_after=10)
    assert breaker.record(PING, 10.0) is Verdict.OPENED
    assert breaker.next_check_in(12.0, interval=30.0) == 3.0  # the probe does not wait a whole interval
    breaker.checking(12.0)
    assert breaker.state is BreakerState.OPEN  # too early to probe
    breaker.checking(15.0)
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.refusal(15.0) == (
        f"unhealthy: 1 health check in a row failed ({PING}); calls fail fast, being checked again now"
    )
    assert breaker.next_check_in(15.0, interval=30.0) == 30.0
    assert breaker.record(PING, 16.0) is Verdict.OPENED  # a failed probe opens it again, for a new cooldown
    assert breaker.refusal(16.0) is not None and "checked again in 5.0 s" in (breaker.refusal(16.0) or "")
    breaker.checking(21.0)
    assert breaker.record(None, 21.5) is Verdict.HEALTHY
    assert breaker.state is BreakerState.CLOSED and breaker.refusal(21.5) is None


def test_a_failure_while_open_keeps_it_open_without_reopening() -> None:
    breaker = Breaker(open_after=1, cooldown=5.0, restart_after=10)
    breaker.record(PING, 0.0)
    assert breaker.record(PING, 1.0) is Verdict.FAILING and breaker.opened_at == 0.0


def test_enough_failures_in_a_row_restart_the_server_and_a_new_connection_starts_closed() -> None:
    breaker = Breaker(open_after=2, cooldown=0.0, restart_after=3)
    verdicts = [breaker.record(PING, float(t)) for t in range(3)]
    assert verdicts == [Verdict.FAILING, Verdict.OPENED, Verdict.RESTART]
    assert breaker.refusal(3.0) is not None
    breaker.reset()
    assert (breaker.state, breaker.failures, breaker.refusal(3.0)) == (BreakerState.CLOSED, 0, None)


@pytest.mark.parametrize(("open_after", "cooldown", "restart_after"), [(0, 1.0, 1), (1, -1.0, 1), (1, 1.0, 0)])
def test_nonsense_bounds_are_refused(open_after: int, cooldown: float, restart_after: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Breaker(open_after, cooldown, restart_after)
