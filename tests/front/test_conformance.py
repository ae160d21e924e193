"""The official MCP conformance suite as a gate: what passes alone passes through the gateway.

Runs `scripts/conformance --require-parity --modern-downstream --http-downstream` (both spec
revisions; the known gaps in scripts/conformance-gaps aside): the gateway with the fixture as a
stdio server on one handshake-era connection, with the fixture speaking only 2026-07-28 on one
connection in that era, and with the fixture reached by URL. The script installs Node 22 and the pinned suite into
`.toolscore/conformance/` on first use, so the test needs only npm; it skips when npm is absent.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is needed to install the conformance suite")
def test_every_scenario_passing_alone_passes_through_the_gateway(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            str(ROOT / "scripts" / "conformance"),
            "--require-parity",
            "--modern-downstream",
            "--http-downstream",
            "--results",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    report = run.stdout + run.stderr
    assert run.returncode == 0, report
    assert "parity: every scenario passing alone passes through the gateway" in run.stdout, report
    for target in ("gateway ", "gateway-modern ", "gateway-http "):
        for revision in ("2025-11-25", "2026-07-28"):
            assert f"{target}".ljust(15) + f"{revision}: " in run.stdout, report
