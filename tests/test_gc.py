"""The collector held while a command starts (`toolscore._gc`), in this process."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from toolscore import _gc


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    yield
    gc.unfreeze()
    gc.enable()
    _gc._held = False


def test_hold_stops_the_collector_and_release_collects_freezes_and_restarts_it() -> None:
    _gc.hold()
    assert not gc.isenabled()

    class Cycle:
        def __init__(self) -> None:
            self.me = self

    garbage = Cycle()
    del garbage
    assert any(type(o) is Cycle for o in gc.get_objects())  # nothing collects it while held
    _gc.release()
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
    # Start-up's garbage is collected before the freeze, not kept for ever in the permanent generation.
    gc.unfreeze()
    assert not any(type(o) is Cycle for o in gc.get_objects())


def test_a_caller_that_turned_the_collector_off_keeps_it_off() -> None:
    gc.disable()
    _gc.hold()
    _gc.release()
    assert not gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_release_without_hold_changes_nothing() -> None:
    _gc.release()
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
