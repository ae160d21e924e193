"""`<call capability="...">`: parsed, checked against the ToolHub's capabilities, run through the hub
(in memory: real SDK servers behind the real front)."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client

from tests.conftest import text
from tests.plan.conftest import REGISTRY, SHORTHANDS, check
from toolscore.config import PlanSettings
from toolscore.errors import PlanCheckError
from toolscore.plan.check import check_plan
from toolscore.plan.nodes import CheckedCapability
from toolscore.plan.parse import parse_turn
from toolscore.testing import FakeDownstream, running_gateway

SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
TABLE = {"search": ("a__find", "b__find"), "math": ("a__add",), "research": ("c__deep",)}


def problems(plan: str, **kw: Any) -> list[tuple[str, str]]:
    with pytest.raises(PlanCheckError) as caught:
        check(plan, **kw)
    return [(p.code, p.message) for p in caught.value.problems]


# -- parse and check (pure) -------------------------------------------------------------------------


def test_a_capability_step_is_checked_with_its_candidates_and_references() -> None:
    plan = check(
        '<call capability="search" id="s">{"query": "mcp"}</call>\n'
        '<fetch><fetch>{"url": "${s.json.url}"}</fetch></fetch>\n'
        '<call capability="research">{"topic": "${2.text}"}</call>',
        capabilities=TABLE,
    )
    assert [type(s).__name__ for s in plan.steps] == ["CheckedCapability", "CheckedCall", "CheckedCapability"]
    first = plan.steps[0]
    assert isinstance(first, CheckedCapability)
    assert (first.capability, first.candidates, first.arguments) == ("search", TABLE["search"], {"query": "mcp"})
    assert [r.target for r in plan.steps[2].refs] == [2]
    assert plan.ids == {"s": 1}


def test_without_a_toolhub_a_capability_step_is_refused_with_the_fix() -> None:
    [(code, message)] = problems('<call capability="search">{"query": "x"}</call>')
    assert code == "no_toolhub"
    assert 'step 1 <call capability="search">' in message and '<call server="S" tool="T">' in message


def test_an_unknown_capability_lists_the_known_ones_nearest_first() -> None:
    [(code, message)] = problems('<call capability="reserch">{}</call>', capabilities=TABLE)
    assert code == "unknown_capability"
    assert message.endswith("capabilities, nearest first: research, search, math")
    many = {f"tag{n:02}": ("x__y",) for n in range(30)}
    [(_, message)] = problems('<call capability="zzz">{}</call>', capabilities=many)
    assert message.count("tag") == 20 and message.endswith(", ...")
    [(_, message)] = problems('<call capability="zzz">{}</call>', capabilities={})
    assert message.endswith("nearest first: none")


def test_retries_text_content_and_bad_references_are_refused() -> None:
    found = problems('<call capability="search" retries="2">{"query": "x"}</call>', capabilities=TABLE)
    assert [c for c, _ in found] == ["bad_attribute"] and "strategy to 'fallback'" in found[0][1]
    found = problems('<call capability="search">plain words</call>', capabilities=TABLE)
    assert [c for c, _ in found] == ["bad_arg"] and '{"query": "..."}' in found[0][1]
    found = problems('<call capability="search">{"query": "${later}"}</call>', capabilities=TABLE)
    assert [c for c, _ in found] == ["unknown_reference"]
    found = problems('<call capability="search">{"query": "${x"}</call>', capabilities=TABLE)
    assert [c for c, _ in found] == ["bad_reference"]
    turn = parse_turn('<call capability="search">{"query": oops}</call>', collect=True)
    with pytest.raises(PlanCheckError) as caught:  # the parser's problem, once: the checker adds none
        check_plan(turn, REGISTRY, shorthands=SHORTHANDS, limits=PlanSettings(), capabilities=TABLE)
    assert [p.code for p in caught.value.problems] == ["invalid_json"]
    assert check('<call capability="math" />', capabilities=TABLE).capabilities[0].arguments == {}


@pytest.mark.parametrize(
    ("attrs", "code"),
    [
        ('capability="search" server="fetch"', "bad_call"),
        ('capability="search" tool="fetch__fetch"', "bad_call"),
        ('capability="Web Search"', "bad_attribute"),
        ('capability=""', "bad_attribute"),
        (f'capability="{"a" * 33}"', "bad_attribute"),
        (f'capability="{"a" * 5000}"', "bad_attribute"),
    ],
)
def test_the_parser_refuses_a_malformed_capability_attribute(attrs: str, code: str) -> None:
    turn = parse_turn(f"<call {attrs}>{{}}</call>", collect=True)
    assert [p.code for p in turn.problems] == [code]
    assert all(len(p.message) < 300 for p in turn.problems)  # a hostile value is not echoed whole
    with pytest.raises(PlanCheckError) as caught:  # the checker adds nothing to the parser's word
        check_plan(turn, REGISTRY, shorthands=SHORTHANDS, limits=PlanSettings(), capabilities=TABLE)
    assert [p.code for p in caught.value.problems] == [code]


# -- run (in memory, through the real front) --------------------------------------------------------


def engine(name: str, delay: float = 0.0, *, fails: bool = False) -> FakeDownstream:
    fake = FakeDownstream(name)

    @fake.tool("find", schema=SCHEMA, description="Search for pages.")
    async def find(query: str) -> Any:
        await anyio.sleep(delay)
        if fails:
            return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=f"{name} broke")], is_error=True)
        return f"{name}: {query}"

    return fake


def hub(strategy: str = "first_success") -> dict[str, Any]:
    return {"toolscore": {"toolhub": {"capabilities": {"search": {"strategy": strategy}}}}}


@pytest.mark.anyio
async def test_a_step_whose_candidates_all_fail_is_an_error_and_its_dependents_are_skipped() -> None:
    fakes = {"a": engine("a", fails=True), "b": engine("b", fails=True)}
    async with running_gateway(fakes, **hub()) as (gw, _), Client(gw.server) as client:
        plan = (
            '<call capability="search" id="s">{"query": "x"}</call>\n'
            '<call capability="search">{"query": "${s.text}"}</call>\n<execute_tools />'
        )
        result = await client.call_tool("orchestrate", {"plan": plan})
        steps = result.structured_content["steps"]  # type: ignore[index]
        assert [s["status"] for s in steps] == ["error", "skipped"]
        assert "No candidate for capability 'search' succeeded" in steps[0]["error"]
        assert "a__find failed (a broke)" in steps[0]["error"]


@pytest.mark.anyio
async def test_a_step_timeout_bounds_the_whole_capability_call() -> None:
    fakes = {"a": engine("a", 600.0), "b": engine("b", 600.0)}  # only the timeout can end them
    async with running_gateway(fakes, **hub("fallback")) as (gw, _), Client(gw.server) as client:
        plan = '<call capability="search" timeout="0.2s">{"query": "x"}</call>\n<execute_tools />'
        with anyio.fail_after(60):  # a hang detector
            result = await client.call_tool("orchestrate", {"plan": plan})
        [step] = result.structured_content["steps"]  # type: ignore[index]
        assert step["status"] == "timeout" and "step's timeout (0.2 s)" in step["error"]


@pytest.mark.anyio
async def test_a_merged_step_gives_its_items_to_references() -> None:
    fakes = {"a": engine("a"), "b": engine("b", 0.02)}
    async with running_gateway(fakes, **hub("all")) as (gw, _), Client(gw.server) as client:
        plan = (
            '<call capability="search" id="s">{"query": "x"}</call>\n'
            '<call capability="search">{"query": "${s.json.items[1].text}"}</call>\n<execute_tools />'
        )
        result = await client.call_tool("orchestrate", {"plan": plan})
        assert not result.is_error, text(result)
        steps = result.structured_content["steps"]  # type: ignore[index]
        assert [s["status"] for s in steps] == ["ok", "ok"]
        # Step 1's second item (either engine's: the live order decides) fed both candidates of step 2.
        texts = sorted(i["text"] for i in steps[1]["result"]["items"])
        assert texts in (["a: a: x", "b: a: x"], ["a: b: x", "b: b: x"])
