"""What comes back: secrets redacted, then results over `max_bytes` truncated with a marker or refused."""

from __future__ import annotations

from dataclasses import dataclass

import mcp_types

from toolscore._engine import ExecutionContext
from toolscore.config import ResultRules
from toolscore.errors import Rejected
from toolscore.policy.redact import Redactor
from toolscore.policy.scope import PerServer, Scope

__all__ = ["TRUNCATION_MARKER", "ResultChecks", "redacted", "result_rules", "truncated"]

TRUNCATION_MARKER = "\n…[truncated by toolscore: {n} more bytes]"


@dataclass(frozen=True, slots=True)
class _Compiled:
    rules: ResultRules
    redactor: Redactor | None


def _compile(scope: Scope) -> _Compiled:
    results = scope.rules.results
    return _Compiled(results, Redactor(results.redact_patterns) if results.redact else None)


class ResultChecks:
    """Post-execution: redaction, then the size limit, by the rules in force on the call's server."""

    name = "results"

    def __init__(self, scopes: PerServer[Scope]) -> None:
        self._rules = scopes.map(_compile)

    async def __call__(self, ctx: ExecutionContext, result: mcp_types.CallToolResult) -> mcp_types.CallToolResult:
        compiled = self._rules.of(ctx.server)
        if compiled.redactor is not None:
            result = redacted(result, compiled.redactor)
        rules = compiled.rules
        if rules.max_bytes is not None:
            size = sum(
                len(b.text.encode("utf-8", "surrogatepass"))
                for b in result.content
                if isinstance(b, mcp_types.TextContent)
            )
            if size > rules.max_bytes:
                if rules.on_exceed == "reject":
                    raise Rejected(f"the result is {size} bytes; the limit is {rules.max_bytes}", hook="results")
                result = truncated(result, rules.max_bytes)
        return result


def redacted(result: mcp_types.CallToolResult, redactor: Redactor) -> mcp_types.CallToolResult:
    """`result` with secrets replaced; the same object when there were none (the common case)."""
    blocks: list[mcp_types.ContentBlock] = []
    changed = False
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            text = redactor.text(block.text)
            if text != block.text:
                block, changed = block.model_copy(update={"text": text}), True
        blocks.append(block)
    structured = result.structured_content
    if structured is not None:
        clean = redactor.json(structured)
        changed = changed or clean is not structured
        structured = clean
    if not changed:
        return result
    return result.model_copy(update={"content": blocks, "structured_content": structured})


def truncated(result: mcp_types.CallToolResult, limit: int) -> mcp_types.CallToolResult:
    """`result` with its text cut to `limit` UTF-8 bytes in all, each cut block ending with the marker."""
    blocks: list[mcp_types.ContentBlock] = []
    room = limit
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            data = block.text.encode("utf-8", "surrogatepass")
            if len(data) > room:
                kept = data[:room].decode(errors="ignore")
                block = block.model_copy(update={"text": kept + TRUNCATION_MARKER.format(n=len(data) - room)})
                room = 0
            else:
                room -= len(data)
        blocks.append(block)
    # structuredContent would carry the untruncated data past the limit.
    return result.model_copy(update={"content": blocks, "structured_content": None})


def result_rules(scopes: PerServer[Scope]) -> ResultChecks | None:
    """The `results` hook, when any server's results are redacted or limited."""
    sections = [scopes.gateway.rules.results, *(s.rules.results for s in scopes.servers.values())]
    return ResultChecks(scopes) if any(r.redact or r.max_bytes is not None for r in sections) else None
