"""Results by reference: a result over its server's `spill_bytes` is kept by the gateway and the
client gets a preview and a `resource_link`; `resources/read` of the link gives the whole result to
its owner only; a call that asks for the whole result gets it; plan steps are never cut; kept
results expire and the store keeps to its size cap."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client, MCPError, StdioServerParameters

from tests.conftest import TOOLSCORE, fixture_entry, text, write_config
from toolscore.scope import CallScope
from toolscore.spill import RESULTS_PREFIX, ResultStore, owner_of_caller, preview
from toolscore.testing import FakeDownstream, memory_config, running_gateway

pytestmark = pytest.mark.anyio

ROWS = [{"id": n, "name": f"row {n}", "tags": ["a", "b"]} for n in range(500)]


def _fake() -> FakeDownstream:
    fake = FakeDownstream("big")

    @fake.tool("rows")
    def rows() -> dict[str, Any]:
        return {"items": ROWS, "total": len(ROWS)}

    @fake.tool("small")
    def small() -> str:
        return "tiny"

    return fake


def _link(result: mcp_types.CallToolResult) -> mcp_types.ResourceLink:
    links = [b for b in result.content if isinstance(b, mcp_types.ResourceLink)]
    assert len(links) == 1, result
    return links[0]


async def test_a_large_result_is_kept_and_previewed_and_read_whole_by_its_owner_only() -> None:
    config = memory_config({"big": {"spill_bytes": 4096}})
    async with (
        running_gateway({"big": _fake()}, config=config) as (gw, audit),
        Client(gw.server, mode="legacy") as owner,
        Client(gw.server, mode="legacy") as other,
    ):
        answer = await owner.call_tool("big__rows", {})
        link = _link(answer)
        assert link.uri.startswith(RESULTS_PREFIX) and link.size is not None and link.size > 4096
        shown = text(answer)
        assert len(shown) < 2048, "the model sees a preview, not the result"
        assert '"array of 500"' in shown and '"total": "number"' in shown
        whole = await owner.read_resource(link.uri)
        body = whole.contents[0]
        assert isinstance(body, mcp_types.TextResourceContents)
        assert json.loads(body.text)["structuredContent"]["items"] == ROWS
        with pytest.raises(MCPError):  # another client: as if there were no such result
            await other.read_resource(link.uri)
        assert text(await owner.call_tool("big__small", {})) == "tiny", "a small result goes as it is"
        asked = await owner.call_tool("big__rows", {}, meta={"io.toolscore/whole-result": True})
        assert asked.structured_content is not None and asked.structured_content["items"] == ROWS
        planned = await gw.orchestrator({"plan": '<big><rows id="r" /><small>{}</small></big>'}, scope=CallScope("c9"))
        assert not planned.is_error and RESULTS_PREFIX not in text(planned), "plan steps are never cut"
        assert all(r.success for r in audit.records if r.tool == "big__rows")


def test_kept_results_expire_belong_to_their_owner_and_keep_to_the_cap() -> None:
    now = [1000.0]
    store = ResultStore(ttl_seconds=60, max_bytes=100, clock=lambda: now[0])
    first = store.put("principal:alice", "a" * 60)
    assert first is not None
    assert store.get("principal:alice", first) == "a" * 60
    assert store.get("principal:bob", first) is None
    second = store.put("principal:alice", "b" * 60)  # over the cap together: the oldest goes
    assert second is not None and store.get("principal:alice", first) is None
    assert store.put("principal:alice", "c" * 101) is None, "one result over the whole cap is not kept"
    now[0] += 61
    assert store.get("principal:alice", second) is None
    assert owner_of_caller("principal:alice/c4") == owner_of_caller("principal:alice") == "principal:alice"
    assert owner_of_caller("c4") == "c4"


def test_a_preview_shows_the_ends_of_long_text_and_bounds_every_line() -> None:
    lines = [f"line {n}" for n in range(1000)]
    lines[3] = "x" * 5000
    result = mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="\n".join(lines))])
    shown = text(preview(result, RESULTS_PREFIX + "ab", 12345))
    assert "line 0" in shown and "line 999" in shown and "line 500" not in shown
    assert "980 more lines" in shown and len(shown) < 5000


@pytest.mark.e2e
async def test_the_stdio_hot_path_and_express_lane_keep_a_large_result(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"fx": fixture_entry(tmp_path, spill_bytes=4096)})
    params = StdioServerParameters(command=TOOLSCORE, args=["serve", "--config", str(path)])
    async with Client(params, mode="legacy") as client:
        for _ in range(2):  # the first may take the hot path, the next the express lane
            answer = await client.call_tool("fx__large", {"size": 100_000})
            link = _link(answer)
            whole = await client.read_resource(link.uri)
            body = whole.contents[0]
            assert isinstance(body, mcp_types.TextResourceContents)
            assert json.loads(body.text)["content"][0]["text"] == "x" * 100_000
