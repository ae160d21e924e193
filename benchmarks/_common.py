"""What several benchmarks share: percentiles, a free loopback port, waiting for a server to listen,
the processes alive and their CPU time.

The benchmarks run as scripts (`python benchmarks/NAME.py`), so this directory is on their path.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx2

HOST = "127.0.0.1"  # loopback only: a benchmark listens on nothing beyond this machine


def percentile(values: list[float], q: float) -> float:
    """The `q` quantile of `values` (nearest rank); NaN for none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def wait_serving(process: subprocess.Popen[bytes], port: int, name: str, seconds: float) -> None:
    """Return once `process` answers HTTP on `port`; exit the benchmark if it dies or takes longer."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            httpx2.get(f"http://{HOST}:{port}/", timeout=1)
            return
        except httpx2.TransportError:
            if process.poll() is not None:
                raise SystemExit(f"{name} exited with status {process.returncode}") from None
            time.sleep(0.1)
    process.kill()
    raise SystemExit(f"{name} did not start listening within {seconds:g} s")


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def processes() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds so far) of every live process, from /proc."""
    found: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # it exited meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...
        if fields[0] == "Z":
            continue  # exited, not yet reaped: an earlier run's
        found[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS)
    return found
