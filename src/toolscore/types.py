"""Aliases and protocols shared across toolscore's modules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import mcp_types

from toolscore.downstream.raw import RawResult
from toolscore.downstream.registry import Registry

if TYPE_CHECKING:
    from toolscore.scope import CallScope

__all__ = ["ANONYMOUS_CALLER", "Arguments", "CallDownstream", "ProgressFn", "ToolSource"]

ANONYMOUS_CALLER = "principal:anonymous"
"""The caller of a stateless (2026-07-28) HTTP request on a front without tokens: every such client
is this one caller, so nothing per-client (an `isolation: "session"` instance) can be theirs."""

Arguments = dict[str, Any]
"""A tool call's arguments: always a JSON object."""


class ProgressFn(Protocol):
    """Receives a call's progress, as MCP progress notifications carry it."""

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None: ...


class CallDownstream(Protocol):
    """The engine's one I/O seam: send a call to a server and return its result verbatim.

    `keep_bytes`: the result may be the bytes the server wrote (`RawResult`), where the connection
    allows; a seam that never keeps bytes ignores it. Raises `DownstreamError` (or a subclass)
    when the server cannot answer.
    """

    async def __call__(
        self,
        server: str,
        tool: str,
        arguments: Arguments,
        *,
        progress: ProgressFn | None,
        scope: CallScope,
        keep_bytes: bool = False,
    ) -> RawResult | mcp_types.CallToolResult: ...


class ToolSource(Protocol):
    """What the engine needs to know about the downstream servers before a call."""

    @property
    def registry(self) -> Registry:
        """The current index of exposed tools."""
        ...

    def unavailable_reason(self, server: str) -> str | None:
        """Why `server` cannot take calls right now, or None when it is connected."""
        ...

    def call_timed_out(self, server: str, caller: str | None) -> None:
        """A call to `server` ran past its deadline (the server may be wedged)."""
        ...
