"""structlog set up to write to stderr only: on stdio, stdout is the JSON-RPC channel."""

from __future__ import annotations

import contextlib
import logging
import sys

import structlog

__all__ = ["configure_logging"]


class _StderrLogger:
    """Writes each line to the `sys.stderr` of the moment, and never raises.

    A log line must not fail the call it describes: a client may close our stderr, and a host
    (or a test harness) may swap `sys.stderr` after start-up.
    """

    def msg(self, message: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # closed, or a broken pipe
            sys.stderr.write(message + "\n")
            sys.stderr.flush()

    debug = info = warning = warn = error = critical = exception = fatal = failure = err = log = msg


def _stderr_logger(*_args: object) -> _StderrLogger:
    return _StderrLogger()


def configure_logging(level: str = "info", *, json: bool = False) -> None:
    """Send toolscore's and the SDK's logs to stderr at `level`."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    # The list in force is changed in place, never replaced: a logger cached on first use keeps
    # the list it was cached with, so a new list would leave it writing through the old chain.
    processors = structlog.get_config()["processors"]
    processors[:] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        renderer,
    ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=True,
    )
    # The SDK and uvicorn log through the standard library; keep them on stderr, quieter.
    logging.basicConfig(
        stream=sys.stderr, level=max(numeric, logging.WARNING), format="%(levelname)s %(name)s: %(message)s"
    )
