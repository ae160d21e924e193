"""The web console at `/ui` on the HTTP front: servers, tools, the live audit tail, figures, a form to try a call.

One static page (`console.html`, plain JS, no build step) and a small JSON API under `/ui/api/`.
Every data path sits behind the front's guard: the bearer token (where one is set) and the
Host/Origin allow-list. The page itself holds no data; it loads behind the Host/Origin check
alone (`PUBLIC_PATHS`), so a browser, which cannot send a bearer header when it opens a URL, can
show it, and it asks for the token (or reads `#token=` from the URL, which never reaches the
server) before it calls the API. A wrong Origin is refused (403) before anything runs, which is
what stops another site's page from driving the try-a-call form.

`ConsoleFeed` sits in the audit chain: it keeps the last records for the tail and the figures,
hands each new one to the open tails (a slow reader loses records, never slows a call), and counts
each principal's usage since the gateway started (`/ui/api/principals`: calls, failures, refusals,
tokens; the first `MAX_PRINCIPALS` named, later ones together as `(other)`).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import anyio
import mcp_types
from anyio.streams.memory import MemoryObjectSendStream
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from toolscore.audit.sinks import AuditRecord, AuditSink
from toolscore.audit.stats import compute_stats
from toolscore.downstream.connection import ServerStatus

__all__ = ["MAX_PRINCIPALS", "PUBLIC_PATHS", "ConsoleFeed", "ConsoleSink", "PrincipalUsage", "console_pages"]

PUBLIC_PATHS = frozenset({"/ui"})
"""Paths the guard serves without the bearer token (still behind the Host/Origin check): the static page."""
TAIL_SECONDS = 10.0
"""How long one audit tail response stays open; the page opens the next (so a stopping server never waits long)."""
_KEEP = 1000
MAX_PRINCIPALS = 500
"""Principals counted apart in the usage table; later ones are counted together (principals come
from tokens, not the config, so the table is bounded)."""
OTHER = "(other)"
_QUEUE = 256
_MAX_BODY = 1 << 20

CallTool = Callable[[str, dict[str, Any], Scope], Awaitable[mcp_types.CallToolResult]]
"""Runs a tool for the console's HTTP request (its ASGI scope says who signed in)."""


@dataclass(slots=True)
class PrincipalUsage:
    """One principal's calls since the gateway started, as its audit records tell them."""

    principal: str
    calls: int = 0
    failures: int = 0
    """Calls that did not succeed, refusals included."""
    refused: int = 0
    """Calls a rule refused (`rejected`: its tools, its quota, a downstream credential it lacks)."""
    tokens: int = 0
    """The audit's size of the calls: the arguments and the results read, at 4 characters a token."""
    last: str | None = None
    """When its latest call started (ISO 8601)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "principal": self.principal,
            "calls": self.calls,
            "failures": self.failures,
            "refused": self.refused,
            "tokens": self.tokens,
            "last": self.last,
        }


class ConsoleFeed:
    """The latest audit records, the tails reading new ones as they come, and each principal's usage."""

    def __init__(self, keep: int = _KEEP, *, max_principals: int = MAX_PRINCIPALS) -> None:
        self._recent: deque[AuditRecord] = deque(maxlen=keep)
        self._tails: set[MemoryObjectSendStream[AuditRecord]] = set()
        self._usage: dict[str, PrincipalUsage] = {}
        self._max_principals = max_principals

    def observe(self, record: AuditRecord) -> None:
        """Keep the record, count it to its principal, and offer it to every open tail (a full tail skips it)."""
        self._recent.append(record)
        if record.principal is not None:
            self._count(record, record.principal)
        for tail in list(self._tails):
            try:
                tail.send_nowait(record)
            except anyio.WouldBlock:
                pass  # that reader is behind: it misses this record rather than slowing the call
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._tails.discard(tail)

    def _count(self, record: AuditRecord, principal: str) -> None:
        usage = self._usage.get(principal)
        if usage is None:
            if len(self._usage) >= self._max_principals + (OTHER in self._usage):
                principal = OTHER
            usage = self._usage.setdefault(principal, PrincipalUsage(principal))
        usage.calls += 1
        usage.failures += not record.success
        usage.refused += record.error_kind == "rejected"
        usage.tokens += record.actual_tokens or 0
        usage.last = record.time.isoformat()

    def recent(self) -> list[AuditRecord]:
        """The kept records, oldest first."""
        return list(self._recent)

    def usage(self) -> list[PrincipalUsage]:
        """Each principal's usage since the gateway started, the busiest first."""
        return sorted(self._usage.values(), key=lambda u: (-u.calls, u.principal))

    async def tail(self, seconds: float) -> AsyncIterator[AuditRecord]:
        """New records for `seconds`."""
        send, receive = anyio.create_memory_object_stream[AuditRecord](_QUEUE)
        self._tails.add(send)
        deadline = anyio.current_time() + seconds
        try:
            while True:
                record: AuditRecord | None = None
                # The deadline applies to each wait only: a cancel scope must not span a `yield`.
                with anyio.move_on_after(deadline - anyio.current_time()):
                    record = await receive.receive()
                if record is None:
                    return
                yield record
        finally:
            self._tails.discard(send)
            send.close()
            receive.close()


class ConsoleSink:
    """An audit sink that shows every record to the console's feed before passing it on."""

    def __init__(self, inner: AuditSink, feed: ConsoleFeed) -> None:
        self._inner = inner
        self._feed = feed

    def write(self, record: AuditRecord) -> None:
        """Feed the record, then write it (a console bug never loses the record)."""
        try:
            self._feed.observe(record)
        finally:
            self._inner.write(record)

    def close(self) -> None:
        """Close the inner sink."""
        self._inner.close()


def _page() -> bytes:
    return resources.files("toolscore.front").joinpath("console.html").read_bytes()


def _record_json(record: AuditRecord) -> str:
    return record.model_dump_json(exclude_none=True, exclude={"arguments"})


def console_pages(
    *,
    feed: ConsoleFeed,
    statuses: Callable[[], list[ServerStatus]],
    tools: Callable[[], list[mcp_types.Tool]],
    server_of: Callable[[str], str | None],
    call: CallTool,
    slow_ms: float,
    reload_problem: Callable[[], str | None] = lambda: None,
) -> dict[str, ASGIApp]:
    """The console's routes by exact path.

    Args:
        feed: The audit records the tail and the figures show.
        statuses: The downstream servers now.
        tools: The tools as `tools/list` shows them.
        server_of: The server a tool is routed to (None for the gateway's own).
        call: Runs a tool (or `orchestrate`) as a client's call would, through the engine.
        slow_ms: The slow-tool threshold of the figures.
        reload_problem: Why the last reload of the config file kept the running config, if it did.
    """
    page = _page()
    page_headers = {
        "Cache-Control": "no-store",
        # The page runs only its own script and talks only to this origin.
        "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        "connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
    }

    def servers() -> Response:
        return _json(
            [
                {
                    "name": s.name,
                    "transport": s.transport,
                    "state": s.state.value,
                    "tools": s.tools,
                    "start_seconds": s.start_seconds,
                    "connects": s.connects,
                    "error": s.error,
                }
                for s in statuses()
            ]
        )

    def audit() -> Response:
        async def events() -> AsyncIterator[str]:
            for record in feed.recent()[-50:]:
                yield f"data: {_record_json(record)}\n\n"
            yield ": live\n\n"
            async for record in feed.tail(TAIL_SECONDS):
                yield f"data: {_record_json(record)}\n\n"

        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)

    async def try_call(scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        if request.method != "POST":
            await _error(405, "POST a JSON object {tool, arguments}")(scope, receive, send)
            return
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            await _error(415, "send application/json")(scope, receive, send)
            return
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > _MAX_BODY:
                await _error(413, f"the request is larger than {_MAX_BODY} bytes")(scope, receive, send)
                return
        try:
            data = json.loads(body)
        except ValueError:
            await _error(400, "the body is not JSON")(scope, receive, send)
            return
        tool = data.get("tool") if isinstance(data, dict) else None
        arguments = data.get("arguments", {}) if isinstance(data, dict) else None
        if not isinstance(tool, str) or not isinstance(arguments, dict):
            await _error(400, "send {'tool': string, 'arguments': object}")(scope, receive, send)
            return
        result = await call(tool, arguments, scope)
        dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        await _json(dumped)(scope, receive, send)

    return {
        "/ui": _get(lambda: Response(page, media_type="text/html", headers=page_headers)),
        "/ui/api/servers": _get(servers),
        "/ui/api/tools": _get(lambda: _json([_tool_json(t, server_of(t.name)) for t in tools()])),
        "/ui/api/stats": _get(lambda: _json(compute_stats(feed.recent(), slow_ms=slow_ms).as_dict())),
        "/ui/api/principals": _get(lambda: _json([u.as_dict() for u in feed.usage()])),
        "/ui/api/audit": _get(audit),
        "/ui/api/call": try_call,
        "/ui/api/config": _get(lambda: _json({"reload_problem": reload_problem()})),
    }


def _tool_json(tool: mcp_types.Tool, server: str | None) -> dict[str, Any]:
    return {"server": server, "tool": tool.model_dump(by_alias=True, mode="json", exclude_none=True)}


def _json(body: Any) -> Response:
    return JSONResponse(body, headers={"Cache-Control": "no-store"})


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


def _get(make: Callable[[], Response]) -> ASGIApp:
    """A GET (and HEAD) route answering what `make` builds; 405 for any other method."""

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method") in ("GET", "HEAD"):
            response = make()
        else:
            response = JSONResponse({"error": "GET only"}, status_code=405, headers={"Allow": "GET, HEAD"})
        await response(scope, receive, send)

    return route
