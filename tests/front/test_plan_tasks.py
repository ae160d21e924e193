"""The gateway's own task store on its own: ttl, the per-client bound, a client leaving."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp import MCPError

from tests.conftest import wait_for
from toolscore.front.plan_tasks import DEFAULT_TTL_MS, MAX_TTL_MS, PlanTasks, running_plans

pytestmark = pytest.mark.anyio


def known(plans: PlanTasks, caller: str, task_id: str) -> bool:
    try:
        plans.get(caller, task_id)
    except MCPError:
        return False
    return True


def answer(text: str) -> Any:
    async def run() -> dict[str, Any]:
        return {"content": [{"type": "text", "text": text}]}

    return run


async def test_a_task_is_forgotten_after_its_ttl_and_ttls_are_capped() -> None:
    plans = PlanTasks(offered=True)
    async with running_plans(plans):
        short = plans.start("c1", 50, answer("soon gone"))["task"]
        assert (await plans.result("c1", short["taskId"]))["content"][0]["text"] == "soon gone"
        assert plans.start("c1", 10**12, answer("x"))["task"]["ttl"] == MAX_TTL_MS
        assert plans.start("c1", None, answer("x"))["task"]["ttl"] == DEFAULT_TTL_MS
        await wait_for(lambda: not known(plans, "c1", short["taskId"]))


async def test_a_client_holds_a_bounded_number_and_loses_them_when_it_leaves() -> None:
    plans = PlanTasks(offered=True, limit=2)
    async with running_plans(plans):
        first = plans.start("c1", None, answer("one"))["task"]["taskId"]
        await plans.result("c1", first)
        blocked = anyio.Event()

        async def forever() -> dict[str, Any]:
            await blocked.wait()
            return {}

        second = plans.start("c1", None, forever)["task"]["taskId"]
        third = plans.start("c1", None, forever)["task"]["taskId"]  # the finished one makes room
        with pytest.raises(MCPError, match="Unknown task"):
            plans.get("c1", first)
        with pytest.raises(MCPError, match="Too many plans"):
            plans.start("c1", None, forever)  # both running: nothing to forget
        assert plans.start("c2", None, answer("other client"))  # the bound is per client
        with pytest.raises(MCPError, match="Unknown task"):
            plans.get("c2", second)
        plans.forget("c1")
        for task_id in (second, third):
            with pytest.raises(MCPError, match="Unknown task"):
                plans.get("c1", task_id)
    assert not plans.running  # the gateway stopped: nothing runs a new task
