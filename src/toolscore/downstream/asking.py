"""A 2026-07-28 connection's input-required results, answered for a client that has a back-channel.

A server connected in the 2026-07-28 era (one that speaks only that era, or whose entry asks for
it) cannot send the client requests: it answers a `tools/call`, `prompts/get` or `resources/read`
that needs the client's input with an input-required result (SEP-2322). Where the request is made
for a handshake-era client, a plan step or `delegate`, the gateway answers it itself: each input
request goes to the client the request is made for (`CallScope.peer`), over its back-channel, under
the rules every server request follows there (the capabilities it declared, the server's `sampling`
option), and the request is sent again with the answers and the server's request state, round
after round, until the server answers it whole.

The client is known here: the request is its own, so nothing is attributed (a server's request on a
handshake-era connection may be). What the client cannot answer (a capability it did not declare, a
refused sampling request, no client at all) ends the request with that error: the era has no way to
tell the server a question went unanswered, and it keeps nothing between rounds to clean up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types

from toolscore.downstream.backchannel import Peer, no_peer_error
from toolscore.errors import DownstreamProtocolError

__all__ = ["MAX_QUESTIONS", "MAX_ROUNDS", "Send", "answered"]

MAX_ROUNDS = 10
"""Input-required rounds one request may take before the gateway gives up (the SDKs' own cap)."""
MAX_QUESTIONS = 32
"""Questions one round may ask: each is put to a person or a model, so a server may not flood them."""

_STATE_ONLY_WAIT = 0.05
"""The first wait before resending a round that asked nothing but carried a request state (a server
that is still working); it doubles up to `_STATE_ONLY_WAIT_MAX`."""
_STATE_ONLY_WAIT_MAX = 0.5

Send = Callable[[dict[str, Any] | None, str | None], Awaitable[dict[str, Any]]]
"""Sends the request again with these input responses and request state (JSON); its raw result."""


async def answered(first: dict[str, Any], *, peer: Peer | None, server: str, send: Send) -> dict[str, Any]:
    """The raw result of a request whose first raw result is `first`, every round it asks answered.

    Raises:
        DownstreamProtocolError: the client could not answer a question (its JSON-RPC error, kept
            for the client where it is one the client must act on), the server asked for more than
            `MAX_ROUNDS` rounds, or sent an input-required result that is not one.
        What `send` raises.
    """
    raw = first
    wait = _STATE_ONLY_WAIT
    for _ in range(MAX_ROUNDS):
        if raw.get("resultType") != "input_required":
            return raw
        try:
            asked = mcp_types.InputRequiredResult.model_validate(raw, by_name=False)
        except ValueError:
            raise DownstreamProtocolError(
                f"Server '{server}' sent a malformed input-required result.", server=server
            ) from None
        responses: dict[str, Any] | None = None
        if asked.input_requests and len(asked.input_requests) > MAX_QUESTIONS:
            raise DownstreamProtocolError(
                f"Server '{server}' asked {len(asked.input_requests)} questions in one round (at most "
                f"{MAX_QUESTIONS} are put to the client); the request was given up.",
                server=server,
            )
        if asked.input_requests:
            responses = {key: await _ask(peer, server, request) for key, request in asked.input_requests.items()}
            wait = _STATE_ONLY_WAIT
        else:  # nothing asked: the server is not done yet, and says so with its state
            await anyio.sleep(wait)
            wait = min(wait * 2, _STATE_ONLY_WAIT_MAX)
        raw = await send(responses, asked.request_state)
    if raw.get("resultType") == "input_required":
        raise DownstreamProtocolError(
            f"Server '{server}' still asked for input after {MAX_ROUNDS} rounds; the request was given up.",
            server=server,
        )
    return raw


async def _ask(peer: Peer | None, server: str, request: mcp_types.InputRequest) -> dict[str, Any]:
    """One input request, asked of `peer`'s client; its answer as JSON."""
    answer: mcp_types.Result | mcp_types.ErrorData
    if peer is None:
        answer = no_peer_error(server, request.method)
    elif isinstance(request, mcp_types.ElicitRequest):
        answer = await peer.elicit(server, request.params)
    elif isinstance(request, mcp_types.CreateMessageRequest):
        answer = await peer.sample(server, request.params)
    else:
        answer = await peer.list_roots(server, request.params)
    if isinstance(answer, mcp_types.ErrorData):
        raise DownstreamProtocolError(
            f"Server '{server}' asked the client ({request.method}) and got no answer: {answer.message}",
            server=server,
            error=answer,
        )
    return answer.model_dump(by_alias=True, mode="json", exclude_none=True)
