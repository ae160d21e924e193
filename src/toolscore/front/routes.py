"""The gateway's own HTTP pages beside `/mcp` (`/metrics`), as one path table in front of the SDK's app.

The table sits inside `HttpGuard`, so every page needs what `/mcp` needs: an allowed Host and
Origin, and the bearer token where one is set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from toolscore.telemetry.metrics import CONTENT_TYPE

__all__ = ["PathRoutes", "metrics_page"]


class PathRoutes:
    """Sends a request for one of `routes`' exact paths to its app, anything else to `app`."""

    def __init__(self, app: ASGIApp, routes: Mapping[str, ASGIApp]) -> None:
        self._app = app
        self._routes = dict(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        page = self._routes.get(scope.get("path", "")) if scope["type"] == "http" else None
        await (page or self._app)(scope, receive, send)


def metrics_page(render: Callable[[], str]) -> ASGIApp:
    """`GET /metrics`: what `render` returns, as the Prometheus text format."""

    async def page(scope: Scope, receive: Receive, send: Send) -> None:
        response: Response
        if Request(scope).method not in ("GET", "HEAD"):
            response = PlainTextResponse("GET only\n", status_code=405, headers={"Allow": "GET, HEAD"})
        else:
            response = Response(render(), media_type=CONTENT_TYPE, headers={"Cache-Control": "no-store"})
        await response(scope, receive, send)

    return page
