"""The order the suite's files start in (tests/conftest.py): the long ones first, then those that
start processes, then the in-memory ones; and where coverage traces."""

from __future__ import annotations

import sys
from pathlib import Path

import coverage
import pytest

from tests.conftest import CORE_TESTS, LONG_FILES, measures_the_core_alone

ROOT = Path(__file__).resolve().parents[1]


def test_every_long_file_is_listed_once_and_exists() -> None:
    assert len(set(LONG_FILES)) == len(LONG_FILES)
    assert [path for path in LONG_FILES if not (ROOT / path).is_file()] == []


def test_this_run_starts_the_long_files_first_then_those_that_start_processes(request: pytest.FixtureRequest) -> None:
    items = request.session.items
    files = list(dict.fromkeys(item.nodeid.split("::")[0] for item in items))
    long = [path for path in files if path in LONG_FILES]
    assert files[: len(long)] == long == sorted(long, key=LONG_FILES.index)
    starts_processes = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("e2e")}
    rest = files[len(long) :]
    assert rest == sorted(rest, key=lambda path: path not in starts_processes)


def test_the_cores_own_tests_are_where_they_are_named() -> None:
    assert [path for path in CORE_TESTS if not (ROOT / path).exists()] == []


def test_coverage_of_the_core_does_not_trace_the_other_tests(request: pytest.FixtureRequest) -> None:
    if not measures_the_core_alone(request.config):
        pytest.skip("runs under coverage of the core alone, as ./scripts/test measures it")
    assert coverage.Coverage.current() is not None  # coverage is measuring this run, but not here
    assert sys.gettrace() is None
