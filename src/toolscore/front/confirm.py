"""The gateway's own yes/no questions to the user (`destructive: "confirm"`), in both eras.

Handshake era: an elicitation request on the client's back-channel. 2026-07-28, which has no
back-channel: the call is answered with an input-required result holding the question and a
sealed request state; the client asks its user and retries the call with the answer. The state
is signed with a key that never leaves this process and holds only what binds the answer to its
question: the tool, a digest of the arguments, the caller, a nonce and an expiry. A client cannot
forge an approval, replay one for other arguments or another caller, or use it after it expired.

A plan (`orchestrate`) with confirm steps asks once for the whole plan (`plan_approver`): the
question is the rendered plan (`toolscore.plan.approval`), and the sealed state also binds the
digest of what was shown; an answered plan state is spent, so it approves one run only.
"""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Any

import mcp_types
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from toolscore._engine import ConfirmFn
from toolscore._seal import Sealer
from toolscore._seal import digest as _digest
from toolscore.errors import InputRequired, Rejected

if TYPE_CHECKING:  # the plan modules load with the first plan
    from toolscore.plan.approval import Approve

__all__ = ["CONFIRM_KEY", "Sealer", "confirmer", "plan_approver"]

CONFIRM_KEY = "toolscore_confirm"
"""The key of the gateway's question in `inputRequests` / `inputResponses`."""
STATE_TTL_SECONDS = 600.0
_ELICITATION = mcp_types.ClientCapabilities(elicitation=mcp_types.ElicitationCapability())
_CONFIRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "title": "Allow this call"}},
    "required": ["confirm"],
}


def _question(text: str) -> mcp_types.ElicitRequest:
    return mcp_types.ElicitRequest(
        params=mcp_types.ElicitRequestFormParams(message=text, requested_schema=_CONFIRM_SCHEMA)
    )


def _accepted(answer: object) -> bool:
    return (
        isinstance(answer, mcp_types.ElicitResult)
        and answer.action == "accept"
        and (answer.content or {}).get("confirm") is True
    )


def _elicit(ctx: ServerRequestContext[Any], hook: str) -> ConfirmFn:
    """A yes/no question over the handshake-era back-channel."""

    async def ask(question: str) -> bool:
        try:
            answer = await ctx.session.send_request(
                _question(question),
                mcp_types.ElicitResult,
                metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
            )
        except MCPError as exc:  # the client failed or refused to ask
            raise Rejected(f"could not ask the user for confirmation: {exc.message}", hook=hook) from None
        return _accepted(answer)

    return ask


def confirmer(
    ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams, caller: str, sealer: Sealer
) -> ConfirmFn | None:
    """A yes/no question to the user of this request, if its client can be asked (elicitation)."""
    session = ctx.session
    if not session.check_client_capability(_ELICITATION):
        return None
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return _elicit(ctx, "destructive")

    bound = {"tool": params.name, "args": _digest(params.arguments), "caller": caller}

    async def ask_modern(question: str) -> bool:
        return await _ask_sealed(
            params,
            sealer,
            bound,
            question,
            mismatch="the confirmation does not belong to this call (request state tampered with, expired, or "
            "for other arguments)",
        )

    return ask_modern


async def _ask_sealed(
    params: mcp_types.CallToolRequestParams,
    sealer: Sealer,
    bound: dict[str, Any],
    question: str,
    *,
    mismatch: str,
    spent: str | None = None,
) -> bool:
    """A 2026-07-28 question: the retried call's answer, taken only if its sealed state binds
    exactly `bound` (else refused with `mismatch`), and once only where `spent` says why not twice;
    without one, an input-required result asking it, with a state that binds `bound`."""
    answer = (params.input_responses or {}).get(CONFIRM_KEY)
    if answer is not None or params.request_state is not None:
        claims = sealer.open(params.request_state or "")
        if claims is None or any(claims.get(k) != v for k, v in bound.items()):
            raise Rejected(mismatch, hook="destructive")
        if answer is not None:
            if spent is not None and not await sealer.spend(claims):
                raise Rejected(spent, hook="destructive")
            return _accepted(answer)
    state = sealer.seal({**bound, "nonce": secrets.token_hex(8), "exp": time.time() + STATE_TTL_SECONDS})
    raise InputRequired({CONFIRM_KEY: _question(question)}, state)


def plan_approver(
    ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams, caller: str, sealer: Sealer
) -> Approve | None:
    """The one question of a plan with confirm steps, if this request's client can be asked.

    Handshake era: an elicitation request. 2026-07-28: an input-required result whose sealed state
    binds the `orchestrate` arguments, the caller and the digest of the plan as shown; the retry's
    answer is taken once, and only if the plan checks to the same digest again."""
    if not ctx.session.check_client_capability(_ELICITATION):
        return None
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        ask = _elicit(ctx, "destructive")

        async def approve(question: str, binding: str) -> bool:
            return await ask(question)

        return approve

    bound = {"tool": params.name, "args": _digest(params.arguments), "caller": caller}

    async def approve_modern(question: str, binding: str) -> bool:
        return await _ask_sealed(
            params,
            sealer,
            {**bound, "plan": binding},
            question,
            mismatch="the approval does not belong to this plan (request state tampered with, expired, or for "
            "another plan or another check of it); send the plan without it to be asked again",
            spent="this approval was used already: one approval runs a plan once; send the plan without it to be "
            "asked again",
        )

    return approve_modern
