"""The few places where toolscore needs more of the mcp SDK than its public API offers.

Each function here reaches one private attribute of mcp 2.3, so an SDK upgrade that moves it
breaks here, in one module, and `tests/test_sdk_adapter.py` says so loudly; nothing else in
toolscore touches a private SDK name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp import Client
from mcp.server.connection import Connection
from mcp.server.session import ServerSession
from mcp.shared._stream_protocols import ReadStream as ReadStream
from mcp.shared._stream_protocols import WriteStream as WriteStream

__all__ = ["ReadStream", "WriteStream", "connection_of", "send_raw_request"]


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
    dispatcher = client.session._dispatcher  # pyright: ignore[reportPrivateUsage] - see above
    raw: dict[str, Any] = await dispatcher.send_raw_request(method, dict(params) if params else None, {})
    return raw
