"""Results that are not JSON (bytes, NaN, integer keys): one documented encoding, the same in what
the model reads and in what a reference passes on."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import mcp_types
import pytest
from mcp import Client

from tests.conftest import text
from toolscore import Gateway
from toolscore.plan.encoding import decode, encode, json_value, loads_result
from toolscore.testing import FakeDownstream, running_gateway

pytestmark = pytest.mark.anyio


def test_the_encoding() -> None:
    value = {
        "data": b"\x00\xff",
        "view": memoryview(b"ab"),
        "nan": math.nan,
        "inf": [math.inf, -math.inf, 1.5],
        "counts": {1: "a", 2.5: "b", False: "c", None: "d", math.inf: "e"},
        "pair": (1, 2),
        "set": {3, 1, 2},
        "mixed": {1, "a"},
    }
    encoded = encode(value)
    assert {k: v for k, v in encoded.items() if k != "mixed"} == {
        "data": {"$bytes": "AP8="},
        "view": {"$bytes": "YWI="},
        "nan": "NaN",
        "inf": ["Infinity", "-Infinity", 1.5],
        "counts": {"1": "a", "2.5": "b", "false": "c", "null": "d", "Infinity": "e"},
        "pair": [1, 2],
        "set": [1, 2, 3],
    }
    assert sorted(encoded["mixed"], key=str) == [1, "a"]
    assert decode(encoded)["data"] == b"\x00\xff"
    assert decode({"$bytes": "not base64!"}) == {"$bytes": "not base64!"}
    assert decode({"$bytes": "AA==", "other": 1}) == {"$bytes": "AA==", "other": 1}


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ({1: "a", "1": "b"}, "the dict keys '1' and '1' are the same"),
        ({object(): 1}, "a dict key of type object"),
        ({"a": object()}, "a value of type object"),
    ],
)
def test_what_no_encoding_covers_is_said(value: Any, error: str) -> None:
    with pytest.raises((TypeError, ValueError), match=error):
        encode(value)


def test_deep_values_are_refused_not_recursed_into() -> None:
    deep: Any = "x"
    for _ in range(300):
        deep = [deep]
    with pytest.raises(ValueError, match="nested deeper than 256"):
        encode([b"", deep])


def test_json_is_kept_as_it_is_and_the_rest_encoded() -> None:
    value = {"a": [1, "x", None]}
    assert json_value(value) is value
    assert json_value({"a": [math.nan]}) == {"a": ["NaN"]}
    assert json_value({"a": [{1: 2}]}) == {"a": [{"1": 2}]}
    assert loads_result('{"x": NaN, "y": [Infinity, -Infinity]}') == {"x": "NaN", "y": ["Infinity", "-Infinity"]}


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    fx = FakeDownstream("fx")

    @fx.tool()
    def pack(text: str) -> dict[str, Any]:
        return {"data": text.encode("utf-16"), "ratio": math.nan, "hist": {3: 1, 5: 2}}

    @fx.tool()
    def unpack(data: Any) -> str:
        return decode(data).decode("utf-16")

    @fx.tool()
    def nan_text() -> mcp_types.CallToolResult:
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(text='{"x": NaN, "y": -Infinity}')])

    @fx.tool()
    def echo(value: Any) -> dict[str, Any]:
        return {"value": value}

    async with running_gateway({"fx": fx}) as (gw, _):
        yield gw


async def test_results_and_references_carry_the_same_encoding(gateway: Gateway) -> None:
    plan = (
        '<fx><pack id="p">{"text": "héllo"}</pack><unpack id="u">{"data": "${p.data}"}</unpack>'
        '<echo id="e">{"value": ["${p.ratio}", "${p.hist[\'5\']}"]}</echo>'
        '<nan_text id="n"/><echo>{"value": "${n.x} ${n.y}"}</echo></fx><execute_tools/>'
    )
    async with Client(gateway.server, mode="legacy") as client:
        result = await client.call_tool("orchestrate", {"plan": plan})
    assert result.structured_content is not None, text(result)
    steps = {s["id"] or s["step"]: s for s in result.structured_content["steps"]}
    assert all(s["status"] == "ok" for s in steps.values()), text(result)
    # What the model reads of a step is what a reference to it passes on.
    assert steps["p"]["result"] == {"data": {"$bytes": "//5oAOkAbABsAG8A"}, "ratio": "NaN", "hist": {"3": 1, "5": 2}}
    assert steps["u"]["result"] == "héllo"  # the bytes went through and back
    assert steps["e"]["result"] == {"value": ["NaN", 2]}
    assert steps["n"]["result"] == {"x": "NaN", "y": "-Infinity"}  # plain text holding NaN
    assert steps[5]["result"] == {"value": "NaN -Infinity"}
