"""The cyclic garbage collector, held off while a command starts.

Starting `toolscore serve` imports the SDK and the gateway: a hundred thousand objects (classes,
pydantic's validators and schemas for three protocol versions) that live as long as the process.
While they are made, the collector runs a few hundred times and walks them again at each older
generation's turn, though nothing of that is garbage worth finding at once. So the command's entry
point holds the collector off (`hold`) before its first import, and the gateway lets it go
(`release`) once it is open and serving: one full collection (what start-up left as garbage:
failed attempts' exceptions, their frames, the files they held), then every object left is frozen
into the permanent generation, which later collections skip, and the collector runs as before.

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
