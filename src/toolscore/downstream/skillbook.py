"""What the gateway knows of its servers' skills (SEP-2640): each entry judged as it is listed, and
each skill file read checked against it; one per hub (`hub.skills`).

Every entry a server lists (`skills/list`, `skills/get`) gets the verdict every tool gets
(`trust/verdict.judged`): pinned on first sight under the server's `pinning` (key
`server/skill:<skill-path>`, the entry as the server sent it: its URI, frontmatter, and each
file's digest and size, so a changed description or a changed file is a changed pin), and its
frontmatter scanned under `poisoning`. A changed skill under `warn` and a flagged one are listed
(flagged: the findings in the entry's `_meta["io.toolscore/poisoning"]`); one changed under
`enforce`, or quarantined, is held: left out of `skills/list` and `resources/list`, and
`skills/get` and every read of its files (by a client or a plan) refused, naming why.

The files of every entry passed on are the manifest of that server's skills. A read of one of
them is checked against it (`verify`): bytes that are not the ones listed are read once more
after the server is asked for its skills again (it may have changed them since; the new listing
is judged like any other), and refused if they still differ. A file the server never listed
(`"resources": "dynamic"`, or not in its list) passes unchecked, unless it lies in a held skill.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mcp_types
import structlog
from mcp import MCPError

from toolscore.downstream.caching import ListHint, hint_of
from toolscore.downstream.catalog import SKILL_SCHEME
from toolscore.downstream.connection import ServerState
from toolscore.downstream.skills import SKILLS_EXTENSION, Listed, check, manifest_of
from toolscore.errors import ConfigError, DownstreamProtocolError, Rejected, ToolscoreError
from toolscore.scope import CallScope
from toolscore.trust.verdict import POISONING_META, judged, poisoning_meta

if TYPE_CHECKING:
    from toolscore.downstream.hub import DownstreamHub

__all__ = ["SkillBook", "skill_path"]

log = structlog.get_logger("toolscore.skills")

_PAGES_MAX = 100
"""Pages of one server's `skills/list` read at most (a paginator that never ends cannot hang a list)."""
_SKILL_FILE = "/SKILL.md"
_TRUST_HOOK = "trust"
"""The hook a held skill's refusal names (a held tool's call names it too)."""


def skill_path(uri: str) -> str:
    """A skill's path, from the URI of its `SKILL.md` (`skill://acme/billing/SKILL.md`: `acme/billing`)."""
    return uri.removeprefix(SKILL_SCHEME).removesuffix(_SKILL_FILE)


class SkillBook:
    """Each server's skills as last listed: their manifests, and the skills held."""

    def __init__(self, hub: DownstreamHub) -> None:
        self._hub = hub
        self._manifests: dict[str, dict[str, Listed]] = {}
        """Per server: its files (its own URIs) as the entries passed on last listed them."""
        self._held: dict[str, dict[str, str]] = {}
        """Per server: its held skills (by path) and why each is held."""
        self._reported: dict[str, set[str]] = {}
        """Per server: the problems its last listing had, logged once each while they last (as the hub's are)."""

    def capable(self) -> list[str]:
        """The connected servers that declare the skills extension, in servers.json order."""
        found = []
        for name, downstream in self._hub.downstreams.items():
            caps = downstream.capabilities
            if caps is not None and downstream.state is ServerState.UP and SKILLS_EXTENSION in (caps.extensions or {}):
                found.append(name)
        return found

    # -- listing ----------------------------------------------------------------------------------

    async def list_server(self, server: str, scope: CallScope) -> tuple[list[dict[str, Any]], ListHint]:
        """Every entry of one server (its own URIs) that is not held, each judged, and the hint of
        its first page."""
        entries: list[dict[str, Any]] = []
        cursor: str | None = None
        hint: ListHint | None = None
        for _ in range(_PAGES_MAX):
            raw = await self._hub.request_raw(
                server, "skills/list", {"cursor": cursor} if cursor else None, "skills/list", scope=scope
            )
            hint = hint or hint_of(raw, 0.0)
            entries.extend(e for e in raw.get("skills") or () if isinstance(e, dict))
            cursor = raw.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
        self._refresh_pins()
        held: dict[str, str] = {}
        manifest: dict[str, Listed] = {}
        kept = []
        seen: set[str] = set()
        for entry in entries:
            judged_entry = self._judge(server, entry, held, seen)
            if judged_entry is not None:
                manifest.update(manifest_of(entry))
                kept.append(judged_entry)
        self._save_pins()
        self._manifests[server] = manifest  # what it lists now, whole
        self._held[server] = held
        self._reported[server] = seen
        return kept, hint or hint_of({}, 0.0)

    def take(self, server: str, entry: dict[str, Any]) -> dict[str, Any]:
        """One entry a server answered `skills/get` with, judged (its own URIs); raises if it is held."""
        self._refresh_pins()
        held = self._held.setdefault(server, {})
        held.pop(skill_path(str(entry.get("uri", ""))), None)
        judged_entry = self._judge(server, entry, held, self._reported.setdefault(server, set()))
        self._save_pins()
        if judged_entry is None:
            uri = str(entry.get("uri", ""))
            raise MCPError(
                mcp_types.INVALID_REQUEST, self._refusal(held[skill_path(uri)]), data={"uri": uri, "held": True}
            )
        self._manifests.setdefault(server, {}).update(manifest_of(entry))
        return judged_entry

    def problems(self, server: str) -> list[str]:
        """What `server`'s last listing of its skills was found to have (held or flagged skills)."""
        return sorted(self._reported.get(server, ()))

    def forget(self, server: str) -> None:
        """A reload removed or replaced `server`: its skills as last listed no longer stand (nor
        claim a file another server lists)."""
        self._manifests.pop(server, None)
        self._held.pop(server, None)
        self._reported.pop(server, None)

    def lister(self, uri: str) -> str | None:
        """The one server whose listed files hold `uri` (its own URI), or None."""
        owners = [server for server, files in self._manifests.items() if uri in files]
        return owners[0] if len(owners) == 1 else None

    def _judge(self, server: str, entry: dict[str, Any], held: dict[str, str], seen: set[str]) -> dict[str, Any] | None:
        """The entry as passed on (flagged or not), or None where it is held (noted in `held`); its
        problems are logged unless the server's last listing had them too, and added to `seen`."""
        cfg = self._hub.config.servers.get(server)
        pins = self._hub.pins
        if cfg is None or (cfg.poisoning == "off" and (pins is None or cfg.pinning == "off")):
            return entry
        uri = entry.get("uri")
        if not isinstance(uri, str):
            return entry  # no skill to name: passed on as it is (the client judges its shape)
        path = skill_path(uri)
        public = self._hub.catalog.public_uri(server, uri)
        verdict = judged("skill", server, path, public, entry, cfg, pins=pins, label=f"skill:{path}")
        reported = self._reported.get(server, ())
        for problem in verdict.problems:
            if problem not in reported and problem not in seen:
                log.warning("skill not exposed as listed", problem=problem)
            seen.add(problem)
        if verdict.held is not None:
            held[path] = verdict.held
            return None
        if verdict.suspect is None:
            return entry
        meta = entry.get("_meta")
        flags = {POISONING_META: poisoning_meta(verdict.suspect)}
        return {**entry, "_meta": {**(meta if isinstance(meta, dict) else {}), **flags}}

    def _refresh_pins(self) -> None:
        pins = self._hub.pins
        if pins is not None:
            try:
                pins.refresh()  # a `pins approve` from the command line since
            except ConfigError as exc:
                log.error("pins not read again; the ones in memory stay", error=str(exc))

    def _save_pins(self) -> None:
        pins = self._hub.pins
        if pins is not None:  # first sights and changes of skills
            try:
                pins.save()
            except OSError as exc:
                log.error("pins not saved", path=str(pins.path), error=str(exc))

    # -- reads ------------------------------------------------------------------------------------

    def holding(self) -> bool:
        """Whether any skill is held now."""
        return any(self._held.values())

    def held(self, server: str, uri: str) -> str | None:
        """Why `uri` (a server's own URI) lies in a held skill of that server, or None."""
        held = self._held.get(server)
        if not held or not uri.startswith(SKILL_SCHEME):
            return None
        rest = uri[len(SKILL_SCHEME) :]
        for path, why in held.items():
            if rest.startswith(f"{path}/"):
                return why
        return None

    def _refusal(self, why: str) -> str:
        return str(Rejected(why, hook=_TRUST_HOOK))

    async def admit(self, server: str, uri: str, scope: CallScope) -> None:
        """Before a skill file is read: raise `Rejected` where it lies in a held skill. A server
        whose skills were never listed through the gateway is asked for them first."""
        if not uri.startswith(SKILL_SCHEME) or server not in self.capable():
            return
        if server not in self._manifests:
            await self._relist(server, scope)
        if (why := self.held(server, uri)) is not None:
            raise Rejected(why, hook=_TRUST_HOOK)

    async def verify(
        self, server: str, uri: str, result: mcp_types.ReadResourceResult, what: str, scope: CallScope
    ) -> None:
        """Check a read of `server`'s `uri` against the digest and size it listed; raise if it differs."""
        if not uri.startswith(SKILL_SCHEME) or server not in self.capable():
            return
        contents = [c.model_dump(by_alias=True, mode="json") for c in result.contents]
        if server not in self._manifests:
            await self._relist(server, scope)
        listed = self._manifests.get(server, {}).get(uri)
        if listed is None:
            return  # not a listed file: nothing to check it against
        problem = check(uri, listed, contents)
        if problem is not None:
            await self._relist(server, scope)  # the server may have changed the skill since
            if (why := self.held(server, uri)) is not None:  # and the change is held
                raise Rejected(why, hook=_TRUST_HOOK)
            listed = self._manifests.get(server, {}).get(uri)
            problem = None if listed is None else check(uri, listed, contents)
        if problem is not None:
            log.warning("skill file refused: not the one listed", server=server, uri=uri, problem=problem)
            error = mcp_types.ErrorData(
                code=mcp_types.INTERNAL_ERROR,
                message=f"{what}: the file is not the one its server listed ({problem}); not passed on",
                data={"uri": uri, "listed": {"digest": listed[0], "size": listed[1]} if listed else None},
            )
            raise DownstreamProtocolError(error.message, server=server, error=error)

    async def _relist(self, server: str, scope: CallScope) -> None:
        try:
            await self.list_server(server, scope)
        except (ToolscoreError, MCPError) as exc:
            log.warning("skills not listed", server=server, error=str(exc))
