"""`toolscore install`: set up the servers servers.json lists, from their `install` hints.

Each server gets its own environment under the servers prefix (`${TOOLSCORE_SERVERS}`): a venv
per Python server (never shared with toolscore's: several servers pin `mcp<2`), an npm folder per
Node server (launched by path: `npx -y` would ask the registry at every start), Debian packages
when run as root, its state directories, then its pre-warm commands. A stamp per server records
what was installed, so a second run only checks.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from toolscore.config import Config, InstallHints, ServerConfig

__all__ = ["InstallOutcome", "install_servers"]

Log = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class InstallOutcome:
    """What happened to one server."""

    server: str
    status: str
    """`installed`, `up to date`, `failed`, or `nothing to install`."""
    seconds: float = 0.0
    megabytes: float = 0.0
    message: str = ""


APT_LOCK_WAIT_SECONDS = 120
"""How long `apt-get` waits for the system package lock another package manager holds."""


class _Failed(Exception):
    pass


def _run(argv: Sequence[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    try:
        proc = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise _Failed(f"{argv[0]}: {exc.strerror}") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise _Failed(f"`{' '.join(argv[:4])} …` exited {proc.returncode}: " + " | ".join(tail))


def _size_mb(paths: Sequence[Path]) -> float:
    total = 0
    for root in paths:
        for dirpath, _, files in os.walk(root):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(dirpath, name)).st_size
    return round(total / 1e6, 1)


def _missing_debs(packages: Sequence[str]) -> list[str]:
    missing = []
    for package in packages:
        proc = subprocess.run(["dpkg", "-s", package], capture_output=True, text=True, check=False)
        if proc.returncode != 0 or "Status: install ok installed" not in proc.stdout:
            missing.append(package)
    return missing


def _apt(packages: Sequence[str], log: Log) -> None:
    missing = _missing_debs(packages)
    if not missing:
        return
    if os.geteuid() != 0:
        raise _Failed(
            f"needs Debian packages: run as root, or install them yourself: apt-get install {' '.join(missing)}"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # Another package manager (unattended-upgrades, a second apt) may hold the lock: wait for it,
    # bounded, instead of failing at once.
    wait = ["-o", f"DPkg::Lock::Timeout={APT_LOCK_WAIT_SECONDS}"]
    command = ["apt-get", *wait, "install", "-y", "--no-install-recommends", *missing]
    log(
        f"  apt-get install {' '.join(missing)}"
        f" (waits up to {APT_LOCK_WAIT_SECONDS} s while another package manager holds the lock)"
    )
    try:
        _run(command, env=env)
    except _Failed:
        _run(["apt-get", *wait, "update"], env=env)  # a fresh machine has no package lists yet
        _run(command, env=env)


def _venv_base(venv: Path) -> Path | None:
    """The folder of the Python a venv was made from (`home` in its pyvenv.cfg), or None."""
    try:
        lines = (venv / "pyvenv.cfg").read_text().splitlines()
    except OSError:
        return None
    home = next((line.split("=", 1)[1].strip() for line in lines if line.split("=", 1)[0].strip() == "home"), None)
    return Path(home) if home else None


def _install_one(server: ServerConfig, hints: InstallHints, prefix: Path, log: Log) -> list[Path]:
    made: list[Path] = []
    prefix.mkdir(parents=True, exist_ok=True)  # `run` steps start in it
    if hints.apt:
        _apt(hints.apt, log)
    if hints.pip:
        venv = prefix / "venvs" / server.name
        python = hints.python or sys.executable
        if _venv_base(venv) != Path(python).parent:
            # Missing, or made from another Python: (re)made from the one asked for.
            _run([python, "-m", "venv", "--clear", str(venv)])
        log(f"  pip install {' '.join(hints.pip)}")
        _run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *hints.pip]
        )
        made.append(venv)
    if hints.npm:
        if shutil.which("npm") is None:
            raise _Failed("needs npm (Node.js) to install " + " ".join(hints.npm))
        folder = prefix / "npm" / server.name
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / "package.json").exists():
            (folder / "package.json").write_text('{"name": "toolscore-downstream", "private": true}\n')
        log(f"  npm install {' '.join(hints.npm)}")
        env = {**os.environ, "PUPPETEER_SKIP_DOWNLOAD": "1"}
        _run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", *hints.npm], cwd=folder, env=env)
        made.append(folder)
    for directory in hints.dirs:
        (prefix / directory).mkdir(parents=True, exist_ok=True)
    for command in hints.run:
        log(f"  {' '.join(command)[:100]}")
        _run(command, cwd=prefix)
    return made


def install_servers(
    config: Config, *, only: Sequence[str] = (), force: bool = False, log: Log = print
) -> list[InstallOutcome]:
    """Install every enabled server (or `only` these) that has install hints."""
    prefix = config.servers_prefix
    stamps = prefix / ".installed"
    outcomes: list[InstallOutcome] = []
    for server in config.enabled_servers:
        if only and server.name not in only:
            continue
        hints = server.install
        if hints is None:
            outcomes.append(InstallOutcome(server.name, "nothing to install"))
            continue
        digest = hashlib.sha256(hints.model_dump_json().encode()).hexdigest()
        stamp = stamps / f"{server.name}.json"
        if not force and stamp.exists() and json.loads(stamp.read_text()).get("hints") == digest:
            outcomes.append(InstallOutcome(server.name, "up to date"))
            continue
        log(f"{server.name}:")
        began = time.monotonic()
        try:
            made = _install_one(server, hints, prefix, log)
        except _Failed as exc:
            outcomes.append(InstallOutcome(server.name, "failed", time.monotonic() - began, message=str(exc)))
            continue
        seconds = time.monotonic() - began
        size = _size_mb(made)
        stamps.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps({"hints": digest, "seconds": round(seconds, 1), "megabytes": size}) + "\n")
        outcomes.append(InstallOutcome(server.name, "installed", seconds, size))
    return outcomes
