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
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import shlex
import subprocess
import sys
import time
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


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> int:
    parser = argparse.ArgumentParser(description="The CPU a test file costs, every process it starts counted.")
    parser.add_argument("files", nargs="+", help="test files, each run alone")
    parser.add_argument(
        "--pytest-args",
        default='-q -p no:randomly -n 0 --no-cov -m "not soak"',
        help="what pytest gets besides the file (default: %(default)s)",
    )
    args = parser.parse_args()
    if not sys.platform.startswith("linux"):
        print("suite_cpu: Linux only (it needs PR_SET_CHILD_SUBREAPER)", file=sys.stderr)
        return 2
    _become_subreaper()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as ./scripts/test runs
    pytest = [sys.executable, "-m", "pytest", *shlex.split(args.pytest_args)]
    print(f"{'file':<56} {'CPU s':>7} {'wall s':>7}  load  outcome")
    failed = False
    for file in args.files:
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
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
