"""The env file beside servers.json (`servers.env`): `NAME=value` lines that `${NAME}` reads; pure.

`toolscore import` moves the secrets it finds in a client's server entries here (mode 600), so
servers.json holds only `${NAME}` references and can be shared. A value is taken as written up to
the end of its line; one that starts with `"` is a JSON string (how a value with a newline or
surrounding spaces is written). Blank lines and `#` comments are skipped. The process environment
wins over the file, so a variable set for one run overrides the stored one.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from toolscore.errors import ConfigError

__all__ = ["ENV_FILE_SUFFIX", "MAX_ENV_FILE_BYTES", "env_file_for", "format_env", "parse_env", "read_env_file"]

ENV_FILE_SUFFIX = ".env"
"""`servers.json` keeps its secrets in `servers.env`."""
MAX_ENV_FILE_BYTES = 1024 * 1024
"""An env file larger than this is refused rather than read."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_file_for(config: Path) -> Path:
    """The env file that belongs to a config file: same folder, same stem, `.env`."""
    return config.with_suffix(ENV_FILE_SUFFIX)


def parse_env(text: str, *, source: str) -> dict[str, str]:
    """`NAME=value` lines into a mapping; the error names the file and line, never a value."""
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, equals, value = stripped.partition("=")
        name = name.strip()
        if not equals or _NAME.fullmatch(name) is None:
            raise ConfigError(f"line {number}: expected NAME=value (a name of A-Z, a-z, 0-9 and _)", path=source)
        value = value.strip()
        if value.startswith('"'):
            try:
                decoded = json.loads(value)
            except ValueError:
                decoded = None
            if not isinstance(decoded, str):
                raise ConfigError(f'line {number}: a value starting with " must be one JSON string', path=source)
            value = decoded
        values[name] = value
    return values


def _plain(value: str) -> bool:
    return value == value.strip() and value.isprintable() and not value.startswith('"')


def format_env(values: Mapping[str, str], *, header: str = "") -> str:
    """The file's text for `values`, in their order; values that would not survive a plain line are quoted."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    for name, value in values.items():
        if _NAME.fullmatch(name) is None:
            raise ValueError(f"{name!r} is not a variable name")
        lines.append(f"{name}={value if _plain(value) else json.dumps(value)}")
    return "\n".join(lines) + "\n"


def read_env_file(path: Path) -> dict[str, str]:
    """The variables of `path`, or none when there is no such file.

    Raises:
        ConfigError: the file is open to group or others, too large, not UTF-8 or malformed.
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read the env file ({exc.strerror})", path=str(path)) from None
    mode = stat.S_IMODE(info.st_mode)
    # It holds secrets: like ssh with private keys, one others can read is refused, not used.
    if os.name == "posix" and mode & 0o077:
        raise ConfigError(f"the env file is open to group or others (mode {mode:o}): chmod 600 it", path=str(path))
    if info.st_size > MAX_ENV_FILE_BYTES:
        raise ConfigError(f"the env file is larger than {MAX_ENV_FILE_BYTES} bytes", path=str(path))
    try:
        text = path.read_bytes()[: MAX_ENV_FILE_BYTES + 1].decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the env file ({exc.strerror})", path=str(path)) from None
    except UnicodeDecodeError:
        raise ConfigError("the env file is not UTF-8 text", path=str(path)) from None
    return parse_env(text, source=str(path))
