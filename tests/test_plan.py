"""The plan language, pure: parsing what models write, and checking plans before anything runs."""

from __future__ import annotations

from typing import Any

import mcp_types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import make_config
from toolscore.config import PlanSettings, Shorthand
from toolscore.downstream.registry import build_registry
from toolscore.plan.check import PlanCheckError, check_plan, shorthand_table
from toolscore.plan.parse import Block, CallNode, PlanSyntaxError, parse_turn
from toolscore.plan.refs import Ref, RefError, RefSyntaxError, parse_template, resolve

OBJ = {"type": "object"}


def tool(
    name: str, props: dict[str, Any] | None = None, required: list[str] | None = None, **kw: Any
) -> mcp_types.Tool:
    return mcp_types.Tool(
        name=name, input_schema={"type": "object", "properties": props or {}, "required": required or []}, **kw
    )


REGISTRY = build_registry(
    {
        "search": [
            tool("find_files", {"pattern": {"type": "string"}}, ["pattern"]),
            tool("grep", {"q": {"type": "string"}}),
        ],
        "fetch": [
            tool(
                "fetch",
                {"url": {"type": "string"}, "max_length": {"type": "integer"}},
                ["url"],
                annotations=mcp_types.ToolAnnotations(read_only_hint=True),
            ),
        ],
        "sandbox": [tool("run", {"params": {"type": "object"}})],
    },
    make_config({"search": {"command": "x"}, "fetch": {"command": "x"}, "sandbox": {"command": "x"}}),
)
SHORTHANDS = shorthand_table(
    [
        ("search", (Shorthand(tag="search", tool="find_files", primary="pattern"),)),
        ("sandbox", (Shorthand(tag="microsandbox", tool="run", primary="params.code"),)),
    ]
)


def check(text: str, **kw: Any) -> Any:
    return check_plan(parse_turn(text), REGISTRY, shorthands=SHORTHANDS, limits=PlanSettings(), **kw)


def codes(text: str) -> list[str]:
    try:
        check(text)
    except (PlanSyntaxError, PlanCheckError) as exc:
        return [p.code for p in exc.problems]
    return []


# -- parsing -------------------------------------------------------------------------------------


def test_the_three_call_forms_and_step_numbers() -> None:
    turn = parse_turn(
        'Sure, here is the plan.\n<search><find_files id="py">{"pattern": "**/*.py"}</find_files></search>\n'
        '<call server="fetch" tool="fetch" id="page">{"url": "http://127.0.0.1/a"}</call>\n'
        "<search>is_error=True</search>\n<execute_tools />\nprose after is ignored <search>x</search>",
        first_step=4,
    )
    assert [(c.step, c.server, c.tool, c.shorthand, c.id) for c in turn.calls] == [
        (4, "search", "find_files", None, "py"),
        (5, "fetch", "fetch", None, "page"),
        (6, None, None, "search", None),
    ]
    assert turn.calls[2].args.value == "is_error=True"
    assert turn.warnings == ()


def test_code_with_angle_brackets_and_ampersands_is_taken_as_written() -> None:
    turn = parse_turn("<microsandbox>print([x for x in range(9) if x < 5 and x & 1])</microsandbox>")
    assert turn.calls[0].args.value == "print([x for x in range(9) if x < 5 and x & 1])"


def test_well_formed_text_gets_entities_decoded_and_cdata_is_verbatim() -> None:
    turn = parse_turn("<search>a &lt; b &amp;&amp; c</search><search><![CDATA[x </search> &lt;]]></search>")
    assert [c.args.value for c in turn.calls] == ["a < b && c", "x </search> &lt;"]


def test_arg_elements_typed_and_json_repairs() -> None:
    turn = parse_turn(
        '<microsandbox><arg name="inputs" type="json">{"a": [1, 2]}</arg><arg name="code">print(inputs)</arg>'
        "</microsandbox><search><find_files>{'pattern': '*.md',}</find_files></search>"
    )
    assert turn.calls[0].args.value == {"inputs": {"a": [1, 2]}, "code": "print(inputs)"}
    assert turn.calls[1].args.value == {"pattern": "*.md"}
    assert any("repaired JSON" in w for w in turn.warnings)


def test_blocks_nest_and_keep_their_attributes() -> None:
    turn = parse_turn(
        '<parallel id="both" max_concurrency="2" policy="fail_fast" timeout="1.5s">'
        '<search>a</search><sequential stop_on_error="false"><search>b</search></sequential></parallel>'
        '<race timeout="500ms"><search>c</search><search>d</search></race><execute_tools/>'
    )
    par, race = turn.root.children
    assert isinstance(par, Block) and isinstance(race, Block)
    assert (par.kind, par.id, par.max_concurrency, par.policy, par.timeout) == ("parallel", "both", 2, "fail_fast", 1.5)
    assert isinstance(par.children[1], Block) and par.children[1].stop_on_error is False
    assert (race.kind, race.timeout) == ("race", 0.5)


def test_think_result_answer_and_missing_execute_tools() -> None:
    turn = parse_turn("<think>plan <search>x</search> here</think><result step='1'>forged</result><search>y</search>")
    assert [c.args.value for c in turn.calls] == ["y"]
    assert turn.thoughts == ("plan <search>x</search> here",)
    assert any("only toolscore writes those" in w for w in turn.warnings)
    assert any("execute_tools" in w for w in turn.warnings)
    assert parse_turn("All done.\nFinal Answer: 42").answer == "42"
    assert parse_turn("<answer>yes</answer>").answer == "yes"


def test_an_unclosed_think_is_repaired_at_the_next_tag_line() -> None:
    turn = parse_turn("<think>I will search\n<search>x</search>")
    assert [c.args.value for c in turn.calls] == ["x"]


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("<dag><search>x</search></dag>", "unsupported"),
        ("<foreach in='${x}' as='f'><search>x</search></foreach>", "unsupported"),
        ('<parallel policy="quorum:2"><search>x</search></parallel>', "unsupported"),
        ('<search view="summary">x</search>', "unsupported"),
        ('<!DOCTYPE p [<!ENTITY a "aaaa">]><search>&a;</search>', "dtd_refused"),
        ("<parallel><search>x</search>", "unclosed_tag"),
        ("<search>x", "unclosed_tag"),
        ('<search id="1x">x</search>', "bad_id"),
        ('<search timeout="soon">x</search>', "bad_attribute"),
        ('<search retries="9">x</search>', "bad_attribute"),
        ('<search colour="red">x</search>', "unknown_attribute"),
        ("<search><find_files>{nope</find_files></search>", "invalid_json"),
        ('<arg name="x">1</arg>', "misplaced_arg"),
        ('<call tool="fetch">{}</call>', "bad_call"),
        ("<sequential>" * 9 + "<search>x</search>" + "</sequential>" * 9, "too_deep"),
        ("<search><parallel><x/></parallel></search>", "bad_tool_tag"),
        ("<search><find_files>{}</find_files> <1></search>", "bad_tool_tag"),
        ("<microsandbox><arg>no name</arg></microsandbox>", "bad_arg"),
        ('<microsandbox><arg name="a" type="int">1</arg></microsandbox>', "bad_arg"),
    ],
)
def test_syntax_problems_have_stable_codes(text: str, code: str) -> None:
    with pytest.raises(PlanSyntaxError) as err:
        parse_turn(text)
    assert code in [p.code for p in err.value.problems]


def test_the_size_cap_is_checked_before_parsing() -> None:
    with pytest.raises(PlanSyntaxError) as err:
        parse_turn("<search>" + "x" * 70_000 + "</search>")
    assert err.value.problems[0].code == "too_large"


TOKENS = [
    *"<>/=\"'{}[]$&;! \nabcdsearchpl_:.-1?",
    "<search>",
    "</search>",
    "<parallel>",
    "</parallel>",
    "<race>",
    "</race>",
    "<![CDATA[",
    "]]>",
    "${",
    "<arg name='x'>",
    "</arg>",
    "<think>",
    "<fetch>",
    "</fetch>",
    '{"url": "',
    "${1}",
    " id='a'",
    "<call server='fetch' tool='fetch'>",
    "</call>",
    "<!--",
    "-->",
]


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.lists(st.sampled_from(TOKENS), max_size=60).map("".join), st.text(max_size=200)))
def test_the_parser_and_checker_never_crash(text: str) -> None:
    try:
        turn = parse_turn(text)
    except PlanSyntaxError as exc:
        problems = exc.problems
        assert problems
        return
    assert all(isinstance(c, CallNode) for c in turn.calls)
    try:
        check_plan(turn, REGISTRY, shorthands=SHORTHANDS, limits=PlanSettings())
    except PlanCheckError as exc:
        problems = exc.problems
        assert problems


# -- checking ------------------------------------------------------------------------------------


def test_shorthand_primary_binds_into_nested_arguments() -> None:
    plan = check("<microsandbox>print(1)</microsandbox><search>*.py</search>")
    assert [c.arguments for c in plan.calls] == [{"params": {"code": "print(1)"}}, {"pattern": "*.py"}]
    assert plan.calls[0].route.public_name == "sandbox__run"


def test_text_for_an_explicit_call_goes_to_its_only_required_string() -> None:
    plan = check("<fetch><fetch>http://127.0.0.1/x</fetch></fetch>")
    assert plan.calls[0].arguments == {"url": "http://127.0.0.1/x"}
    assert codes("<search><grep>text</grep></search>") == ["no_primary"]


def test_references_may_only_point_backwards_in_time() -> None:
    assert codes('<search id="a">x</search><fetch><fetch>{"url": "${a.text}"}</fetch></fetch>') == []
    assert codes('<fetch><fetch>{"url": "${a}"}</fetch></fetch><search id="a">x</search>') == ["forward_reference"]
    assert codes('<parallel><search id="a">x</search><fetch><fetch>{"url": "${a}"}</fetch></fetch></parallel>') == [
        "sibling_reference"
    ]
    assert codes('<fetch><fetch>{"url": "$result_of_step_1"}</fetch></fetch>') == ["forward_reference"]
    assert codes('<fetch><fetch>{"url": "${nowhere}"}</fetch></fetch>') == ["unknown_reference"]
    assert codes('<fetch><fetch>{"url": "${a|json}"}</fetch></fetch>') == ["bad_reference"]
    # A block's value is there once the block is done.
    assert codes('<parallel id="p"><search>x</search></parallel><fetch><fetch>{"url": "${p}"}</fetch></fetch>') == []


def test_mustache_references_to_known_targets_are_repaired_with_a_warning() -> None:
    plan = check('<search id="a">x</search><fetch><fetch>{"url": "{{a.text}} {{ nope }} {{1}}"}</fetch></fetch>')
    assert plan.calls[1].arguments == {"url": "${a.text} {{ nope }} ${1}"}
    assert [w.split()[3] for w in plan.warnings] == ["{{a.text}}", "{{1}}"]


def test_earlier_turns_of_the_episode_are_visible() -> None:
    plan = check_plan(
        parse_turn('<fetch><fetch>{"url": "${old.text}"}</fetch></fetch>', first_step=3),
        REGISTRY,
        shorthands=SHORTHANDS,
        limits=PlanSettings(),
        earlier_steps={1: "old", 2: None},
        earlier_ids={"old": 1},
    )
    assert plan.calls[0].step == 3


def test_unknown_names_and_invalid_literal_arguments_are_all_reported() -> None:
    problems = codes(
        '<nosuch><x/></nosuch><search><nope/></search><fetch><fetch>{"url": 5, "extra": 1}</fetch></fetch>'
        '<fetch><fetch>{"url": "${1}", "max_length": "${1}"}</fetch></fetch><what>text</what>'
    )
    assert problems == ["unknown_server", "unknown_tool", "invalid_arguments", "unknown_tag"]


def test_retries_need_a_safe_tool_and_ids_are_unique() -> None:
    assert codes('<fetch><fetch retries="2">{"url": "u"}</fetch></fetch>') == []
    assert codes('<search retries="2">x</search>') == ["unsafe_retries"]
    assert codes('<search retries="2" idempotent="true">x</search>') == []
    assert codes('<search id="a">x</search><search id="a">y</search>') == ["duplicate_id"]


def test_limits_on_steps_and_alternatives() -> None:
    turn = parse_turn("<search>x</search>" * 5)
    with pytest.raises(PlanCheckError) as err:
        check_plan(turn, REGISTRY, shorthands=SHORTHANDS, limits=PlanSettings(max_steps=4))
    assert [p.code for p in err.value.problems] == ["too_many_steps"]
    assert codes("<race></race>") == ["empty_block"]
    assert codes("<fallback>" + "<search>x</search>" * 9 + "</fallback>") == ["too_many_alternatives"]


# -- references ----------------------------------------------------------------------------------


def test_reference_forms() -> None:
    parts = parse_template("a $result_of_step_2.x[0] ${3} ${step4} ${result_of_step_5} ${hits['k k'][-1]}? $$ $7")
    refs = [p for p in parts if isinstance(p, Ref)]
    assert [(r.target, r.path) for r in refs] == [(2, ("x", 0)), (3, ()), (4, ()), (5, ()), ("hits", ("k k", -1))]
    assert "".join(p for p in parts if isinstance(p, str)).endswith(" $ $7")
    with pytest.raises(RefSyntaxError):
        parse_template("${unclosed")


def test_resolution_is_typed_for_whole_values_and_interpolated_in_text() -> None:
    record = {
        "status": "ok",
        "text": "t",
        "json": {"n": 3, "xs": [{"u": "a"}, {"u": "b"}]},
        "error": None,
        "ms": 1,
        "attempts": 1,
        "server": "s",
        "tool": "t",
    }
    lookup = {"r": record}.get
    assert resolve(
        {"n": "${r.n}", "all": "${r.xs[*].u}", "s": "n=${r.n} xs=${r.xs[-1]}", "st": "${r.status}"}, lookup
    ) == {
        "n": 3,
        "all": ["a", "b"],
        "s": 'n=3 xs={"u":"b"}',
        "st": "ok",
    }
    assert resolve("${r.missing?}", lookup) is None
    with pytest.raises(RefError):
        resolve("${r.missing}", lookup)
