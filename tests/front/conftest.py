"""Fixtures shared by the front's test files."""

from __future__ import annotations

import pytest

from tests.front.line_client import LAUNCHES, Launch


@pytest.fixture(params=sorted(LAUNCHES))
def launch(request: pytest.FixtureRequest) -> Launch:
    """A line client of each kind (`line_client.LAUNCHES`): the test runs once with each."""
    return LAUNCHES[request.param]
