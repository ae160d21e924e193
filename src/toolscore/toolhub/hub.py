"""The ToolHub: capability calls over redundant servers, and the search catalog's tools.

Every candidate call is an ordinary `engine.execute` call, so policy, validation, deadlines and
the audit record apply to each exactly as to a direct call; the hub only chooses, maps, races and
merges. Candidates are ordered by the scoreboard (fed by the audit stream), then by priority.

Searching, argument mapping and merging are imported with the first call that needs them, and
the search index is built by the first search: `tools/list` needs only the catalog mode.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import anyio
import mcp_types

from toolscore._engine import CallOutcome, ConfirmFn, ToolExecutionEngine, error_result
from toolscore.config import CapabilitySettings, Config
from toolscore.downstream.registry import Registry, Route
from toolscore.scope import NO_CLIENT, CallScope
from toolscore.toolhub.capabilities import Capabilities, Tagged, index_capabilities
from toolscore.toolhub.catalog import CALL_TOOL, OWN_TOOLS, SEARCH_TOOLS, catalog_mode
from toolscore.toolhub.scoring import Scoreboard
from toolscore.toolhub.text import words
from toolscore.types import ProgressFn, ToolSource

if TYPE_CHECKING:
    from toolscore.config import ToolHubSettings
    from toolscore.toolhub.rerank import Reranker
    from toolscore.toolhub.sampling import Sample
    from toolscore.toolhub.search import SearchIndex

__all__ = ["Attempt", "ToolHub"]

Strategy = Literal["first_success", "all", "fallback"]
_STRATEGIES = ("first_success", "all", "fallback")
_META_KEY = "toolscore/capability"
_MAX_OTHER_BLOCKS = 16


@dataclass(slots=True)
class Attempt:
    """What became of one candidate of a capability call."""

    tool: str
    status: Literal["ok", "failed", "cancelled", "skipped", "not_reached"]
    reason: str | None = None
    ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        """As the result's metadata shows it."""
        out: dict[str, Any] = {"tool": self.tool, "status": self.status, "reason": self.reason, "ms": self.ms}
        return {k: v for k, v in out.items() if v is not None}

    def line(self) -> str:
        """As the result's closing note shows it."""
        return f"{self.tool} {self.status}" + (f" ({self.reason})" if self.reason else "")


@dataclass(slots=True)
class _Index:
    registry: Registry
    capabilities: Capabilities
    mode: Literal["full", "search"]
    search: SearchIndex | None = None
    """Built by the first search."""


def _reranker_for(settings: ToolHubSettings) -> Reranker | None:
    """The search's optional second stage, imported only where it is configured on."""
    if settings.rerank == "off":
        return None
    from toolscore.toolhub.rerank import reranker_for

    return reranker_for(settings)


def _first_line(outcome: CallOutcome) -> str:
    for block in outcome.result.content:
        if isinstance(block, mcp_types.TextContent):
            return block.text.strip().splitlines()[0][:160] if block.text.strip() else ""
    return ""


class ToolHub:
    """Capability calls and catalog search over the gateway's routed tools."""

    def __init__(
        self,
        *,
        tools: ToolSource,
        engine: ToolExecutionEngine,
        config: Config,
        scores: Scoreboard,
        refusals: Mapping[str, str | None] | None = None,
        hidden_for: Callable[[str], Callable[[Route], bool] | None] | None = None,
    ) -> None:
        """Args:
        tools: The registry source (the downstream hub).
        engine: Runs every candidate call.
        config: Capabilities, argument maps, priorities and strategies.
        scores: Live scores from the audit stream.
        refusals: Why policy forbids one of the hub's own tools, by name.
        hidden_for: For a caller, the routed tools its own rules refuse (`constraints.principals`):
            search never shows them to it, and a capability call never picks them for it.
        """
        self._tools = tools
        self._engine = engine
        self._config = config
        self._settings = config.settings.toolhub
        self.scores = scores
        self._refusals = dict(refusals or {})
        self._hidden_for = hidden_for
        self._index: _Index | None = None
        self._reranker = _reranker_for(self._settings)

    def reconfigure(self, config: Config, *, refusals: Mapping[str, str | None]) -> None:
        """Capabilities, argument maps and settings from `config` from now on (a live reload);
        learned scores are kept."""
        before = (self._settings.rerank, self._settings.rerank_model)
        self._config, self._settings, self._refusals = config, config.settings.toolhub, dict(refusals)
        self._index = None
        if (self._settings.rerank, self._settings.rerank_model) != before:
            self._reranker = _reranker_for(self._settings)

    # -- the index, rebuilt when the registry is (it is immutable, so identity says it changed)

    def _current(self) -> _Index:
        registry = self._tools.registry
        if self._index is None or self._index.registry is not registry:
            routes = registry.listed()  # a denied tool is never found either
            capabilities = index_capabilities(routes, self._config)
            mode = catalog_mode(self._config.settings.catalog, self._settings, registry.tools())
            self._index = _Index(registry, capabilities, mode)
        return self._index

    @property
    def capabilities(self) -> Capabilities:
        """Every exposed tool's tags."""
        return self._current().capabilities

    @property
    def mode(self) -> Literal["full", "search"]:
        """The catalog mode in force for the current tools."""
        return self._current().mode

    @property
    def offers_capabilities(self) -> bool:
        """Whether the config declares capabilities (then `call_capability` is listed in full mode)."""
        return bool(self._settings.capabilities) or any(s.capabilities for s in self._config.enabled_servers)

    def ranked(self, capability: str) -> list[Tagged]:
        """The tools offering `capability`, in the order they are tried."""
        candidates = self.capabilities.candidates(capability)
        return self.scores.order(candidates, lambda t: (t.route.public_name, t.priority, t.order))

    def candidate_table(self) -> dict[str, tuple[str, ...]]:
        """Every capability -> its tools, in the order a call tries them now (for plan checks)."""
        return {tag: tuple(t.route.public_name for t in self.ranked(tag)) for tag in self.capabilities.by_tag}

    def _hidden(self, scope: CallScope) -> Callable[[Route], bool] | None:
        """Which routed tools the caller of `scope` may not call by its own rules (None: none)."""
        return None if self._hidden_for is None or scope.caller is None else self._hidden_for(scope.caller)

    def search(
        self,
        query: str,
        k: int,
        *,
        server: str | None = None,
        capability: str | None = None,
        hidden: Callable[[Route], bool] | None = None,
        own: Sequence[mcp_types.Tool] = (),
    ) -> list[dict[str, Any]]:
        """The `k` best tools for `query`: full definitions, tags, score, the query words that matched,
        and near-duplicates folded in; `server` and `capability` keep only the tools of one server or
        tag, and `hidden` leaves out the tools the caller may not call; `own`: the gateway's own
        tools, returned in full when the query names one."""
        index = self._current()
        if index.search is None:
            from toolscore.toolhub.search import SearchIndex

            index.search = SearchIndex(index.capabilities.tools)
        asked = set(words(query))
        found: list[dict[str, Any]] = (
            [
                t.model_dump(by_alias=True, mode="json", exclude_none=True)
                for t in own
                if set(words(t.name)) <= asked and self._refusals.get(t.name) is None
            ][:k]
            if server is None and capability is None
            else []
        )
        folded: set[str] = set()
        # Ask for more where the caller's rules may leave some out: the best k it may call.
        wanted = k * 2 if hidden is None else k * 8
        hits = (
            index.search.search(query, wanted, server=server, capability=capability)
            if self._reranker is None
            else self._reranker.search(
                index.search, index.capabilities.tools, query, wanted, server=server, capability=capability
            )
        )
        for hit in hits:
            if hit.name in folded or len(found) >= k:
                continue
            tagged = index.capabilities.tools[hit.name]
            if hidden is not None and hidden(tagged.route):
                continue
            entry = tagged.route.tool.model_dump(by_alias=True, mode="json", exclude_none=True)
            entry.pop("_meta", None)
            entry["capabilities"] = sorted(tagged.tags)
            entry["score"] = hit.score
            entry["matched"] = list(hit.matched)
            for group, members in index.capabilities.duplicates.items():
                if hit.name in members:
                    others = [m for m in members if m != hit.name]
                    folded.update(others)
                    entry["same_as"] = others
                    entry["capability"] = group
            found.append(entry)
        return found

    # -- the front tools

    def handles(self, name: str) -> bool:
        """Whether `name` is one of the hub's own front tools."""
        return name in OWN_TOOLS

    async def answer(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        *,
        request_id: str | int | None = None,
        confirm: ConfirmFn | None = None,
        progress: ProgressFn | None = None,
        sample: Sample | None = None,
        scope: CallScope = NO_CLIENT,
        gateway_tools: Callable[[], list[mcp_types.Tool]] = list,
    ) -> mcp_types.CallToolResult:
        """Answer a call to one of the hub's own tools (`handles(name)`); `sample` asks the client's
        model; `gateway_tools`: the gateway's own tools as the front lists them (search returns one
        named in full)."""
        if (refusal := self._refusals.get(name)) is not None:
            return error_result(f"Call rejected by policy 'tools': {refusal}")
        args = arguments or {}
        if name == SEARCH_TOOLS:
            query, k = args.get("query"), args.get("k", 5)
            server, capability = args.get("server"), args.get("capability")
            if (
                not isinstance(query, str)
                or not isinstance(k, int)
                or isinstance(k, bool)
                or not 1 <= k <= 20
                or not isinstance(server, str | None)
                or not isinstance(capability, str | None)
            ):
                return error_result(
                    "search_tools takes {'query': string, 'k'?: integer 1-20, "
                    "'server'?: string, 'capability'?: string}."
                )
            if self._reranker is not None:
                # the model and the catalog's vectors, off the event loop, before the search needs them
                await self._reranker.load(self.capabilities.tools)
            found = self.search(
                query, k, server=server, capability=capability, hidden=self._hidden(scope), own=gateway_tools()
            )
            if not found:
                narrowed = "".join(
                    f" {what} {value[:64]!r}"
                    for what, value in (("on server", server), ("with capability", capability))
                    if value is not None
                )
                return error_result(
                    f"No tool{narrowed} matches {query[:100]!r}; try other words (servers: {self._servers()})."
                )
            return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=json.dumps(found))])
        if name == CALL_TOOL:
            tool, inner = args.get("name"), args.get("arguments", {})
            if not isinstance(tool, str) or not isinstance(inner, dict):
                return error_result("call_tool takes {'name': string, 'arguments'?: object}.")
            if tool in OWN_TOOLS or tool == "orchestrate":
                return error_result(f"call_tool calls the servers' tools; call '{tool}' directly.")
            run = await self._engine.execute(
                tool, inner, request_id=request_id, confirm=confirm, progress=progress, scope=scope
            )
            return run.result
        capability, inner, strategy = args.get("capability"), args.get("arguments", {}), args.get("strategy")
        if not isinstance(capability, str) or not isinstance(inner, dict) or strategy not in (None, *_STRATEGIES):
            return error_result(
                "call_capability takes {'capability': string, 'arguments'?: object, "
                "'strategy'?: 'first_success' | 'all' | 'fallback'}."
            )
        return await self.call_capability(
            capability,
            inner,
            strategy=strategy,
            request_id=request_id,
            confirm=confirm,
            sample=sample,
            scope=scope,
        )

    def _servers(self) -> str:
        return ", ".join(self._tools.registry.servers) or "none connected"

    # -- capability calls

    async def call_capability(
        self,
        capability: str,
        arguments: Mapping[str, Any],
        *,
        strategy: Strategy | None = None,
        request_id: str | int | None = None,
        confirm: ConfirmFn | None = None,
        plan_id: str | None = None,
        sample: Sample | None = None,
        scope: CallScope = NO_CLIENT,
    ) -> mcp_types.CallToolResult:
        """Call the best candidates for `capability` with `arguments`, by the capability's strategy."""
        from toolscore.toolhub.mapping import map_arguments

        settings = self._settings.capabilities.get(capability, CapabilitySettings())
        how: Strategy = strategy or settings.strategy
        ranked = self.ranked(capability)
        if ranked and (hidden := self._hidden(scope)) is not None:
            ranked = [t for t in ranked if not hidden(t.route)]
            if not ranked:
                return error_result(
                    f"Call rejected by policy 'principals': every tool offering capability '{capability[:64]}' "
                    "is refused to this caller by its rules."
                )
        if not ranked:
            known = ", ".join(tag for tag, _ in self.capabilities.summary(20)) or "none"
            return error_result(
                f"No tool offers capability '{capability[:64]}'. Capabilities: {known}. Find tools with search_tools."
            )
        fan_out = settings.fan_out or self._settings.fan_out
        attempts: list[Attempt] = []
        picked: list[tuple[Tagged, dict[str, Any]]] = []
        for tagged in ranked:
            server = self._config.servers.get(tagged.route.server)
            amap = server.argument_maps.get(tagged.route.remote_name, {}) if server is not None else {}
            mapped = map_arguments(arguments, tagged.route, amap)
            if mapped.arguments is None:
                attempts.append(Attempt(tagged.route.public_name, "skipped", mapped.skipped))
            elif len(picked) >= fan_out:
                attempts.append(Attempt(tagged.route.public_name, "not_reached", f"fan-out {fan_out}"))
            else:
                picked.append((tagged, mapped.arguments))
        if not picked:
            return self._failed(capability, how, attempts)

        async def run(tagged: Tagged, args: dict[str, Any]) -> CallOutcome:
            return await self._engine.execute(
                tagged.route.public_name,
                args,
                request_id=request_id,
                plan_id=plan_id,
                timeout=settings.timeout,
                confirm=confirm,
                scope=scope,
            )

        tried = [Attempt(t.route.public_name, "cancelled") for t, _ in picked]
        outcomes: list[CallOutcome | None] = [None] * len(picked)

        finished: list[int] = []  # in the order they ended: the first success is the race's winner

        def settle(i: int, outcome: CallOutcome) -> None:
            outcomes[i] = outcome
            finished.append(i)
            ok = outcome.context.success
            reason = None if ok else _first_line(outcome)
            tried[i] = Attempt(
                tried[i].tool, "ok" if ok else "failed", reason, round(outcome.context.duration * 1000, 1)
            )

        if how == "fallback":
            for i, (tagged, args) in enumerate(picked):
                settle(i, await run(tagged, args))
                if tried[i].status == "ok":
                    for later in tried[i + 1 :]:
                        later.status = "not_reached"
                    break
        else:
            async with anyio.create_task_group() as group:

                async def one(i: int, tagged: Tagged, args: dict[str, Any]) -> None:
                    settle(i, await run(tagged, args))
                    if how == "first_success" and tried[i].status == "ok":
                        group.cancel_scope.cancel()  # the losers' downstream calls are cancelled

                for i, (tagged, args) in enumerate(picked):
                    group.start_soon(one, i, tagged, args)
        attempts = tried + attempts
        order = finished if how == "first_success" else range(len(picked))
        wins = [(picked[i][0].route.public_name, o) for i in order if (o := outcomes[i]) and tried[i].status == "ok"]
        if not wins:
            return self._failed(capability, how, attempts)
        if how == "all":
            return await self._merged(capability, arguments, settings, wins, attempts, sample)
        return self._answered(capability, how, wins[0][1].result, attempts)

    def _note(self, capability: str, how: str, attempts: list[Attempt]) -> str:
        return f"[capability '{capability}', {how}: " + "; ".join(a.line() for a in attempts) + "]"

    def _meta(self, capability: str, how: str, attempts: list[Attempt]) -> dict[str, Any]:
        return {"capability": capability, "strategy": how, "candidates": [a.to_json() for a in attempts]}

    def _failed(self, capability: str, how: str, attempts: list[Attempt]) -> mcp_types.CallToolResult:
        result = error_result(
            f"No candidate for capability '{capability[:64]}' succeeded. " + self._note(capability, how, attempts)
        )
        return result.model_copy(update={"meta": {_META_KEY: self._meta(capability, how, attempts)}})

    def _answered(
        self, capability: str, how: str, result: mcp_types.CallToolResult, attempts: list[Attempt]
    ) -> mcp_types.CallToolResult:
        note = mcp_types.TextContent(text=self._note(capability, how, attempts))
        meta = {**(result.meta or {}), _META_KEY: self._meta(capability, how, attempts)}
        return result.model_copy(update={"content": [*result.content, note], "meta": meta})

    async def _merged(
        self,
        capability: str,
        arguments: Mapping[str, Any],
        settings: CapabilitySettings,
        wins: list[tuple[str, CallOutcome]],
        attempts: list[Attempt],
        sample: Sample | None,
    ) -> mcp_types.CallToolResult:
        from toolscore.toolhub.sampling import synthesis_request, synthesize
        from toolscore.toolhub.synthesis import merge

        items = merge([(n, o.result) for n, o in wins], item_bytes=settings.item_bytes, max_items=settings.max_items)
        lines = []
        for number, item in enumerate(items, 1):
            head = " — ".join(p for p in (item.title, item.url) if p)
            lines.append(
                f"{number}. {head + chr(10) + '   ' if head else ''}{item.text}\n   from: {', '.join(item.sources)}"
            )
        text = "\n".join(lines) or "(no items)"
        # Images, audio and embedded resources are not items: they follow the merged text as they came.
        others = [
            b
            for _, o in wins
            for b in o.result.content
            if not isinstance(b, mcp_types.TextContent | mcp_types.ResourceLink)
        ]
        structured = {**self._meta(capability, "all", attempts), "items": [i.to_json() for i in items]}
        note = self._note(capability, "all", attempts)
        answer: list[mcp_types.TextContent] = []
        if settings.synthesis == "sampling" and items:
            request = synthesis_request(capability, arguments, items, settings.synthesis_tokens)
            synthesized, how = await synthesize(sample, request, settings.synthesis_timeout)
            if synthesized is not None:
                answer.append(mcp_types.TextContent(text=synthesized))
                structured["synthesis"] = synthesized
                text = "Sources:\n" + text
            note = note[:-1] + f"; {how}]"
        return mcp_types.CallToolResult(
            content=[
                *answer,
                mcp_types.TextContent(text=text),
                *others[:_MAX_OTHER_BLOCKS],
                mcp_types.TextContent(text=note),
            ],
            structured_content=structured,
        ).model_copy(update={"meta": {_META_KEY: self._meta(capability, "all", attempts)}})
