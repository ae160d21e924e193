"""Single scenarios of the official conformance suite, run against a gateway (tests of extensions).

`scripts/conformance --install-only` installs the pinned suite and its Node into
`.toolscore/conformance/` (once, under a lock, whichever test asks first); the tests skip only
where npm is absent. The suite never runs extension scenarios on its own: `--force`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

__all__ = ["needs_npm", "run_scenario"]

ROOT = Path(__file__).resolve().parents[2]
_MODULES = ROOT / ".toolscore" / "conformance" / "node_modules"
NODE = _MODULES / "node" / "bin" / "node"
CLI = _MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"

needs_npm = pytest.mark.skipif(shutil.which("npm") is None, reason="npm is needed to install the conformance suite")


def _install() -> None:
    run = subprocess.run(
        [str(ROOT / "scripts" / "conformance"), "--install-only"], capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stdout + run.stderr


def run_scenario(url: str, scenario: str, out: Path) -> tuple[list[dict[str, Any]], str]:
    """Run `scenario` (2026-07-28) against the MCP endpoint `url`: its checks and the suite's output."""
    _install()
    options = ["--scenario", scenario, "--spec-version", "2026-07-28", "--force", "--timeout", "15000", "-o", str(out)]
    run = subprocess.run(
        [str(NODE), str(CLI), "server", "--url", url, *options],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"},
    )
    report = run.stdout + run.stderr
    found = list(out.glob(f"server-{scenario}-*/checks.json"))
    assert len(found) == 1, report
    checks: list[dict[str, Any]] = json.loads(found[0].read_text())
    return checks, report
