"""`tools/call` from a stdio client without the SDK's per-message models: the hot path.

Theory of operation. The SDK reads every message into models, validates it per protocol version,
dispatches it, and dumps the result back, and the gateway's downstream client does the same
again; for a passthrough call that is most of what the gateway costs (docs/performance.md). The
stdio transport (`front.stdio`) hands each line to `FastCalls.take` first. A `tools/call` for a
downstream tool, on a connection that completed the handshake at the latest handshake-era
version, is decoded here in one msgspec pass and run through the same engine call as the SDK
path (validation, policy, deadline, audit: `HotCall`). The answer is written as bytes: the
downstream's result bytes spliced into the response envelope when the engine kept them
(`CallOutcome.raw`), else the result model dumped and shaped for the connection's version as the
SDK's runner does. An `orchestrate` call takes this path too: its plan runs through the SDK path's
own handler, in the same context, and only the request and the answer skip the models. The
client's `notifications/cancelled` for such a call cancels it here, and no answer is sent, as the
SDK does.

The path opens once the SDK has handled the client's `notifications/initialized` (its context is
the template of each fast request's): a `tools/call` read right after that notification waits
for it to be handled (`settled`), so even a client's first call takes the hot path.
Everything else goes to the SDK unchanged: the handshake, lists, other methods, a request this
decoder does not fully understand (unknown params such as `task`, a lone surrogate, an id the SDK
would refuse), every 2026-07-28 request, an older handshake version (whose results the SDK sieves
per version), and all calls while tracing is on (the SDK's spans carry the trace downstream).

The decoding (`decode_call`, `cancelled_id`) and the answer (`answer`) know nothing of stdio: the
HTTP front's hot path (`front.http_fast`) uses them too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types
import msgspec
import structlog
from mcp.server import ServerRequestContext
from mcp_types.methods import serialize_server_result
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from pydantic import ValidationError

from toolscore._engine import CallOutcome, error_result
from toolscore._json import scrub_unpaired_surrogates
from toolscore._sdk import request_context
from toolscore.errors import DownstreamProtocolError
from toolscore.telemetry import tracing

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from toolscore.front.express import ClientOut, ExpressLane

__all__ = [
    "FastCalls",
    "HotCall",
    "Job",
    "answer",
    "cancelled_id",
    "decode_call",
    "encode_answer",
    "error_response",
    "internal_error",
    "response",
    "shaped",
]

log = structlog.get_logger("toolscore.fast")

HotCall = Callable[
    [ServerRequestContext[Any], mcp_types.CallToolRequestParams, str],
    Awaitable[CallOutcome | mcp_types.CallToolResult | mcp_types.InputRequiredResult],
]
"""Runs one call for a request's context, its params and the protocol version whose result bytes
may be kept (the front server's own path, shared): a passthrough call's engine outcome, or the
answer of one of the gateway's own tools (`orchestrate`)."""
Send = Callable[[bytes], Awaitable[None]]
"""Writes one whole line to the client."""


class _Request(msgspec.Struct):
    jsonrpc: str
    method: str
    id: int | str | None = None
    params: msgspec.Raw = msgspec.Raw()


class _Params(msgspec.Struct, forbid_unknown_fields=True):
    """`tools/call` params the fast path serves; any other member (`task`, ...) is the SDK's."""

    name: str
    arguments: dict[str, Any] | None = None
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


class _CancelParams(msgspec.Struct):
    requestId: int | str | None = None


class _Cancel(msgspec.Struct):
    method: str
    params: _CancelParams | None = None


_request = msgspec.json.Decoder(_Request)
_params = msgspec.json.Decoder(_Params)
_cancel = msgspec.json.Decoder(_Cancel)
_encode = msgspec.json.Encoder().encode
_TOOLS_CALL = b'"tools/call"'
_INITIALIZED = b'"notifications/initialized"'
_SETTLE_SECONDS = 1.0
_CANCELLED = b'"notifications/cancelled"'


@dataclass(frozen=True, slots=True)
class Job:
    """One `tools/call` taken from the client's stream."""

    id: int | str
    params: _Params


def response(request_id: int | str, result: bytes, end: bytes = b"") -> bytes:
    """The JSON-RPC response to `request_id` with `result` (JSON bytes) spliced in, then `end`."""
    # One copy of a large result, where a chain of `+` would copy it once per operand.
    return b"".join((b'{"jsonrpc":"2.0","id":', _encode(request_id), b',"result":', result, b"}", end))


def error_response(request_id: int | str, error: mcp_types.ErrorData, end: bytes = b"") -> bytes:
    """The JSON-RPC error response to `request_id`, then `end`."""
    body = error.model_dump_json(by_alias=True, exclude_none=True).encode()
    return b'{"jsonrpc":"2.0","id":' + _encode(request_id) + b',"error":' + body + b"}" + end


def decode_call(data: bytes) -> Job | None:
    """The `tools/call` request in `data` if the hot path can read it whole, else None (the SDK's).

    Only the message itself is checked here: whether the tool, the connection and the id suit the
    hot path is the transport's to decide.
    """
    if _TOOLS_CALL not in data:
        return None
    try:
        request = _request.decode(data)
        if request.method != "tools/call" or request.jsonrpc != "2.0" or not request.params:
            return None
        params = _params.decode(request.params)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        # Nested too deep for msgspec, or not UTF-8 where msgspec only checks when it reads a
        # string (params, names): the SDK's path answers it with the spec's error.
        return None
    if request.id is None or (params.meta is not None and mcp_types.PROTOCOL_VERSION_META_KEY in params.meta):
        return None  # a notification, or a 2026-07-28 envelope: the SDK routes it by era
    return Job(request.id, params)


def cancelled_id(data: bytes) -> int | str | None:
    """The request a `notifications/cancelled` message in `data` names, else None."""
    if _CANCELLED not in data:
        return None
    try:
        message = _cancel.decode(data)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return None
    if message.method != "notifications/cancelled" or message.params is None:
        return None
    return message.params.requestId


async def answer(
    call: HotCall,
    template: ServerRequestContext[Any],
    job: Job,
    *,
    end: bytes = b"",
    on_send: Callable[[], None] | None = None,
) -> bytes:
    """Run `job` through the engine in a context made from `template`, and its whole answer as bytes.

    Args:
        call: The front server's passthrough call.
        template: The context of an earlier message of the same client connection (`request_context`).
        job: The call.
        end: Appended to the answer (a line's newline).
        on_send: Called before each message the gateway sends the client for this request
            (progress, logs, sampling), so a transport knows the answer does not come first.
    """
    params = job.params
    version = template.protocol_version
    meta: mcp_types.RequestParamsMeta | None = None
    if params.meta is not None:
        with suppress(ValidationError):  # as the SDK reads a malformed `_meta`: absent
            meta = mcp_types.RequestParams.model_validate({"_meta": params.meta}, by_name=False).meta
    try:
        # Validating (in Rust) costs a third of `model_construct` (Python), and the decoder checked the types.
        model = mcp_types.CallToolRequestParams(name=params.name, arguments=params.arguments)
        ctx = request_context(template, job.id, "tools/call", {"name": params.name}, meta, on_send=on_send)
        outcome = await call(ctx, model, version)
    except Exception:  # the same boundary as the SDK path's (`front.server`)
        outcome = internal_error(params.name)
    return encode_answer(job.id, params.name, outcome, version, end)


def internal_error(tool: str) -> mcp_types.CallToolResult:
    """The answer to a call that hit a bug (logged here, with its traceback), as the SDK path's boundary gives it."""
    log.exception("internal error", tool=tool)
    return error_result(f"Error executing tool {tool}: internal gateway error (see the gateway log).")


def encode_answer(
    request_id: int | str,
    tool: str,
    outcome: CallOutcome | mcp_types.CallToolResult | mcp_types.InputRequiredResult,
    version: str,
    end: bytes = b"",
) -> bytes:
    """The response to the call `request_id` of `tool` as the SDK path would write it for `version`:
    the server's result bytes spliced in when the engine kept them, else the result dumped."""
    if isinstance(outcome, CallOutcome):
        error = outcome.error
        if isinstance(error, DownstreamProtocolError) and (for_client := error.for_the_client) is not None:
            return error_response(request_id, for_client, end)  # for the client to act on, as on the SDK path
        if outcome.raw is not None:
            return response(request_id, outcome.raw.data, end)
        outcome = outcome.result
    try:
        return response(request_id, _encode(shaped(outcome, version)), end)
    except ValidationError:  # as the SDK's runner answers a result its version's surface refuses
        log.exception("invalid result", tool=tool)
        invalid = mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message="Handler returned an invalid result")
        return error_response(request_id, invalid, end)


class FastCalls:
    """The hot path for one stdio client connection (see the module docstring)."""

    def __init__(
        self,
        call: HotCall,
        *,
        serves: Callable[[str], bool],
        lane_for: Callable[[ServerRequestContext[Any]], ExpressLane | None] | None = None,
    ) -> None:
        """Args:
        call: The front server's passthrough call.
        serves: Whether the hot path takes a tool: a downstream tool, or `orchestrate` (its
            plan runs as on the SDK path; only the request and the answer skip the models).
        lane_for: The express lane (`front.express`) for the client whose handshake ends with
            this context, if calls may take it.
        """
        self._lane_for = lane_for
        self._lane: ExpressLane | None = None
        self.call = call
        """The front server's passthrough call (the HTTP front's hot path uses it too)."""
        self.serves = serves
        """Whether the hot path takes a tool (see `__init__`)."""
        self._enabled = False
        self._template: ServerRequestContext[Any] | None = None
        self._handshake_seen = False
        self._settled = False
        self._attached = anyio.Event()
        self._running: dict[int | str, anyio.CancelScope] = {}

    @property
    def lane(self) -> ExpressLane | None:
        """The express lane, once the client's handshake opened it (None: every call is `run`)."""
        return self._lane

    def enable(self) -> None:
        """This server's transport is stdio: one client, whose handshake `attach` will see."""
        self._enabled = True

    def attach(self, ctx: ServerRequestContext[Any]) -> None:
        """The client finished the handshake (`ctx`: its `notifications/initialized`)."""
        if self._enabled and ctx.protocol_version == LATEST_HANDSHAKE_VERSION:
            self._template = ctx
            if self._lane_for is not None:
                self._lane = self._lane_for(ctx)
        self._attached.set()

    async def settled(self, line: bytes) -> None:
        """Before `take`: once the client's `notifications/initialized` has been read, a `tools/call`
        waits (briefly) for the SDK to have handled it, so the call does not race it."""
        if self._template is not None or not self._enabled or self._settled:
            return
        if not self._handshake_seen:
            self._handshake_seen = _INITIALIZED in line
        elif _TOOLS_CALL in line:
            self._settled = True  # once: a handshake the SDK refused must not slow every call
            with anyio.move_on_after(_SETTLE_SECONDS):
                await self._attached.wait()

    def cancels(self, line: bytes) -> bool:
        """Cancel the fast call a `notifications/cancelled` line names; False: the SDK's to handle."""
        lane = self._lane
        if not self._running and (lane is None or not len(lane)):
            return False
        request_id = cancelled_id(line)
        if request_id is None:
            return False
        if lane is not None and lane.cancel(request_id):
            return True
        scope = self._running.get(request_id)
        if scope is None:
            return False
        scope.cancel()
        return True

    def take(self, line: bytes) -> Job | None:
        """The `tools/call` in `line` if the fast path serves it, else None (the SDK does)."""
        if self._template is None or tracing.tracer is not None:
            return None
        job = decode_call(line)
        if (
            job is None
            or job.id in self._running
            or (self._lane is not None and job.id in self._lane)
            or not self.serves(job.params.name)
        ):
            return None
        return job

    def express(self, job: Job, out: ClientOut, tg: TaskGroup) -> bool:
        """Send `job` on the express lane, which answers it on `out`; False: `run` it instead.

        A job left to `run` is in flight from now on, not from when a worker starts it: another
        call with its id, read meanwhile, goes to the SDK (`take`), and a cancellation finds it.
        """
        lane = self._lane
        if lane is not None and lane.take(job, out, tg):
            return True
        self._running[job.id] = anyio.CancelScope()
        return False

    async def close(self) -> None:
        """The client is gone: the express lane's calls end (the hot path's are cancelled by their transport)."""
        if self._lane is not None:
            await self._lane.close()

    async def run(self, job: Job, send: Send) -> None:
        """Answer `job` (which `express` left to it) on `send`, unless the client cancels it first."""
        template = self._template
        assert template is not None
        scope = self._running[job.id]  # reserved by `express`, as the job was read
        if scope.cancel_called:  # cancelled while it waited for a worker: nothing was started
            del self._running[job.id]
            return
        with scope:
            try:
                line = await answer(self.call, template, job, end=b"\n")
            finally:
                del self._running[job.id]  # its own: no other job with this id got past `take`
        if scope.cancelled_caught:
            return  # the client cancelled: it expects no answer
        try:
            await send(line)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            log.debug("answer not delivered: the client is gone", id=job.id)


def shaped(result: mcp_types.CallToolResult | mcp_types.InputRequiredResult, version: str) -> dict[str, Any]:
    """A result model as the SDK's runner writes it for `version`: dumped, then shaped by that
    version's surface (which drops what the version does not have, `resultType` before 2026);
    text no encoder takes (a lone surrogate) replaced.

    Raises:
        ValidationError: the version's surface refuses the result.
    """
    dumped = scrub_unpaired_surrogates(result).model_dump(by_alias=True, mode="json", exclude_none=True)
    return serialize_server_result("tools/call", version, dumped)
