"""The express lane: a plain passthrough `tools/call` from a stdio client, answered without a task.

Theory of operation. The hot path (`front.fast`) runs each call in a worker task: the task wakes
for the call, waits on the downstream's answer, and wakes again to write it, each step a trip
through the event loop with its cancel scopes and futures. While no engine hook is installed,
nothing between the request and the answer needs to wait on anything but the server, so here:

- the front's reader decodes the call (`fast.decode_call`), begins its phases
  (`ToolExecutionEngine.fly`, the callback driver of the engine's one call lifecycle), writes
  the request on the downstream's pipe (`Downstream.send`, the callback driver of the
  connection's one call seam) and reads on;
- the downstream's reader, which reads the answer, hands it here: the call's phases finish
  (`Flight.land`: tokens, audit) and the answer is written to the client from that reader, the
  server's result bytes spliced in as on the hot path. A call that ends before it is sent (its
  arguments refused, its caller over the cap) is answered here the same way.

Neither reader ever waits here: a write happens only if the pipe takes the whole line at once
(`LineWriter.write_now`). A request it cannot take goes to the hot path instead, unsent; an
answer it cannot take (a large one, a client slow to read) is written by a task of its own. So a
server that does not read its input never holds up the client's other requests (a cancellation,
a call to another server), and a client slow to read never holds up a server's other messages
(its answers to the health check's pings).

A call's deadline is a timer on the event loop. When it fires, or the client cancels the call,
or the server's connection ends, the call ends as it does on the hot path: the server is told
(`notifications/cancelled`), the client gets the same answer (none for a cancelled call), and
the audit record says the same. While the call lasts, the client is the server's peer for its
requests and logs, as on the hot path.

A call goes to the hot path instead when anything about it needs more: the rules are in
`toolscore.front.lanes`.
"""

from __future__ import annotations

import asyncio  # noqa: TID251 (a deadline is a timer on the running asyncio loop; see `_Pending`)
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVarTuple

import anyio
import mcp_types
import structlog
from anyio.abc import TaskGroup

from toolscore._engine import CallOutcome, Flight, ToolExecutionEngine
from toolscore.downstream.backchannel import Peer
from toolscore.downstream.connection import Downstream, SentCall
from toolscore.downstream.raw import RawResult
from toolscore.downstream.registry import Route
from toolscore.errors import DownstreamProtocolError, DownstreamUnavailable
from toolscore.front.fast import Job, encode_answer, internal_error
from toolscore.scope import CallScope

__all__ = ["ClientOut", "ExpressLane", "Resolve"]

log = structlog.get_logger("toolscore.express")
_Args = TypeVarTuple("_Args")

Resolve = Callable[[str, str], tuple[Route, Downstream] | None]
"""The route of a public tool name called by a client speaking a version, and the connection to
send it on, when the lane rules let it go express (`toolscore.front.lanes.Lanes.express`)."""


class ClientOut(Protocol):
    """The client's side of the wire (`front.stdio.ClientLines`)."""

    def write_now(self, line: bytes) -> bool:
        """Write `line` whole without waiting; False: nothing was written."""
        ...

    async def write(self, line: bytes) -> None:
        """Write `line`, waiting as long as it takes."""
        ...


@dataclass(slots=True)
class _Pending:
    """One call sent and not yet answered."""

    request_id: int | str
    flight: Flight
    call: SentCall | None = None
    """The call as the connection sent it (None until it is sent)."""
    timer: asyncio.TimerHandle | None = None
    """The deadline: a bare loop timer, the cheapest one there is (no cancel scope, no task)."""
    ended: bool = False


class ExpressLane:
    """The express lane of one stdio client connection (see the module docstring)."""

    def __init__(
        self,
        engine: ToolExecutionEngine,
        resolve: Resolve,
        *,
        version: str,
        caller: str,
        peer: Peer,
    ) -> None:
        """Args:
        engine: Runs the calls' phases and audits them.
        resolve: Where a tool's calls go, if they may go express.
        version: The client's protocol version (a server's result bytes are kept only at the same).
        caller: The client connection, as the engine knows callers.
        peer: The client, as the servers see it during its calls.
        """
        self._engine = engine
        self._resolve = resolve
        self._version = version
        # One scope for the connection's every express call: nothing more is made per call.
        self._scope = CallScope(caller, peer, version)
        self._pending: dict[int | str, _Pending] = {}
        self.sent = 0
        """Calls sent on this lane so far."""
        self._out: ClientOut | None = None
        self._tg: TaskGroup | None = None

    def __contains__(self, request_id: int | str) -> bool:
        return request_id in self._pending

    def __len__(self) -> int:
        return len(self._pending)

    def take(self, job: Job, out: ClientOut, tg: TaskGroup) -> bool:
        """Send `job` on the express lane; False: it is the hot path's (nothing was sent).

        Args:
            job: The client's call.
            out: The client's side of the wire.
            tg: The transport's task group, for what must wait (a deadline's notice to the server,
                an answer the client's pipe cannot take at once).
        """
        params = job.params
        if params.meta is not None:
            return False
        flight = None
        try:
            found = self._resolve(params.name, self._version)
            if found is None:
                return False
            route, downstream = found
            arguments = params.arguments if params.arguments is not None else {}
            flight = self._engine.fly(
                params.name,
                route,
                arguments,
                request_id=job.id,
                scope=self._scope,
                spill=True,  # a call here carries no `_meta`: nothing asked for the whole result
            )
            if isinstance(flight, CallOutcome):  # ended before it was sent: answered as it is
                self._out, self._tg = out, tg
                self._send(encode_answer(job.id, params.name, flight, self._version, b"\n"))
                return True
            pending = _Pending(job.id, flight)
            pending.call = downstream.send(route.remote_name, arguments, self._scope, partial(self._answered, pending))
        except Exception:  # a bug, before anything was sent: the hot path answers the call
            log.exception("express lane failed; the call takes the hot path", tool=params.name)
            if isinstance(flight, Flight):
                flight.abandon()
            return False
        if pending.call is None:  # it cannot go this way now (the pipe is full, ...): the hot path's
            flight.abandon()
            return False
        self._out, self._tg = out, tg
        self._pending[job.id] = pending
        self.sent += 1
        timeout = flight.ctx.timeout
        assert timeout is not None
        loop = asyncio.get_running_loop()
        pending.timer = loop.call_at(loop.time() + timeout, self._expire, pending)
        return True

    def cancel(self, request_id: int | str) -> bool:
        """The client cancelled the call `request_id`: no answer, and the server is told; False: not
        one of this lane's calls."""
        pending = self._pending.get(request_id)
        if pending is None or not self._end(pending):
            return False
        pending.flight.cancel()
        assert pending.call is not None
        self._later(pending.call.withdraw)
        return True

    async def close(self) -> None:
        """The client is gone: every call still out ends as cancelled, and its server is told."""
        for pending in list(self._pending.values()):
            if self._end(pending):
                pending.flight.cancel()
                assert pending.call is not None
                await pending.call.withdraw()

    def _end(self, pending: _Pending) -> bool:
        """Take `pending` out of the lane once; False if it had already ended."""
        if pending.ended:
            return False
        pending.ended = True
        del self._pending[pending.request_id]
        if pending.timer is not None:
            pending.timer.cancel()
        if pending.call is not None:
            pending.call.release()
        return True

    def _answered(
        self,
        pending: _Pending,
        outcome: RawResult | mcp_types.CallToolResult | DownstreamUnavailable | DownstreamProtocolError,
    ) -> None:
        """The server's answer, or the error that ended the call (its connection lost), from its reader."""
        if not self._end(pending):
            return
        tool = pending.flight.ctx.tool
        try:
            done = pending.flight.land(outcome)
            line = encode_answer(pending.request_id, tool, done, self._version, b"\n")
        except Exception:  # the SDK path's boundary: a bug is logged and answered, never raised into the reader
            line = encode_answer(pending.request_id, tool, internal_error(tool), self._version, b"\n")
        self._send(line)

    def _expire(self, pending: _Pending) -> None:
        """The deadline passed: the server is told, and the client answered with the timeout."""
        if not self._end(pending):
            return
        done = pending.flight.expire()
        line = encode_answer(pending.request_id, pending.flight.ctx.tool, done, self._version, b"\n")
        self._later(self._withdraw_then_send, pending, line)

    async def _withdraw_then_send(self, pending: _Pending, line: bytes) -> None:
        assert pending.call is not None
        await pending.call.withdraw()
        await self._write(line)

    def _send(self, line: bytes) -> None:
        assert self._out is not None
        if not self._out.write_now(line):
            self._later(self._write, line)

    async def _write(self, line: bytes) -> None:
        assert self._out is not None
        try:
            await self._out.write(line)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            log.debug("answer not delivered: the client is gone")

    def _later(self, func: Callable[[*_Args], Coroutine[Any, Any, object]], *args: *_Args) -> None:
        """Run `func(*args)` in a task of its own (the transport's, which ends with the client)."""
        assert self._tg is not None
        try:
            self._tg.start_soon(func, *args)
        except RuntimeError:  # the transport is closing: the client is gone
            log.debug("not done: the client is gone", step=getattr(func, "__name__", "?"))
