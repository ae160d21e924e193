"""What the gateway does with a listed definition: its pin's judgement, the poisoning scan's
findings (the suspect, its approval, its flag); pure.

`judged` is the one verdict every kind of definition gets (tools, prompts, resource templates,
skills), in one order: a definition changed since it was pinned is reported, and under
`"pinning": "enforce"` held without being scanned; else it is scanned. A definition with
findings is a `Suspect`. Under `"poisoning": "quarantine"` it is held (not
routed, not listed) unless the server's `poisoning_approved` names it: `name@digest` approves
that definition only (the digest covers the whole definition, so a changed one is held again),
a name glob approves whatever the definition becomes. Under `flag` it is listed with its
findings in `_meta[POISONING_META]`, where clients and the console can show them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from pydantic import BaseModel

from toolscore._glob import matches
from toolscore.trust.poison import Finding, scan

if TYPE_CHECKING:
    from toolscore.config import ServerConfig

__all__ = [
    "POISONING_META",
    "PinJudge",
    "Suspect",
    "Verdict",
    "approved",
    "canonical_json",
    "digest_of",
    "digest_of_text",
    "flagged",
    "judged",
    "poisoning_meta",
    "screen",
]

POISONING_META = "io.toolscore/poisoning"
"""The `_meta` key of a listed definition the poisoning scan flagged: its digest and findings."""

Kind = Literal["tool", "prompt", "resource_template", "skill"]
Model = TypeVar("Model", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Suspect:
    """A definition the poisoning scan found something in (docs/security.md)."""

    server: str
    name: str
    """The downstream name (a tool's or prompt's name, a template's URI template, a skill's path)."""
    public_name: str
    digest: str
    """A digest of the definition: `poisoning_approved: ["name@digest"]` approves exactly this one."""
    findings: tuple[Finding, ...]
    quarantined: bool
    """Held (`"poisoning": "quarantine"`, not approved): not routed; else listed, with a warning."""
    kind: Kind = "tool"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, as `check --json` prints it."""
        return {
            "kind": self.kind,
            "name": self.name,
            "exposed_as": self.public_name,
            "digest": self.digest,
            "quarantined": self.quarantined,
            "findings": [f.as_dict() for f in self.findings],
        }

    def problem(self, server_label: str) -> str:
        """The line `check` and the log show."""
        checks = ", ".join(sorted({f.check for f in self.findings}))
        what = f"server '{server_label}' {self.kind.replace('_', ' ')} '{self.name}'"
        if self.quarantined:
            return (
                f"{what} quarantined by the poisoning scan ({checks}); to list it, add"
                f' "poisoning_approved": ["{self.name}@{self.digest}"] to the server'
            )
        return f"{what} listed with poisoning findings: {checks}"


def canonical_json(definition: dict[str, Any]) -> str:
    """The definition's canonical JSON (sorted keys, no spaces): what its digest covers."""
    return json.dumps(definition, sort_keys=True, separators=(",", ":"))


def digest_of_text(canonical: str) -> str:
    """16 hex digits of the SHA-256 of a definition's canonical JSON (`canonical_json`)."""
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def digest_of(definition: dict[str, Any]) -> str:
    """16 hex digits of the SHA-256 of the definition's canonical JSON."""
    return digest_of_text(canonical_json(definition))


def approved(name: str, digest: str, approvals: Sequence[str]) -> bool:
    """`name@digest` approves that definition; a name glob, whatever the definition."""
    if f"{name}@{digest}" in approvals:
        return True
    return matches(name, [entry for entry in approvals if "@" not in entry])


def poisoning_meta(suspect: Suspect) -> dict[str, Any]:
    """What `_meta[POISONING_META]` holds for a flagged definition: its digest and findings."""
    brief = [
        {"check": f.check, "severity": f.severity.value, "where": f.where, "excerpt": f.excerpt}
        for f in suspect.findings
    ]
    return {"digest": suspect.digest, "findings": brief}


def flagged(model: Model, suspect: Suspect) -> Model:
    """The exposed definition with the findings in its `_meta`, for clients and the console to show."""
    meta = {**(getattr(model, "meta", None) or {}), POISONING_META: poisoning_meta(suspect)}
    return model.model_copy(update={"meta": meta})


def screen(
    kind: Kind,
    server: str,
    name: str,
    public: str,
    definition: dict[str, Any],
    *,
    mode: str,
    approvals: Sequence[str],
    others: Collection[str] = (),
    findings: tuple[Finding, ...] | None = None,
) -> Suspect | None:
    """The suspect this definition is (None: nothing found, or `mode` is `off`).

    Args:
        definition: As the server sent it (JSON data, its own name).
        mode: The server's `poisoning`: `flag`, `quarantine` or `off`.
        findings: Already scanned (a memo); else scanned here.
    """
    if mode == "off":
        return None
    if findings is None:
        findings = scan(kind, definition, others=others)
    if not findings:
        return None
    digest = digest_of(definition)
    held = mode == "quarantine" and not approved(name, digest, approvals)
    return Suspect(server, name, public, digest, findings, held, kind)


class PinJudge(Protocol):
    """Pinned definitions (`trust/pins.py`): whether one is new, the pinned one, or changed."""

    def judge(
        self, server: str, tool: str, definition: dict[str, Any], canonical: str | None = None
    ) -> tuple[str, str]:
        """`new`, `same` or `changed`, and the definition's digest (a first sight or a change is
        recorded); `canonical` is the definition's canonical JSON, made once by the caller."""
        ...


@dataclass(frozen=True, slots=True)
class Verdict:
    """What `judged` found of one definition."""

    problems: tuple[str, ...] = ()
    """What to report (the log, `toolscore check`): a change since the pin, the scan's findings."""
    held: str | None = None
    """Why it is held (not listed, not routed; a use of it is refused saying this), or None."""
    suspect: Suspect | None = None
    """The scan's findings, when there are any: held (`quarantined`) or listed flagged."""


_SAME = Verdict()


def judged(
    kind: Kind,
    server: str,
    name: str,
    public: str,
    definition: dict[str, Any],
    cfg: ServerConfig,
    *,
    pins: PinJudge | None,
    label: str | None = None,
    resting: bool = False,
    canonical: str | None = None,
    findings: tuple[Finding, ...] | None = None,
    others: Collection[str] = (),
) -> Verdict:
    """The pin's and the poisoning scan's verdict on one listed definition (docs/security.md).

    Args:
        kind: What it is: the scan's texts and the words of every message follow it.
        name: Its downstream name (what `poisoning_approved` names).
        public: How clients see it.
        definition: As the server sent it (JSON data, its own name and URIs).
        cfg: Its server's entry: `pinning`, `poisoning`, `poisoning_approved`.
        pins: The pin store, where some server pins; judged only under `pinning` `warn`/`enforce`.
        label: Its pin's key within the server (`prompt:<name>`, `skill:<path>`); default `name`.
        resting: Its server is down (listed as it last was): not judged against its pin.
        canonical: The definition's `canonical_json`, when the caller made it already.
        findings: The scan's findings, when the caller scanned it already (a memo).
    """
    problems: list[str] = []
    words = kind.replace("_", " ")
    if pins is not None and cfg.pinning != "off" and not resting:
        key = label or name
        if pins.judge(server, key, definition, canonical)[0] == "changed":
            held = cfg.pinning == "enforce"
            problems.append(
                f"server '{server}' {words} '{name}' changed since it was pinned"
                + (f"; held until `toolscore pins approve {server}/{key}`" if held else "; listed")
                + f" (`toolscore pins diff {server}/{key}` shows what changed)"
            )
            if held:
                why = f"{words} '{name}' of server '{server}' changed since it was pinned; it is held"
                return Verdict(tuple(problems), f"{why} until `toolscore pins approve {server}/{key}`")
    if cfg.poisoning != "off":
        suspect = screen(
            kind, server, name, public, definition, mode=cfg.poisoning, approvals=cfg.poisoning_approved,
            others=others, findings=findings,
        )  # fmt: skip
        if suspect is not None:
            problems.append(suspect.problem(server))
            return Verdict(tuple(problems), suspect.problem(server) if suspect.quarantined else None, suspect)
    return Verdict(tuple(problems)) if problems else _SAME
