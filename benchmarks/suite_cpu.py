"""The CPU a test file costs, every process it starts counted: one pytest run per file, in turn.

    .venv/bin/python benchmarks/suite_cpu.py tests/security/test_exposure.py tests/test_cli.py ...
    .venv/bin/python benchmarks/suite_cpu.py --pytest-args="-m e2e" tests/front/test_fast.py

`/usr/bin/time` counts a process's children only once they are waited for. A gateway runs its
stdio servers under a reaper process of its own (toolscore/downstream/spawn.py) that ends when
the gateway's process ends, never waited for, so their CPU is missed: tests/toolhub/
test_strategies.py, whose tests started their servers from the test process, counted 10 s of
CPU that way and 45 s counted here. This script makes itself a child
subreaper (Linux `prctl(PR_SET_CHILD_SUBREAPER)`), so every process the run leaves behind is
handed to it and reaped, and reports the user + system CPU of the whole tree per file, with the
wall time and the 1-minute load average before and after (a busy machine counts the time its
neighbours stole as CPU too). Each run includes pytest's own start and collection (about 4 s
of CPU on 2 cores). Linux only; run it on a machine as quiet as you can find.

`--by-command` (root only) also turns on the kernel's process accounting (acct(2)) for the runs
and prints, for all of them together, the CPU and count of the processes of the tree by command
name (`python`, `toolscore`, `node`, ...): which kind of process the time goes to, the short-lived
ones included.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import shlex
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36
_ORPHANS_SECONDS = 120.0
"""How long to wait for what a run left running (a server its reaper is stopping) before giving up."""


def _become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def _reap_orphans() -> bool:
    """Wait for every descendant handed to this process; False if some still run after the limit."""
    deadline = time.monotonic() + _ORPHANS_SECONDS
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)


def _tree_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


_ACCT_RECORD = struct.Struct("<BBHIIIIIIfHHHHHHHH16s")
"""struct acct_v3 (linux/acct.h): flag, version, tty, exit code, uid, gid, pid, ppid, start time,
elapsed, user and system time (comp_t), memory, I/O, blocks, faults, swaps, command name."""


def _ticks(comp: int) -> int:
    """A comp_t (13-bit mantissa, 3-bit base-8 exponent) in clock ticks."""
    return (comp & 0x1FFF) << (3 * (comp >> 13))


def _by_command(records: bytes, root: int) -> dict[str, tuple[int, float]]:
    """The processes below `root` in an acct(2) file, by command name: (count, CPU seconds)."""
    hz = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[tuple[int, str, float]]] = defaultdict(list)
    for offset in range(0, len(records) - _ACCT_RECORD.size + 1, _ACCT_RECORD.size):
        fields = _ACCT_RECORD.unpack_from(records, offset)
        if fields[1] != 3:  # not an acct_v3 record
            continue
        pid, ppid, utime, stime, comm = fields[6], fields[7], fields[10], fields[11], fields[18]
        name = comm.split(b"\0", 1)[0].decode(errors="replace")
        children[ppid].append((pid, name, (_ticks(utime) + _ticks(stime)) / hz))
    totals: dict[str, tuple[int, float]] = {}
    todo, seen = [root], set()
    while todo:
        for pid, name, cpu in children.get(todo.pop(), []):
            if pid in seen:  # a pid the kernel reused within the run: walked once, so the walk ends
                continue
            seen.add(pid)
            count, total = totals.get(name, (0, 0.0))
            totals[name] = (count + 1, total + cpu)
            todo.append(pid)
    return totals


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def _run_files(files: list[str], pytest_args: str) -> bool:
    """Run pytest on each file in turn, printing its line; True if any run failed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as ./scripts/test runs
    pytest = [sys.executable, "-m", "pytest", *shlex.split(pytest_args)]
    print(f"{'file':<56} {'CPU s':>7} {'wall s':>7}  load  outcome")
    failed = False
    for file in files:
        before, load, start = _tree_cpu(), _load(), time.monotonic()
        done = subprocess.run([*pytest, file], env=env, capture_output=True, text=True, check=False)
        wall = time.monotonic() - start
        complete = _reap_orphans()
        cpu = _tree_cpu() - before
        lines = done.stdout.strip().splitlines()
        outcome = (lines[-1] if lines else "no output").strip("= ")
        note = "" if complete else " (processes still running: CPU undercounted)"
        print(f"{file:<56} {cpu:7.1f} {wall:7.1f}  {load}→{_load()}  {outcome}{note}", flush=True)
        if done.returncode != 0:  # what failed, so that a rare failure is not lost to the figures
            failed = True
            print("\n".join("    " + line for line in lines[-40:]), flush=True)
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description="The CPU a test file costs, every process it starts counted.")
    parser.add_argument("files", nargs="+", help="test files, each run alone")
    parser.add_argument(
        "--pytest-args",
        default='-q -p no:randomly -n 0 --no-cov -m "not soak"',
        help="what pytest gets besides the file (default: %(default)s)",
    )
    parser.add_argument(
        "--by-command", action="store_true", help="CPU by command name, from process accounting (root only)"
    )
    args = parser.parse_args()
    if not sys.platform.startswith("linux"):
        print("suite_cpu: Linux only (it needs PR_SET_CHILD_SUBREAPER)", file=sys.stderr)
        return 2
    _become_subreaper()
    libc = ctypes.CDLL(None, use_errno=True)
    accounting = Path(tempfile.mkdtemp()) / "acct" if args.by_command else None
    if accounting is not None:
        accounting.touch()
        if libc.acct(str(accounting).encode()) != 0:
            print(f"suite_cpu: acct(2) failed: {os.strerror(ctypes.get_errno())} (root only)", file=sys.stderr)
            accounting.unlink()
            accounting.parent.rmdir()
            return 2
    try:
        failed = _run_files(args.files, args.pytest_args)
    finally:  # accounting is machine-wide: it never outlives the run, whatever ends it
        if accounting is not None:
            libc.acct(None)
    if accounting is not None:
        totals = _by_command(accounting.read_bytes(), os.getpid())
        accounting.unlink()
        accounting.parent.rmdir()
        print(f"\n{'command':<18} {'processes':>9} {'CPU s':>8}")
        for name, (count, cpu) in sorted(totals.items(), key=lambda item: -item[1][1]):
            if cpu >= 0.05:
                print(f"{name:<18} {count:9d} {cpu:8.1f}")
        rest = [(count, cpu) for count, cpu in totals.values() if cpu < 0.05]
        print(f"{'(the others)':<18} {sum(c for c, _ in rest):9d} {sum(cpu for _, cpu in rest):8.1f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
