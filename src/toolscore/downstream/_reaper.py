"""The gateway's reaper: runs every stdio server, and takes everything each one starts down with it.

    python -I -S _reaper.py GATEWAY_PID CONTROL_FD

One such process runs per gateway (Linux only; it imports nothing outside the standard library
and runs without `site`), started with the first stdio server. The gateway asks it for a server
over `CONTROL_FD`, a `SOCK_SEQPACKET` socket: one message per request, a JSON object (`argv`,
`env`, `cwd`) with the server's stdin, stdout and stderr attached (`SCM_RIGHTS`). For each, the
reaper forks a *server reaper* (a fork: no Python start, its memory shared with this process until
written) and answers `{"pid": ...}` with its pid; when one exits, it sends `{"exit": pid,
"status": ...}` (a wait status). The server reaper:

- starts a session of its own (the gateway's group signals reach it and the server), becomes a
  *child subreaper* (`PR_SET_CHILD_SUBREAPER`): whatever the server starts stays its descendant
  even when the process in between exits or starts a session of its own (a browser, a sandbox,
  `npx`'s node), so it can always find them; and execs the server in a child of its own;
- on SIGUSR1 (the gateway asks for a kill, or this process died: its parent-death signal) kills
  every descendant at once;
- on SIGTERM (the gateway's polite stop after stdin EOF) gives every descendant SIGTERM, then
  SIGKILL after `GRACE` seconds, well before the gateway's own SIGKILL to the group;
- when the server exits by itself, gives what it left behind the same SIGTERM, then SIGKILL;

then exits as the server did (the same status, or the same signal), so the gateway reports the
server's own exit. The server gets a parent-death signal too, should its reaper be killed.

This process has a parent-death signal as well, so it hears of the gateway's death even after a
SIGKILL; then, or when the gateway closes the control socket, it has every server reaper kill its
server and all below it, and exits. It is a child subreaper too, so what a killed server reaper
leaves behind comes here and is killed with the rest.

This file is run as a script, never imported by the gateway: keep it to the standard library.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import selectors
import signal
import socket
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
GRACE = 1.0
"""Seconds descendants get between SIGTERM and SIGKILL; the gateway waits 2 s before its own."""
MAX_REQUEST = 1 << 20
"""The largest request (argv and environment as JSON) the gateway may send."""
_STOPS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP)


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
    if os.WIFSIGNALED(code):
        signum = os.WTERMSIG(code)
        if signum not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot be handled (EINVAL), nor blocked
            signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
        os.kill(os.getpid(), signum)  # the gateway sees the server's own end: "killed by SIGKILL"
    os._exit(os.waitstatus_to_exitcode(code) if os.WIFEXITED(code) else 1)


def serve_one(libc: ctypes.CDLL, parent: int, request: dict[str, object], fds: list[int]) -> None:
    """A server reaper (in a fork of the reaper): run the server, clean up after it, exit as it did."""
    argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
    env = {str(k): str(v) for k, v in request["env"].items()}  # type: ignore[attr-defined]
    cwd = request.get("cwd")
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()  # its own group: the gateway's group signals reach it and the server
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    for signum in _STOPS:
        signal.signal(signum, _raise)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGUSR1, 0, 0, 0)
    if os.getppid() != parent:  # the reaper died before the death signal was set
        os._exit(1)
    server = os.fork()
    if server == 0:
        try:
            for signum in _STOPS:
                signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            for target, fd in enumerate(fds):
                os.dup2(fd, target)  # stdin, stdout, stderr; dup2 leaves them inheritable
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if cwd is not None:
                os.chdir(str(cwd))
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the reaper's own descriptors stay here
            os.execvpe(argv[0], argv, env)
        except BaseException as exc:  # whatever it is, the child must not go on
            os.write(2, f"cannot run {argv[0]}: {exc}\n".encode(errors="replace"))
        os._exit(127)
    # Only the server talks to the gateway: its pipes end when the server's copies close.
    for fd in fds:
        os.close(fd)
    devnull = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1):
        os.dup2(devnull, target)
    status: list[int] = []
    try:
        while not status:
            pid, code = os.waitpid(-1, 0)
            if pid == server:
                status.append(code)
        clean_up(server, status, grace=GRACE)
    except _Stop as stop:
        signal.pthread_sigmask(signal.SIG_BLOCK, list(_STOPS))
        clean_up(server, status, grace=GRACE if stop.signum != signal.SIGUSR1 else 0.0)
    _exit_as(status[0] if status else signal.SIGKILL)


def _send(control: socket.socket, message: dict[str, int]) -> None:
    with contextlib.suppress(OSError):  # the gateway is gone: its death signal follows
        control.send(json.dumps(message).encode())


def _spawn(libc: ctypes.CDLL, control: socket.socket, data: bytes, fds: list[int]) -> int | None:
    """Fork a server reaper for one request; its pid (None: the request was unreadable)."""
    try:
        request = json.loads(data)
        assert len(fds) == 3 and isinstance(request["argv"], list) and request["argv"]
    except (ValueError, KeyError, TypeError, AssertionError):
        for fd in fds:
            os.close(fd)
        return None
    parent = os.getpid()
    try:
        pid = os.fork()
    except OSError:  # out of processes or memory: this server fails to start, the others go on
        for fd in fds:
            os.close(fd)
        return None
    if pid == 0:
        try:
            control.close()
            serve_one(libc, parent, request, fds)
        finally:
            os._exit(1)
    for fd in fds:  # the server's copies alone keep its pipes open
        os.close(fd)
    return pid


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        sys.stderr.write("usage: _reaper.py GATEWAY_PID CONTROL_FD\n")
        os._exit(2)
    gateway, control = int(argv[1]), socket.socket(fileno=int(argv[2]))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    for signum in _STOPS:
        signal.signal(signum, _raise)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGUSR1, 0, 0, 0)
    if os.getppid() != gateway:  # the gateway died before the death signal was set
        os._exit(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1):
        os.dup2(devnull, target)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # wakes the select below
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    servers: set[int] = set()
    try:
        while True:
            for key, _ in selector.select():
                if key.fileobj is control:
                    try:
                        data, fds, _flags, _addr = socket.recv_fds(control, MAX_REQUEST, 3)
                    except OSError:  # reset: the gateway exited with reports unread
                        data, fds = b"", []
                    if not data:
                        raise _Stop(signal.SIGUSR1)  # the gateway closed the socket: it is ending
                    pid = _spawn(libc, control, data, fds)
                    if pid is not None:
                        servers.add(pid)
                    _send(control, {"pid": pid if pid is not None else -1})
                else:
                    with contextlib.suppress(OSError):
                        os.read(wake_read, 512)
            while True:  # exited children: server reapers are reported, orphans only collected
                try:
                    pid, code = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                if pid in servers:
                    servers.discard(pid)
                    _send(control, {"exit": pid, "status": code})
    except _Stop:
        signal.pthread_sigmask(signal.SIG_BLOCK, list(_STOPS))
        for pid in servers:  # each kills its server and all below it
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGUSR1)
        deadline = time.monotonic() + GRACE
        while servers and time.monotonic() < deadline:
            try:
                pid, _code = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            servers.discard(pid)
            if pid == 0:
                time.sleep(0.005)
        clean_up(-1, [], grace=0.0)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
