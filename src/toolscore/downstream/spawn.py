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

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from toolscore.config import ServerConfig

__all__ = [
    "DEFAULT_ENV_KEYS",
    "USE_REAPER",
    "Process",
    "ReapedProcess",
    "abandon_early",
    "open_errlog",
    "start",
    "start_early",
    "take_errlog",
]

DEFAULT_ENV_KEYS = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
"""What a child inherits from the gateway's environment (as the SDK does); `env` adds to it."""
_REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_reaper.py")
USE_REAPER = sys.platform == "linux" and os.path.isdir("/proc/self/task")
"""Whether servers run under `_reaper.py` (see `child`)."""
_CLOSE_SECONDS = 2.0
"""How long the interpreter's exit waits for the reaper to end once its socket is closed."""
_ANSWER_SECONDS = 30.0
"""How long a start waits for the reaper's answer (a fork; the first also waits for its Python start)."""


class _Reaper:
    """The gateway's one reaper process (`_reaper.py`) and the socket that asks it for servers."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", _REAPER, str(os.getpid()), str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=[theirs.fileno()],
                start_new_session=True,  # a Ctrl-C to the gateway's group is the gateway's to handle
            )
        self._control = ours
        self._answers: list[int] = []
        self._exits: dict[int, int] = {}
        self._lost = False

    @property
    def alive(self) -> bool:
        return not self._lost and self._process.poll() is None

    def _receive(self, timeout: float) -> bool:
        """Read one message, waiting up to `timeout` seconds (0: not at all); False if none came."""
        self._control.settimeout(timeout)
        try:
            data = self._control.recv(4096)
        except (BlockingIOError, TimeoutError):
            return False
        except OSError:
            data = b""
        if not data:
            self._lost = True  # it died: its servers' reapers killed their servers (parent-death signal)
            return False
        message = json.loads(data)
        if "exit" in message:
            self._exits[int(message["exit"])] = int(message["status"])
        else:
            self._answers.append(int(message["pid"]))
        return True

    def close(self) -> None:
        """Close the socket, which ends the reaper (and whatever of its servers is left), and collect
        it for a moment, so that it does not outlive the gateway unwaited."""
        self._control.close()
        with suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=_CLOSE_SECONDS)

    def start(self, argv: list[str], env: Mapping[str, str], cwd: str | None, fds: list[int]) -> int:
        """Have the reaper start `argv` with `fds` as its stdin, stdout and stderr; its pid."""
        request = json.dumps({"argv": argv, "env": dict(env), "cwd": cwd}).encode()
        self._control.settimeout(_ANSWER_SECONDS)  # `exit_status` may have left it non-blocking
        socket.send_fds(self._control, [request], fds)
        deadline = time.monotonic() + _ANSWER_SECONDS
        while not self._answers:
            left = deadline - time.monotonic()
            if self._lost or left <= 0:
                raise OSError(f"the reaper did not start {argv[0]}")
            self._receive(left)
        pid = self._answers.pop(0)
        if pid < 0:
            raise OSError(f"the reaper could not start {argv[0]}")
        return pid

    def exit_status(self, pid: int, timeout: float = 0) -> int | None:
        """Process `pid`'s wait status once the reaper has reported its exit, else None."""
        deadline = time.monotonic() + timeout
        while pid not in self._exits and not self._lost:
            if not self._receive(max(0.0, deadline - time.monotonic())) and time.monotonic() >= deadline:
                break
        if pid in self._exits:
            return self._exits.pop(pid)
        return signal.SIGKILL if self._lost else None  # a lost reaper's servers were killed with it


_shared: _Reaper | None = None


def _reaper() -> _Reaper:
    """The live reaper, started on first need (and again should it have died)."""
    global _shared
    if _shared is None or not _shared.alive:
        if _shared is None:
            atexit.register(_close_reaper)
        _shared = _Reaper()
    return _shared


def _close_reaper() -> None:
    """At the interpreter's exit: the reaper ends with the gateway's process (`_Reaper.close`)."""
    if _shared is not None:
        _shared.close()


class ReapedProcess:
    """A server the reaper runs: what `child` uses of a `subprocess.Popen`.

    `pid` is its server reaper's (the process the gateway signals); `returncode` is the server's
    own exit, which that reaper exits with.
    """

    def __init__(self, pid: int, stdin: IO[bytes], stdout: IO[bytes], reaper: _Reaper) -> None:
        self.pid = pid
        self.stdin: IO[bytes] | None = stdin
        self.stdout: IO[bytes] | None = stdout
        self.returncode: int | None = None
        self._reaper = reaper

    def poll(self) -> int | None:
        """The exit status once it has exited (negative: killed by that signal), else None."""
        if self.returncode is None and (status := self._reaper.exit_status(self.pid)) is not None:
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit; `subprocess.TimeoutExpired` after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            left = 3600.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            if (status := self._reaper.exit_status(self.pid, left)) is not None:
                self.returncode = os.waitstatus_to_exitcode(status)
        return code


Process = subprocess.Popen[bytes] | ReapedProcess
"""A started server: under the reaper (Linux) or a plain child."""

_Key = tuple[str, tuple[str, ...], tuple[tuple[str, str], ...], str | None]


_started_at: dict[int, float] = {}
"""When `start` started each process not yet connected to, by pid."""
_early: dict[_Key, Process] = {}
"""Servers started before the hub asked for them, by what `start` is asked to run."""
_logs: dict[str, tuple[IO[str], int]] = {}
"""Their log files by server name, and where the server's stderr starts in each (for the exit report)."""


def _key(command: str, args: Sequence[str], env: Mapping[str, str] | None, cwd: str | None) -> _Key:
    return command, tuple(args), tuple(sorted((env or {}).items())), cwd


def start(
    command: str, args: Sequence[str], env: Mapping[str, str] | None, cwd: str | None, errlog: IO[str] | None
) -> Process:
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
    if cwd is not None and not os.path.isdir(cwd):
        raise FileNotFoundError(2, "no such directory", cwd)
    began = time.perf_counter()
    if USE_REAPER:
        reaped = _start_reaped(argv, environment, cwd, errlog)
        _started_at[reaped.pid] = began
        return reaped
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


def _start_reaped(argv: list[str], env: Mapping[str, str], cwd: str | None, errlog: IO[str] | None) -> ReapedProcess:
    """Start `argv` under the reaper, on two new pipes (and `errlog`, or this process's stderr)."""
    stdin_read, stdin_write = os.pipe()
    stdout_read, stdout_write = os.pipe()
    reaper = _reaper()
    try:
        pid = reaper.start(argv, env, cwd, [stdin_read, stdout_write, errlog.fileno() if errlog is not None else 2])
    except OSError:
        for fd in (stdin_write, stdout_read):
            os.close(fd)
        raise
    finally:
        for fd in (stdin_read, stdout_write):  # the server's ends: its copies alone keep the pipes open
            os.close(fd)
    return ReapedProcess(pid, open(stdin_write, "wb"), open(stdout_read, "rb"), reaper)


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
