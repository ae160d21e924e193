"""Capability tags of every exposed tool, and near-duplicate tools across servers; pure.

A tool's tags come from three places: servers.json (`"capabilities"`, per tool or server-wide),
its annotations, and a small fixed vocabulary matched against the words of its name and the first
sentence of its description. Configured tags are *explicit*: when any tool has a tag explicitly,
only those tools answer a capability call for it, so an operator's word beats the guesswork.

Tools of different servers with the same downstream name and overlapping parameters are one
capability (tagged with that name), offered once rather than silently doubled.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from toolscore.config import Config
from toolscore.downstream.registry import Route
from toolscore.toolhub.text import stem, words

__all__ = ["Capabilities", "Tagged", "extract_tags", "index_capabilities"]

# stemmed word -> tag. Small on purpose: a wrong tag sends calls to the wrong tool.
_WORDS: Mapping[str, str] = {
    **dict.fromkeys(("search", "find", "lookup", "grep", "query"), "search"),
    **dict.fromkeys(("web", "internet", "google", "bing", "duckduckgo", "brave"), "web"),
    **dict.fromkeys(("fetch", "url", "http", "browse", "scrape", "download", "crawl"), "fetch"),
    **dict.fromkeys(("read", "cat", "view", "open", "show"), "read"),
    **dict.fromkeys(("write", "save", "edit", "create", "update", "append", "delete", "remove"), "write"),
    **dict.fromkeys(("file", "director", "directory", "folder", "filesystem", "path"), "files"),
    **dict.fromkeys(("code", "python", "execute", "exec", "script", "repl", "sandbox"), "code"),
    **dict.fromkeys(("calc", "calculate", "calculator", "math", "arithmetic", "evaluate", "compute"), "math"),
    **dict.fromkeys(("git", "commit", "diff", "branch"), "git"),
    **dict.fromkeys(("sql", "database", "db", "table"), "database"),
    **dict.fromkeys(("news", "headline"), "news"),
    **dict.fromkeys(("paper", "arxiv", "scholar", "research"), "research"),
    **dict.fromkeys(("translate", "translation"), "translate"),
    **dict.fromkeys(("image", "screenshot", "photo", "picture"), "image"),
    **dict.fromkeys(("weather", "forecast"), "weather"),
    **dict.fromkeys(("time", "date", "clock", "timezone"), "time"),
    **dict.fromkeys(("memory", "remember", "recall"), "memory"),
}
_VOCABULARY: Mapping[str, str] = {stem(word): tag for word, tag in _WORDS.items()}
"""The same, by stem, as `words` gives them."""
_SENTENCE_END = re.compile(r"[.!?](\s|$)|\n")
_DUP_NAME = re.compile(r"[^a-z0-9]+")


def extract_tags(name: str, description: str | None) -> set[str]:
    """Tags from the vocabulary found in a tool's name or its description's first sentence."""
    text = description or ""
    end = _SENTENCE_END.search(text[:400])
    first = text[: end.start() + 1] if end else text[:400]
    return {_VOCABULARY[w] for w in (*words(name), *words(first)) if w in _VOCABULARY}


@dataclass(frozen=True, slots=True)
class Tagged:
    """One exposed tool with its tags."""

    route: Route
    explicit: frozenset[str]
    """From servers.json, or the tool's near-duplicate group."""
    inferred: frozenset[str]
    """From annotations and the vocabulary."""
    priority: int = 0
    order: int = 0
    """Its position in `tools/list` (config order, then the server's order): the last tie-break."""

    @property
    def tags(self) -> frozenset[str]:
        """Every tag of the tool."""
        return self.explicit | self.inferred


@dataclass(frozen=True, slots=True)
class Capabilities:
    """Every routed tool's tags, and which tools answer each tag."""

    tools: Mapping[str, Tagged] = field(default_factory=dict)
    """Public tool name -> its tags."""
    by_tag: Mapping[str, tuple[Tagged, ...]] = field(default_factory=dict)
    """Tag -> the tools a capability call reaches (explicit holders if any, else inferred ones)."""
    duplicates: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Group tag -> public names of near-equal tools on different servers, first in config order."""

    def candidates(self, tag: str) -> tuple[Tagged, ...]:
        """The tools a capability call for `tag` may reach, in config order."""
        return self.by_tag.get(tag, ())

    def summary(self, limit: int) -> list[tuple[str, int]]:
        """The `limit` tags held by most tools (ties by name), with how many tools hold each."""
        counts = sorted(((t, len(c)) for t, c in self.by_tag.items()), key=lambda tc: (-tc[1], tc[0]))
        return counts[:limit]


def _annotation_tags(route: Route) -> set[str]:
    notes = route.tool.annotations
    if notes is None:
        return set()
    tags = set()
    if notes.read_only_hint:
        tags.add("read-only")
    if notes.destructive_hint:
        tags.add("destructive")
    if notes.title:
        tags |= extract_tags(notes.title, None)
    return tags


def _properties(route: Route) -> frozenset[str]:
    props = route.tool.input_schema.get("properties")
    return frozenset(props) if isinstance(props, dict) else frozenset()


def _duplicate_groups(routes: Sequence[Route]) -> dict[str, tuple[str, ...]]:
    """Same downstream name (normalised) on several servers, with at least half their parameters shared."""
    by_name: dict[str, list[Route]] = defaultdict(list)
    for route in routes:
        key = _DUP_NAME.sub("_", route.remote_name.lower()).strip("_")[:32]
        if key and key[0].isalnum():
            by_name[key].append(route)
    groups: dict[str, tuple[str, ...]] = {}
    for key, members in by_name.items():
        first = members[0]
        same = [first] + [
            r for r in members[1:] if r.server != first.server and _overlap(_properties(first), _properties(r)) >= 0.5
        ]
        if len({r.server for r in same}) > 1:
            groups[key] = tuple(r.public_name for r in same)
    return groups


def _overlap(a: frozenset[str], b: frozenset[str]) -> float:
    return 1.0 if not a and not b else len(a & b) / len(a | b)


def _configured(config: Config, route: Route) -> tuple[str, ...]:
    server = config.servers.get(route.server)
    if server is None or server.capabilities is None:
        return ()
    if isinstance(server.capabilities, tuple):
        return server.capabilities
    return server.capabilities.get(route.remote_name, ())


def index_capabilities(routes: Sequence[Route], config: Config) -> Capabilities:
    """Tag every route and group the tools answering each tag."""
    duplicates = _duplicate_groups(routes)
    group_of = {name: tag for tag, names in duplicates.items() for name in names}
    tools: dict[str, Tagged] = {}
    for order, route in enumerate(routes):
        explicit = set(_configured(config, route))
        if route.public_name in group_of:
            explicit.add(group_of[route.public_name])
        inferred = extract_tags(route.local_name or route.remote_name, route.tool.description) | _annotation_tags(route)
        server = config.servers.get(route.server)
        tools[route.public_name] = Tagged(
            route,
            frozenset(explicit),
            frozenset(inferred - explicit),
            priority=server.priority if server is not None else 0,
            order=order,
        )
    explicit_holders: dict[str, list[Tagged]] = defaultdict(list)
    inferred_holders: dict[str, list[Tagged]] = defaultdict(list)
    for tagged in tools.values():
        for tag in tagged.explicit:
            explicit_holders[tag].append(tagged)
        for tag in tagged.inferred:
            inferred_holders[tag].append(tagged)
    by_tag = {tag: tuple(holders) for tag, holders in inferred_holders.items()}
    by_tag.update({tag: tuple(holders) for tag, holders in explicit_holders.items()})
    return Capabilities(tools=tools, by_tag=dict(sorted(by_tag.items())), duplicates=duplicates)
