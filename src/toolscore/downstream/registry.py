"""The immutable index of exposed tools: public name -> (server, downstream tool); pure.

Rebuilt from scratch whenever a server's tool list changes; a rebuild is cheap next to the
`tools/list` round trip that caused it, and an immutable index needs no locking on the call path.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema.exceptions
import mcp_types
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from mcp_types import methods
from mcp_types.version import LATEST_HANDSHAKE_VERSION, LATEST_MODERN_VERSION
from pydantic import ValidationError

from toolscore._glob import matches
from toolscore._naming import public_name
from toolscore.config import Config
from toolscore.downstream.schema_check import Check, compile_check
from toolscore.trust.poison import Finding, scan
from toolscore.trust.verdict import PinJudge, Suspect, canonical_json, flagged, judged

__all__ = ["PinJudge", "Registry", "Route", "build_registry"]


# Results are re-validated per negotiated version by the SDK: one tool that fails there would
# fail the whole tools/list, so every tool is checked against both protocol eras up front.
_CHECK_VERSIONS = (LATEST_HANDSHAKE_VERSION, LATEST_MODERN_VERSION)

# Every rebuild (one per server that comes up or changes its list) re-checks every tool, and a
# meta-schema check costs milliseconds: remembered per definition, a 200-tool catalog is checked
# once instead of once per server. Bounded, since a server may send new definitions forever.
_CHECKED: dict[str, str | None] = {}
_CHECKED_MAX = 8192
# The poisoning scan's findings per (definition, downstream name, other servers' tool names), alike.
_SCANNED: dict[tuple[str, str, frozenset[str]], tuple[Finding, ...]] = {}


@dataclass(frozen=True, slots=True)
class Route:
    """Where one exposed tool goes."""

    public_name: str
    server: str
    remote_name: str
    tool: mcp_types.Tool
    """The tool as exposed: the downstream definition verbatim except for `name` (and, when the
    poisoning scan flagged it, the findings under `_meta[POISONING_META]`)."""
    validator: Validator = field(repr=False, compare=False)
    """The compiled inputSchema, built once here rather than per call."""
    canonical: str = ""
    """`<server><separator><downstream tool name>`: the tool's identity whatever it is renamed to."""
    local_name: str = ""
    """The name after `rename`, before the server prefix."""
    path_keys: frozenset[str] = frozenset()
    """Property names the inputSchema marks as paths (`format`), at any depth."""
    check: Check | None = field(default=None, repr=False, compare=False)
    """A fast yes-only check of arguments for common schema shapes (`schema_check`); None: jsonschema only."""

    def schema_errors(self, arguments: Any) -> list[jsonschema.exceptions.ValidationError]:
        """What is wrong with `arguments` by the inputSchema, in path order; nothing when the compiled
        check vouches for them (its yes is jsonschema's yes); jsonschema decides, and words, the rest."""
        if self.check is not None and self.check(arguments):
            return []
        return sorted(self.validator.iter_errors(arguments), key=lambda e: list(map(str, e.absolute_path)))


@dataclass(frozen=True, slots=True)
class Registry:
    """Every routed tool plus what went wrong while building the index.

    The routes of a server that is down (being restarted) are kept from its last tool list, so a
    call to one is answered "unavailable, retried in ..." rather than "unknown tool"; they are not
    listed (`tools()`) until the server is back.
    """

    routes: Mapping[str, Route] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    servers: tuple[str, ...] = ()
    """The connected servers, in config order."""
    by_remote: Mapping[tuple[str, str], Route] = field(default_factory=dict)
    """(server, downstream tool name) -> route, for plans that name tools the way servers do."""
    down: frozenset[str] = frozenset()
    """Servers that are down but were up once: their last known tools are routed, not listed."""
    hidden: frozenset[str] = frozenset()
    """Routed tools the policy refuses whatever their arguments: not listed, not searched."""
    prefixes: Mapping[str, str] = field(default_factory=dict)
    """Each configured server's tool-name prefix (with the separator) -> the server, whether or not
    it ever came up: a call to a server that never listed its tools names that server."""
    suspects: tuple[Suspect, ...] = ()
    held: Mapping[str, str] = field(default_factory=dict)
    """Public name -> why a connected server's tool is not routed: quarantined by the poisoning scan,
    or changed since it was pinned (`enforce`); a call to one is refused saying so."""
    """Tools of connected servers with poisoning findings: listed (flagged) or quarantined (not routed)."""

    def server_named_by(self, tool: str) -> str | None:
        """The configured server whose prefix `tool` starts with, if any (the longest such prefix)."""
        found = [(len(prefix), server) for prefix, server in self.prefixes.items() if tool.startswith(prefix)]
        return max(found)[1] if found else None

    def get(self, name: str) -> Route | None:
        """The route for a public tool name, if any (a down server's tools included)."""
        return self.routes.get(name)

    def find(self, server: str, tool: str) -> Route | None:
        """The route of a server's tool by its downstream name (None if not exposed)."""
        return self.by_remote.get((server, tool))

    def tools(self) -> list[mcp_types.Tool]:
        """The exposed tool definitions of the connected servers, in server then downstream order."""
        return [r.tool for r in self.listed()]

    def listed(self) -> list[Route]:
        """The routes of the tools clients see: a connected server's, the policy allowing them."""
        return [r for r in self.routes.values() if r.server not in self.down and r.public_name not in self.hidden]

    def listed_per_server(self) -> dict[str, int]:
        """How many tools each server has listed: after `tools` allow/deny and the policy, as clients
        see them (the figure `check`, `/metrics` and the console all show)."""
        counts: dict[str, int] = {}
        for route in self.listed():
            counts[route.server] = counts.get(route.server, 0) + 1
        return counts


def _selected(name: str, allow: Sequence[str] | None, deny: Sequence[str]) -> bool:
    if matches(name, deny):
        return False
    return allow is None or matches(name, allow)


def _dumped(tool: mcp_types.Tool, downstream_name: str) -> tuple[dict[str, Any], dict[str, Any], str, str]:
    """The exposed tool as a one-tool `tools/list` result's JSON; the definition as the server
    sent it (its own name) and that definition's canonical JSON (what a pin's digest covers); and
    a memo key for the exposed tool (its name and that JSON): one JSON encoding serves all three."""
    dump: dict[str, Any] = mcp_types.ListToolsResult(tools=[tool]).model_dump(
        by_alias=True, mode="json", exclude_none=True
    )
    definition = {**dump["tools"][0], "name": downstream_name}
    canonical = canonical_json(definition)
    return dump, definition, canonical, f"{tool.name}\n{canonical}"


def _schema_problem(tool: mcp_types.Tool, dump: dict[str, Any], key: str) -> str | None:
    """Why a client would refuse this tool definition, or None if it is fine (remembered)."""
    if key in _CHECKED:
        return _CHECKED[key]
    problem = _definition_problem(tool, dump)
    if len(_CHECKED) >= _CHECKED_MAX:
        del _CHECKED[next(iter(_CHECKED))]  # the oldest: a catalog being rebuilt stays remembered
    _CHECKED[key] = problem
    return problem


def _definition_problem(tool: mcp_types.Tool, dump: dict[str, Any]) -> str | None:
    for version in _CHECK_VERSIONS:
        try:
            methods.serialize_server_result("tools/list", version, dump)
        except ValidationError as exc:
            err = exc.errors()[0]
            return f"invalid for protocol {version}: {'.'.join(str(p) for p in err['loc'][2:])}: {err['msg']}"
    try:
        validator_for(tool.input_schema).check_schema(tool.input_schema)
    except SchemaError as exc:
        return f"inputSchema is not a valid JSON Schema: {exc.message}"
    return None


_PATH_FORMATS = frozenset({"path", "file-path", "filepath", "file", "directory", "dir-path", "dirpath"})


def _path_keys(schema: Any, found: set[str] | None = None, depth: int = 0) -> set[str]:
    """Names of properties whose schema has a path `format`, through nested schemas."""
    found = set() if found is None else found
    if not isinstance(schema, dict) or depth > 32:
        return found
    for name, prop in (schema.get("properties") or {}).items():
        if isinstance(prop, dict) and str(prop.get("format", "")).lower() in _PATH_FORMATS:
            found.add(name)
        _path_keys(prop, found, depth + 1)
    for key in ("items", "additionalProperties"):
        _path_keys(schema.get(key), found, depth + 1)
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or ():
            _path_keys(sub, found, depth + 1)
    return found


_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMAS = ("items", "additionalProperties", "not", "if", "then", "else", "contains")


def lenient(schema: Any, depth: int = 0) -> Any:
    """`schema` as the gateway checks arguments against it: a `required` property that has a
    `default` may be left out (the server fills it in, as @playwright/mcp does for `scale`).

    A gateway must never refuse what the server accepts. The schema clients see is the server's,
    unchanged; only the check is relaxed. Copies only what changes; nesting past 32 is left as is.
    """
    if not isinstance(schema, dict) or depth > 32:
        return schema
    out: dict[str, Any] | None = None

    def put(key: str, value: Any) -> None:
        nonlocal out
        if value is not schema.get(key):
            out = dict(schema) if out is None else out
            out[key] = value

    for key in _SUBSCHEMA_MAPS:
        mapping = schema.get(key)
        if isinstance(mapping, dict):
            relaxed = {name: lenient(sub, depth + 1) for name, sub in mapping.items()}
            if any(relaxed[name] is not mapping[name] for name in mapping):
                put(key, relaxed)
    for key in _SUBSCHEMA_LISTS:
        items = schema.get(key)
        if isinstance(items, list):
            relaxed_items = [lenient(sub, depth + 1) for sub in items]
            if any(a is not b for a, b in zip(relaxed_items, items, strict=True)):
                put(key, relaxed_items)
    for key in _SUBSCHEMAS:
        if key in schema:
            put(key, lenient(schema[key], depth + 1))
    required, properties = schema.get("required"), schema.get("properties")
    if isinstance(required, list) and isinstance(properties, dict):
        kept = [
            name
            for name in required
            if not (isinstance(name, str) and isinstance(properties.get(name), dict) and "default" in properties[name])
        ]
        if len(kept) != len(required):
            put("required", kept)
    return schema if out is None else out


def _scanned(tool: mcp_types.Tool, definition: dict[str, Any], key: str, others: frozenset[str]) -> tuple[Finding, ...]:
    """The scan's findings for one downstream definition, remembered."""
    memo = (key, tool.name, others)
    if (findings := _SCANNED.get(memo)) is None:
        findings = scan("tool", definition, others=others)
        if len(_SCANNED) >= _CHECKED_MAX:
            del _SCANNED[next(iter(_SCANNED))]
        _SCANNED[memo] = findings
    return findings


def _ignore(problem: str) -> None:
    """A down server's problems: already reported while it was up."""


def _compile(schema: Mapping[str, Any]) -> Validator:
    cls = validator_for(schema)
    return cls(schema)


def build_registry(
    server_tools: Mapping[str, Sequence[mcp_types.Tool]],
    config: Config,
    *,
    down: Collection[str] = (),
    hide: Callable[[Route], bool] | None = None,
    pins: PinJudge | None = None,
) -> Registry:
    """Index the tools of every connected server.

    Args:
        server_tools: Each connected server's tools, as it listed them; servers in config order.
        config: Filters, renames, prefixes and the separator.
        down: Servers of `server_tools` that are down: their tools (as last listed) are routed,
            so a call can be told the server is restarting, but not listed or counted as connected.
        hide: Tools the policy refuses whatever their arguments: routed (a call is told why), not listed.
        pins: The pinned definitions, for servers with `pinning` on: a changed one is reported, and
            under `enforce` not routed.

    Returns:
        The index. Collisions keep the first server in config order (a connected server before a
        down one); every skipped, shortened or colliding tool of a connected server is described
        in `problems` (a down server's were reported while it was up).
    """
    routes: dict[str, Route] = {}
    problems: list[str] = []
    suspects: list[Suspect] = []
    holds: dict[str, str] = {}
    separator = config.settings.separator
    order = [name for name in config.servers if name in server_tools]
    names = {server: frozenset(t.name.lower() for t in server_tools[server]) for server in order}
    everyone = frozenset().union(*names.values())
    resting = frozenset(down) & set(order)
    up = [name for name in order if name not in resting]
    for server in [*up, *(name for name in order if name in resting)]:
        cfg = config.servers[server]
        prefix = server if cfg.prefix is None else cfg.prefix
        report = problems.append if server not in resting else _ignore
        # Another server's tool named in a description is shadowing; this server's own is not.
        others = everyone - names[server]
        for tool in server_tools[server]:
            if not _selected(tool.name, cfg.tools.allow, cfg.tools.deny):
                continue
            exposed = cfg.tools.rename.get(tool.name, tool.name)
            name, shortened = public_name(prefix, exposed, separator)
            if shortened:
                report(f"server '{server}' tool '{tool.name}' is exposed as '{name}' (shortened to 64)")
            if (other := routes.get(name)) is not None:
                report(
                    f"name collision: '{name}' from server '{server}' (tool '{tool.name}') is already taken by"
                    f" server '{other.server}' (tool '{other.remote_name}'); kept '{other.server}'. Fix: give one"
                    f' server a different "prefix" or add "tools": {{"rename": {{"{tool.name}": "new_name"}}}}'
                )
                continue
            exposed_tool = tool.model_copy(update={"name": name})
            dump, definition, canonical, key = _dumped(exposed_tool, tool.name)
            if (problem := _schema_problem(exposed_tool, dump, key)) is not None:
                report(f"server '{server}' tool '{tool.name}' skipped: {problem}")
                continue
            if (pins is not None and cfg.pinning != "off") or cfg.poisoning != "off":
                findings = _scanned(tool, definition, key, others) if cfg.poisoning != "off" else None
                verdict = judged(
                    "tool", server, tool.name, name, definition, cfg, pins=pins, resting=server in resting,
                    canonical=canonical, findings=findings,
                )  # fmt: skip
                for problem in verdict.problems:
                    report(problem)
                if verdict.suspect is not None and server not in resting:
                    suspects.append(verdict.suspect)
                if verdict.held is not None:
                    holds[name] = verdict.held
                    continue
                if verdict.suspect is not None:
                    exposed_tool = flagged(exposed_tool, verdict.suspect)
            routes[name] = Route(
                name,
                server,
                tool.name,
                exposed_tool,
                _compile(checked := lenient(tool.input_schema)),
                canonical=f"{server}{separator}{tool.name}",
                local_name=exposed,
                path_keys=frozenset(_path_keys(tool.input_schema)),
                check=compile_check(checked),
            )
    by_remote = {(r.server, r.remote_name): r for r in routes.values()}
    prefixes = {
        f"{name if cfg.prefix is None else cfg.prefix}{separator}": name
        for name, cfg in config.servers.items()
        if cfg.prefix != ""
    }
    return Registry(
        routes=routes,
        problems=tuple(problems),
        servers=tuple(up),
        by_remote=by_remote,
        down=resting,
        hidden=frozenset(name for name, route in routes.items() if hide is not None and hide(route)),
        prefixes=prefixes,
        suspects=tuple(suspects),
        held=holds,
    )
