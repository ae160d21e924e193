"""`toolscore import`: a client's servers merged into servers.json, secrets into its env file.

Everything is read and checked first (the client's files, servers.json, the env file, each
imported entry against servers.json's schema); only then are the two files written, each
atomically after a backup. `--dry-run` prints the diffs instead (secret values masked).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolscore._envfile import env_file_for, format_env, read_env_file
from toolscore.clients import jsonc
from toolscore.clients.documents import Document, client_for_file, diff, parse_document, read_document
from toolscore.clients.entries import Imported, Where, read_entries, references
from toolscore.clients.files import read_client_file, write_atomic
from toolscore.clients.locations import CLIENTS, client_files, home_dir
from toolscore.clients.merge import merge_servers
from toolscore.config import default_config_path, parse_config
from toolscore.errors import ConfigError

__all__ = ["ImportOutcome", "default_into", "import_servers", "servers_json", "source_documents"]


@dataclass(slots=True)
class ImportOutcome:
    """What an import did (or, for a dry run, would do)."""

    added: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def source_documents(source: str, *, env: Mapping[str, str], platform: str, cwd: Path) -> list[Document]:
    """The files `--from` names: a client's files that exist (user, then project), or one file.

    Raises:
        ConfigError: naming the file: none of the client's files exists, or one cannot be read.
    """
    if source in CLIENTS:
        files = client_files(source, env=env, platform=platform, cwd=cwd)
        present = [f for f in files if f.path.exists() or f.path.is_symlink()]
        # In the home folder, the project file is the user file: read it once.
        present = list({os.path.realpath(f.path): f for f in reversed(present)}.values())[::-1]
        if not present:
            title = files[0].client.title
            looked = " nor ".join(str(f.path) for f in files)
            raise ConfigError(f"{title} has no configuration file here (neither {looked})", path=str(files[0].path))
        return [read_document(f.path, f.client) for f in present]
    path = Path(source).expanduser()
    if not path.is_absolute():
        path = cwd / path
    if not path.exists() and not path.is_symlink() and "/" not in source and os.sep not in source:
        raise ConfigError(f"'{source}' is neither a known client ({', '.join(CLIENTS)}) nor a file")
    text = read_client_file(path, title="the client")
    return [parse_document(path, client_for_file(path, text), text)]


def servers_json(into: Path) -> tuple[str, dict[str, Any], str]:
    """servers.json's text, its servers, and the key they are under (new file: empty, none, `mcpServers`)."""
    if not into.exists():
        return "", {}, "mcpServers"
    text = read_client_file(into, title="toolscore")
    try:
        data = jsonc.loads(text) if text.strip() else {}
    except jsonc.JsoncError as exc:
        raise ConfigError(str(exc), path=str(into)) from None
    if not isinstance(data, dict):
        raise ConfigError("the top level must be a JSON object", path=str(into))
    key = "servers" if "servers" in data else "mcpServers"
    servers = data.get(key, {})
    if not isinstance(servers, dict):
        raise ConfigError("must be an object mapping server names to entries", path=str(into), field=key)
    return text, servers, key


def _claude_code_local(document: Document, cwd: Path) -> dict[str, Any]:
    """Claude Code's local scope (its default): `projects[<this folder>].mcpServers` in `~/.claude.json`."""
    projects = document.data.get("projects") if document.client.name == "claude-code" else None
    project = projects.get(str(cwd)) if isinstance(projects, dict) else None
    return project if isinstance(project, dict) else {}


def _valid(item: Imported, into: Path, variables: Mapping[str, str], lines: list[str]) -> bool:
    """Whether servers.json's schema takes the entry; if not, a line says why and it is left out."""
    try:
        parse_config({"mcpServers": {item.name: item.entry}}, source=str(into), env=variables)
    except ConfigError as exc:
        lines.append(f"{item.name}: not imported, servers.json would not take it: {exc}")
        return False
    return True


def import_servers(
    source: str,
    *,
    into: Path,
    dry_run: bool,
    env: Mapping[str, str],
    platform: str,
    cwd: Path,
) -> ImportOutcome:
    """Import `source`'s servers into `into`; see the module docstring.

    Raises:
        ConfigError: naming the file at fault; nothing has been written.
    """
    documents = source_documents(source, env=env, platform=platform, cwd=cwd)
    text, existing, key = servers_json(into)
    env_path = env_file_for(into)
    stored = read_env_file(env_path)
    outcome = ImportOutcome()
    imported: list[Imported] = []
    try:
        home = str(home_dir(env, platform))
    except ConfigError:  # a file given by path needs no home folder; `${userHome}` stays as written
        home = "${userHome}"
    where = Where(folder=str(cwd), home=home)
    for document in documents:
        for data in (document.data, _claude_code_local(document, cwd)):
            try:
                items, notes = read_entries(document.client, data, where)
            except ValueError as exc:
                raise ConfigError(str(exc), path=str(document.path)) from None
            outcome.lines.extend(notes)
            imported.extend(items)
    suffix = source if source in CLIENTS else documents[0].client.name
    merge = merge_servers(existing, imported, suffix=suffix, stored=stored, environ=env)
    outcome.lines.extend(merge.notes)
    variables = {**stored, **merge.secrets, **env}
    added = {
        name: entry
        for name, entry in merge.added.items()
        if _valid(Imported(name, entry), into, variables, outcome.lines)
    }
    used: set[str] = set().union(*(references(e) for e in added.values()))
    secrets = {name: value for name, value in merge.secrets.items() if name in used}
    outcome.added, outcome.secrets = list(added), list(secrets)
    if not added:
        outcome.lines.append(f"nothing to import into {into}")
        return outcome
    try:
        new_text = jsonc.edit_object(text, (key,), dict(added))
    except jsonc.JsoncError as exc:
        raise ConfigError(str(exc), path=str(into)) from None
    env_text = env_new = ""
    if secrets:
        env_text = env_path.read_text(encoding="utf-8") if env_path.exists() else ""
        header = "" if env_text else "Secrets for servers.json's ${NAME} references (toolscore import). Keep mode 600."
        env_new = (env_text.rstrip("\n") + "\n" if env_text.strip() else "") + format_env(secrets, header=header)
    if dry_run:
        outcome.lines.extend(diff(into, text, new_text))
        if secrets:
            masked = format_env(dict.fromkeys(secrets, "***"))
            outcome.lines.extend(diff(env_path, "", masked))
        outcome.lines.append("dry run: nothing written")
        return outcome
    # The env file first: servers.json must never refer to a secret that is not stored yet.
    if secrets:
        write_atomic(env_path, env_new, mode=0o600)
    backup = write_atomic(into, new_text, mode=0o644)
    outcome.lines.append(f"imported {len(added)} server(s) into {into}: {', '.join(added)}")
    if backup is not None:
        outcome.lines.append(f"the previous servers.json is saved as {backup}")
    if secrets:
        outcome.lines.append(
            f"{len(secrets)} secret(s) stored in {env_path} (mode 600), servers.json refers to them: "
            + ", ".join("$" + s for s in secrets)
        )
    return outcome


def default_into(config: Path | None, cwd: Path) -> Path:
    """Where imported servers go: `--into`/`--config`, else `./servers.json` if there, else the user's servers.json."""
    return config if config is not None else default_config_path(cwd)
