"""Run a stdio server as this process's child, and take everything it starts down with it.

    python -I -S _reaper.py GATEWAY_PID -- COMMAND [ARGS...]

The gateway starts every stdio server through this small process (Linux only; it imports nothing
outside the standard library and runs without `site`). It is a *child subreaper*
(`PR_SET_CHILD_SUBREAPER`): whatever the server starts stays its descendant even when the
process in between exits or starts a session of its own (a browser, a sandbox, `npx`'s node), so
it can always find them. It has a parent-death signal, so it hears of the gateway's death even
after a SIGKILL. Then:

- the gateway dies (SIGUSR1 by parent-death signal), or asks for a kill (SIGUSR1): every
  descendant is killed at once;
- the gateway asks politely (SIGTERM, the stop after stdin EOF): every descendant gets SIGTERM,
  then SIGKILL after `GRACE` seconds, well before the gateway's own SIGKILL to the group;
- the server exits by itself: what it left behind gets the same SIGTERM, then SIGKILL.

Then it exits as the server did (the same status, or the same signal), so the gateway reports the
server's own exit. The server gets a parent-death signal too, should this process be killed.

This file is run as a script, never imported by the gateway: keep it to the standard library.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
GRACE = 1.0
"""Seconds descendants get between SIGTERM and SIGKILL; the gateway waits 2 s before its own."""


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        self.signum = signum


def _raise(signum: int, frame: object) -> None:
    raise _Stop(signum)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return found


def descendants() -> list[int]:
    """Every live process below this one."""
    found: list[int] = []
    stack = [os.getpid()]
    while stack:
        for child in _children(stack.pop()):
            found.append(child)
            stack.append(child)
    return found


def _signal_all(signum: int) -> int:
    pids = descendants()
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)
    return len(pids)


def _reap(server: int, status: list[int]) -> bool:
    """Collect exited children without blocking; False once there are none left."""
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True
        if pid == server:
            status.append(code)


def clean_up(server: int, status: list[int], *, grace: float) -> None:
    """SIGTERM (with `grace`), then SIGKILL every descendant until none is left."""
    if grace > 0 and _signal_all(signal.SIGTERM):
        deadline = time.monotonic() + grace
        while _reap(server, status) and time.monotonic() < deadline:
            time.sleep(0.01)
    # A killed process cannot fork; its children come to this process: repeat until none.
    while _signal_all(signal.SIGKILL) or _reap(server, status):
        time.sleep(0.005)
        _reap(server, status)


def _exit_as(code: int) -> None:
    sys.stdout.flush()
    if os.WIFSIGNALED(code):
        signum = os.WTERMSIG(code)
        if signum not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot be handled (EINVAL), nor blocked
            signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
        os.kill(os.getpid(), signum)  # the gateway sees the server's own end: "killed by SIGKILL"
    os._exit(os.waitstatus_to_exitcode(code) if os.WIFEXITED(code) else 1)


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: _reaper.py GATEWAY_PID -- COMMAND [ARGS...]\n")
        os._exit(2)
    gateway, command = int(argv[1]), argv[3:]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    for signum in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _raise)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGUSR1, 0, 0, 0)
    if os.getppid() != gateway:  # the gateway died before the death signal was set
        os._exit(1)
    server = os.fork()
    if server == 0:
        try:
            for signum in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP):
                signal.signal(signum, signal.SIG_DFL)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            os.execvp(command[0], command)
        except BaseException as exc:  # whatever it is, the child must not go on
            os.write(2, f"cannot run {command[0]}: {exc}\n".encode(errors="replace"))
        os._exit(127)
    # Only the server talks to the gateway: its pipes end when the server's copies close.
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    status: list[int] = []
    try:
        while not status:
            pid, code = os.waitpid(-1, 0)
            if pid == server:
                status.append(code)
        clean_up(server, status, grace=GRACE)
    except _Stop as stop:
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP])
        clean_up(server, status, grace=GRACE if stop.signum != signal.SIGUSR1 else 0.0)
    _exit_as(status[0] if status else signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv)
