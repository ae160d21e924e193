"""The few places where toolscore needs more of the mcp SDK than its public API offers.

Each function here reaches one private attribute of mcp 2.3, so an SDK upgrade that moves it
breaks here, in one module, and `tests/test_sdk_adapter.py` says so loudly; nothing else in
toolscore touches a private SDK name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types
from mcp import Client
from mcp.client.session import ClientSession
from mcp.server import ServerRequestContext
from mcp.server.connection import Connection
from mcp.server.session import ServerSession
from mcp.shared._stream_protocols import ReadStream as ReadStream
from mcp.shared._stream_protocols import WriteStream as WriteStream
from mcp.shared.dispatcher import CallOptions, ProgressFnT

__all__ = [
    "ReadStream",
    "WriteStream",
    "connection_of",
    "request_context",
    "send_raw_request",
    "send_session_raw_request",
]


def connection_of(session: ServerSession) -> Connection:
    """The `Connection` behind a front request's session.

    `ServerSession` is a per-request proxy; its connection holds what lives as long as the
    client's connection: the outbound channel, the teardown stack, the negotiated version.
    """
    return session._connection  # pyright: ignore[reportPrivateUsage] - no public accessor in mcp 2.3


async def send_raw_request(client: Client, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Send a request and return the raw result, skipping the SDK's whole-result validation.

    `ClientSession.send_request` validates a result against the protocol surface as a whole, so
    one malformed tool in a `tools/list` page would hide every good tool of that server.
    """
    return await send_session_raw_request(client.session, method, params)


async def send_session_raw_request(
    session: ClientSession, method: str, params: Mapping[str, Any] | None
) -> dict[str, Any]:
    """`send_raw_request` on a client session: also for results the SDK has no model of (tasks)."""
    dispatcher = session._dispatcher  # pyright: ignore[reportPrivateUsage] - see above
    raw: dict[str, Any] = await dispatcher.send_raw_request(method, dict(params) if params else None, {})
    return raw


async def send_as_client(
    client: Client,
    method: str,
    params: dict[str, Any],
    *,
    capabilities: dict[str, Any],
    log_level: str | None,
    progress: ProgressFnT | None = None,
) -> dict[str, Any]:
    """Send a request on a 2026-07-28 connection as if from another client, and return the raw result.

    The session stamps every request's `_meta` (protocol version, client info, capabilities) and
    its headers; here the stamp is kept but the capabilities and log level are the ones given:
    those of the front client the request is made for. The raw result is returned unvalidated,
    since it may be an input-required result instead of the method's own.
    """
    session = client.session
    data: dict[str, Any] = {"method": method, "params": params}
    opts: CallOptions = {}
    session._stamp(data, opts)  # pyright: ignore[reportPrivateUsage] - the era's envelope and headers
    meta: dict[str, Any] = data["params"].setdefault("_meta", {})
    meta[mcp_types.CLIENT_CAPABILITIES_META_KEY] = capabilities
    meta.pop(mcp_types.LOG_LEVEL_META_KEY, None)
    if log_level is not None:
        meta[mcp_types.LOG_LEVEL_META_KEY] = log_level
    if progress is not None:
        opts["on_progress"] = progress
    dispatcher = session._dispatcher  # pyright: ignore[reportPrivateUsage] - see above
    raw: dict[str, Any] = await dispatcher.send_raw_request(method, data["params"], opts)
    return raw


def request_context(
    template: ServerRequestContext[Any],
    request_id: mcp_types.RequestId,
    method: str,
    params: Mapping[str, Any],
    meta: mcp_types.RequestParamsMeta | None,
) -> ServerRequestContext[Any]:
    """A context for a request the gateway read itself (`front.fast`), as the SDK's runner builds one.

    `template` is the context of an earlier message on the same JSON-RPC connection; its dispatch
    context is copied with this request's id and progress token, so server-to-client requests,
    progress and logs made for this request are tied to it exactly as for one the SDK read.
    """
    # The JSON-RPC dispatcher's concrete context is a dataclass (typed as its protocol).
    outbound: Any = template.session._request_outbound  # pyright: ignore[reportPrivateUsage] - see above
    token = meta.get("progress_token") if meta else None
    dispatch = dataclasses.replace(
        outbound,
        _request_id=request_id,
        _progress_token=token,
        _closed=False,
        cancel_requested=anyio.Event(),
        message_metadata=None,
    )
    session = ServerSession(dispatch, connection_of(template.session), request_meta=meta)
    return ServerRequestContext(
        session=session,
        lifespan_context=template.lifespan_context,
        protocol_version=template.protocol_version,
        method=method,
        params=params,
        request_id=request_id,
        meta=meta,
    )
