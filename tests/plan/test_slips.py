"""The ordinary slips of model output, piece by piece: what is read as meant, and what is refused.

The same slips run end to end, with the arguments the downstreams received, in `test_corpus.py`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.plan.conftest import REGISTRY, SHORTHANDS
from tests.security.test_plan_hardening import assert_linear, fill
from toolscore.config import PlanSettings
from toolscore.errors import PlanCheckError, PlanSyntaxError, RefError
from toolscore.plan.check import check_plan
from toolscore.plan.dialects import Targets, read_references
from toolscore.plan.lex import code_regions, lex
from toolscore.plan.nodes import ArgsSpec, CallNode, CheckedPlan
from toolscore.plan.parse import canonical, parse_turn
from toolscore.plan.refs import nearest, resolve
from toolscore.plan.values import repair_json, snippet


def prepare(text: str) -> CheckedPlan:
    """As `orchestrate` does: parse collecting problems, then check."""
    return check_plan(parse_turn(text, collect=True), REGISTRY, shorthands=SHORTHANDS, limits=PlanSettings())


def refused(text: str) -> list[tuple[str, str]]:
    with pytest.raises((PlanSyntaxError, PlanCheckError)) as err:
        prepare(text)
    return [(p.code, p.message) for p in err.value.problems]


# -- JSON -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value", "repairs"),
    [
        (
            '{"a": True, "b": None, "c": False}',
            {"a": True, "b": None, "c": False},
            ["Python True", "Python None", "Python False"],
        ),
        ('{"a": 1, // one\n"b": [1, 2,],}', {"a": 1, "b": [1, 2]}, ["// comments", "trailing commas"]),
        ("{'a': 'it\\'s \"x\"'}", {"a": 'it\'s "x"'}, ["single quotes"]),
        # Nothing inside a string is touched, so a URL keeps its `//` and a string its `True,}`.
        ('{"u": "http://x/True,}", "n": None}', {"u": "http://x/True,}", "n": None}, ["Python None"]),
        ("{'open': 'never closed}", None, ["single quotes"]),
        # Escapes in single-quoted strings keep their meaning; a double quote inside gets escaped.
        ("{'code': 'a\\nb \"q\" it\\'s \\u00e9'}", {"code": 'a\nb "q" it\'s é'}, ["single quotes"]),
    ],
)
def test_json_slips_are_repaired_outside_strings_only(raw: str, value: Any, repairs: list[str]) -> None:
    repaired, done = repair_json(raw)
    assert set(done) == set(repairs)
    if value is not None:
        assert json.loads(repaired) == value


def test_a_snippet_marks_where_json_broke() -> None:
    assert snippet('{"a": 1 "b": 2}', 8) == '{"a": 1 ⟨here⟩"b": 2}'
    assert snippet("x" * 100, 50, width=4) == "…xxxx⟨here⟩xxxx…"


# -- tags -------------------------------------------------------------------------------------------


def test_reserved_names_in_any_case_and_aliases() -> None:
    assert [canonical(n) for n in ("Parallel", "EXECUTE_TOOLS", "Thinking", "Tool_Call", "Search")] == [
        "parallel",
        "execute_tools",
        "think",
        "tool_call",
        "Search",  # a server, tool or shorthand keeps its case
    ]
    tokens = lex("<Parallel><a/></parallel>", canonical)
    assert tokens[0].close == 2


def test_case_variants_are_read_with_one_warning_per_spelling() -> None:
    turn = parse_turn(
        "<Thinking>hm</Thinking><PARALLEL><search>a</search><Search>b</Search></parallel><Parallel></PARALLEL>"
        "<EXECUTE_TOOLS/><search>never</search>"
    )
    assert turn.thoughts == ("hm",)
    assert [c.shorthand for c in turn.calls] == ["search", "Search"]
    assert [w for w in turn.warnings if "read as" in w] == [
        "line 1: <Thinking> read as <think>",
        "line 1: <PARALLEL> read as <parallel>",
        "line 1: <Parallel> read as <parallel>",
        "line 1: <EXECUTE_TOOLS> read as <execute_tools>",
    ]


def test_markdown_code_is_text_unless_the_plan_is_only_in_a_fence() -> None:
    text = "Use `<parallel>` or `<race>`.\n```\n<search>example</search>\n```\n<search>real</search>"
    assert [r[2] for r in code_regions(text)] == [False, False, True]
    assert [c.args.value for c in parse_turn(text).calls] == ["real"]
    fenced = "Here is the plan (a `<search>` call):\n```xml\n<search>in the fence</search>\n<execute_tools/>\n```\n"
    assert [c.args.value for c in parse_turn(fenced).calls] == ["in the fence"]
    # An unclosed fence is no fence; a fence closed by a longer one is; spans inside fences stay in it.
    assert code_regions("```\n<a>") == []
    assert code_regions("````\n`<a>`\n`````\n") == [(0, 16, True)]


def test_tags_named_in_running_text_are_text() -> None:
    turn = parse_turn(
        "I will call the <search> tool, then end with <execute_tools/> as usual.\n"
        "<parallel><search>a</search></parallel>\n<execute_tools/>\nAfterwards <parallel> is not needed."
    )
    assert [c.args.value for c in turn.calls] == ["a"]
    assert any("<search> in running text, never closed, read as text" in w for w in turn.warnings)
    assert any("<execute_tools> in running text before any call" in w for w in turn.warnings)
    turn = parse_turn("<parallel> blocks run their calls together.\n<search>b</search>")
    assert [c.args.value for c in turn.calls] == ["b"]
    # Not in running text: an unclosed tag is still a problem with its fix.
    with pytest.raises(PlanSyntaxError) as err:
        parse_turn("<search>x")
    assert err.value.problems[0].message == "<search> is never closed: add </search>"


# -- calls ------------------------------------------------------------------------------------------


def test_hermes_tool_calls() -> None:
    plan = prepare(
        '<tool_call>{"name": "fetch__fetch", "arguments": {"url": "u"}}</tool_call>'
        '<tool_call>{"name": "search.find_files", "parameters": {"pattern": "*"}}</tool_call>'
    )
    assert [(c.route.public_name, c.arguments) for c in plan.calls] == [
        ("fetch__fetch", {"url": "u"}),
        ("search__find_files", {"pattern": "*"}),
    ]
    assert [c.node.public for c in plan.calls] == ["fetch__fetch", "search.find_files"]


@pytest.mark.parametrize(
    ("text", "code", "fragment"),
    [
        ('<tool_call>{"arguments": {}}</tool_call><search>x</search>', "bad_call", '{"name": "<tool>"'),
        ('<tool_call>{"name": "x", "arguments": "[1]"}</tool_call>', "bad_call", "<tool_call> holds"),
        ("<tool_call>{nope}</tool_call>", "invalid_json", "<tool_call>: arguments are not valid JSON"),
        ('<tool_call>{"name": "x"}', "unclosed_tag", "add </tool_call>"),
        ('<tool_call>{"name": "nothing", "arguments": {}}</tool_call>', "unknown_tool", "no tool 'nothing'"),
        ('<tool_call>{"name": "find_files", "arguments": {}}</tool_call>', "unknown_tool", 'server="search"'),
        ('<tool_call>{"name": "fetch__fech", "arguments": {}}</tool_call>', "unknown_tool", "'fetch__fetch'?"),
    ],
)
def test_hermes_slips_are_refused_with_the_fix(text: str, code: str, fragment: str) -> None:
    found = refused(text)
    assert found[0][0] == code and fragment in found[0][1], found


def test_arguments_in_an_attribute_are_read_as_the_content() -> None:
    plan = prepare('<fetch><fetch args=\'{"url": "u"}\'/></fetch>')
    assert plan.calls[0].arguments == {"url": "u"}
    assert refused('<fetch><fetch input=\'{}\'>{"url": "u"}</fetch></fetch>') == [
        ("unknown_attribute", "<fetch> has no attribute 'input'; arguments go in the content: <tag>{...}</tag>")
    ]


def test_child_elements_become_arguments_only_when_they_are_parameters() -> None:
    plan = prepare(
        "<fetch><fetch><url><![CDATA[a<b]]></url><max_length>40</max_length></fetch><fetch><url/></fetch></fetch>"
    )
    assert [c.arguments for c in plan.calls] == [{"url": "a<b", "max_length": 40}, {"url": ""}]
    assert any("child elements <url>, <max_length> read as arguments" in w for w in plan.warnings)
    # A value that is not what the schema says stays text, and the schema check says what is wrong.
    assert refused("<fetch><fetch><url>u</url><max_length>many</max_length></fetch></fetch>") == [
        ("invalid_arguments", "fetch__fetch: max_length: 'many' is not of type 'integer'")
    ]


def test_markup_that_is_not_argument_elements_stays_text() -> None:
    # Text beside the elements, the same element twice, an unclosed one: not argument elements.
    for body in ("<b>x</b> tail", "<b>x</b><b>y</b>", "<b>x", "<b/><i>y</i> z"):
        turn = parse_turn(f"<search><grep>{body}</grep></search>")
        assert turn.calls[0].args == ArgsSpec("text", body), body
    # Directly inside a server block, elements are its tools.
    assert [c.tool for c in parse_turn("<search><b/><i>y</i></search>").calls] == ["b", "i"]


def test_parse_collects_problems_and_marks_broken_arguments() -> None:
    turn = parse_turn('<search>{"a": </search><search id="9">x</search>', collect=True)
    assert [p.code for p in turn.problems] == ["invalid_json", "bad_id"]
    assert isinstance(turn.calls[0], CallNode) and turn.calls[0].args.kind == "invalid"
    assert turn.calls[1].args.kind == "text"  # an attribute problem leaves the arguments alone


def test_a_plan_over_the_step_limit_still_gets_that_one_problem() -> None:
    with pytest.raises(PlanCheckError) as err:
        check_plan(
            parse_turn("<nosuch>x</nosuch>" * 5, collect=True, max_steps=3),
            REGISTRY,
            shorthands=SHORTHANDS,
            limits=PlanSettings(),
        )
    assert [p.code for p in err.value.problems] == ["too_many_steps"]


# -- references -------------------------------------------------------------------------------------


def test_bare_references_are_read_as_meant_only_when_they_name_something() -> None:
    known: Callable[[int | str], bool] = lambda target: target in (1, 2, "hits")  # noqa: E731
    value, rewritten, suspects = read_references(
        ["$hits[0].path", "$step2", "$1", "pay $1 now", "$1.text", "$$hits", "$HOME", "$step_7", "$result_of_step_1"],
        Targets(known),
    )
    assert value == [
        "${hits[0].path}",
        "${step2}",
        "${1}",
        "pay $1 now",
        "${1.text}",
        "$$hits",
        "$HOME",
        "$step_7",
        "$result_of_step_1",
    ]
    assert [r.written for r in rewritten] == ["$hits[0].path", "$step2", "$1", "$1.text"]
    assert [(s.code, s.written) for s in suspects] == [("unknown_reference", "$step_7")]


def test_bare_reference_slips_are_warned_or_refused() -> None:
    plan = prepare('<search id="a">x</search><fetch><fetch>{"url": "$a.text"}</fetch></fetch>')
    assert plan.calls[1].arguments == {"url": "${a.text}"}
    assert plan.warnings == (
        "step 2: read $a.text as ${a.text} (a $ without braces); write references as ${id.path} or ${N.path}",
    )
    assert refused("<search>x</search><search>$step_1</search>") == [
        (
            "unknown_reference",
            "step 2 uses $step_1, which names no step or id (write ${1} for step 1's result); "
            "for the text $step_1 write $$step_1",
        )
    ]


def record(value: Any) -> dict[str, Any]:
    return {"status": "ok", "text": "", "json": value, "error": None}


@pytest.mark.parametrize(
    ("value", "template", "reason"),
    [
        ({}, "${r.a}", "no key 'a': found an empty object"),
        ({str(n): n for n in range(25)}, "${r.x}", "keys 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15"),
        ({str(n): n for n in range(25)}, "${r.x}", "18, 19 and 5 more"),
        (True, "${r.a}", "found a boolean (true)"),
        (1.5, "${r.a}", "found a number (1.5)"),
        (None, "${r.a}", "found null"),
        ("plain", "${r.a}", "found a string of 5 characters"),
        ({"result": '{"session": 1}'}, "${r.sesion}", "no key 'sesion' (did you mean 'session'?)"),
        ({"result": [1]}, "${r[3]}", "no index [3]: found an object with keys result wrapping an array of 1 item"),
        ({"a": 1}, "${r[*]}", "[*] needs an array, found an object with keys a"),
    ],
)
def test_a_failing_path_says_what_is_there(value: Any, template: str, reason: str) -> None:
    with pytest.raises(RefError, match=None) as err:
        resolve(template, {"r": record(value)}.get)
    assert reason in str(err.value)


def test_references_see_through_one_result_wrapper() -> None:
    lookup = {"s": record({"result": [{"path": "a"}]}), "t": record({"only": {"k": [1, 2]}})}.get
    assert resolve(["${s[0].path}", "${t.k[-1]}", "${s.result[0].path}"], lookup) == ["a", 2, "a"]


def test_nearest_is_bounded_and_case_blind() -> None:
    assert nearest("Hits", ["hits", "other"]) == "hits"
    assert nearest("x" * 65, ["x" * 65]) is None
    assert nearest("zzz", ["hits"]) is None


def test_a_cycle_longer_than_two_names_its_first_edge() -> None:
    found = refused(
        '<search id="a">${c.text}</search><search id="b">${a.text}</search><search id="c">${b.text}</search>'
    )
    assert found == [
        (
            "forward_reference",
            "step 1 uses ${c.text} (step 3), and step 3 uses ${b.text}: a cycle; remove ${c.text} from step 1 "
            "(or ${b.text} from step 3) and split the work over two turns if both are needed",
        )
    ]


def test_a_forward_reference_to_a_block_names_its_first_step() -> None:
    found = refused('<search>${p}</search><parallel id="p"><search>x</search></parallel><race id="e"></race>')
    assert ("forward_reference", "step 1 uses ${p}, which is step 2 and runs later; move step 1 after it") in found
    assert [code for code, _ in found] == ["empty_block", "forward_reference"]  # in plan order: line, then step


def test_only_the_first_misspellings_get_a_suggestion() -> None:
    # Each suggestion is a bounded difflib search; a plan of hundreds of misspellings gets 16.
    ids = "".join(f'<search id="name_{i:03d}">x</search>' for i in range(30))
    found = refused(ids + "".join(f"<search>${{name_{i:03d}x}}</search>" for i in range(30)))
    assert sum("did you mean" in message for _, message in found) == 16
    found = refused("".join(f'<search timout="{i}s">x</search>' for i in range(20)))
    assert sum("did you mean 'timeout'" in message for _, message in found) == 16


# -- linear time ------------------------------------------------------------------------------------

SHAPES: dict[str, Callable[[int], str]] = {
    "code spans": lambda n: fill("", "`<search>` ", "", n),
    "unclosed code spans": lambda n: fill("", "`<", "", n),
    "fences": lambda n: fill("", "```\n<search>x</search>\n```\n", "", n),
    "prose tags on one line": lambda n: fill("", "word <search> ", "", n),
    "child elements": lambda n: fill("<fetch><fetch>", "<url>u</url>", "</fetch></fetch>", n),
    "nested child elements": lambda n: fill("<search>", "<b>", "</search>", n),
    "case variants": lambda n: fill("", "<Parallel><search>x</search></PARALLEL>", "", n),
    "hermes": lambda n: fill("", '<tool_call>{"name": "fetch__fetch", "arguments": {"url": "u"}}</tool_call>', "", n),
    "bare references": lambda n: fill('<search id="a">x</search><search>', "$a.b $step_1 ", "</search>", n),
    "JSON slips": lambda n: fill(
        '<search><find_files>{"pattern": "x", "a": [', "True, // c\n", "]}</find_files></search>", n
    ),
    "calls with CDATA, then one never closed": lambda n: fill("", "<search><![CDATA[a<b]]></search>", "<![CDATA[", n),
    "misspelt ids": lambda n: fill(
        "".join(f'<search id="abcdefghijklmnopqrstuvwxyz_{i:02d}">x</search>' for i in range(64)),
        "<search>${abcdefghijklmnopqrstuvwxyz_0x}</search>",
        "",
        n,
    ),
    "cycles": lambda n: "".join(f'<search id="s{i}">${{s{i + 1}}}</search>' for i in range(n // 40)),
}


@pytest.mark.no_cover  # timed: coverage's tracer would be measured, not the code
@pytest.mark.parametrize("shape", SHAPES)
def test_the_lenient_readings_take_linear_time(shape: str) -> None:
    assert_linear(SHAPES[shape], 16 * 1024, 0.5, max_bytes=1024 * 1024, max_steps=1000)


def test_hermes_arguments_are_decoded_once() -> None:
    plan = prepare('<tool_call>{"name": "fetch__fetch", "arguments": {"url": "a &amp;lt; b"}}</tool_call>')
    assert plan.calls[0].arguments == {"url": "a &lt; b"}  # the plan's one level of entities, no more


def test_a_shorthand_written_with_child_elements_says_how_to_write_it() -> None:
    assert refused("<microsandbox><code>x</code></microsandbox>") == [
        (
            "unknown_server",
            "<microsandbox> is a shorthand for sandbox.run, which takes text for 'params.code': write "
            "<microsandbox>text</microsandbox>, or <sandbox><run>{...}</run></sandbox>",
        )
    ]


def test_a_child_element_holding_no_character_is_refused() -> None:
    assert [code for code, _ in refused("<fetch><fetch><url>&#xD800;</url></fetch></fetch>")] == ["bad_character"]
