"""glibc's allocator, told to keep freed memory for the next large message.

By default glibc gives a block of 128 KiB or more its own mapping, and once such a block is
freed it adapts: blocks up to that size come from the heap, and free memory at the heap's top
is returned to the system as soon as it exceeds twice that size. Relaying a 1 MiB result holds a
few buffers of that size at once (the line read, the result, the answer written), so every
message frees more than the trim threshold, and the next one starts on fresh pages that the
kernel zero-fills on first touch, one 4 KiB page at a time. That was 40 % of the gateway's CPU
for a 1 MiB passthrough call (docs/performance.md). Fixed thresholds of 32 MiB (the most glibc
ever adapts to on its own) keep up to that much freed memory for reuse instead.

A user's own setting wins: with `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_` or
`GLIBC_TUNABLES` in the environment nothing is changed; other C libraries are left alone.
"""

from __future__ import annotations

import os

__all__ = ["KEEP_BYTES", "keep_freed_memory"]

KEEP_BYTES = 32 << 20
"""Blocks up to this size come from the heap, and this much free heap is kept before trimming."""
_M_TRIM_THRESHOLD = -1  # from glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def keep_freed_memory() -> bool:
    """Set glibc's thresholds (see the module docstring); whether they were set."""
    if any(name in os.environ for name in _USER_SETTINGS) or not _glibc():
        return False
    import ctypes  # only here: nothing else in the gateway needs it

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # glibc answers 1 on success; M_TRIM_THRESHOLD first: setting either one fixes both.
    return bool(mallopt(_M_TRIM_THRESHOLD, KEEP_BYTES)) and bool(mallopt(_M_MMAP_THRESHOLD, KEEP_BYTES))


def _glibc() -> bool:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError):  # not a glibc system
        return False
