"""The cyclic garbage collector, held off while a command starts.

Starting `toolscore serve` imports the SDK and the gateway: about 90,000 tracked objects
(classes, pydantic's validators and schemas for three protocol versions) that live as long as the
process, and 48,000 more left as garbage. While they are made the collector runs a few hundred
times, walking the survivors again at each older generation's turn, and the interpreter's exit
tears them all down once more. So the command's entry point holds the collector off (`hold`)
before its first import, and lets it go (`release`) once the gateway has imported what it needs
and waits for its servers to start (`downstream.hub.open_hub`), or, for a command that opens no
gateway, once its arguments are read: one full collection (start-up's garbage, with any
file or socket a failed attempt left in a reference cycle), then every object left is frozen into
the permanent generation, which later collections skip and the exit leaves alone, and the
collector runs as before. What the imports save, that collection spends again; the gain is the
exit (about 0.25 s of CPU) and the full collections while serving (docs/performance.md).

Only the entry point holds: a caller of `toolscore.cli.main` in its own process (the tests, an
embedding program) keeps its collector as it is, and `release` does nothing there.
"""

from __future__ import annotations

import gc

__all__ = ["hold", "release"]

_held = False


def hold() -> None:
    """Stop the collector until `release`, unless it is already off (a caller's own choice)."""
    global _held
    if gc.isenabled():
        gc.disable()
        _held = True


def release() -> None:
    """Collect once, freeze what is left and restart the collector, if `hold` stopped it."""
    global _held
    if not _held:
        return
    _held = False
    gc.collect()
    gc.freeze()
    gc.enable()
