"""The official conformance suite's tasks-extension scenarios (SEP-2663) against the gateway.

`toolscore serve --transport http` over the plain fixture server: the suite, as a 2026-07-28
client, checks the surface the gateway itself owns: the extension declared, `tasks/*` gated on
it (-32021), the removed methods (-32601), an unknown task id (-32602), a legacy `task` param
tolerated, `resultType` on every answer. Its other checks call the suite's own fixture tools
(`slow_compute`, `failing_job`, ...) and expect a server's tool to run as an extension task, which
the gateway does not relay yet (docs/conformance.md#the-2026-07-28-surface): those are named
below and must fail for that reason alone. The suite never runs extension scenarios on its own
(`--force`). It is installed by `scripts/conformance`; without it this skips.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, http_gateway_process, write_config

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / ".toolscore" / "conformance" / "node_modules"
NODE = SUITE / "node" / "bin" / "node"
CLI = SUITE / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"

PASSING = {
    "tasks-capability-negotiation": {
        "tasks-extension-advertised",
        "sep-2663-tasks-methods-non-declaring",
        "sep-2663-server-rejects-undeclared-client",
        "wire-schema-valid",
    },
    "tasks-dispatch-and-envelope": {
        "sep-2663-tasks-result-removed-method-not-found",
        "tasks-removed-tasks-list",
        "sep-2663-legacy-task-param-ignored",
        "tasks-immediate-result-shortcut",
        "tasks-result-type-complete-on-non-task-responses",
        "sep-2663-tasks-get-invalid-task-id-32602",
        "wire-schema-valid",
    },
}
"""Per scenario, the checks that pass through the gateway; every other one needs the suite's
fixture tools on a server that runs them as extension tasks."""
NEEDS_A_TASK_SERVER = {
    "tasks-capability-negotiation": {"tasks-per-request-meta-opt-in"},
    "tasks-dispatch-and-envelope": {
        "tasks-server-directed-creation-no-hint",
        "sep-2663-durable-create-strong-consistency",
    },
}


@pytest.mark.skipif(not (NODE.exists() and CLI.exists()), reason="the suite is installed by scripts/conformance")
@pytest.mark.parametrize("scenario", sorted(PASSING))
def test_the_suites_tasks_scenarios_pass_through_the_gateway_where_the_gateway_answers(
    tmp_path: Path, scenario: str
) -> None:
    entry = {"command": sys.executable, "args": [str(FIXTURES / "fixture_server.py")]}
    entry["env"] = {"FIXTURE_STATE_DIR": str(tmp_path)}
    out = tmp_path / "results"
    options = ["--scenario", scenario, "--spec-version", "2026-07-28", "--force", "--timeout", "15000", "-o", str(out)]
    with http_gateway_process(write_config(tmp_path, {"fx": entry})) as base:
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
    assert {c for c, status in statuses.items() if status == "SUCCESS"} == PASSING[scenario], json.dumps(
        checks, indent=1
    )
    assert set(statuses) == PASSING[scenario] | NEEDS_A_TASK_SERVER[scenario], report
    for check in checks:
        if check["id"] in NEEDS_A_TASK_SERVER[scenario]:  # the suite's fixture tool was answered whole
            assert "task" in (check.get("errorMessage") or ""), check
