"""The official conformance suite's skills scenarios (SEP-2640) against the gateway.

`toolscore serve --transport http` with tests/fixtures/skills_server.py as its stdio server: the
suite, as a 2026-07-28 client of the gateway, lists and gets the skills, reads their SKILL.md
files and checks every shape. The suite never runs extension scenarios on its own (`--force`).
It is installed by `scripts/conformance` (tests/front/test_conformance.py); without it this skips.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import http_gateway_process, write_config

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / ".toolscore" / "conformance" / "node_modules"
NODE = SUITE / "node" / "bin" / "node"
CLI = SUITE / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
SKILLS_SERVER = str(ROOT / "tests" / "fixtures" / "skills_server.py")


@pytest.mark.skipif(not (NODE.exists() and CLI.exists()), reason="the suite is installed by scripts/conformance")
@pytest.mark.parametrize("scenario", ["sep-2640-skills-enumeration", "sep-2640-skills-manifest"])
def test_the_suites_skills_scenarios_pass_through_the_gateway(tmp_path: Path, scenario: str) -> None:
    entry = {"command": sys.executable, "args": [SKILLS_SERVER], "env": {"PYTHONPATH": str(ROOT)}}
    out = tmp_path / "results"
    options = ["--scenario", scenario, "--spec-version", "2026-07-28", "--force", "--timeout", "15000", "-o", str(out)]
    with http_gateway_process(write_config(tmp_path, {"s": entry})) as base:
        run = subprocess.run(
            [str(NODE), str(CLI), "server", "--url", f"{base}/mcp", *options],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={**os.environ, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"},
        )
    report = run.stdout + run.stderr
    found = list(out.glob(f"server-{scenario}-*/checks.json"))
    assert len(found) == 1, report
    checks = json.loads(found[0].read_text())
    statuses = {check["id"]: check["status"] for check in checks}
    assert statuses, report
    assert {s for s in statuses.values()} == {"SUCCESS"}, json.dumps(statuses, indent=1)
    assert any(name.startswith("sep-2640-") for name in statuses)
