"""Logging writes to the stderr of the moment and never fails the call it describes."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator

import pytest
import structlog

from toolscore._logging import configure_logging


@pytest.fixture(autouse=True)
def _restore_structlog() -> Iterator[None]:
    # Restored in place: `reset_defaults` would install a new processor list, which loggers the
    # gateway cached earlier never see, so a later test's `captured_logs` would miss them.
    before = structlog.get_config()
    saved = list(before["processors"])
    yield
    before["processors"][:] = saved
    structlog.configure(**before)


def test_lines_go_to_the_current_stderr_and_a_closed_one_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    configure_logging("info")
    log = structlog.get_logger("t")
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    log.info("one", n=1)
    assert "one" in first.getvalue() and "n=1" in first.getvalue()
    first.close()
    log.warning("after close")  # the stream a test harness swapped in is gone: no exception
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    log.info("two")
    assert "two" in second.getvalue()
    log.debug("hidden")
    assert "hidden" not in second.getvalue()
