"""Plans written the way models write them, through a real client and the real front.

Each plan either runs with exactly the data it meant (the arguments each fake downstream received
are asserted) or is refused naming every problem with its fix. The servers mimic the shapes real
ones answer with: a sandbox that wraps a JSON string in `{"result": ...}`, a code search that
wraps its hits in `{"result": [...]}`.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import mcp_types
import pytest
from mcp import Client

from tests.conftest import text
from toolscore import Gateway
from toolscore.testing import FakeDownstream, memory_config, running_gateway

pytestmark = pytest.mark.anyio

_STRING = {"type": "string"}


@dataclass
class Stack:
    gateway: Gateway
    servers: dict[str, FakeDownstream]

    def calls(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(server, tool, arguments) of every downstream call, server by server."""
        return [(name, tool, args) for name, fake in self.servers.items() for tool, args in fake.calls]


def _servers() -> dict[str, FakeDownstream]:
    sandbox, search, fx = FakeDownstream("sandbox"), FakeDownstream("search"), FakeDownstream("fx")

    @sandbox.tool(
        schema={"type": "object", "properties": {"code": _STRING, "session_id": _STRING}, "required": ["code"]}
    )
    def run_code(code: str, session_id: str = "s-1") -> dict[str, Any]:
        return {"result": json.dumps({"session_id": session_id, "stdout": f"ran {len(code)} chars\n"})}

    @search.tool(
        schema={"type": "object", "properties": {"pattern": _STRING}, "required": ["pattern"]},
        annotations=mcp_types.ToolAnnotations(read_only_hint=True),
    )
    def search_code(pattern: str) -> dict[str, Any]:
        return {"result": [{"path": "src/a.py", "line": 3}, {"path": "src/b.py", "line": 9}]}

    @fx.tool(schema={"type": "object", "properties": {"text": _STRING}, "required": ["text"]})
    def echo(text: str) -> str:
        return text

    @fx.tool(
        schema={
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "verbose": {"type": "boolean"}},
            "required": ["a", "b"],
        }
    )
    def add(a: int, b: int, verbose: bool | None = None) -> dict[str, Any]:
        return {"sum": a + b}

    @fx.tool(schema={"type": "object", "properties": {"message": _STRING}})
    def fail(message: str = "it broke") -> mcp_types.CallToolResult:
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=message)], is_error=True)

    return {"sandbox": sandbox, "search": search, "fx": fx}


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    servers = _servers()
    config = memory_config(
        {
            "sandbox": {"shorthand": {"tag": "python", "tool": "run_code", "primary": "code"}},
            "search": {"shorthand": {"tag": "grep", "tool": "search_code", "primary": "pattern"}},
            "fx": {},
        }
    )
    async with running_gateway(servers, config=config) as (gateway, _):
        yield Stack(gateway, servers)


async def orchestrate(stack: Stack, plan: str, **extra: Any) -> mcp_types.CallToolResult:
    async with Client(stack.gateway.server, mode="legacy") as client:
        return await client.call_tool("orchestrate", {"plan": plan, **extra})


def problems(result: mcp_types.CallToolResult) -> list[tuple[str, str]]:
    """(code, message) of each <plan_error>."""
    assert result.is_error, text(result)
    found = re.findall(r'<plan_error code="(\w+)"[^>]*>(.*?)</plan_error>', text(result), re.DOTALL)
    return [(code, html.unescape(message)) for code, message in found]


def warnings(result: mcp_types.CallToolResult) -> list[str]:
    return [html.unescape(w) for w in re.findall(r"<warning>(.*?)</warning>", text(result), re.DOTALL)]


def steps(result: mcp_types.CallToolResult) -> list[dict[str, Any]]:
    assert not result.is_error, text(result)
    assert result.structured_content is not None
    return list(result.structured_content["steps"])


# -- plans that run with exactly the data meant ----------------------------------------------------

RUNS: dict[str, tuple[str, list[tuple[str, str, dict[str, Any]]], str]] = {
    # name: (plan, what the downstreams received, a warning that must be given ("" for none))
    "chat model, prose around a fenced plan": (
        "I'll search first, then echo the first hit. The `<parallel>` block is not needed here.\n"
        '```xml\n<grep id="hits">TODO</grep>\n'
        '<fx><echo>{"text": "${hits[0].path}"}</echo></fx>\n<execute_tools />\n```\n'
        "Then I call the <echo> tool once more if needed.",
        [("search", "search_code", {"pattern": "TODO"}), ("fx", "echo", {"text": "src/a.py"})],
        "",
    ),
    "prose names tags in running text": (
        "To be quick I put both searches inside a <parallel> block and then call the <echo> tool.\n"
        '<parallel><grep id="a">foo</grep><grep id="b">bar</grep></parallel>\n'
        '<fx><echo>{"text": "${a[1].line} ${b.result[0].path}"}</echo></fx>\n<execute_tools/>',
        [
            ("search", "search_code", {"pattern": "foo"}),
            ("search", "search_code", {"pattern": "bar"}),
            ("fx", "echo", {"text": "9 src/a.py"}),
        ],
        "in running text",
    ),
    "sandbox session continued through the JSON-string wrapper": (
        '<python id="s">print(1)</python>\n'
        '<sandbox><run_code>{"code": "print(2)", "session_id": "${s.session_id}"}</run_code></sandbox>\n'
        '<fx><echo>{"text": "${s.stdout}"}</echo></fx><execute_tools />',
        [
            ("sandbox", "run_code", {"code": "print(1)"}),
            ("sandbox", "run_code", {"code": "print(2)", "session_id": "s-1"}),
            ("fx", "echo", {"text": "ran 8 chars\n"}),
        ],
        "",
    ),
    "reasoning model: <thinking>, case variants": (
        "<thinking>Add, then echo.</thinking>\n<Sequential>\n"
        '<Call server="fx" tool="add" id="sum">{"a": 2, "b": 3}</Call>\n'
        '<CALL server="fx" tool="echo">{"text": "sum=${sum.sum}"}</CALL>\n</sequential>\n<Execute_Tools/>',
        [("fx", "add", {"a": 2, "b": 3}), ("fx", "echo", {"text": "sum=5"})],
        "<thinking> read as <think>",
    ),
    "ReAct: $step1 and $name spellings": (
        '<fx><add id="total">{"a": 1, "b": 1}</add></fx>\n'
        '<fx><echo>{"text": "$step1 and $total.sum but $$total and costs $2"}</echo></fx>\n<execute_tools />',
        [("fx", "add", {"a": 1, "b": 1}), ("fx", "echo", {"text": '{"sum":2} and 2 but $total and costs $2'})],
        "read $step1 as ${step1}",
    ),
    "arguments as child elements": (
        "<fx><add><a>4</a><b>5</b><verbose>true</verbose></add><echo><text>hi <b>there</b></text></echo></fx>",
        [("fx", "add", {"a": 4, "b": 5, "verbose": True}), ("fx", "echo", {"text": "hi <b>there</b>"})],
        "child elements <a>, <b>, <verbose> read as arguments",
    ),
    "Hermes tool calls": (
        '<tool_call>{"name": "fx__add", "arguments": {"a": 1, "b": 2}}</tool_call>\n'
        '<tool_call>{"name": "fx__echo", "arguments": "{\\"text\\": \\"hermes\\"}"}</tool_call>',
        [("fx", "add", {"a": 1, "b": 2}), ("fx", "echo", {"text": "hermes"})],
        "<tool_call> read as a call of 'fx__add'",
    ),
    "server__tool names": (
        '<fx__echo>{"text": "a"}</fx__echo><call tool="fx__echo">{"text": "b"}</call>'
        '<call server="fx" tool="fx__echo">{"text": "c"}</call><fx.echo>{"text": "d"}</fx.echo>',
        [("fx", "echo", {"text": t}) for t in "abcd"],
        "<fx__echo> read as <fx><echo>",
    ),
    "args attribute": (
        '<call server="fx" tool="add" args=\'{"a": 7, "b": 1}\'/>',
        [("fx", "add", {"a": 7, "b": 1})],
        "arguments read from args='...'",
    ),
    "Python literals and // comments in JSON": (
        '<fx><add>{"a": 1, // the first\n "b": 2, "verbose": True,}</add></fx>',
        [("fx", "add", {"a": 1, "b": 2, "verbose": True})],
        "repaired JSON (// comments, Python True, trailing commas)",
    ),
    "mustache and a search hit list": (
        '<grep id="hits">x</grep><fx><echo>{"text": "{{hits[1].path}} of ${hits[*].line}"}</echo></fx>',
        [("search", "search_code", {"pattern": "x"}), ("fx", "echo", {"text": "src/b.py of [3,9]"})],
        "read {{hits[1].path}} as ${hits[1].path} (template braces",
    ),
    "ReAct agent: Thought/Action prose around the plan": (
        "Thought: I need the sum first.\nAction: I'll use <orchestrate> with an <fx> block.\n"
        '<fx><add id="s">{"a": 20, "b": 22}</add></fx>\n<fx><echo>{"text": "Observation: $s.sum"}</echo></fx>\n'
        "<execute_tools />\nThought: now I wait for the results.",
        [("fx", "add", {"a": 20, "b": 22}), ("fx", "echo", {"text": "Observation: 42"})],
        "<orchestrate> in running text, never closed, read as text",
    ),
    "shell and JS code keep their dollars and backticks": (
        '<python>echo "$HOME costs $5"; x=`date`; y="$${HOME}"</python>\n'
        "<python><![CDATA[console.log(`hi $${name}`); if (a < b) {}]]></python>",
        [
            ("sandbox", "run_code", {"code": 'echo "$HOME costs $5"; x=`date`; y="${HOME}"'}),
            ("sandbox", "run_code", {"code": "console.log(`hi ${name}`); if (a < b) {}"}),
        ],
        "",
    ),
    "markup meant as text stays text in CDATA": (
        "<fx><echo><![CDATA[<b>bold</b>]]></echo></fx>",
        [("fx", "echo", {"text": "<b>bold</b>"})],
        "",
    ),
}


@pytest.mark.parametrize("name", RUNS)
async def test_model_style_plans_run_with_the_data_meant(stack: Stack, name: str) -> None:
    plan, received, warning = RUNS[name]
    result = await orchestrate(stack, plan)
    assert all(s["status"] == "ok" for s in steps(result)), text(result)
    assert sorted(stack.calls(), key=repr) == sorted(received, key=repr)
    if warning:
        assert any(warning in w for w in warnings(result)), warnings(result)


# -- plans that are refused, every problem named with its fix ----------------------------------------

REFUSED: dict[str, tuple[str, list[tuple[str, str]]]] = {
    # name: (plan, [(code, a fragment of its message)] in order)
    "one round: bad JSON does not hide the checker's findings": (
        '<fx><echo>{"text": "a" "b"}</echo></fx>\n<fx><nope>{}</nope></fx>\n'
        '<fx><echo>{"text": "${later.text}"}</echo></fx>\n<fx><echo id="later">{"text": "x"}</echo></fx>',
        [
            ("invalid_json", "column"),
            ("unknown_tool", "server 'fx' has no tool 'nope'"),
            ("forward_reference", "which is step 4 and runs later; move step 3 after it"),
        ],
    ),
    "a bare tool names its server": (
        '<echo>{"text": "hi"}</echo><add><a>1</a></add>',
        [
            ("unknown_tag", "a tool needs its server: write <fx><echo>...</echo></fx>"),
            ("unknown_server", "'add' is a tool, not a server: write <fx><add>{...}</add></fx>"),
        ],
    ),
    "${step_1.text} suggests ${1.text}": (
        '<fx><echo>{"text": "a"}</echo></fx><fx><echo>{"text": "${step_1.text}"}</echo></fx>',
        [("unknown_reference", "step 1 is ${1.text}")],
    ),
    "a misspelt id and a misspelt tool": (
        '<fx><add id="total">{"a": 1, "b": 2}</add></fx><fx><ech>{"text": "${totl.sum}"}</ech></fx>',
        [("unknown_tool", "did you mean 'echo'?")],
    ),
    "a misspelt id": (
        '<fx><add id="total">{"a": 1, "b": 2}</add></fx><fx><echo>{"text": "${totl.sum}"}</echo></fx>',
        [("unknown_reference", "did you mean ${total.sum}?")],
    ),
    "a JS template literal": (
        "<python>console.log(`hello ${name}`)</python>",
        [("unknown_reference", "write $${name}")],
    ),
    "a cycle names the edge to remove": (
        '<fx><echo id="a">{"text": "${b.text}"}</echo></fx><fx><echo id="b">{"text": "${a.text}"}</echo></fx>',
        [("forward_reference", "a cycle; remove ${b.text} from step 1")],
    ),
    "child elements that are no parameters": (
        "<fx><echo><message>hi</message></echo></fx>",
        [("bad_arg", "<message> is no parameter of 'fx__echo'; write a JSON object")],
    ),
    "$step_9 names nothing": (
        '<fx><echo>{"text": "$step_9"}</echo></fx>',
        [("unknown_reference", "no step 9")],
    ),
    "a misspelt attribute, and args beside content": (
        '<fx><echo timout="2s" args=\'{"text": 1}\'>{"text": "x"}</echo></fx>',
        [("unknown_attribute", "did you mean 'timeout'?"), ("unknown_attribute", "arguments go in the content")],
    ),
    "unrepairable JSON quotes the snippet": (
        '<fx><add>{"a": 1 "b": 2}</add></fx>',
        [("invalid_json", "⟨here⟩")],
    ),
}


@pytest.mark.parametrize("name", REFUSED)
async def test_model_style_plans_are_refused_with_every_fix(stack: Stack, name: str) -> None:
    plan, expected = REFUSED[name]
    result = await orchestrate(stack, plan)
    found = problems(result)
    assert [code for code, _ in found] == [code for code, _ in expected], found
    for (_, message), (_, fragment) in zip(found, expected, strict=True):
        assert fragment in message, (fragment, message)
    assert stack.calls() == []  # nothing ran


async def test_a_dry_run_shows_how_slips_were_read(stack: Stack) -> None:
    result = await orchestrate(stack, '<fx__echo>{"text": "a"}</fx__echo><execute_tools/>', dry_run=True)
    assert not result.is_error and stack.calls() == []
    assert "<fx__echo> read as <fx><echo>" in text(result)


# -- skipped steps say why -------------------------------------------------------------------------


async def test_a_skipped_step_names_the_step_it_depends_on_and_its_error(stack: Stack) -> None:
    result = await orchestrate(
        stack,
        '<sequential stop_on_error="false"><parallel><fx><fail id="f">{"message": "disk full"}</fail></fx>'
        '<fx><add id="ok">{"a": 1, "b": 1}</add></fx></parallel><fx><echo>{"text": "${f.text}"}</echo></fx>'
        "</sequential>",
    )
    by_step = {s["step"]: s for s in steps(result)}
    assert by_step[3]["status"] == "skipped"
    assert by_step[3]["error"] == "skipped: it uses ${f.text}, and step 1 (f) ended error: disk full"


async def test_a_step_skipped_for_a_failed_block_names_the_block(stack: Stack) -> None:
    result = await orchestrate(
        stack,
        '<sequential stop_on_error="false"><parallel id="p"><fx><fail>{}</fail></fx></parallel>'
        '<fx><echo>{"text": "${p.text}"}</echo></fx></sequential>',
    )
    assert steps(result)[1]["error"] == "skipped: it uses ${p.text}, and the block 'p' ended error"


async def test_a_step_never_started_says_which_failure_stopped_its_block(stack: Stack) -> None:
    result = await orchestrate(
        stack, '<fx><fail id="f">{"message": "no route"}</fail></fx><fx><echo>{"text": "x"}</echo></fx>'
    )
    assert steps(result)[1]["error"] == "not run: the <sequential> stopped after step 1 (f) ended error: no route"
    result = await orchestrate(
        stack, '<fallback><fx><echo>{"text": "first"}</echo></fx><fx><echo>{"text": "second"}</echo></fx></fallback>'
    )
    assert steps(result)[1]["error"] == "not run: step 1 succeeded first and decided the <fallback>"
    assert ("fx", "echo", {"text": "second"}) not in stack.calls()
