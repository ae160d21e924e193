"""Which way a client's `tools/call` goes through the front: the rules in one place.

A call takes one of three lanes. Each is the same engine call (four phases, one audit record);
they differ in how much of the SDK and of the event loop they go through.

| lane | what it is | which calls |
|---|---|---|
| SDK path | the SDK reads the request into models, runs the handler | all the others do not take |
| hot path | decoded once, run in a task, answered as bytes | `orchestrate` (allowed), routed tools |
| express lane | sent from the client's reader, answered from the server's | hot-path calls the rules allow |

The hot path is `front.fast` (stdio) and `front.http_fast`; it takes a call it can read whole in
one pass. The express lane is `front.express`; it takes a call for which every express rule below
holds.

Never the hot path: `delegate` and the ToolHub's tools (`call_capability`, `search_tools`, ...),
which ask the client's model or fan out; a tool no server routes (the SDK path words the error);
anything tracing is on for (the SDK's spans carry the trace). The HTTP front adds its own
transport rules (a live session at its handshake version, an `Accept` of both kinds, a body
under the size cap: `front.http_fast`).

Express rules, all of which must hold, else the hot path takes the call:
- no engine hook is installed (`ToolExecutionEngine.hookless`): nothing in phases 2-4 can await;
- the call carries no `_meta` (a progress token needs a task to report progress from);
- its server is shared, not one instance per client (`isolation: "session"` picks an instance);
- its tool does not require a task (`execution.taskSupport: "required"`);
- its connection takes sent calls at the client's version now (`Downstream.keeps_bytes`: a stdio
  pipe at that version, up, its breaker closed).

On every lane the call goes through the same phases (`ToolExecutionEngine._phases`): a call the
express lane takes whose arguments are refused, or whose caller is over its cap, is answered there
with the words and the audit record any lane gives it.
"""

from __future__ import annotations

from collections.abc import Callable

from toolscore._engine import ToolExecutionEngine
from toolscore.downstream.connection import Downstream
from toolscore.downstream.hub import DownstreamHub
from toolscore.downstream.registry import Route

__all__ = ["Lanes"]


class Lanes:
    """The lane rules of one front server, over the collaborators they read."""

    def __init__(
        self,
        hub: DownstreamHub,
        engine: ToolExecutionEngine,
        *,
        plans: Callable[[], bool],
        own: Callable[[str], bool],
    ) -> None:
        """Args:
        hub: Routes tools to servers, and holds the connections.
        engine: Whether hooks are installed (`hookless`).
        plans: Whether `orchestrate` is allowed now (else the SDK path answers that it is not there).
        own: Whether a name is one of the gateway's own tools kept off the hot path (`delegate`,
            the ToolHub's).
        """
        self._hub = hub
        self._engine = engine
        self._plans = plans
        self._own = own

    def hot(self, name: str, *, plan: bool) -> bool:
        """Whether the hot path takes a call of `name` (`plan`: it names `orchestrate`)."""
        if plan:
            return self._plans()
        return not self._own(name) and self._hub.registry.get(name) is not None

    @property
    def express_open(self) -> bool:
        """Whether calls may take the express lane at all (no hook installed)."""
        return self._engine.hookless

    def express(self, name: str, version: str) -> tuple[Route, Downstream] | None:
        """The route of a hot-path call of `name` from a client speaking `version` and the
        connection to send it on, where the express rules of the route hold; else None."""
        route = self._hub.registry.get(name)
        if route is None:
            return None
        downstream = self._hub.shared(route.server)
        if downstream is None or downstream.config.isolation == "session":
            return None
        # The express lane never asks for a task, so only a tool that requires one runs as a task
        # (`runs_as_task`): read from the route rather than looked up in the server's tool list.
        execution = route.tool.execution
        if execution is not None and execution.task_support == "required":
            return None
        return (route, downstream) if downstream.keeps_bytes(version) else None
