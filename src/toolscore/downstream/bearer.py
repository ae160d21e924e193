"""The bearer credential on an HTTP downstream connection: an `httpx2.Auth` that asks the principal's
`Credential` (`credentials.py`) for its current token on every request, and once more after a 401.

Its own module so that `httpx2` is imported with the first HTTP connection that carries a
credential, not by every gateway (a stdio gateway with stdio servers never loads it).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import httpx2
import structlog

from toolscore.downstream.credentials import Credential
from toolscore.errors import ToolscoreError

__all__ = ["BearerAuth"]

log = structlog.get_logger("toolscore.credentials")


class BearerAuth(httpx2.Auth):
    """`Authorization: Bearer <the principal's current credential>` on every request of a connection.

    A token due for renewal is exchanged again here too (a connection's own requests, between
    calls); where that fails, the token still held is sent while it lasts, and the server decides.
    A request the server answers 401 (the token was revoked or rotated before it expired) is sent
    once more with a token obtained anew, where the credential can give one; else the 401 stands.
    Where the server refuses the new token too, its 401s stand for `REFUSED_RENEWAL_SECONDS`
    (`Credential.renewal_refused`), the token kept: a server that refuses every exchanged token
    does not cost an exchange per request.
    """

    requires_request_body = True  # a request refused with 401 is sent again, body and all

    def __init__(self, credential: Credential, principal: str) -> None:
        self._credential = credential
        self._principal = principal

    def __repr__(self) -> str:
        return f"BearerAuth({self._credential.server!r}, {self._principal!r})"

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        try:
            secret = await self._credential.bearer(self._principal)
        except ToolscoreError as exc:
            held = self._credential.held(self._principal)
            if held is None:
                raise
            log.info(
                "downstream credential not renewed; the one held is sent",
                server=self._credential.server,
                principal=self._principal,
                reason=str(exc),
            )
            secret = held
        request.headers["Authorization"] = f"Bearer {secret}"
        response = yield request
        if response.status_code != 401 or not self._credential.refused(self._principal, secret):
            return
        try:
            renewed = await self._credential.bearer(self._principal)
        except ToolscoreError as exc:
            log.info(
                "downstream credential refused and not renewed",
                server=self._credential.server,
                principal=self._principal,
                reason=str(exc),
            )
            return  # the server's 401 stands
        if renewed == secret:
            return
        request.headers["Authorization"] = f"Bearer {renewed}"
        response = yield request
        if response.status_code == 401:
            self._credential.renewal_refused(self._principal)

    def sync_auth_flow(self, request: httpx2.Request) -> Any:  # pragma: no cover - connections are async
        raise RuntimeError("BearerAuth is for async clients")
