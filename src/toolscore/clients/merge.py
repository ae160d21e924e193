"""Imported servers merged into servers.json: names, clashes, secrets moved to the env file; pure.

A server already in servers.json with the same command, arguments and address is skipped, so
importing twice changes nothing. A name taken by a different server gets the client's name as a
suffix (`github-cursor`). An `env` value or header that looks like a secret (by its name, or by
the patterns `_redact` knows) is replaced by a `${NAME}` reference and its value goes to the env
file beside servers.json; arguments and addresses are only checked, and a secret found there is
named for the person to move. An entry that refers to a variable set nowhere would stop the whole
gateway at start, so it is imported disabled and named.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolscore._redact import redact_text
from toolscore.clients.entries import Imported, references

__all__ = ["Merge", "merge_servers", "same_server"]

_SECRET_NAME = re.compile(
    r"(?i)(?:^|[_.-])(?:api[_-]?key|key|token|secret|password|passwd|pwd|pass|credentials?|auth|pat|private|cookie)"
    r"(?:[_.-]|$)"
)
_SECRET_HEADER = re.compile(r"(?i)^(?:authorization|proxy-authorization|cookie|x-api-key|api-key|x-auth-token)$")
_BEARER = re.compile(r"(?i)^(bearer|token|basic)\s+(\S.*)$")
_VAR_CHARS = re.compile(r"[^A-Za-z0-9_]")


@dataclass(slots=True)
class Merge:
    """What importing changes: servers to add, secrets for the env file, and lines for the person."""

    added: dict[str, dict[str, Any]] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _looks_secret(name: str, value: str) -> bool:
    return bool(value) and (_SECRET_NAME.search(name) is not None or redact_text(value) != value)


def same_server(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two entries start the same server: same command, arguments and address."""
    return all(a.get(k) == b.get(k) for k in ("command", "url")) and list(a.get("args") or []) == list(
        b.get("args") or []
    )


class _Names:
    """Variable names for secrets: the entry's own key where free, else `SERVER_KEY`, then numbered."""

    def __init__(self, taken: Mapping[str, str], environ: Mapping[str, str], new: dict[str, str]) -> None:
        self._taken, self._environ, self._new = taken, environ, new

    def _free(self, name: str, value: str) -> bool:
        return all(store.get(name, value) == value for store in (self._taken, self._environ, self._new))

    def name(self, server: str, key: str, value: str) -> str:
        own = _VAR_CHARS.sub("_", key).upper().strip("_") or "SECRET"
        prefixed = f"{_VAR_CHARS.sub('_', server).upper().strip('_') or 'SERVER'}_{own}"
        if prefixed[0].isdigit():  # a variable name starts with a letter or _
            prefixed = "_" + prefixed
        candidates = (own, prefixed) if not own[0].isdigit() else (prefixed,)
        # Numbered names never run out: each one taken needs a distinct value already stored.
        for candidate in itertools.chain(candidates, (f"{prefixed}_{n}" for n in itertools.count(2))):
            if self._free(candidate, value):
                self._new[candidate] = value
                return candidate
        raise AssertionError("unreachable: itertools.count never ends")


def _move_secrets(item: Imported, names: _Names, notes: list[str]) -> None:
    entry = item.entry
    moved: list[str] = []
    env = entry.get("env")
    if isinstance(env, dict):
        for key, value in env.items():
            if isinstance(value, str) and not references(value) and _looks_secret(str(key), value):
                env[key] = "${" + names.name(item.name, str(key), value) + "}"
                moved.append(f"env {key}")
    headers = entry.get("headers")
    if isinstance(headers, dict):
        for key, value in headers.items():
            if not isinstance(value, str) or references(value):
                continue
            scheme = _BEARER.match(value)
            if scheme is not None and (_SECRET_HEADER.match(str(key)) or scheme.group(1).lower() == "bearer"):
                headers[key] = f"{scheme.group(1)} ${{{names.name(item.name, str(key), scheme.group(2))}}}"
                moved.append(f"header {key}")
            elif _SECRET_HEADER.match(str(key)) or _looks_secret(str(key), value):
                headers[key] = "${" + names.name(item.name, str(key), value) + "}"
                moved.append(f"header {key}")
    if moved:
        notes.append(f"{item.name}: moved {', '.join(moved)} to the env file as ${{…}} references")
    leftover = [str(a) for a in entry.get("args") or [] if isinstance(a, str) and redact_text(a) != a]
    if isinstance(entry.get("url"), str) and redact_text(entry["url"]) != entry["url"]:
        leftover.append("url")
    if leftover:
        notes.append(f"{item.name}: its arguments or address look like they hold a secret: move it to the env file")


def merge_servers(
    existing: Mapping[str, Any],
    imported: list[Imported],
    *,
    suffix: str,
    stored: Mapping[str, str],
    environ: Mapping[str, str],
) -> Merge:
    """Plan the merge of `imported` into the servers of `existing` (servers.json's decoded servers).

    Args:
        existing: servers.json's servers, name -> entry.
        imported: What was read from the client.
        suffix: Added to a clashing name (`github` -> `github-<suffix>`).
        stored: The env file's variables.
        environ: The process environment (it wins over the env file, so a name set there is not reused).
    """
    merge = Merge()
    names = _Names(stored, environ, merge.secrets)
    for item in imported:
        name = item.name
        held = next((n for n, e in (*existing.items(), *merge.added.items()) if same_server(e, item.entry)), None)
        if held is not None:
            where = f" as {held}" if held != name else ""
            merge.notes.append(f"{name}: already in servers.json{where}, skipped")
            continue
        if name in existing or name in merge.added:
            base = f"{name}-{suffix}"
            taken = existing.keys() | merge.added.keys()
            name = next(n for n in (base, *(f"{base}-{i}" for i in range(2, 10_000))) if n not in taken)
            merge.notes.append(f"{item.name}: servers.json has another server of that name, imported as {name}")
            item.name = name
        merge.notes.extend(item.notes)
        _move_secrets(item, names, merge.notes)
        unset = sorted(references(item.entry) - set(stored) - set(environ) - set(merge.secrets))
        if unset and item.entry.get("disabled") is not True:
            item.entry["disabled"] = True
            merge.notes.append(
                f"{name}: imported disabled, it needs {', '.join('$' + v for v in unset)}: set it in the env file, "
                "then remove `disabled`"
            )
        merge.added[name] = item.entry
    return merge
