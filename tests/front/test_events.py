"""The HTTP front's event store: replay after an event, and its bounds."""

from __future__ import annotations

import mcp_types
import pytest
from mcp.server.streamable_http import EventMessage

from toolscore.front.events import BoundedEventStore

pytestmark = pytest.mark.anyio


def note(n: int, size: int = 0) -> mcp_types.JSONRPCMessage:
    return mcp_types.JSONRPCNotification(
        jsonrpc="2.0", method="notifications/message", params={"n": n, "pad": "x" * size}
    )


async def replay(store: BoundedEventStore, after: str) -> tuple[str | None, list[str]]:
    sent: list[EventMessage] = []

    async def send(event: EventMessage) -> None:
        sent.append(event)

    stream = await store.replay_events_after(after, send)
    return stream, [e.event_id or "" for e in sent]


async def test_replay_sends_the_later_events_of_the_same_stream_only() -> None:
    store = BoundedEventStore()
    first = await store.store_event("s1", None)  # a priming event
    a = await store.store_event("s1", note(1))
    await store.store_event("s2", note(2))
    b = await store.store_event("s1", note(3))
    assert await replay(store, first) == ("s1", [a, b])
    assert await replay(store, "999") == (None, [])


async def test_the_oldest_events_go_first_past_either_bound() -> None:
    store = BoundedEventStore(max_events=3)
    ids = [await store.store_event("s", note(i)) for i in range(5)]
    assert await replay(store, ids[0]) == (None, [])
    assert await replay(store, ids[2]) == ("s", ids[3:])

    sized = BoundedEventStore(max_bytes=10_000)
    big = [await sized.store_event("s", note(i, 4000)) for i in range(4)]
    assert await replay(sized, big[0]) == (None, [])
    assert (await replay(sized, big[2]))[1] == [big[3]]
    too_big = await sized.store_event("s", note(9, 20_000))  # kept as an id, never replayed
    assert (await replay(sized, big[3]))[1] == []
    assert too_big
