"""The audit log the documented `toolscore audit` commands report on (tests/reliability/documented.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.reliability.documented import environment, make_workdir


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An audit log with one call in it, made once per module: the `toolscore audit` commands
    report on a copy. Asked for by name by those commands alone (`documented.run`)."""
    workdir = make_workdir(tmp_path_factory.mktemp("audited"))
    call = ["toolscore", "call", "fx__echo", "--args", '{"text": "x"}']
    subprocess.run(call, cwd=workdir, env=environment(workdir), check=True, timeout=120)
    return workdir / "audit.jsonl"
