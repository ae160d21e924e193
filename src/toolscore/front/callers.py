"""Who is calling: one stable identity per front client, and notice when that client is gone.

Per-client state (plan episodes, rate-limit buckets of scope `session`, per-client downstream
instances) is keyed by this identity, so one client can neither read nor evict another's.

- A client on a channel that lasts (stdio in either era, a handshake-era HTTP session) is one
  caller for as long as the channel lives; the identity is a fresh counter value, never reused
  (`c<n>`), under the principal that opened the session where the HTTP front authenticated it
  (`principal:<name>/c<n>`), so what is stored of it beyond the session (plan episodes, on
  another replica or after a restart) stays that principal's (`toolscore.loop.store.owner_of`).
- A 2026-07-28 HTTP request stands alone (no session exists in that era): its caller is the
  authenticated principal the HTTP front recorded for the request (see `_http_auth`), or
  `anonymous` on an unauthenticated loopback bind, where every local client is equally trusted.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import structlog
from mcp.server import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from toolscore._sdk import connection_of
from toolscore.types import ANONYMOUS_CALLER

__all__ = ["CONSOLE_CALLER", "PRINCIPAL_SCOPE_KEY", "ROLES_SCOPE_KEY", "Callers", "console_caller"]

log = structlog.get_logger("toolscore.callers")

PRINCIPAL_SCOPE_KEY = "toolscore.principal"
"""Key of the ASGI scope where the HTTP front's authentication leaves the caller's principal."""
ROLES_SCOPE_KEY = "toolscore.roles"
"""Key of the ASGI scope where the HTTP front's authentication leaves the principal's roles (a tuple
of strings; absent: none), which per-principal policy reads (`constraints.principals`)."""

CONSOLE_CALLER = "console"
"""Who the web console's calls are from, where no principal signed in (for per-session rules and episodes)."""

GoneListener = Callable[[str], None]


class RoleBook(Protocol):
    """Where the roles a principal's credentials carry are noted (`toolscore.policy.principals.Directory`)."""

    def note(self, principal: str, roles: Iterable[str]) -> None: ...


def console_caller(request: Mapping[str, Any], roles: RoleBook | None) -> str:
    """The caller of a web console call, from its HTTP request's ASGI scope: the principal that
    signed in (`principal:<name>/console`: its own rules and quotas apply, and its episodes are the
    console's own), its roles told to `roles`; without one, `console`."""
    principal = request.get(PRINCIPAL_SCOPE_KEY)
    if not isinstance(principal, str) or not principal:
        return CONSOLE_CALLER
    if roles is not None:
        carried = request.get(ROLES_SCOPE_KEY, ())
        roles.note(principal, carried if isinstance(carried, tuple) else ())
    return f"principal:{principal}/{CONSOLE_CALLER}"


class Callers:
    """Maps a front request to its caller's identity; tells listeners when a caller's channel closes."""

    def __init__(self, roles: RoleBook | None = None) -> None:
        """`roles`: told the roles each principal's credentials carry (per-principal policy reads them)."""
        self._roles = roles
        self._ids: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._counter = itertools.count(1)
        self._listeners: list[GoneListener] = []
        self._departed: list[str] = []

    def on_gone(self, listener: GoneListener) -> None:
        """Call `listener(caller)` after a caller's channel has closed (on the event loop, at the next request)."""
        self._listeners.append(listener)

    def identify(self, ctx: ServerRequestContext[Any]) -> str:
        """The caller of this request."""
        self.drain()
        connection = connection_of(ctx.session)
        if connection.has_standalone_channel:
            # The outbound channel lives exactly as long as the client's stream, in both eras
            # (a 2026-07-28 stdio client gets a fresh Connection per request, but one channel).
            anchor = connection.outbound
            caller = self._ids.get(anchor)
            if caller is None:
                principal = self._principal(ctx)
                caller = (
                    f"c{next(self._counter)}" if principal is None else f"principal:{principal}/c{next(self._counter)}"
                )
                self._ids[anchor] = caller
                weakref.finalize(anchor, self._gone, caller)
                if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                    # A handshake connection is the client's whole session: when it closes (stdio
                    # EOF, `DELETE /mcp`) the caller is gone now, not whenever the channel is
                    # collected (something may hold it for minutes: the session's instance did).
                    connection.exit_stack.callback(self._gone, caller)
            return caller
        principal = self._principal(ctx)
        return f"principal:{principal}" if principal else ANONYMOUS_CALLER

    def _principal(self, ctx: ServerRequestContext[Any]) -> str | None:
        """The request's principal (`_principal`), its roles told to the role book."""
        principal = _principal(ctx)
        if principal is not None and self._roles is not None:
            scope = getattr(ctx.request, "scope", None)
            roles = scope.get(ROLES_SCOPE_KEY, ()) if isinstance(scope, dict) else ()
            self._roles.note(principal, roles if isinstance(roles, tuple) else ())
        return principal

    def _gone(self, caller: str) -> None:
        # A finalizer may run in any thread, in the middle of anything: only note it here.
        self._departed.append(caller)

    def drain(self) -> None:
        """Tell the listeners about every caller gone since the last call."""
        while self._departed:
            caller = self._departed.pop()
            for listener in self._listeners:
                try:
                    listener(caller)
                except Exception:  # one broken listener must not keep the others from cleaning up
                    log.exception("caller cleanup failed", caller=caller)


def _principal(ctx: ServerRequestContext[Any]) -> str | None:
    """The principal the HTTP front authenticated this request as (None: no tokens, or stdio)."""
    scope = getattr(ctx.request, "scope", None)
    principal = scope.get(PRINCIPAL_SCOPE_KEY) if isinstance(scope, dict) else None
    return principal if isinstance(principal, str) and principal else None
