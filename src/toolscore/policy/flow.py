"""Flow control around the downstream call: concurrency caps per server, and single-flight batching.

With `toolscore.state` set, the caps hold across replicas (slots in Redis, `state/`); batching
stays per replica.
"""

from __future__ import annotations

import json
import secrets

import anyio
import mcp_types

from toolscore._engine import CallNext, ExecutionContext
from toolscore.errors import Rejected
from toolscore.policy.scope import PerServer, Scope
from toolscore.state import SlotStore

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


class ConcurrencyCap:
    """Wrap: at most `per_server` calls running per server, `queue` more waiting, the rest refused."""

    name = "concurrency"

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
    """

    name = "batching"

    def __init__(self) -> None:
        self._flights: dict[str, tuple[anyio.Event, list[mcp_types.CallToolResult]]] = {}

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
            result = await call_next(ctx)
            outcome.append(result)
            return result
        finally:
            del self._flights[key]
            done.set()


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


def single_flight(scopes: PerServer[Scope]) -> SingleFlight | None:
    """The wrap half of `batching`, when it is on."""
    return SingleFlight() if scopes.gateway.rules.batching else None
