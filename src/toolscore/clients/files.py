"""Reading a client's file safely, and writing any file atomically after a timestamped backup.

A write goes to a new file in the same folder, is flushed to disk, takes the old file's mode and
replaces it in one `rename`, so a crash leaves the old file or the new one, never half of each.
Before that, the old file is copied beside itself as `<name>.<UTC time>.toolscore-backup` (same
mode: it may hold secrets); `restore_last` puts the newest one back and removes it, so each undo
goes one write further back. A symlinked file (a dotfiles folder) is written through to its target.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from toolscore.errors import ConfigError

__all__ = ["BACKUP_SUFFIX", "MAX_CLIENT_FILE_BYTES", "backups", "read_client_file", "restore_last", "write_atomic"]

MAX_CLIENT_FILE_BYTES = 64 * 1024 * 1024
"""A client file larger than this is refused (Claude Code's `~/.claude.json` keeps history, so allow some)."""
BACKUP_SUFFIX = ".toolscore-backup"


def read_client_file(path: Path, *, title: str) -> str:
    """The text of a client's file.

    Raises:
        ConfigError: naming the file: it is missing, not a file, unreadable, too large or not UTF-8.
    """
    where = str(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"{title}'s file does not exist", path=where) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {title}'s file ({exc.strerror})", path=where) from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{title}'s file is not a regular file", path=where)
    if info.st_size > MAX_CLIENT_FILE_BYTES:
        raise ConfigError(f"{title}'s file is larger than {MAX_CLIENT_FILE_BYTES // (1024 * 1024)} MiB", path=where)
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_CLIENT_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {title}'s file ({exc.strerror})", path=where) from None
    if len(data) > MAX_CLIENT_FILE_BYTES:
        raise ConfigError(f"{title}'s file is larger than {MAX_CLIENT_FILE_BYTES // (1024 * 1024)} MiB", path=where)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{title}'s file is not UTF-8 text (byte {exc.start})", path=where) from None


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")


def backups(path: Path) -> list[Path]:
    """The backups of `path`, oldest first."""
    target = Path(os.path.realpath(path))
    prefix = target.name + "."
    try:
        names = os.listdir(target.parent)
    except OSError:
        return []
    found = [n for n in names if n.startswith(prefix) and n.endswith(BACKUP_SUFFIX)]
    return [target.parent / n for n in sorted(found)]  # the UTC stamps sort as times


def _write_new(folder: Path, name: str, data: bytes, mode: int) -> Path:
    fd, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(temp, mode)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return Path(temp)


def _sync_folder(folder: Path) -> None:
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str, *, mode: int = 0o600, backup: bool = True) -> Path | None:
    """Replace `path` with `text` in one rename; the old file is first copied to a backup, returned.

    A new file gets `mode`; an existing one keeps its own mode.

    Raises:
        ConfigError: naming the file, when it cannot be written.
    """
    target = Path(os.path.realpath(path))
    saved: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            old = target.read_bytes()
            mode = stat.S_IMODE(target.stat().st_mode)
        except FileNotFoundError:
            old = None
        if old is not None and backup:
            saved = _write_new(target.parent, target.name, old, mode)
            final = target.with_name(f"{target.name}.{_stamp()}{BACKUP_SUFFIX}")
            os.replace(saved, final)
            saved = final
        temp = _write_new(target.parent, target.name, text.encode("utf-8"), mode)
        os.replace(temp, target)
        _sync_folder(target.parent)
    except OSError as exc:
        raise ConfigError(f"cannot write the file ({exc.strerror})", path=str(path)) from None
    return saved


def restore_last(path: Path) -> Path | None:
    """Put the newest backup of `path` back in its place and remove it; None when there is none.

    Raises:
        ConfigError: naming the file, when it cannot be written.
    """
    found = backups(path)
    if not found:
        return None
    last = found[-1]
    try:
        data = last.read_bytes()
        mode = stat.S_IMODE(last.stat().st_mode)
        target = Path(os.path.realpath(path))
        temp = _write_new(target.parent, target.name, data, mode)
        os.replace(temp, target)
        last.unlink()
        _sync_folder(target.parent)
    except OSError as exc:
        raise ConfigError(f"cannot restore the backup ({exc.strerror})", path=str(last)) from None
    return last
