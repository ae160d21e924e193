"""The immutable index of exposed resources, resource templates and prompts; pure.

Resource URIs are namespaced reversibly: a server with a prefix (the default) exposes each of its
URIs as `toolscore://<server>/<original URI>` (the server name percent-encoded, so it holds no
`/`), and one with `"prefix": ""` keeps its URIs as they are. A skill's files (SEP-2640,
`skill://<skill-path>/<file>`) stay `skill://` URIs: the server name becomes the first segment of
the skill path (`skill://<server>/<skill-path>/<file>`), so a skill's name, its path's last
segment, is the server's. Templates get the same treatment,
so a URI expanded from an exposed template routes back to its owner. Prompts are named like tools
(`<prefix><separator><name>`). On a clash (two unprefixed servers listing one URI, two prompts
with one public name), the first server in config order keeps it and the clash is reported.

Like the tool registry, the catalog is rebuilt from scratch whenever a server's lists change.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import quote, unquote

import mcp_types

from toolscore._glob import pieces_match
from toolscore._naming import public_name
from toolscore.config import Config, ServerConfig
from toolscore.trust.verdict import Kind, PinJudge, Suspect, flagged, judged

__all__ = [
    "SCHEME",
    "SKILL_SCHEME",
    "Catalog",
    "PromptRoute",
    "ResourceRoute",
    "ServerLists",
    "TemplateRoute",
    "build_catalog",
    "namespaced_uri",
]

SCHEME = "toolscore://"
SKILL_SCHEME = "skill://"
"""The skills extension's URIs (SEP-2640), namespaced within the scheme."""
_MAX_TEMPLATE_CHARS = 2048
_EXPRESSION = re.compile(r"\{([+#./;?&]?)([^{}]*)\}")  # linear: no nested repetition


@dataclass(frozen=True, slots=True)
class ServerLists:
    """What one connected server lists besides tools."""

    resources: Sequence[mcp_types.Resource] = ()
    templates: Sequence[mcp_types.ResourceTemplate] = ()
    prompts: Sequence[mcp_types.Prompt] = ()
    serves_resources: bool = True
    """The server declared `resources`: URIs may be routed to it."""


@dataclass(frozen=True, slots=True)
class ResourceRoute:
    """One exposed resource: its public form and where it comes from."""

    server: str
    uri: str
    """The URI as its server knows it."""
    resource: mcp_types.Resource
    """As exposed: the server's definition with the public URI."""


@dataclass(frozen=True, slots=True)
class TemplateRoute:
    """One exposed resource template."""

    server: str
    uri_template: str
    """The template as its server knows it."""
    template: mcp_types.ResourceTemplate
    """As exposed: with the public template."""
    literals: tuple[str, ...] | None = field(default=None, compare=False, repr=False)
    """The template's text between its expressions (None: too large to match against)."""

    def matches(self, uri: str) -> bool:
        """Whether `uri` could be an expansion of the server's template.

        Each expression matches any text (a glob's `*`), the literals are found leftmost first:
        linear in the URI, whatever the template. A false positive only sends a URI to a server
        that then says it does not know it.
        """
        return self.literals is not None and pieces_match(uri, self.literals)


@dataclass(frozen=True, slots=True)
class PromptRoute:
    """One exposed prompt."""

    server: str
    remote_name: str
    prompt: mcp_types.Prompt
    """As exposed: the server's definition with the public name."""


def namespaced_uri(server: str, uri: str) -> str:
    """`toolscore://<server>/<uri>`, the server name percent-encoded; `skill://<server>/<path>` for
    a skill's `skill://<path>`."""
    if uri.startswith(SKILL_SCHEME):
        return f"{SKILL_SCHEME}{quote(server, safe='')}/{uri[len(SKILL_SCHEME) :]}"
    return f"{SCHEME}{quote(server, safe='')}/{uri}"


def _literals(template: str) -> tuple[str, ...] | None:
    """An RFC 6570 template's text around its `{...}` expressions (None if too large)."""
    if len(template) > _MAX_TEMPLATE_CHARS:
        return None
    return tuple(_EXPRESSION.split(template)[::3])


@dataclass(frozen=True, slots=True)
class Catalog:
    """Every exposed resource, template and prompt, plus what went wrong building the index."""

    resources: Mapping[str, ResourceRoute] = field(default_factory=dict)
    """Public URI -> route."""
    templates: Mapping[str, TemplateRoute] = field(default_factory=dict)
    """Public template -> route."""
    prompts: Mapping[str, PromptRoute] = field(default_factory=dict)
    """Public name -> route."""
    namespaced: frozenset[str] = frozenset()
    """Servers whose URIs are exposed under `toolscore://<server>/`."""
    plain: tuple[str, ...] = ()
    """Servers whose URIs are exposed as they are, in config order."""
    problems: tuple[str, ...] = ()
    down: frozenset[str] = frozenset()
    """Servers that are down but were up once: still routed (a read says "restarting"), not listed."""
    suspects: tuple[Suspect, ...] = ()
    """Templates and prompts of connected servers with poisoning findings: listed (flagged) or held."""

    def listed_resources(self) -> list[mcp_types.Resource]:
        """The exposed resources of the connected servers."""
        return [r.resource for r in self.resources.values() if r.server not in self.down]

    def listed_templates(self) -> list[mcp_types.ResourceTemplate]:
        """The exposed resource templates of the connected servers."""
        return [t.template for t in self.templates.values() if t.server not in self.down]

    def listed_prompts(self) -> list[mcp_types.Prompt]:
        """The exposed prompts of the connected servers."""
        return [p.prompt for p in self.prompts.values() if p.server not in self.down]

    def route_uri(self, uri: str) -> tuple[str, str] | None:
        """The (server, original URI) a public URI belongs to, or None if no server owns it.

        A namespaced URI names its server. Any other URI goes to the unprefixed server that lists
        it or whose template matches it, else to the only unprefixed server there is, else to the
        one server that lists it under its own namespace, else to the one namespaced server whose
        template matches it (a tool result's resource links carry the server's own URIs).
        """
        if uri.startswith(SCHEME):
            server, slash, original = uri[len(SCHEME) :].partition("/")
            server = unquote(server)
            if slash and server in self.namespaced:
                return server, original
            return None
        if uri.startswith(SKILL_SCHEME):  # `skill://<server>/<path>`; else an unprefixed server's own
            server, slash, path = uri[len(SKILL_SCHEME) :].partition("/")
            if slash and path and unquote(server) in self.namespaced:
                return unquote(server), SKILL_SCHEME + path
        if (route := self.resources.get(uri)) is not None and route.server in self.plain:
            return route.server, uri
        for template in self.templates.values():
            if template.server in self.plain and template.matches(uri):
                return template.server, uri
        if len(self.plain) == 1:
            return self.plain[0], uri
        owners = {r.server for r in self.resources.values() if r.uri == uri and r.server in self.namespaced}
        if len(owners) == 1:
            return owners.pop(), uri
        if not owners:
            matching = {t.server for t in self.templates.values() if t.server in self.namespaced and t.matches(uri)}
            if len(matching) == 1:
                return matching.pop(), uri
        return None

    def route_template(self, uri_template: str) -> tuple[str, str] | None:
        """The (server, original template) of a public template (completion references)."""
        if (route := self.templates.get(uri_template)) is not None:
            return route.server, route.uri_template
        return None

    def public_uri(self, server: str, uri: str) -> str:
        """How a server's own URI is exposed (for `resources/updated`)."""
        return namespaced_uri(server, uri) if server in self.namespaced else uri


_Listed = TypeVar("_Listed", mcp_types.Prompt, mcp_types.ResourceTemplate)


def build_catalog(
    lists: Mapping[str, ServerLists], config: Config, *, down: Collection[str] = (), pins: PinJudge | None = None
) -> Catalog:
    """Index the resources, templates and prompts of every connected server.

    Args:
        lists: Each known server's lists; servers in any order (config order is applied).
        config: Prefixes and the separator.
        down: Servers of `lists` that are down: routed, so that a request says they restart, not listed.
        pins: The pinned definitions, for servers with `pinning` on: a prompt or template changed
            since it was pinned is reported, and under `enforce` not listed (keys `prompt:<name>`,
            `template:<uri template>`).
    """
    resources: dict[str, ResourceRoute] = {}
    templates: dict[str, TemplateRoute] = {}
    prompts: dict[str, PromptRoute] = {}
    problems: list[str] = []
    namespaced: set[str] = set()
    plain: list[str] = []
    suspects: list[Suspect] = []
    separator = config.settings.separator

    def screened(kind: Kind, server: str, cfg: ServerConfig, name: str, public: str, model: _Listed) -> _Listed | None:
        """The pin's and the poisoning scan's verdict: the definition as listed (flagged or not), or None when held."""
        if cfg.poisoning == "off" and (pins is None or cfg.pinning == "off"):
            return model
        definition = model.model_dump(by_alias=True, mode="json", exclude_none=True)
        label = f"{'prompt' if kind == 'prompt' else 'template'}:{name}"
        verdict = judged(kind, server, name, public, definition, cfg, pins=pins, label=label, resting=server in down)
        if server not in down:
            problems.extend(verdict.problems)
            if verdict.suspect is not None:
                suspects.append(verdict.suspect)
        if verdict.held is not None:
            return None
        return model if verdict.suspect is None else flagged(model, verdict.suspect)

    for server in (name for name in config.servers if name in lists):
        cfg = config.servers[server]
        prefix = server if cfg.prefix is None else cfg.prefix
        found = lists[server]
        if found.serves_resources:
            (plain.append if prefix == "" else namespaced.add)(server)
        for resource in found.resources:
            original = str(resource.uri)
            uri = original if prefix == "" else namespaced_uri(server, original)
            if (other := resources.get(uri)) is not None:
                problems.append(f"resource '{uri}' of server '{server}' is already listed by '{other.server}'")
                continue
            resources[uri] = ResourceRoute(server, original, resource.model_copy(update={"uri": uri}))
        for template in found.templates:
            original = template.uri_template
            public = original if prefix == "" else namespaced_uri(server, original)
            if (other_template := templates.get(public)) is not None:
                problems.append(
                    f"resource template '{public}' of server '{server}' is already listed by '{other_template.server}'"
                )
                continue
            if (exposed := screened("resource_template", server, cfg, original, public, template)) is None:
                continue
            templates[public] = TemplateRoute(
                server, original, exposed.model_copy(update={"uri_template": public}), _literals(original)
            )
        for prompt in found.prompts:
            name, _ = public_name(prefix, prompt.name, separator)
            if (other_prompt := prompts.get(name)) is not None:
                problems.append(
                    f"prompt '{name}' of server '{server}' is already taken by server '{other_prompt.server}'"
                )
                continue
            if (exposed_prompt := screened("prompt", server, cfg, prompt.name, name, prompt)) is None:
                continue
            prompts[name] = PromptRoute(server, prompt.name, exposed_prompt.model_copy(update={"name": name}))
    return Catalog(
        resources, templates, prompts, frozenset(namespaced), tuple(plain), tuple(problems), frozenset(down),
        tuple(suspects),
    )  # fmt: skip
