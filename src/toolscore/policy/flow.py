"""Flow control around the downstream call: concurrency caps per server, and single-flight batching.

With `toolscore.state` set, both hold across replicas (`state/`): the caps as slots in Redis, and
batching as a leased lock per (tool, arguments) whose leader publishes its result for the calls
that waited on it.
"""

from __future__ import annotations

import hashlib
import json
import secrets

import anyio
import mcp_types

from toolscore._engine import CallNext, ExecutionContext
from toolscore.errors import Rejected
from toolscore.policy.scope import PerServer, Scope
from toolscore.state import FlightStore, SlotStore

__all__ = [
    "ConcurrencyCap",
    "MarkBatchable",
    "SingleFlight",
    "concurrency_cap",
    "mark_batchable",
    "single_flight",
]

_REPLICA = secrets.token_hex(6)
"""Tells this process's slot holders from another replica's (call ids repeat across processes)."""
_LEASE_MARGIN = 5.0
_KEEP_RESULT = 10.0
"""Seconds a shared result stays for the calls that waited on it (read within 20 ms; slack for a loaded replica)."""
_MAX_SHARED_RESULT = 4 * 1024 * 1024
"""A result larger than this (bytes of JSON) is not published: each waiting replica makes its own call."""


class ConcurrencyCap:
    """Wrap: at most `per_server` calls running per server, `queue` more waiting, the rest refused."""

    name = "concurrency"
    passes_results_through = True

    def __init__(self, caps: dict[str, tuple[int, int]], *, store: SlotStore | None = None) -> None:
        """Args:
        caps: Server -> (calls running at most, calls waiting at most); other servers are not capped.
        store: Shared slots (Redis): the caps hold for all replicas together; None: in this process.
        """
        self._caps = caps
        self._store = store
        self._limiters = {server: anyio.CapacityLimiter(cap) for server, (cap, _) in caps.items()}
        self._waiting = dict.fromkeys(caps, 0)

    async def __call__(self, ctx: ExecutionContext, call_next: CallNext) -> mcp_types.CallToolResult:
        server = ctx.server
        if server not in self._limiters:
            return await call_next(ctx)
        limiter, (cap, queue) = self._limiters[server], self._caps[server]

        def full() -> Rejected:
            return Rejected(
                f"server '{server}' is at its concurrency limit ({cap} running, {queue} waiting); try again shortly",
                hook="concurrency",
            )

        if self._store is not None:
            holder = f"{_REPLICA}:{ctx.call_id}"
            # The engine cancels the call at its deadline: the lease outlives it only if the replica died.
            lease = (ctx.timeout or 0.0) + _LEASE_MARGIN
            if not await self._store.acquire_slot(server, cap, queue, holder, lease):
                raise full()
            try:
                return await call_next(ctx)
            finally:
                await self._store.release_slot(server, holder)
        if limiter.available_tokens == 0 and self._waiting[server] >= queue:
            raise full()
        try:
            limiter.acquire_nowait()  # a free slot: this call never counts as waiting
        except anyio.WouldBlock:
            self._waiting[server] += 1
            try:
                await limiter.acquire()
            finally:
                self._waiting[server] -= 1
        try:
            return await call_next(ctx)
        finally:
            limiter.release()


class MarkBatchable:
    """Pre-execution: identical concurrent calls to read-only tools may share one downstream call."""

    name = "batching"

    async def __call__(self, ctx: ExecutionContext) -> mcp_types.CallToolResult | None:
        hints = ctx.route.tool.annotations if ctx.route else None
        if hints is not None and hints.read_only_hint:
            ctx.should_batch = True
        return None


class SingleFlight:
    """Wrap: calls marked `should_batch` with the same tool and arguments share one downstream call.

    The first caller (the leader) makes the call; identical calls arriving while it runs wait for
    its result and are audited as `batched`. If the leader fails or is cancelled, each waiting
    call makes its own call, so one caller's cancellation never fails another.

    With a shared `store`, this replica's leader first asks whether another replica's call is
    under way: if so it waits for that result instead of calling (for itself and its own waiters).
    Only calls that arrive while a flight runs share it; a result is never served after that.
    """

    name = "batching"

    def __init__(self, *, store: FlightStore | None = None) -> None:
        self._flights: dict[str, tuple[anyio.Event, list[mcp_types.CallToolResult]]] = {}
        self._store = store

    async def __call__(self, ctx: ExecutionContext, call_next: CallNext) -> mcp_types.CallToolResult:
        if not ctx.should_batch:
            return await call_next(ctx)
        key = ctx.tool + "\0" + json.dumps(ctx.arguments, sort_keys=True, separators=(",", ":"))
        flight = self._flights.get(key)
        if flight is not None:
            done, outcome = flight
            await done.wait()
            if outcome:
                ctx.batched = True
                return outcome[0]
            return await call_next(ctx)
        done, outcome = anyio.Event(), list[mcp_types.CallToolResult]()
        self._flights[key] = (done, outcome)
        try:
            if self._store is None:
                result = await call_next(ctx)
            else:
                result = await self._shared(self._store, key, ctx, call_next)
            outcome.append(result)
            return result
        finally:
            del self._flights[key]
            done.set()

    @staticmethod
    async def _shared(
        store: FlightStore, key: str, ctx: ExecutionContext, call_next: CallNext
    ) -> mcp_types.CallToolResult:
        """Share the call with the other replicas: lead it, or wait for the flight under way."""
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()  # bounded key, any arguments
        flight = f"{_REPLICA}:{ctx.call_id}"
        other = await store.start_flight(digest, flight, (ctx.timeout or 0.0) + _LEASE_MARGIN)
        if other is not None:
            raw = await store.await_flight(digest, other)
            if raw is not None:
                try:
                    shared = mcp_types.CallToolResult.model_validate_json(raw)
                except ValueError:
                    pass  # not a result this version reads (a mixed-version deployment): call
                else:
                    ctx.batched = True
                    return shared
            return await call_next(ctx)  # the other flight failed or was cancelled: as in-process, call
        published: bytes | None = None
        try:
            result = await call_next(ctx)
            published = _publishable(result)
            return result
        finally:
            await store.end_flight(digest, flight, published, _KEEP_RESULT)


def _publishable(result: mcp_types.CallToolResult) -> bytes | None:
    """The result as JSON for the other replicas, or None (too large, or not serialisable: a lone surrogate)."""
    try:
        text = result.model_dump_json(by_alias=True, exclude_none=True).encode("utf-8")
    except ValueError:  # PydanticSerializationError and UnicodeEncodeError: this call's caller still gets it
        return None
    return text if len(text) <= _MAX_SHARED_RESULT else None


def concurrency_cap(scopes: PerServer[Scope], store: SlotStore | None = None) -> ConcurrencyCap | None:
    """The `concurrency` hook, when any server is capped (its own section, else the global one)."""
    caps = {
        server: (c.per_server, c.queue)
        for server, scope in scopes.servers.items()
        if (c := scope.rules.concurrency).per_server is not None
    }
    return ConcurrencyCap(caps, store=store) if caps else None


def mark_batchable(scopes: PerServer[Scope]) -> MarkBatchable | None:
    """The pre-execution half of `batching`, when it is on."""
    return MarkBatchable() if scopes.gateway.rules.batching else None


def single_flight(scopes: PerServer[Scope], store: FlightStore | None = None) -> SingleFlight | None:
    """The wrap half of `batching`, when it is on (across replicas with a shared `store`)."""
    return SingleFlight(store=store) if scopes.gateway.rules.batching else None
