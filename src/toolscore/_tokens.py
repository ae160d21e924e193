"""Token estimates for audit: the common 4-characters-per-token rule; pure.

A real tokenizer depends on the model behind the client, which the gateway does not know; the
estimate is what the audit compares against, documented in docs/audit.md.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types
import msgspec

__all__ = ["CHARS_PER_TOKEN", "arguments_tokens", "result_tokens", "tokens_for_chars"]

CHARS_PER_TOKEN = 4
_encode = msgspec.json.Encoder().encode


def tokens_for_chars(chars: int) -> int:
    """Tokens for a text of `chars` characters (rounded up)."""
    return -(-chars // CHARS_PER_TOKEN)


def arguments_tokens(arguments: dict[str, Any]) -> int:
    """Tokens the model spent writing these arguments: their compact JSON's characters."""
    try:
        # msgspec writes the compact JSON a tenth as slowly as `json.dumps`; its UTF-8 bytes are
        # the characters when all are ASCII, the common case.
        data = _encode(arguments)
    except (TypeError, ValueError, OverflowError):  # an int past 64 bits, a value only `json` writes
        return tokens_for_chars(len(json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)))
    return tokens_for_chars(len(data) if data.isascii() else len(data.decode()))


def result_tokens(result: mcp_types.CallToolResult) -> int:
    """Tokens the model will read from this result.

    Counts the content blocks the client shows the model; `structuredContent` only when there is
    no content (the spec asks servers to mirror it in a text block, so counting both would double).
    """
    chars = 0
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            chars += len(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            chars += len(block.data)
        elif isinstance(block, mcp_types.EmbeddedResource):
            res = block.resource
            chars += len(res.text) if isinstance(res, mcp_types.TextResourceContents) else len(res.blob)
        else:
            chars += len(block.model_dump_json())
    if not result.content and result.structured_content is not None:
        chars += len(json.dumps(result.structured_content, separators=(",", ":")))
    return tokens_for_chars(chars)
