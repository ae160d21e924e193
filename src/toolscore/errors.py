"""The one exception tree of toolscore, branched by who is at fault.

```
ToolscoreError
├── ConfigError                  the operator's servers.json: file + field path
├── ToolNotFound                 the model named a tool that is not routed
├── InvalidArguments             the model's arguments fail the tool's inputSchema
├── Rejected                     a constraint hook refused the call: hook name + reason
├── CallTimeout                  the call ran past its deadline and was cancelled downstream
├── InputRequired                not a failure: the call pauses for the client's input (one signal for all)
├── DownstreamError
│   ├── DownstreamUnavailable    spawn / connect failed, the server is down or went away
│   └── DownstreamProtocolError  the downstream answered with a JSON-RPC error or broke MCP
├── PlanError                    an `orchestrate` plan cannot run: every PlanProblem found
│   ├── PlanSyntaxError          the text does not parse (tags, attributes, JSON, characters)
│   └── PlanCheckError           it parses, but names unknown tools, bad references, breaks policy
└── PlanReferenceError           a `${...}` in a plan
    ├── RefSyntaxError           is not a reference (found while checking: a plan problem)
    └── RefError                 does not resolve when its step runs (that step's `ref_error`)
UsageError(ToolscoreError, RuntimeError)   our API misused by a developer
```

Everything a model can fix or should know about becomes a tool error result at the front
server; nothing here ever reaches a client as a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    import mcp_types

__all__ = [
    "CallTimeout",
    "ConfigError",
    "DownstreamError",
    "DownstreamProtocolError",
    "DownstreamUnavailable",
    "InvalidArguments",
    "PlanCheckError",
    "PlanError",
    "PlanProblem",
    "PlanReferenceError",
    "PlanSyntaxError",
    "RefError",
    "RefSyntaxError",
    "Rejected",
    "ToolNotFound",
    "ToolscoreError",
    "UsageError",
]


class ToolscoreError(Exception):
    """Base of every error toolscore raises on purpose."""

    #: Stable machine-readable kind, written to the audit log.
    kind: str = "error"


class TaskStarted(ToolscoreError):
    """Not a failure: the server runs a 2026-07-28 client's call as a task of the tasks extension
    (SEP-2663). The front answers the call with the server's `CreateTaskResult`, its task id
    remembered as that server's, so that the client's `tasks/get`, `tasks/update` and
    `tasks/cancel` reach it."""

    kind = "task"

    def __init__(self, server: str, result: dict[str, Any]) -> None:
        self.server = server
        self.result = result
        """The server's `CreateTaskResult`, as JSON (`resultType`, `taskId`, `status`, ...)."""
        super().__init__(f"server '{server}' runs the call as a task")


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


class InputRequired(ToolscoreError):
    """Not a failure: the call pauses for the client's input, the one way anything in the gateway
    says so (its own yes/no question, a downstream's input-required result, the `delegate` loop's
    turn for the client's model). A 2026-07-28 client answers by retrying the call; the front
    answers the call with `answer()`: an input-required result carrying `requests` and `state`.
    """

    kind = "input_required"

    def __init__(
        self, requests: dict[str, Any], state: str = "", *, result: mcp_types.InputRequiredResult | None = None
    ) -> None:
        self.requests = requests
        """The input requests, by the key the client answers each under."""
        self.state = state
        """The request state the retry carries back (sealed or an id; empty until its owner sets it)."""
        self._result = result
        super().__init__("the call waits for the user's answer")

    @classmethod
    def passing(cls, result: mcp_types.InputRequiredResult) -> InputRequired:
        """A downstream's input-required result, to go back to the client unchanged."""
        return cls(dict(result.input_requests or {}), result.request_state or "", result=result)

    def answer(self) -> mcp_types.InputRequiredResult:
        """The client's answer to the paused call."""
        if self._result is not None:
            return self._result
        import mcp_types

        return mcp_types.InputRequiredResult(input_requests=self.requests, request_state=self.state)


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

    def __init__(self, message: str, *, server: str, error: mcp_types.ErrorData | None = None) -> None:
        self.error = error
        """The server's JSON-RPC error, if that is what it answered (passed on as such to the client)."""
        super().__init__(message, server=server)

    @property
    def for_the_client(self) -> mcp_types.ErrorData | None:
        """The JSON-RPC error the front client gets as such (not as a tool error), if any.

        Only -32021, which the client (not the model) must act on; a relayed request's errors are
        all the client's (`downstream.modern.RelayedError`).
        """
        from mcp_types import MISSING_REQUIRED_CLIENT_CAPABILITY  # loaded by now: not at this module's import

        error = self.error
        return error if error is not None and error.code == MISSING_REQUIRED_CLIENT_CAPABILITY else None

    @classmethod
    def answered(cls, server: str, what: str, error: mcp_types.ErrorData) -> Self:
        """The server answered `what` ("the read of 'x'") with the JSON-RPC `error`."""
        return cls(
            f"Server '{server}' answered {what} with an error: {error.message} (code {error.code}).",
            server=server,
            error=error,
        )


@dataclass(frozen=True, slots=True)
class PlanProblem:
    """One reason a plan cannot run, with a stable `code` and where it is."""

    code: str
    message: str
    step: int | None = None
    tag: str | None = None
    id: str | None = None
    ref: str | None = None
    line: int | None = None


class PlanError(ToolscoreError):
    """A plan that may not run; carries every problem found, not just the first."""

    kind = "plan_error"

    def __init__(self, problems: Sequence[PlanProblem]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(p.message for p in self.problems))


class PlanSyntaxError(PlanError):
    """The turn could not be parsed."""


class PlanCheckError(PlanError):
    """The plan parsed, but failed the checks against the live tools or the policy."""


class PlanReferenceError(ToolscoreError):
    """A `${...}` reference into earlier results."""

    kind = "ref_error"


class RefSyntaxError(PlanReferenceError, ValueError):
    """A `${...}` that is not a valid v1 reference."""


class RefError(PlanReferenceError, LookupError):
    """A reference that does not resolve (missing step, key or index, or too large a value)."""


class UsageError(ToolscoreError, RuntimeError):
    """toolscore's Python API was used wrongly (a bug in the caller, not bad input)."""

    kind = "usage"
