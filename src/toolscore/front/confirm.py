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

import base64
import hashlib
import hmac
import json
import secrets
import time
from typing import TYPE_CHECKING, Any

import mcp_types
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from toolscore._engine import ConfirmFn
from toolscore.errors import InputRequired, Rejected

if TYPE_CHECKING:  # the plan modules load with the first plan
    from toolscore.plan.approval import Approve

__all__ = ["CONFIRM_KEY", "Sealer", "confirmer", "plan_approver"]

CONFIRM_KEY = "toolscore_confirm"
"""The key of the gateway's question in `inputRequests` / `inputResponses`."""
STATE_TTL_SECONDS = 600.0
_MAX_STATE_CHARS = 4096
_MAX_SPENT = 10_000
"""Spent plan approvals remembered until they expire; past this, the oldest are dropped early
(they still expire within `STATE_TTL_SECONDS`)."""
_ELICITATION = mcp_types.ClientCapabilities(elicitation=mcp_types.ElicitationCapability())
_CONFIRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "title": "Allow this call"}},
    "required": ["confirm"],
}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


class Sealer:
    """Signs and checks request states with a per-process random key."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)
        self._spent: dict[str, float] = {}

    def spend(self, claims: dict[str, Any]) -> bool:
        """Mark an opened state used; False if it was used before (a replay)."""
        now = time.time()
        for nonce in [n for n, exp in self._spent.items() if exp < now]:
            del self._spent[nonce]
        nonce = str(claims.get("nonce"))
        if nonce in self._spent:
            return False
        while len(self._spent) >= _MAX_SPENT:
            del self._spent[next(iter(self._spent))]
        self._spent[nonce] = float(claims["exp"])
        return True

    def seal(self, claims: dict[str, Any]) -> str:
        """`claims` as `<payload>.<signature>`, both base64url."""
        payload = _b64(json.dumps(claims, sort_keys=True, separators=(",", ":")).encode())
        return f"{payload}.{_b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())}"

    def open(self, state: str) -> dict[str, Any] | None:
        """The claims of a state this sealer signed and that has not expired, else None."""
        if len(state) > _MAX_STATE_CHARS or state.count(".") != 1:
            return None
        payload, signature = state.split(".")
        expected = _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())
        if not hmac.compare_digest(signature, expected):
            return None
        try:
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except ValueError:  # pragma: no cover - signed by us, so well-formed
            return None
        if (
            not isinstance(claims, dict)
            or not isinstance(claims.get("exp"), int | float)
            or claims["exp"] < time.time()
        ):
            return None
        return claims


def _digest(arguments: dict[str, Any] | None) -> str:
    text = json.dumps(arguments or {}, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


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
        return _ask_sealed(
            params,
            sealer,
            bound,
            question,
            mismatch="the confirmation does not belong to this call (request state tampered with, expired, or "
            "for other arguments)",
        )

    return ask_modern


def _ask_sealed(
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
            if spent is not None and not sealer.spend(claims):
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
        return _ask_sealed(
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
