"""Optional LLM synthesis of an `all` merge through the front client's own model (MCP sampling).

The model gets the numbered merged items and the call's arguments, and writes one answer citing
them as [n]. Anything short of a text answer in time (no sampling support, a refusal, a timeout,
a broken connection) leaves the plain merge as the answer, and the note says why.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
import mcp_types
import structlog

from toolscore.toolhub.synthesis import Item

__all__ = ["Sample", "synthesis_request", "synthesize"]

log = structlog.get_logger("toolscore.toolhub")

Sample = Callable[[mcp_types.CreateMessageRequest], Awaitable[mcp_types.CreateMessageResult]]
"""Sends `sampling/createMessage` to the front client of the current call."""

_SYSTEM = (
    "You combine results that several tools returned for one request into a single answer. Use only "
    "the numbered items below; cite them as [n]; say where they disagree; be concise."
)
_MAX_ARGUMENT_CHARS = 2000


def synthesis_request(
    capability: str, arguments: Mapping[str, Any], items: Sequence[Item], max_tokens: int
) -> mcp_types.CreateMessageRequest:
    """The sampling request: the arguments and the numbered items (already cut to their budgets)."""
    numbered = "\n\n".join(
        f"[{n}] " + " ".join(p for p in (item.title, item.url) if p) + f" (from {', '.join(item.sources)})\n{item.text}"
        for n, item in enumerate(items, 1)
    )
    request = json.dumps(arguments, ensure_ascii=False, default=str)[:_MAX_ARGUMENT_CHARS]
    message = mcp_types.SamplingMessage(
        role="user",
        content=mcp_types.TextContent(text=f"Capability: {capability}\nRequest: {request}\n\nItems:\n{numbered}"),
    )
    return mcp_types.CreateMessageRequest(
        params=mcp_types.CreateMessageRequestParams(
            messages=[message], system_prompt=_SYSTEM, max_tokens=max_tokens, include_context="none"
        )
    )


def _text_of(result: mcp_types.CreateMessageResult) -> str | None:
    block = result.content
    return block.text if isinstance(block, mcp_types.TextContent) and block.text.strip() else None


async def synthesize(
    sample: Sample | None, request: mcp_types.CreateMessageRequest, timeout: float
) -> tuple[str | None, str]:
    """The model's answer, or None; and a few words on how it went, for the result's note."""
    if sample is None:
        return None, "not synthesized: this client offers no sampling"
    try:
        with anyio.fail_after(timeout):
            reply = await sample(request)
    except TimeoutError:
        return None, f"not synthesized: no answer from the client's model within {timeout:g} s"
    except Exception as exc:  # a refusal, a gone client: the plain merge still answers
        log.info("synthesis failed", error=f"{type(exc).__name__}: {exc}")
        return None, f"not synthesized: {type(exc).__name__}: {str(exc)[:200]}"
    text = _text_of(reply)
    if text is None:
        return None, "not synthesized: the model's answer had no text"
    return text, f"synthesized by {reply.model[:64]}"
