"""`<call capability="...">` plan steps over the two fixture search servers (SDK, subprocesses),
through a real client and the real front: the step goes through the ToolHub like `call_capability`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import make_config, running_gateway, text
from tests.toolhub.test_strategies import engine, engines

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

SEARCH_THEN_ADD = """
<call capability="search" id="s">{"query": "mcp v42"}</call>
<call server="alpha" tool="calculate">{"expression": "${s.json[1].url}"}</call>
<execute_tools />
"""


async def orchestrate(client: Client, plan: str, **extra: Any) -> Any:
    return await client.call_tool("orchestrate", {"plan": plan, **extra})


async def test_a_capability_step_races_the_candidates_and_a_later_step_uses_its_result(tmp_path: Path) -> None:
    async with engines(tmp_path) as (gw, audit), Client(gw.server) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert '<call capability="C">' in (listed["orchestrate"].description or "")
        result = await orchestrate(client, SEARCH_THEN_ADD)
        assert not result.is_error, text(result)
        steps = result.structured_content["steps"]  # type: ignore[index]
        assert [(s["step"], s["status"]) for s in steps] == [(1, "ok"), (2, "ok")]
        assert (steps[0]["server"], steps[0]["tool"]) == ("capability", "search")
        # The fast engine won the race; its JSON answer (the note aside) fed step 2's arguments.
        assert "alpha__web_search ok" in text(result) and "beta__web_search cancelled" in text(result)
        assert steps[0]["result"][1]["url"] == "https://alpha.test/mcp-v42"
        assert steps[1]["result"] == "42 (by alpha)"
        # Every candidate call is an engine call of its own, in this plan, with its own arguments.
        records = [r for r in audit.records if r.phase != "plan"]
        assert {r.tool: r.error_kind for r in records} == {
            "alpha__web_search": None,
            "beta__web_search": "cancelled",
            "alpha__calculate": None,
        }
        assert len({r.plan_id for r in records}) == 1 and records[0].plan_id is not None
        names = {r.tool: r.argument_names for r in records}
        assert names["beta__web_search"] == ("q",)  # beta's argument map, as call_capability does


async def test_a_dry_run_shows_the_candidates_best_first_and_calls_nothing(tmp_path: Path) -> None:
    async with engines(tmp_path, priority=-5) as (gw, audit), Client(gw.server) as client:
        result = await orchestrate(client, SEARCH_THEN_ADD, dry_run=True)
        assert not result.is_error, text(result)
        assert "step 1 (s): capability search (candidates, best first: beta__web_search, alpha__web_search)" in text(
            result
        )
        first = result.structured_content["plan"]["children"][0]  # type: ignore[index]
        assert first["capability"] == "search"
        assert first["candidates"] == ["beta__web_search", "alpha__web_search"]
        assert [r for r in audit.records if r.phase != "plan"] == []


async def test_an_unknown_capability_is_refused_with_the_known_ones_nearest_first(tmp_path: Path) -> None:
    async with engines(tmp_path) as (gw, audit), Client(gw.server) as client:
        plan = '<call capability="serch" id="s">{"query": "mcp"}</call>\n<execute_tools />'
        result = await orchestrate(client, plan)
        assert result.is_error
        message = text(result)
        assert '<plan_error code="unknown_capability" step="1" tag="call" id="s"' in message
        assert "no tool offers capability 'serch'; capabilities, nearest first: search," in message
        assert [r for r in audit.records if r.phase != "plan"] == []


async def test_policy_refuses_one_candidate_and_the_other_answers(tmp_path: Path) -> None:
    config = make_config(
        {
            "alpha": engine(tmp_path, "alpha", 0.0, capabilities={"web_search": ["search"]}),
            "beta": engine(
                tmp_path,
                "beta",
                0.05,
                env={"SEARCH_QUERY_ARG": "q"},
                capabilities={"web_search": ["search"]},
                argument_maps={"web_search": {"query": "q"}},
            ),
        },
        toolscore={"startup_grace_seconds": None},
        constraints={"enabled": True, "tools": {"deny": ["alpha__web_search"]}},
    )
    async with running_gateway(config, tmp_path) as (gw, audit), Client(gw.server) as client:
        plan = '<call capability="search" id="s">{"query": "mcp"}</call>\n<execute_tools />'
        result = await orchestrate(client, plan)
        assert not result.is_error, text(result)
        steps = result.structured_content["steps"]  # type: ignore[index]
        assert steps[0]["status"] == "ok" and "beta.test" in json.dumps(steps[0]["result"])
        # A tool the policy always refuses is no candidate: never tried, never audited.
        assert "alpha__web_search" not in text(result)
        assert {r.tool: r.error_kind for r in audit.records if r.phase != "plan"} == {"beta__web_search": None}
        assert not (tmp_path / "done-alpha").exists()  # never reached the server
