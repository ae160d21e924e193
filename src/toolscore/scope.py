"""Who a call is made for: one `CallScope` per front request, passed down explicitly.

The front makes it once per request (or once per connection, for the express lane) and hands it
to the engine, which hands it to the hub and to the downstream connection the call is sent on.
The connection keeps the scopes of its calls in flight: a server's own requests (sampling,
elicitation, roots) and its log messages go to the client of those calls, and only when they are
all one client's (`toolscore.downstream.backchannel.attribute`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolscore.downstream.backchannel import Peer
    from toolscore.downstream.modern import FrontCall
    from toolscore.plan.approval import Approval
    from toolscore.trust.labels import Seen, StepTaint

__all__ = ["NO_CLIENT", "CallScope", "principal_of"]


@dataclass(frozen=True, slots=True)
class CallScope:
    """One front request's caller, as every layer below the front sees it."""

    caller: str | None = None
    """Who is calling (`toolscore.front.callers`): per connection, per session or per principal;
    None for the gateway's own calls. Per-client instances and rate limits are keyed by it."""
    peer: Peer | None = None
    """The client's back-channel, for the server's requests and logs during the call; None where
    there is no client to ask (the console, the CLI, the gateway's own requests)."""
    version: str | None = None
    """The client's protocol version, where known."""
    task: Mapping[str, Any] | None = None
    """The `task` params of a task-augmented passthrough `tools/call` (2025-11-25): the call goes
    to the server as a task where the tool supports one (`toolscore.downstream.tasks`)."""
    front: FrontCall | None = None
    """A 2026-07-28 client's passthrough request, relayed to the server as the client's own
    (`toolscore.downstream.modern`); None for every other request, the gateway's own tools' included."""
    approval: Approval | None = None
    """The user's yes to the plan this call is a step of (`toolscore.plan.approval`): a confirm
    step runs only with arguments that fit what the user was shown."""
    seen: Seen | None = None
    """What the model of the `delegate` task making this call has read of untrusted results, for
    the flow rule's quotation check (`toolscore.trust.labels`)."""
    taint: StepTaint | None = None
    """The data-flow labels of the plan step this call is (`toolscore.trust.labels`): what its
    references bring, judged by the flow rule, which adds its result's. Each step has a scope of
    its own, made from its plan's with this set."""


NO_CLIENT = CallScope()
"""The scope of a call no client made: nothing is asked of anyone on its behalf."""


def principal_of(caller: str | None) -> str | None:
    """The principal a caller identity names (`principal:<name>`, or `principal:<name>/c<n>` for a
    session it opened: `toolscore.front.callers`), or None for a caller without one."""
    if caller is None or not caller.startswith("principal:"):
        return None
    return caller[len("principal:") :].partition("/")[0] or None
