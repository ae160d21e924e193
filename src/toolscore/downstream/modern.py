"""A downstream's 2026-07-28 connection, for the requests of 2026-07-28 clients.

Why a second connection. A connection speaks one protocol era, fixed by its first request (an SDK
server refuses the other era's requests on it), and the gateway's main connection to a server is
in the handshake era: it is the one that receives `list_changed` pushes, resource updates, log
messages and the server's own sampling and elicitation requests, which a handshake-era client
answers over its back-channel. A 2026-07-28 client has no back-channel: a server that needs its
input answers with an input-required result, and the client retries with the answers. So for a
2026-07-28 client's `tools/call` and `prompts/get`, the gateway opens (on first need) a second
connection in that era, when the server offers it, and relays over it:

- each request carries that client's own capabilities and log level in `_meta`, not a guess
  shared by every client, so the server refuses what the client cannot do (-32021) as it would
  without the gateway;
- an input-required result goes back to the client unchanged, and the client's retry
  (`inputResponses`, `requestState`) goes to the server unchanged, round after round: the
  gateway holds no state between rounds and checks none (the server seals its own);
- the server's JSON-RPC errors stay JSON-RPC errors (a tampered request state, say).

A server that answers `server/discover` with no 2026-07-28 version, or that fails to open a
second connection, is marked as not offering it: its 2026-07-28 clients keep using the main
connection, as before. For a stdio server the second connection is a second process, sharing no
memory with the first; `"era": "handshake"` in a server's config keeps it to one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types
import structlog
from anyio.abc import TaskGroup
from mcp.client.session import ClientSession, LoggingFnT
from mcp.shared.message import SessionMessage
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from toolscore._sdk import ReadStream, WriteStream
from toolscore.errors import DownstreamProtocolError

if TYPE_CHECKING:
    from mcp import Client

__all__ = ["FrontCall", "ModernLink", "RelayedError", "listen_for_changes"]

log = structlog.get_logger("toolscore.downstream")

Streams = tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]
Connect = Callable[[anyio.Event], AbstractAsyncContextManager[Streams]]
"""Opens one more connection to the server; the event is set when it ends."""


@dataclass(frozen=True, slots=True)
class FrontCall:
    """A 2026-07-28 client's request, relayed as such: what the downstream must see of the client."""

    capabilities: dict[str, Any]
    """The client's declared capabilities, as JSON."""
    log_level: str | None = None
    """The log level the request opted in to (`io.modelcontextprotocol/logLevel`), if any."""
    input_responses: dict[str, Any] | None = None
    """The client's answers to the server's input requests of the previous round, as JSON."""
    request_state: str | None = None
    """The server's request state of the previous round, passed back verbatim."""

    def params(self, params: dict[str, Any]) -> dict[str, Any]:
        """`params` (JSON) with this round's answers and state added."""
        if self.input_responses is not None:
            params["inputResponses"] = self.input_responses
        if self.request_state is not None:
            params["requestState"] = self.request_state
        return params


class RelayedError(DownstreamProtocolError):
    """A JSON-RPC error of a request relayed in the 2026-07-28 era: the client gets it as such."""

    error: mcp_types.ErrorData

    @property
    def for_the_client(self) -> mcp_types.ErrorData | None:
        """Every one: the server answered the client's own request."""
        return self.error


async def listen_for_changes(
    session: ClientSession,
    server: str,
    on_change: Callable[[], None],
    *,
    uris: Sequence[str] = (),
    on_updated: Callable[[str], Awaitable[None]] | None = None,
) -> None:
    """Call `on_change` whenever the server says its tools, prompts or resources changed, and
    `on_updated` when one of `uris` did, on a 2026-07-28 connection (the era pushes these only on a
    `subscriptions/listen` stream), until the stream ends. Nothing to listen for, no stream."""
    from mcp.client.subscriptions import ResourceUpdated, listen  # the era's, on first need

    caps = session.server_capabilities
    tools = bool(caps and caps.tools and caps.tools.list_changed)
    prompts = bool(caps and caps.prompts and caps.prompts.list_changed)
    resources = bool(caps and caps.resources and caps.resources.list_changed)
    uris = list(uris) if caps and caps.resources and caps.resources.subscribe else []
    if not (tools or prompts or resources or uris):
        return
    try:
        async with listen(
            session,
            tools_list_changed=tools,
            prompts_list_changed=prompts,
            resources_list_changed=resources,
            resource_subscriptions=uris,
        ) as events:
            async for event in events:
                if isinstance(event, ResourceUpdated):
                    if on_updated is not None:
                        await on_updated(event.uri)
                else:
                    on_change()
    except Exception as exc:  # the calls go on without it
        log.info("listening on the 2026-07-28 connection ended", server=server, error=str(exc))


class ModernLink:
    """The 2026-07-28 connection to one server, opened on first need and probed once.

    `client()` opens it in the given task group (the main connection's, so it closes with it) and
    returns it, or None where the server does not offer the era or the connection failed.
    """

    def __init__(
        self,
        server: str,
        connect: Connect,
        *,
        timeout: float,
        on_log: LoggingFnT,
        on_lists_changed: Callable[[], None],
    ) -> None:
        """Args:
        connect: Opens one more connection to the server.
        timeout: How long a request waits for the connection to open before going the main way.
        on_log: The server's log messages on this connection.
        on_lists_changed: The server says its tools, prompts or resources changed (on this connection).
        """
        self._server = server
        self._connect = connect
        self._timeout = timeout
        self._on_log = on_log
        self._on_lists_changed = on_lists_changed
        self._client: Client | None = None
        self._opened: anyio.Event | None = None
        self.offered: bool | None = None
        """Whether the server speaks 2026-07-28 (None until a 2026-07-28 client needed it)."""

    @property
    def version(self) -> str | None:
        """The protocol version of the open connection (None while it is not open)."""
        return self._client.protocol_version if self._client is not None else None

    async def client(self, task_group: TaskGroup) -> Client | None:
        """The open connection, opening it first if need be; None if there is none to have."""
        if self.offered is False:
            return None
        if self._client is not None:
            return self._client
        opened = self._opened
        if opened is None:
            opened = self._opened = anyio.Event()
            task_group.start_soon(self._run, opened)
        with anyio.move_on_after(self._timeout):
            await opened.wait()
        return self._client

    def lost(self, client: object) -> None:
        """`client` closed under a request: the next request opens a new connection."""
        if self._client is client:
            self._client = None
            self._opened = None  # the old one's task may still be ending

    async def _run(self, opened: anyio.Event) -> None:
        from mcp import Client  # its module imports the SDK's HTTP and in-process stacks: on first need

        lost = anyio.Event()
        try:
            async with Client(self._connect(lost), mode="auto", cache=None, logging_callback=self._on_log) as client:
                if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                    self.offered = False
                    log.info("server offers no 2026-07-28 era", server=self._server)
                    return
                self.offered = True
                try:  # the listing tells the session which arguments go in headers (HTTP)
                    await client.list_tools()
                except Exception as exc:
                    log.info("listing tools on the 2026-07-28 connection failed", server=self._server, error=str(exc))
                self._client = client
                opened.set()
                log.info("2026-07-28 connection up", server=self._server, version=client.protocol_version)
                async with anyio.create_task_group() as tg:
                    # A stdio server's second process has lists of its own, which the main
                    # connection's do not show: its changes re-list the server too.
                    tg.start_soon(listen_for_changes, client.session, self._server, self._on_lists_changed)
                    await lost.wait()
                    tg.cancel_scope.cancel()
        except Exception as exc:  # its own boundary: the main connection carries on
            if not opened.is_set():  # it never came up: 2026-07-28 clients use the main connection
                self.offered = False
            # else it was lost, a crash say: the next request opens a new one
            log.warning("2026-07-28 connection failed", server=self._server, error=f"{type(exc).__name__}: {exc}")
        finally:
            if self._opened is opened:  # not yet replaced by a newer connection's
                self._client = None
                self._opened = None
            opened.set()
