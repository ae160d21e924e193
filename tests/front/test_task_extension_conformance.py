"""The official conformance suite's tasks-extension scenarios (SEP-2663) against the gateway.

`toolscore serve --transport http` over the plain fixture server: the suite, as a 2026-07-28
client, checks the surface the gateway itself owns: the extension declared, `tasks/*` gated on
it (-32021), the removed methods (-32601), an unknown task id (-32602), a legacy `task` param
tolerated, `resultType` on every answer. Its other checks call the suite's own fixture tools
(`slow_compute`, `failing_job`, ...) and expect a server's tool to run as an extension task; the
fixture behind the gateway has no such tools (a server's extension tasks are relayed:
tests/front/test_modern_downstream.py): those are named below and must fail for that reason
alone. The suite never runs extension scenarios on its own (`--force`). The suite is installed on
first need (tests/front/suite.py); without npm this skips.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, http_gateway_process, write_config
from tests.front.suite import needs_npm, run_scenario

pytestmark = pytest.mark.e2e

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


@needs_npm
@pytest.mark.parametrize("scenario", sorted(PASSING))
def test_the_suites_tasks_scenarios_pass_through_the_gateway_where_the_gateway_answers(
    tmp_path: Path, scenario: str
) -> None:
    entry = {"command": sys.executable, "args": [str(FIXTURES / "fixture_server.py")]}
    entry["env"] = {"FIXTURE_STATE_DIR": str(tmp_path)}
    with http_gateway_process(write_config(tmp_path, {"fx": entry})) as base:
        checks, report = run_scenario(f"{base}/mcp", scenario, tmp_path / "results")
    statuses = {check["id"]: check["status"] for check in checks}
    assert {c for c, status in statuses.items() if status == "SUCCESS"} == PASSING[scenario], json.dumps(
        checks, indent=1
    )
    assert set(statuses) == PASSING[scenario] | NEEDS_A_TASK_SERVER[scenario], report
    for check in checks:
        if check["id"] in NEEDS_A_TASK_SERVER[scenario]:  # the suite's fixture tool was answered whole
            assert "task" in (check.get("errorMessage") or ""), check
