"""What the gateway does with the poisoning scan's findings: the suspect, its approval, its flag; pure.

A definition with findings is a `Suspect`. Under `"poisoning": "quarantine"` it is held (not
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
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from toolscore._glob import matches
from toolscore.trust.poison import Finding, scan

__all__ = [
    "POISONING_META",
    "Suspect",
    "approved",
    "canonical_json",
    "digest_of",
    "digest_of_text",
    "flagged",
    "screen",
]

POISONING_META = "io.toolscore/poisoning"
"""The `_meta` key of a listed definition the poisoning scan flagged: its digest and findings."""

Kind = Literal["tool", "prompt", "resource_template"]
Model = TypeVar("Model", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Suspect:
    """A definition the poisoning scan found something in (docs/security.md)."""

    server: str
    name: str
    """The downstream name (a tool's or prompt's name, a template's URI template)."""
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


def flagged(model: Model, suspect: Suspect) -> Model:
    """The exposed definition with the findings in its `_meta`, for clients and the console to show."""
    brief = [
        {"check": f.check, "severity": f.severity.value, "where": f.where, "excerpt": f.excerpt}
        for f in suspect.findings
    ]
    meta = {**(getattr(model, "meta", None) or {}), POISONING_META: {"digest": suspect.digest, "findings": brief}}
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
