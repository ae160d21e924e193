"""A 2026-07-28 client's `tools/call` on the streamable HTTP front, without the SDK's request machinery.

Theory of operation. A 2026-07-28 request is one self-contained POST: no session, the protocol
version, the client's capabilities and its info in the request's `_meta`, one JSON-RPC answer. The
SDK's entry for it builds a Starlette request and response, validates the message into models,
runs a task group with a handler task, a disconnection watcher and a notification stream, then
the server's runner (its middleware, the params validated again, the result shaped for the
version) before the gateway's handler sees the call. `ModernCalls` takes such a POST, when it is
a `tools/call` of a downstream tool (`HttpCalls` routes it here), and runs the front's own
`tools/call` handler (`ToolHandlers.call_tool`, the SDK path's: the era bridge, policy, the
engine, the audit record) in a context built as the SDK builds one.

What it checks first is what the SDK's entry checks, with the SDK's own functions: the Accept
header, the routing headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`: present, once,
equal to the body), the envelope (`classify_inbound_request`), the params against the version's
surface, and the `Mcp-Param-*` headers against the tool's input schema. A request any of these
would refuse goes to the SDK, which refuses it with its own error and status. So does a request
this path does not serve: any other method, a retry (`inputResponses`, `requestState`), a `task`,
one that asks for progress or logs (their notifications need the SDK's stream), `orchestrate`
(a plan may become an extension task), a body it cannot fully read, and every request while
tracing is on.

The answer is what the SDK would write: the result for the version (its `resultType`), the
`serverInfo` stamp in `_meta` unless the result has one, one `application/json` body. A result the
engine kept as the server's bytes (a stdio server at the latest handshake version, whose result is
a 2026-07-28 one but for those two members) has them spliced after its last member; any other is
dumped for the version, as the SDK's runner dumps it. A JSON-RPC error (a relayed one, a refused
retry) goes with the status the SDK maps its code to. As on the SDK's path, a call still running
after `PING_SECONDS` commits the response to an SSE stream that carries a comment line every
`PING_SECONDS` (so a proxy does not close an idle connection) and then the answer, and a client
that disconnects cancels its call: in this era, closing the stream is how a client cancels.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types
import msgspec
import structlog
from mcp.server import ServerRequestContext
from mcp.server.runner import modern_error_data
from mcp.server.streamable_http import check_accept_headers
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_PARAM_HEADER_PREFIX,
    InboundModernRoute,
    classify_inbound_request,
    find_duplicated_routing_header,
    validate_mcp_param_headers,
)
from mcp_types.methods import validate_client_request
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from toolscore._engine import CallOutcome
from toolscore._sdk import modern_request_context
from toolscore.downstream.raw import RawResult
from toolscore.front.fast import error_response, response, shaped

__all__ = ["PING_SECONDS", "ModernCall", "ModernCalls"]

log = structlog.get_logger("toolscore.http_fast")

PING_SECONDS = 15.0
"""A call still running after this answers by an SSE stream, with a comment line this often (as the SDK's entry)."""

Handle = Callable[
    [ServerRequestContext[Any], mcp_types.CallToolRequestParams],
    Awaitable[CallOutcome | mcp_types.CallToolResult | mcp_types.InputRequiredResult | dict[str, Any]],
]
"""The front's `tools/call` handler with the result's bytes kept where they can be
(`ToolHandlers.call_outcome`): raises `MCPError` for a JSON-RPC error."""

_TOOLS_CALL = b'"tools/call"'
_PARAM_PREFIX = MCP_PARAM_HEADER_PREFIX.lower().encode()
_HEADER_KEYWORD = b'"x-mcp-header"'
_NOT_HERE = frozenset({"progressToken", mcp_types.LOG_LEVEL_META_KEY})
"""`_meta` keys that ask for notifications during the call: such a request goes to the SDK."""
_SSE_START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-cache, no-transform"),
        (b"connection", b"keep-alive"),
        (b"x-accel-buffering", b"no"),
    ],
}
_PING = {"type": "http.response.body", "body": b": ping\r\n\r\n", "more_body": True}


class _Params(msgspec.Struct, forbid_unknown_fields=True):
    """The params this path serves; any other member (`inputResponses`, `task`, ...) is the SDK's."""

    name: str
    meta: dict[str, Any] = msgspec.field(name="_meta")
    arguments: dict[str, Any] | None = None


class _Request(msgspec.Struct):
    jsonrpc: str
    method: str
    id: int | str
    params: _Params


_decode = msgspec.json.Decoder(_Request).decode
_encode = msgspec.json.Encoder().encode


@dataclass(frozen=True, slots=True)
class ModernCall:
    """One 2026-07-28 `tools/call` taken by the hot path: its context (its version among it) and params."""

    ctx: ServerRequestContext[Any]
    params: mcp_types.CallToolRequestParams
    request_id: int | str


class ModernCalls:
    """The 2026-07-28 hot path of the HTTP front (see the module docstring)."""

    def __init__(
        self,
        *,
        handle: Handle,
        serves: Callable[[str], bool],
        input_schema: Callable[[str], dict[str, Any] | None],
        server_info: dict[str, Any],
        lifespan_state: Callable[[], Any],
    ) -> None:
        """Args:
        handle: The front's `tools/call` handler.
        serves: Whether this path takes a call of a tool (a downstream tool's).
        input_schema: A tool's input schema (`Server.get_tool_input_schema`), for `Mcp-Param-*` headers.
        server_info: The server's `serverInfo` stamp (fixed at its construction; read, never changed).
        lifespan_state: The server's lifespan state, as the SDK hands it to each request.
        """
        self._handle = handle
        self._serves = serves
        self._input_schema = input_schema
        self._server_info = server_info
        self._lifespan_state = lifespan_state
        stamp = _encode({mcp_types.SERVER_INFO_META_KEY: server_info})
        self._tail = b',"resultType":"complete","_meta":' + stamp + b"}"
        """What `_spliced` puts after a result's last member, the closing brace with it."""
        self._declared: dict[str, tuple[dict[str, Any], bool]] = {}
        self.served = 0
        """How many calls this path has taken."""

    def take(self, scope: Scope, body: bytes) -> ModernCall | None:
        """The call in `body` if this path serves it, ready to run; None: the SDK's (see the module docstring)."""
        if _TOOLS_CALL not in body:
            return None
        try:
            message = _decode(body)
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            return None
        params = message.params
        meta = params.meta
        if (
            message.method != "tools/call"
            or message.jsonrpc != "2.0"
            or not _NOT_HERE.isdisjoint(meta)
            or not self._serves(params.name)
        ):
            return None
        request = Request(scope)
        has_json, has_sse = check_accept_headers(request)
        if not (has_json and has_sse):
            return None
        headers = request.headers
        if find_duplicated_routing_header(headers.items()) is not None:
            return None
        wire: dict[str, Any] = {"name": params.name, "_meta": meta}
        if params.arguments is not None:
            wire["arguments"] = params.arguments
        verdict = classify_inbound_request({"method": "tools/call", "params": wire}, headers=dict(headers))
        if not isinstance(verdict, InboundModernRoute):
            return None
        version = verdict.protocol_version
        try:
            validate_client_request("tools/call", version, wire)
            typed = mcp_types.CallToolRequestParams.model_validate(wire, by_name=False)
        except (ValidationError, KeyError, ValueError):
            return None
        arguments = params.arguments or {}
        if arguments or any(key.startswith(_PARAM_PREFIX) for key, _ in scope["headers"]):
            schema = self._input_schema(params.name)
            if (
                schema is not None
                and self._declares_headers(params.name, schema)
                and validate_mcp_param_headers(schema, arguments, headers) is not None
            ):
                return None
        ctx = modern_request_context(
            request,
            message.id,
            wire,
            typed.meta,
            version=version,
            client_info=verdict.client_info,
            client_capabilities=verdict.client_capabilities,
            lifespan_state=self._lifespan_state(),
        )
        self.served += 1
        return ModernCall(ctx, typed, message.id)

    def _declares_headers(self, tool: str, schema: dict[str, Any]) -> bool:
        """Whether `schema` may declare an `Mcp-Param-*` header (`x-mcp-header`): without one, no
        header or argument can disagree with it, and the SDK's walk of the schema is skipped."""
        known = self._declared.get(tool)
        if known is None or known[0] is not schema:  # a tool's schema is replaced, not changed, on a new listing
            known = (schema, _HEADER_KEYWORD in _encode(schema))
            self._declared[tool] = known
        return known[1]

    async def serve(self, call: ModernCall, receive: Receive, send: Send) -> None:
        """Run `call` and answer it on `send` (one JSON body, or an SSE stream if it runs long)."""
        gone = False  # the client disconnected: its call was cancelled, nobody to answer
        streaming = False  # the SSE stream was committed: the answer is its last event
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                # The only reader of `receive` from here on (the body was read). It returns once the
                # client is gone: it disconnected, or a ping could not be written.
                nonlocal gone, streaming
                try:
                    while True:
                        with anyio.move_on_after(PING_SECONDS):
                            while (await receive())["type"] != "http.disconnect":
                                pass
                            break
                        with anyio.CancelScope(shield=True):  # a frame is written whole
                            if not streaming:
                                streaming = True
                                await send(_SSE_START)
                            await send(_PING)
                except OSError:
                    pass
                gone = True
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            status, answer = await self._answer(call)
            tg.cancel_scope.cancel()
        if gone:
            log.debug("2026-07-28 call cancelled: the client closed its stream", id=call.request_id)
            return
        if streaming:
            body = b"event: message\r\ndata: " + answer + b"\r\n\r\n"
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": answer})

    async def _answer(self, call: ModernCall) -> tuple[int, bytes]:
        """The call's HTTP status and JSON-RPC answer, as the SDK's entry and runner write them."""
        try:
            answer = await self._handle(call.ctx, call.params)
            body = self._kept(answer)
            if body is None:
                result = answer.result if isinstance(answer, CallOutcome) else answer
                if isinstance(answer, CallOutcome) and answer.raw is not None:
                    result = answer.raw.model()  # bytes that cannot be spliced: the model path
                # A server's task (the tasks extension) is answered as the server wrote it.
                dumped = dict(result) if isinstance(result, dict) else shaped(result, call.ctx.protocol_version)
                body = self._stamped(dumped)
        except ValidationError:  # the version's surface refuses the result: the runner's internal error
            log.exception("invalid result", tool=call.params.name)
            error = mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message="Handler returned an invalid result")
        except Exception as exc:  # as the SDK's entry maps a handler's exception (`MCPError` and the rest)
            error = modern_error_data(exc)
        else:
            return 200, response(call.request_id, body)
        return ERROR_CODE_HTTP_STATUS.get(error.code, 200), error_response(call.request_id, error)

    def _kept(self, answer: object) -> bytes | None:
        """The result of a call whose engine kept the server's bytes, spliced (`_spliced`); None: dump it."""
        if not isinstance(answer, CallOutcome) or answer.raw is None:
            return None
        return self._spliced(answer.raw)

    def _spliced(self, raw: RawResult) -> bytes | None:
        """The server's result bytes (a 2025-11-25 `CallToolResult`, which differs from a 2026-07-28
        one only by what the runner adds) with `resultType` and the `serverInfo` stamp spliced in
        after its last member, as `_stamped` adds them to a dumped result; None where the result
        has either member already (`RawResult.bare`): the model path merges them."""
        if not raw.bare:
            return None
        data = raw.data
        end = len(data.rstrip()) - 1  # the closing brace: `read_result` read one whole object
        return b"".join((memoryview(data)[:end], self._tail))

    def _stamped(self, dumped: dict[str, Any]) -> bytes:
        """A shaped result with what the runner adds in this era: `resultType`, and the `serverInfo`
        stamp where the result does not carry one already."""
        if dumped.get("resultType") is None:
            dumped["resultType"] = "complete"
        meta = dumped.get("_meta")
        if meta is None:
            dumped["_meta"] = {mcp_types.SERVER_INFO_META_KEY: self._server_info}
        elif isinstance(meta, dict) and meta.get(mcp_types.SERVER_INFO_META_KEY) is None:
            dumped["_meta"] = {**meta, mcp_types.SERVER_INFO_META_KEY: self._server_info}
        return _encode(dumped)
