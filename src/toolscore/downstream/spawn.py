"""Starting a stdio server's process, and starting them all before the gateway has imported the rest.

A Python MCP server takes about as long to import the SDK as the gateway does. Started in
sequence (the gateway imports, then spawns, then the server imports), a cold start costs both;
started first, the two imports overlap. So `toolscore serve` reads the config, calls `start_early`
for every stdio server, and only then imports the SDK and the rest of the gateway. When the
hub's first connection to a server spawns the same command (`start`), it takes the process
already running instead of forking another; `StdioTransport` takes the log file it writes to.

This module imports the standard library only, so that it runs before anything heavy.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from toolscore.config import ServerConfig

__all__ = ["DEFAULT_ENV_KEYS", "USE_REAPER", "abandon_early", "open_errlog", "start", "start_early", "take_errlog"]

DEFAULT_ENV_KEYS = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
"""What a child inherits from the gateway's environment (as the SDK does); `env` adds to it."""
_REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_reaper.py")
USE_REAPER = sys.platform == "linux" and os.path.isdir("/proc/self/task")
"""Whether servers run under `_reaper.py` (see `child`)."""

_Key = tuple[str, tuple[str, ...], tuple[tuple[str, str], ...], str | None]


_started_at: dict[int, float] = {}
"""When `start` started each process not yet connected to, by pid."""
_early: dict[_Key, subprocess.Popen[bytes]] = {}
"""Servers started before the hub asked for them, by what `start` is asked to run."""
_logs: dict[str, tuple[IO[str], int]] = {}
"""Their log files by server name, and where the server's stderr starts in each (for the exit report)."""


def _key(command: str, args: Sequence[str], env: Mapping[str, str] | None, cwd: str | None) -> _Key:
    return command, tuple(args), tuple(sorted((env or {}).items())), cwd


def start(
    command: str, args: Sequence[str], env: Mapping[str, str] | None, cwd: str | None, errlog: IO[str] | None
) -> subprocess.Popen[bytes]:
    """fork/exec, synchronously: it takes a millisecond and happens once per connection.

    The same command started early (`start_early`) and not yet taken is returned instead; its
    stderr already goes to the same log file.

    Raises:
        OSError: the command is not found or cannot be started.
    """
    waiting = _early.pop(_key(command, args, env, cwd), None)
    if waiting is not None:
        return waiting
    environment = {k: os.environ[k] for k in DEFAULT_ENV_KEYS if k in os.environ} | dict(env or {})
    argv = [command, *args]
    # Under the reaper a missing command would only show as an exit status: say it here.
    if "/" in command:
        path = command if os.path.isabs(command) else os.path.join(cwd or ".", command)
        found: str | None = path if os.access(path, os.X_OK) and os.path.isfile(path) else None
    else:
        found = shutil.which(command, path=environment.get("PATH"))
    if found is None:
        raise FileNotFoundError(2, "command not found", command)
    if USE_REAPER:
        argv = [sys.executable, "-I", "-S", _REAPER, str(os.getpid()), "--", *argv]
    began = time.perf_counter()
    popen = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=errlog if errlog is not None else None,
        env=environment,
        cwd=cwd,
        start_new_session=True,
    )
    _started_at[popen.pid] = began
    return popen


def take_started_at(pid: int) -> float | None:
    """When `start` started process `pid` (`time.perf_counter()`), once; None for another process.

    A server started early has part of its start-up behind it when its first connection begins:
    its start time counts from here, so `check`, `/metrics` and the console agree whichever way
    it was started.
    """
    return _started_at.pop(pid, None)


def open_errlog(log_dir: Path | None, name: str) -> IO[str] | None:
    """The server's log file, `<log_dir>/<name>.log`, opened for appending (None: stderr is the gateway's)."""
    if log_dir is None:
        return None
    log_dir.mkdir(parents=True, exist_ok=True)
    # Line-buffered append: the child writes to the file descriptor directly.
    fh = open(log_dir / f"{name}.log", "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - the transport closes it
    fh.write(f"--- toolscore: starting '{name}' (pid {os.getpid()}) ---\n")
    return fh


def start_early(servers: Iterable[ServerConfig], log_dir: Path | None) -> None:
    """Start every stdio server in `servers` now, for the hub's first connection to take.

    A server that cannot be started is left alone (its log is open: the hub's own attempt
    reports why there), and so is one with the same command, arguments, environment and
    directory as another: the hub's first connection to either could take the other's process.
    """
    for server in servers:
        if server.transport != "stdio" or server.command is None:
            continue
        key = _key(server.command, server.args, server.env, server.cwd)
        if key in _early:
            continue
        errlog = open_errlog(log_dir, server.name)
        if errlog is not None:
            errlog.flush()
            _logs[server.name] = errlog, os.fstat(errlog.fileno()).st_size
        with suppress(OSError):
            _early[key] = start(server.command, server.args, server.env, server.cwd, errlog)


def take_errlog(server: ServerConfig) -> tuple[IO[str], int] | None:
    """The log file `start_early` opened for `server`, and where the server's stderr starts in it.

    The transport owns it from now on; the process stays for `start` to hand over.
    """
    return _logs.pop(server.name, None)


def abandon_early() -> None:
    """Kill what was started early and never taken (the gateway stopped before connecting)."""
    for popen in _early.values():
        # The reaper takes SIGUSR1 as "kill everything"; without it, the process group.
        with suppress(ProcessLookupError, PermissionError):
            if USE_REAPER:
                os.kill(popen.pid, signal.SIGUSR1)
            else:
                os.killpg(popen.pid, signal.SIGKILL)
        for pipe in (popen.stdin, popen.stdout):
            if pipe is not None:
                pipe.close()
        with suppress(subprocess.TimeoutExpired):
            popen.wait(5)
    for errlog, _ in _logs.values():
        errlog.close()
    _early.clear()
    _logs.clear()
