"""structlog set up to write to stderr only: on stdio, stdout is the JSON-RPC channel."""

from __future__ import annotations

import logging
import sys

import structlog

__all__ = ["configure_logging"]


def configure_logging(level: str = "info", *, json: bool = False) -> None:
    """Send toolscore's and the SDK's logs to stderr at `level`."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    # The SDK and uvicorn log through the standard library; keep them on stderr, quieter.
    logging.basicConfig(
        stream=sys.stderr, level=max(numeric, logging.WARNING), format="%(levelname)s %(name)s: %(message)s"
    )
