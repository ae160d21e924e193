"""The documented commands that serve on stdio or a loopback address until stopped (`toolscore serve`):
each answers, then exits 0 on SIGTERM. Those that serve beyond it are in test_documented_serve_exposed.py.

tests/reliability/documented.py reads them from the docs and runs them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.documented import commands_of, run

pytestmark = pytest.mark.e2e

COMMANDS = commands_of("serve")


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[c for _, c in COMMANDS])
def test_a_documented_command_runs_and_exits_as_documented(
    where: str, command: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    run(where, command, tmp_path, request)
