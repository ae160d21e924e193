"""A required property the schema gives a default may be left out, through the front: a direct
call and a plan step alike (@playwright/mcp marks `scale` required with a default, and accepts `{}`)."""

from __future__ import annotations

import json
from typing import Any

import mcp_types
import pytest
from mcp import Client
from mcp.server import Server, ServerRequestContext

from tests.conftest import text
from toolscore import testing

pytestmark = pytest.mark.anyio

SHOT = mcp_types.Tool(
    name="take_screenshot",
    description="Answers with the arguments it was sent.",
    input_schema={
        "type": "object",
        "properties": {
            "scale": {"type": "string", "enum": ["css", "device"], "default": "css"},
            "clip": {
                "type": "object",
                "properties": {"x": {"type": "number"}, "unit": {"type": "string", "default": "px"}},
                "required": ["x", "unit"],
            },
        },
        "required": ["scale"],
    },
)


def browser() -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=[SHOT])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=json.dumps(params.arguments or {}))])

    return Server("browser", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def test_a_defaulted_required_property_may_be_left_out_directly_and_in_a_plan() -> None:
    config = testing.memory_config(["browser"])
    async with (
        testing.running_gateway({"browser": browser()}, config=config) as (gw, _),
        Client(gw.server, mode="legacy") as client,
    ):
        direct = await client.call_tool("browser__take_screenshot", {})
        assert not direct.is_error, text(direct)
        assert json.loads(text(direct)) == {}  # passed on unchanged: the server applies its default
        nested = await client.call_tool("browser__take_screenshot", {"clip": {"x": 1}})
        assert not nested.is_error and json.loads(text(nested)) == {"clip": {"x": 1}}
        # What is given is still checked.
        wrong = await client.call_tool("browser__take_screenshot", {"scale": "huge"})
        assert wrong.is_error and "is not one of" in text(wrong)
        plan = '<browser><take_screenshot id="a">{}</take_screenshot></browser>'
        ran = await client.call_tool("orchestrate", {"plan": plan})
        assert not ran.is_error, text(ran)
        assert (ran.structured_content or {}).get("steps"), text(ran)
        assert "plan_error" not in text(ran) and "required property" not in text(ran)
