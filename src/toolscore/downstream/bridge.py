"""Era bridging: a 2026-07-28 client's call on a connection in the handshake era.

A server connected in the handshake era asks its client things (sampling, elicitation, roots) by
back-channel requests during a call. A 2026-07-28 client has no back-channel: it is asked by an
input-required result instead, and answers by retrying the call. The bridge joins the two over
the server's one connection:

- the call is sent as any other, in a task of the connection's (`Exchange.run`), with the client
  as an input peer (`Peer.by_input`: the same rules as by back-channel, the capabilities the client
  declared and the server's `sampling` option): each request the server sends becomes a question;
- the client's request waits for the call's end or for questions. Questions that arrive together
  (each within `SETTLE_SECONDS` of the last) make one round: the request is answered with an
  input-required result asking them, each under the key its server named in the request's `_meta`
  (`INPUT_KEY_META`), else one the gateway gives it, and a request state the
  gateway seals (`toolscore._seal`: the exchange, the round, the tool or prompt, a digest of its
  arguments, the caller, an expiry);
- the retry's request state is opened and checked: a forged, altered or expired one, one of another
  caller or of other arguments, or one whose round was answered already (a replay) is refused with a
  JSON-RPC error that says which. Its `inputResponses` answer the server's pending requests, and the
  retry waits in turn, round after round, until the call ends and the last retry gets its result;
- a client that does not retry within the bound (the server's `timeout`, else `ANSWER_SECONDS`), or
  whose waiting request is cancelled or dropped, ends the exchange: the server's pending requests
  get an error and the call is cancelled (the server gets `notifications/cancelled`).

A first request that carries `inputResponses` already (no request state) answers the server's
questions whose key it holds at once, as a 2026-07-28 server reads the answers it was sent.

Each round is a call through the engine of its own (policy, its deadline, an audit record), as a
relayed round is (`toolscore.downstream.modern`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from itertools import count
from typing import Any, TypeVar

import anyio
import anyio.abc
import mcp_types
import structlog
from pydantic import ValidationError

from toolscore._seal import Sealer, digest
from toolscore.downstream.backchannel import Peer
from toolscore.downstream.modern import FrontCall, RelayedError
from toolscore.errors import DownstreamUnavailable, InputRequired
from toolscore.scope import CallScope
from toolscore.types import ProgressFn

__all__ = ["ANSWER_SECONDS", "SETTLE_SECONDS", "WAITING_PER_CALLER", "Bridge", "Exchange"]

SETTLE_SECONDS = 0.05
"""Requests of the server's that arrive within this of each other go to the client as one round."""
SETTLE_MAX_SECONDS = 1.0
"""However the server keeps asking, a round is handed out after this."""
ANSWER_SECONDS = 300.0
"""How long a round waits for the client's retry, for a server without a `timeout` of its own."""
WAITING_PER_CALLER = 32
"""Rounds one caller may leave unanswered on one server: handing out one more ends the oldest
(its call cancelled), so a client that never retries cannot pile up pending calls on a server."""
log = structlog.get_logger("toolscore.downstream")

INPUT_KEY_META = "io.toolscore/inputKey"
"""A server's request's `_meta` key: the key it wants its question to have in `inputRequests`."""
_KEYS = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation", "roots/list": "roots"}

_T = TypeVar("_T")
Call = Callable[[CallScope, ProgressFn | None], Awaitable[_T]]
"""The call itself on the main connection, for a scope (the client as an input peer) and progress."""


@dataclass(eq=False, slots=True)
class _Question:
    """One request of the server's, waiting for the client's answer."""

    request: Any
    result_type: type[Any]
    key: str | None = None
    """The key the server named for it, if any (`INPUT_KEY_META`)."""
    answered: anyio.Event = field(default_factory=anyio.Event)
    answer: Any = None

    def settle(self, answer: Any) -> None:
        if not self.answered.is_set():
            self.answer = answer
            self.answered.set()


def _named_key(request: Any) -> str | None:
    """The key a server named for its request (`INPUT_KEY_META`), if a usable one."""
    params = getattr(request, "params", None)
    meta = getattr(params, "meta", None)
    key = meta.get(INPUT_KEY_META) if isinstance(meta, dict) else None
    return key if isinstance(key, str) and 0 < len(key) <= 128 else None


def _refused(server: str, what: str, message: str) -> RelayedError:
    """The client's retry refused: a JSON-RPC error (invalid params) the client gets as such."""
    error = mcp_types.ErrorData(code=mcp_types.INVALID_PARAMS, message=message)
    return RelayedError(
        f"toolscore refused the retry of {what} on server '{server}': {message}.", server=server, error=error
    )


class Exchange:
    """One bridged call: its task, the server's questions, and the round the client answers now."""

    def __init__(
        self,
        bridge: Bridge,
        ident: str,
        bound: dict[str, Any],
        what: str,
        group: anyio.abc.TaskGroup,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        self.ident = ident
        self.bound = bound
        """What the request state binds besides the exchange, the round and the arguments: call, caller."""
        self._arguments = arguments
        self._digest: str | None = None
        self.what = what
        self.round = 0
        self.peer: Peer | None = None
        self.done = False
        self._bridge = bridge
        self._new: list[_Question] = []
        self._asked: dict[str, _Question] = {}
        self._awaiting = False
        """A round was handed out and its answers have not come."""
        self._changed = anyio.Event()
        self._resumed = anyio.Event()
        self._group = group
        """Where the call runs, and each round's wait for the client's retry (`_watch`)."""
        self._scope = anyio.CancelScope()
        self._keys = count(1)
        self._result: Any = None
        self._error: BaseException | None = None
        self._ended: str | None = None
        self._waiting: CallScope | None = None
        self._progress: ProgressFn | None = None
        self.given: dict[str, Any] = {}
        self.kept_until = 0.0
        """Once done: until when its outcome waits for the retry of the round that was out."""
        """Answers the first request carried already (JSON, by key), for the questions named so."""

    @property
    def arguments_digest(self) -> str:
        """The digest of the call's arguments, which its request states bind: taken when the first
        round is sealed, as most calls never ask anything."""
        if self._digest is None:
            self._digest = digest(self._arguments)
        return self._digest

    # -- the server's side (an `InputChannel`) -----------------------------------------------

    async def ask(self, request: Any, result_type: type[_T]) -> _T | mcp_types.ErrorData:
        """The server's `request`, to go to the client in the next round; its answer when it comes."""
        if self.done or self._ended is not None:
            return self._gone()
        key = _named_key(request)
        if key is not None and key in self.given:
            try:
                answer_given: _T = result_type.model_validate(self.given.pop(key), by_name=False)  # type: ignore[attr-defined]
                return answer_given
            except ValidationError:  # not an answer to this question: it is asked
                pass
        question = _Question(request, result_type, key)
        self._new.append(question)
        self._changed.set()
        await question.answered.wait()
        answer: _T | mcp_types.ErrorData = question.answer
        return answer

    async def log(self, server: str, params: mcp_types.LoggingMessageNotificationParams) -> None:
        """A log message, to the client's request waiting now (under its own level), if one waits."""
        waiting = self._waiting
        if waiting is not None and waiting.peer is not None:
            await waiting.peer.log(server, params)

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        """Progress, to the client's request waiting now, if one waits and asked for it."""
        forward = self._progress
        if forward is not None:
            try:
                await forward(progress, total, message)
            except Exception as exc:  # the client's request ended meanwhile: progress is not worth an error
                log.debug("progress not delivered", server=self._bridge.server, error=str(exc))

    @property
    def waiting(self) -> bool:
        """A round went to the client and its answers have not come (the call may have ended since)."""
        return self._awaiting

    @property
    def parked(self) -> bool:
        """A round went to the client, and the server has asked nothing since."""
        return self._awaiting and not self._new

    def _gone(self) -> mcp_types.ErrorData:
        why = self._ended or "the call is over"
        return mcp_types.ErrorData(
            code=mcp_types.INVALID_REQUEST,
            message=f"toolscore cannot forward this request of server '{self._bridge.server}' to its client: {why}",
        )

    # -- the call -------------------------------------------------------------------------------

    async def run(self, call: Callable[[], Awaitable[Any]]) -> None:
        """The call, in the connection's task group; its outcome is kept for the request waiting."""
        try:
            with self._scope:
                try:
                    self._result = await call()
                except Exception as exc:  # the waiting request raises it, as the call would have
                    self._error = exc
        finally:
            self._finish()

    def _finish(self) -> None:
        self.done = True
        # The call ended while a round was out (the server gave up waiting, say): the outcome is
        # kept for that round's retry, as long as the round's state would have been good for.
        kept = self._awaiting and self._ended is None
        self.kept_until = anyio.current_time() + self._bridge.answer_seconds
        if self._result is None and self._error is None:
            why = self._ended or "its connection closed"
            self._error = DownstreamUnavailable(
                f"Server '{self._bridge.server}': {self.what} ended: {why}.", server=self._bridge.server
            )
        for question in [*self._new, *self._asked.values()]:
            question.settle(self._gone())
        self._new.clear()
        self._asked.clear()
        if not kept:
            self._bridge.forget(self)
        if self.peer is not None:
            self.peer.detach()
        self._changed.set()
        self._resumed.set()  # the round's watcher, if one is out, has nothing left to wait for

    async def _watch(self, resumed: anyio.Event) -> None:
        """A round handed out waits for the client's retry (`resumed`) so long, then the exchange ends.

        Started per round rather than kept beside every call: most calls never ask anything."""
        limit = self._bridge.answer_seconds
        with anyio.move_on_after(limit) as waited:
            await resumed.wait()
        if waited.cancelled_caught:
            self.abandon(f"the client did not answer within {limit:g} s")

    def abandon(self, why: str) -> None:
        """End the exchange: the server's pending requests get an error, the call is cancelled."""
        if self.done or self._ended is not None:
            return
        self._ended = why
        for question in [*self._new, *self._asked.values()]:
            question.settle(self._gone())
        self._scope.cancel()

    # -- the client's side ----------------------------------------------------------------------

    def answer(self, responses: dict[str, Any] | None) -> None:
        """The retry's `inputResponses` (JSON) to the questions of the round handed out.

        Raises:
            RelayedError: an answer is missing or does not answer its question (nothing is taken).
        """
        server, what = self._bridge.server, self.what
        given = responses or {}
        missing = [key for key in self._asked if key not in given]
        if missing:
            raise _refused(
                server, what, f"inputResponses lacks {', '.join(map(repr, missing))}, asked in the previous round"
            )
        parsed: dict[str, Any] = {}
        for key, question in self._asked.items():
            try:
                parsed[key] = question.result_type.model_validate(given[key], by_name=False)
            except ValidationError:
                raise _refused(
                    server, what, f"inputResponses[{key!r}] is not an answer to {question.request.method}"
                ) from None
        for key, question in self._asked.items():
            question.settle(parsed[key])
        self._asked.clear()
        self._awaiting = False
        self._resumed.set()

    def check_round(self, round_: object) -> str | None:
        """Why a retry's state of round `round_` cannot answer now (a replay), or None."""
        if round_ != self.round or not self._awaiting:
            return "this requestState was answered already; send the answers to the latest round's"
        return None

    async def next(self, scope: CallScope, progress: ProgressFn | None) -> Any:
        """Wait, for the client's request of `scope`, for the call's outcome or the next round.

        Raises:
            InputRequired: the next round's questions, with its sealed state.
        """
        self._waiting, self._progress = scope, progress
        try:
            while not self.done and not self._new:
                self._changed = changed = anyio.Event()
                await changed.wait()
            if not self.done:  # questions: wait for those sent with them
                with anyio.move_on_after(SETTLE_MAX_SECONDS):
                    while not self.done:
                        before = len(self._new)
                        self._changed = changed = anyio.Event()
                        with anyio.move_on_after(SETTLE_SECONDS):
                            await changed.wait()
                        if len(self._new) == before:
                            break
        except BaseException:  # the client's request was cancelled, or its client went away
            self.abandon("the client's request was cancelled")
            raise
        finally:
            self._waiting = self._progress = None
        if self.done:
            self._bridge.forget(self)
            if self._error is not None:
                raise self._error
            return self._result
        requests: dict[str, Any] = {}
        for question in self._new:
            key = question.key
            if key is None or key in requests or key in self._asked:
                key = f"{_KEYS.get(question.request.method, 'input')}_{next(self._keys)}"
            self._asked[key] = question
            requests[key] = question.request
        self._new.clear()
        self.round += 1
        self._awaiting = True
        self._bridge.make_room(self)
        state = self._bridge.seal(self)
        self._resumed = resumed = anyio.Event()
        self._group.start_soon(self._watch, resumed)
        raise InputRequired(requests, state)


class Bridge:
    """The bridged calls of one downstream connection, and the key their request states are sealed with."""

    def __init__(self, server: str, *, answer_seconds: float = ANSWER_SECONDS) -> None:
        self.server = server
        self.answer_seconds = answer_seconds
        self._sealer = Sealer()
        self._open: dict[str, Exchange] = {}
        self._changed = anyio.Event()

    @property
    def open(self) -> int:
        """How many bridged calls are in progress (started and not ended)."""
        return len(self._open)

    async def until_open(self, count: int) -> None:
        """Return once `count` bridged calls are in progress."""
        while len(self._open) != count:
            await self._changed.wait()

    def _told(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    def _prune(self) -> None:
        """Forget the ended calls whose outcome no retry came for in time."""
        now = anyio.current_time()
        for exchange in [e for e in self._open.values() if e.done and e.kept_until < now]:
            self.forget(exchange)

    def forget(self, exchange: Exchange) -> None:
        if self._open.pop(exchange.ident, None) is not None:
            self._told()

    def make_room(self, exchange: Exchange) -> None:
        """Before `exchange` hands out a round: end its caller's oldest unanswered ones over the cap."""
        caller = exchange.bound.get("caller")
        waiting = [
            e for e in self._open.values() if e is not exchange and e.waiting and e.bound.get("caller") == caller
        ]
        for old in waiting[: max(0, len(waiting) + 1 - WAITING_PER_CALLER)]:  # oldest first
            if old.done:
                self.forget(old)
            else:
                old.abandon(f"its caller left more than {WAITING_PER_CALLER} rounds unanswered on this server")

    def seal(self, exchange: Exchange) -> str:
        """The request state of `exchange`'s current round."""
        claims = {
            **exchange.bound,
            "args": exchange.arguments_digest,
            "x": exchange.ident,
            "round": exchange.round,
            "exp": time.time() + self.answer_seconds,
        }
        return self._sealer.seal(claims)

    async def run(
        self,
        task_group: anyio.abc.TaskGroup,
        call_name: str,
        arguments: dict[str, Any] | None,
        what: str,
        scope: CallScope,
        progress: ProgressFn | None,
        call: Call[_T],
    ) -> _T:
        """One round of the 2026-07-28 client's request in `scope` (its `front`): the first starts
        the call in `task_group`, a retry answers the round its request state names.

        Raises:
            InputRequired: the server asked something: the client's next round.
            RelayedError: the retry was refused (its state or its answers), for the client as such.
            DownstreamError: what the call raises.
        """
        front = scope.front
        assert front is not None
        bound = {"call": call_name, "caller": scope.caller}
        if front.request_state is None:
            self._prune()
            exchange = Exchange(self, secrets.token_urlsafe(12), bound, what, task_group, arguments)
            exchange.given = dict(front.input_responses or {})
            if scope.peer is not None:
                exchange.peer = scope.peer.by_input(exchange)
            inner = replace(scope, peer=exchange.peer, front=None)
            forward = exchange.progress if progress is not None else None
            self._open[exchange.ident] = exchange
            self._told()

            async def started() -> _T:
                return await call(inner, forward)

            task_group.start_soon(exchange.run, started)
        else:
            exchange = self._resumed(front, {**bound, "args": digest(arguments)}, what)
        result: _T = await exchange.next(scope, progress)
        return result

    def _resumed(self, front: FrontCall, bound: dict[str, Any], what: str) -> Exchange:
        """The exchange a retry's request state names, its answers taken; refused if it cannot be."""
        claims = self._sealer.open(front.request_state or "")
        if claims is None or "x" not in claims:
            raise _refused(
                self.server,
                what,
                "requestState is not one toolscore issued for this server, or it expired: call again without it",
            )
        if any(claims.get(key) != value for key, value in bound.items()):
            raise _refused(
                self.server,
                what,
                "requestState belongs to another call (another tool or prompt, other arguments, or another caller)",
            )
        exchange = self._open.get(str(claims["x"]))
        if exchange is None:
            raise _refused(
                self.server,
                what,
                "the call this requestState belongs to is over (it ended, timed out or was cancelled): "
                "call again without it",
            )
        if (why := exchange.check_round(claims.get("round"))) is not None:
            raise _refused(self.server, what, why)
        exchange.answer(front.input_responses)
        return exchange
