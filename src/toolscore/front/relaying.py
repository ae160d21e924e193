"""What a 2026-07-28 client's request carries down to the one server that answers it.

The front puts a `FrontCall` (`front_call_of`) in the scope of a passthrough `tools/call` or a
`prompts/get`; the downstream connection then sends it in the 2026-07-28 era with this client's capabilities,
log level, input responses and request state (`toolscore.downstream.modern`). Handshake-era
clients, and the calls of the gateway's own tools (plans, search), have none: their
downstream requests go over the main connection as before.
"""

from __future__ import annotations

from typing import Any

import mcp_types
from mcp.server import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from toolscore.downstream.modern import FrontCall
from toolscore.front.confirm import CONFIRM_KEY

__all__ = ["front_call_of"]


def front_call_of(
    ctx: ServerRequestContext[Any], input_responses: mcp_types.InputResponses | None, request_state: str | None
) -> FrontCall | None:
    """What a 2026-07-28 client's request carries down as its own; None for a handshake-era client."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return None
    capabilities = ctx.session.client_capabilities or mcp_types.ClientCapabilities()
    level = (ctx.meta or {}).get(mcp_types.LOG_LEVEL_META_KEY)
    responses = None
    if input_responses is not None:
        if CONFIRM_KEY in input_responses:
            # The answer to the gateway's own question (destructive: confirm), with the gateway's
            # state: neither is the server's, which has not been called yet.
            request_state = None
        responses = {
            key: answer.model_dump(by_alias=True, mode="json", exclude_none=True)
            for key, answer in input_responses.items()
            if key != CONFIRM_KEY
        } or None
    return FrontCall(
        capabilities=capabilities.model_dump(by_alias=True, mode="json", exclude_none=True),
        log_level=level if isinstance(level, str) else None,
        input_responses=responses,
        request_state=request_state,
    )
