"""`destructive: "confirm"` for a 2026-07-28 client: an input-required result with a sealed state."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client

from tests.conftest import memory_gateway
from toolscore.front.confirm import CONFIRM_KEY, Sealer

pytestmark = pytest.mark.anyio

CONFIRM = {"constraints": {"enabled": True, "destructive": "confirm"}}


def answering(confirm: bool, asked: list[str]) -> Any:
    async def elicit(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"confirm": confirm})

    return elicit


@pytest.mark.parametrize("agree", [True, False])
async def test_a_2026_client_is_asked_and_its_retry_runs_or_refuses_the_call(tmp_path: Path, agree: bool) -> None:
    asked: list[str] = []
    async with (
        memory_gateway(tmp_path, **CONFIRM) as (gw, sink),
        Client(gw.server, elicitation_callback=answering(agree, asked)) as client,  # 2026-07-28, in process
    ):
        result = await client.call_tool("fx__delete", {"key": "k"})
    assert len(asked) == 1 and "fx__delete" in asked[0]
    assert result.is_error is not agree
    assert (tmp_path / "deleted-k").exists() is agree
    assert [r.error_kind for r in sink.records] == ["input_required", None if agree else "rejected"]


async def test_a_forged_or_replayed_state_is_refused(tmp_path: Path) -> None:
    asked: list[str] = []
    async with (
        memory_gateway(tmp_path, **CONFIRM) as (gw, _),
        Client(gw.server, elicitation_callback=answering(True, asked)) as client,
    ):
        first = await client.session.call_tool("fx__delete", {"key": "k"}, allow_input_required=True)
        assert isinstance(first, mcp_types.InputRequiredResult) and first.input_requests is not None
        assert set(first.input_requests) == {CONFIRM_KEY} and first.request_state
        yes = {CONFIRM_KEY: mcp_types.ElicitResult(action="accept", content={"confirm": True})}

        forged = Sealer().seal({"tool": "fx__delete", "exp": time.time() + 60})  # another key
        tampered = first.request_state[:-2] + ("AA" if not first.request_state.endswith("AA") else "BB")
        for state in (forged, tampered, "", "x" * 10_000):
            refused = await client.session.call_tool(
                "fx__delete", {"key": "k"}, input_responses=yes, request_state=state, allow_input_required=True
            )
            assert isinstance(refused, mcp_types.CallToolResult) and refused.is_error
            assert "does not belong to this call" in str(refused.content[0])
        other = await client.session.call_tool(
            "fx__delete",
            {"key": "other"},
            input_responses=yes,
            request_state=first.request_state,
            allow_input_required=True,
        )
        assert isinstance(other, mcp_types.CallToolResult) and other.is_error  # the approval was for key "k"
        assert not (tmp_path / "deleted-k").exists() and not (tmp_path / "deleted-other").exists()

        done = await client.session.call_tool(
            "fx__delete",
            {"key": "k"},
            input_responses=yes,
            request_state=first.request_state,
            allow_input_required=True,
        )
        assert isinstance(done, mcp_types.CallToolResult) and not done.is_error
    assert (tmp_path / "deleted-k").exists()


def test_a_sealed_state_expires() -> None:
    sealer = Sealer()
    assert sealer.open(sealer.seal({"a": 1, "exp": time.time() + 5})) is not None
    assert sealer.open(sealer.seal({"a": 1, "exp": time.time() - 1})) is None
    assert sealer.open(sealer.seal({"a": 1})) is None
    assert sealer.open("a.b.c") is None
