"""glibc keeps the memory of one large message for the next (`toolscore._malloc`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from toolscore._malloc import _glibc

pytestmark = [pytest.mark.skipif(not _glibc(), reason="glibc's allocator only"), pytest.mark.e2e]

# Two 1 MiB buffers alive at once and freed, as relaying a large result does; the page faults of
# the process per round, once the allocator has settled.
_ROUNDS = """
import sys
from toolscore._malloc import keep_freed_memory
print(keep_freed_memory())
def faults():
    stat = open("/proc/self/stat").read()
    return int(stat[stat.rindex(")") + 2 :].split()[7])
data = b"x" * (1 << 20)
for _ in range(5):
    a = bytearray(data); b = bytes(a); del a, b
before = faults()
for _ in range(50):
    a = bytearray(data); b = bytes(a); del a, b
print((faults() - before) / 50)
"""


def _run(**env: str) -> tuple[bool, float]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_"))}
    done = subprocess.run(
        [sys.executable, "-c", _ROUNDS], env={**base, **env}, capture_output=True, text=True, check=True
    )
    kept, faults = done.stdout.split()
    return kept == "True", float(faults)


def test_a_large_message_reuses_the_memory_of_the_last() -> None:
    kept, faults = _run()
    assert kept
    assert faults < 16  # without it: 256 or more, one per fresh 4 KiB page of each new buffer


def test_a_users_own_allocator_setting_wins() -> None:
    kept, faults = _run(MALLOC_TRIM_THRESHOLD_="131072")
    assert not kept
    assert faults > 128  # the user's setting, as they chose it
