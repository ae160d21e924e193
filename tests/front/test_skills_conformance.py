"""The official conformance suite's skills scenarios (SEP-2640) against the gateway.

`toolscore serve --transport http` with tests/fixtures/skills_server.py as its stdio server: the
suite, as a 2026-07-28 client of the gateway, lists and gets the skills, reads their SKILL.md
files and checks every shape. The suite never runs extension scenarios on its own (`--force`).
The suite is installed on first need (tests/front/suite.py); without npm this skips.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import http_gateway_process, write_config
from tests.front.suite import ROOT, needs_npm, run_scenario

pytestmark = pytest.mark.e2e

SKILLS_SERVER = str(ROOT / "tests" / "fixtures" / "skills_server.py")


@needs_npm
@pytest.mark.parametrize("scenario", ["sep-2640-skills-enumeration", "sep-2640-skills-manifest"])
def test_the_suites_skills_scenarios_pass_through_the_gateway(tmp_path: Path, scenario: str) -> None:
    entry = {"command": sys.executable, "args": [SKILLS_SERVER], "env": {"PYTHONPATH": str(ROOT)}}
    with http_gateway_process(write_config(tmp_path, {"s": entry})) as base:
        checks, report = run_scenario(f"{base}/mcp", scenario, tmp_path / "results")
    statuses = {check["id"]: check["status"] for check in checks}
    assert statuses, report
    assert {s for s in statuses.values()} == {"SUCCESS"}, json.dumps(statuses, indent=1)
    assert any(name.startswith("sep-2640-") for name in statuses)
