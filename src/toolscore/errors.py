"""The one exception tree of toolscore, branched by who is at fault.

```
ToolscoreError
├── ConfigError                  the operator's servers.json: file + field path
├── ToolNotFound                 the model named a tool that is not routed
├── InvalidArguments             the model's arguments fail the tool's inputSchema
├── Rejected                     a constraint hook refused the call: hook name + reason
├── CallTimeout                  the call ran past its deadline and was cancelled downstream
└── DownstreamError
    ├── DownstreamUnavailable    spawn / connect failed, the server is down or went away
    └── DownstreamProtocolError  the downstream answered with a JSON-RPC error or broke MCP
UsageError(ToolscoreError, RuntimeError)   our API misused by a developer
```

Everything a model can fix or should know about becomes a tool error result at the front
server; nothing here ever reaches a client as a traceback.
"""

from __future__ import annotations

__all__ = [
    "CallTimeout",
    "ConfigError",
    "DownstreamError",
    "DownstreamProtocolError",
    "DownstreamUnavailable",
    "InvalidArguments",
    "Rejected",
    "ToolNotFound",
    "ToolscoreError",
    "UsageError",
]


class ToolscoreError(Exception):
    """Base of every error toolscore raises on purpose."""

    #: Stable machine-readable kind, written to the audit log.
    kind: str = "error"


class ConfigError(ToolscoreError):
    """servers.json is unreadable or invalid; the message names the file and the field."""

    kind = "config"

    def __init__(self, message: str, *, path: str | None = None, field: str | None = None) -> None:
        self.path = path
        self.field = field
        where = ": ".join(p for p in (path, field) if p)
        super().__init__(f"{where}: {message}" if where else message)


class ToolNotFound(ToolscoreError):
    """The requested tool is not exposed by the gateway."""

    kind = "tool_not_found"


class InvalidArguments(ToolscoreError):
    """The arguments do not validate against the tool's inputSchema."""

    kind = "invalid_arguments"

    def __init__(self, tool: str, problems: list[str]) -> None:
        self.tool = tool
        self.problems = problems
        listing = "\n".join(f"- {p}" for p in problems)
        super().__init__(f"Invalid arguments for tool '{tool}':\n{listing}")


class Rejected(ToolscoreError):
    """A constraint hook refused the call before it reached the downstream."""

    kind = "rejected"

    def __init__(self, reason: str, *, hook: str) -> None:
        self.reason = reason
        self.hook = hook
        super().__init__(f"Call rejected by policy '{hook}': {reason}")


class CallTimeout(ToolscoreError):
    """The call exceeded its timeout; the downstream was told to cancel it."""

    kind = "timeout"


class DownstreamError(ToolscoreError):
    """A downstream server failed to answer a call."""

    kind = "downstream"

    def __init__(self, message: str, *, server: str) -> None:
        self.server = server
        super().__init__(message)


class DownstreamUnavailable(DownstreamError):
    """The server is not connected: it failed to start, died, or is reconnecting."""

    kind = "unavailable"


class DownstreamProtocolError(DownstreamError):
    """The server answered with a JSON-RPC error or a malformed result."""

    kind = "protocol"


class UsageError(ToolscoreError, RuntimeError):
    """toolscore's Python API was used wrongly (a bug in the caller, not bad input)."""

    kind = "usage"
