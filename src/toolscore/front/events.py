"""The HTTP front's event store: SSE streams a client can resume with `Last-Event-ID`.

In memory and bounded: at most `max_events` events and `max_bytes` of serialized messages, the
oldest dropped first, so a client that never resumes cannot make the gateway grow. A resume from an
event that was dropped (or never existed) replays nothing; the client then starts over.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict

import mcp_types
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId

__all__ = ["BoundedEventStore"]


class BoundedEventStore(EventStore):
    """Every stream's recent events, oldest evicted first past either bound."""

    def __init__(self, *, max_events: int = 10_000, max_bytes: int = 32 * 1024 * 1024) -> None:
        self._events: OrderedDict[EventId, tuple[StreamId, mcp_types.JSONRPCMessage | None, int]] = OrderedDict()
        self._ids = itertools.count(1)
        self._bytes = 0
        self._max_events = max_events
        self._max_bytes = max_bytes

    async def store_event(self, stream_id: StreamId, message: mcp_types.JSONRPCMessage | None) -> EventId:
        """Keep `message` (None: a priming event) and return its id."""
        event_id = str(next(self._ids))
        size = len(stream_id) + (len(message.model_dump_json(by_alias=True)) if message is not None else 0)
        if size > self._max_bytes:  # too large to keep: it gets an id, but cannot be replayed
            message, size = None, len(stream_id)
        self._events[event_id] = (stream_id, message, size)
        self._bytes += size
        while len(self._events) > self._max_events or self._bytes > self._max_bytes:
            _, (_, _, dropped) = self._events.popitem(last=False)
            self._bytes -= dropped
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        """Send the events of `last_event_id`'s stream that followed it; its stream, or None if unknown."""
        found = self._events.get(last_event_id)
        if found is None:
            return None
        stream_id = found[0]
        later = itertools.dropwhile(lambda item: item[0] != last_event_id, list(self._events.items()))
        next(later, None)
        for event_id, (stream, message, _) in later:
            if stream == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id
