"""`toolscore register`: toolscore's entry written into a client's file, and `--undo`.

The entry starts this installation by absolute path (a client may start servers with a shorter
`PATH` than a shell's) with an absolute `--config`, or, for `--transport http`, points at the
HTTP front with the bearer token as a reference to `$TOOLSCORE_TOKEN` in the client's own syntax.
`--replace-imported` also removes the client's entries that servers.json now holds (same command,
arguments and address), so each server runs once, behind toolscore.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from toolscore.clients.documents import diff, edit_servers, read_document
from toolscore.clients.entries import TOKEN_VAR, TOOLSCORE, is_toolscore, normalized, toolscore_entry
from toolscore.clients.files import restore_last, write_atomic
from toolscore.clients.importing import servers_json
from toolscore.clients.locations import CLIENTS, client_files
from toolscore.clients.merge import same_server
from toolscore.config import load_config
from toolscore.errors import ConfigError

__all__ = ["DEFAULT_URL", "Registration", "register", "this_installation", "undo"]

DEFAULT_URL = "http://127.0.0.1:8765/mcp"
"""Where `toolscore serve --transport http` listens by default."""
_KEPT = ("env", "cwd")
"""Keys of an earlier stdio entry of toolscore's that registering again keeps."""


@dataclass(slots=True)
class Registration:
    """What a registration did (or would do), as lines for the person."""

    lines: list[str] = field(default_factory=list)
    changed: bool = False


def this_installation(platform: str = sys.platform) -> list[str]:
    """The command that starts this installation of toolscore: its console script, else `python -m toolscore`."""
    folder = Path(sys.executable).absolute().parent
    script = folder / ("toolscore.exe" if platform == "win32" else "toolscore")
    return [str(script)] if script.is_file() else [str(Path(sys.executable).absolute()), "-m", "toolscore"]


def target_file(client: str, file: Path | None, *, env: Mapping[str, str], platform: str, cwd: Path) -> Path:
    """The file `register` writes: `--file`, else the client's user file."""
    return file if file is not None else client_files(client, env=env, platform=platform, cwd=cwd)[0].path


def register(
    client_name: str,
    *,
    config: Path,
    transport: Literal["stdio", "http"],
    url: str | None,
    replace_imported: bool,
    dry_run: bool,
    file: Path | None,
    env: Mapping[str, str],
    platform: str,
    cwd: Path,
) -> Registration:
    """Write toolscore's entry into the client's file; see the module docstring.

    Raises:
        ConfigError: naming the file at fault (servers.json or the client's); nothing has been written.
    """
    client = CLIENTS[client_name]
    path = target_file(client_name, file, env=env, platform=platform, cwd=cwd)
    config = config.absolute()
    if not config.exists():
        raise ConfigError(
            f"there is no servers.json here for {client.title} to start: run `toolscore import --from {client_name}` "
            "first, or pass --config",
            path=str(config),
        )
    loaded = load_config(config)  # a client pointed at a servers.json that does not load would show nothing
    token = transport == "http" and (TOKEN_VAR in env or loaded.settings.http.token_file is not None)
    try:
        entry = toolscore_entry(
            client,
            command=this_installation(platform),
            config=str(config),
            url=(url or DEFAULT_URL) if transport == "http" else None,
            token=token,
        )
    except ValueError as exc:
        raise ConfigError(str(exc), path=str(path)) from None
    document = read_document(path, client, missing_ok=True)
    outcome = Registration()
    ours = {name: raw for name, raw in document.servers.items() if is_toolscore(name, raw)}
    changes: dict[str, Any] = dict.fromkeys(n for n in ours if n != TOOLSCORE)  # an older entry of ours goes
    if transport == "stdio":
        # What the person added to an earlier entry (TOOLSCORE_SEARCH_ROOT, a working folder) stays.
        for key in _KEPT:
            kept = next((raw[key] for raw in ours.values() if key in raw), None)
            if kept is not None:
                entry[key] = kept
    changes[TOOLSCORE] = entry
    if replace_imported:
        held = servers_json(config)[1]  # as written: references unexpanded
        for name, raw in document.servers.items():
            if is_toolscore(name, raw):
                continue
            mine = normalized(client, name, raw).entry
            if any(same_server(mine, theirs) for theirs in held.values() if isinstance(theirs, dict)):
                changes[name] = None
                outcome.lines.append(f"{name}: removed from {client.title}, toolscore serves it now")
            else:
                outcome.lines.append(
                    f"{name}: kept, it is not in servers.json (toolscore import --from {client_name} first)"
                )
    new_text = edit_servers(document, changes)
    if new_text == document.text:
        outcome.lines.append(f"{client.title} already starts toolscore this way ({path}): nothing to change")
        return outcome
    outcome.changed = True
    if dry_run:
        outcome.lines.extend(diff(path, document.text, new_text))
        outcome.lines.append("dry run: nothing written")
        return outcome
    backup = write_atomic(path, new_text, mode=0o600)
    outcome.lines.append(f"registered toolscore in {path}")
    if backup is not None:
        outcome.lines.append(f"the previous file is saved as {backup}")
        outcome.lines.append(f"to put it back: toolscore register --undo --client {client_name}")
    if token:
        outcome.lines.append(f"{client.title} must have ${TOKEN_VAR} set in its environment to send the token")
    outcome.lines.append(f"Next: restart {client.title} (quit it fully, then open it again) so it starts toolscore.")
    return outcome


def undo(client_name: str, *, file: Path | None, env: Mapping[str, str], platform: str, cwd: Path) -> Registration:
    """Restore the newest backup of the client's file.

    Raises:
        ConfigError: naming the file, when there is no backup or it cannot be restored.
    """
    client = CLIENTS[client_name]
    path = target_file(client_name, file, env=env, platform=platform, cwd=cwd)
    restored = restore_last(path)
    if restored is None:
        raise ConfigError("no backup of this file to restore (toolscore register writes one first)", path=str(path))
    return Registration(
        [f"restored {path} from {restored}", f"Next: restart {client.title} (quit it fully, then open it again)."],
        changed=True,
    )
