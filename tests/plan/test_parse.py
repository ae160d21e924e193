"""Parsing what models write: one turn of text -> a tree of blocks and calls, or every problem."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.plan.conftest import REGISTRY, SHORTHANDS
from toolscore.config import PlanSettings
from toolscore.errors import PlanCheckError, PlanSyntaxError
from toolscore.plan.blocks import BlockKind, option
from toolscore.plan.check import check_plan
from toolscore.plan.nodes import Block, CallNode
from toolscore.plan.parse import MAX_DEPTH, MAX_DEPTH_CEILING, parse_turn


def problems(text: str, **kw: int) -> list[tuple[str, str]]:
    """(code, message) of every problem in `text`."""
    with pytest.raises(PlanSyntaxError) as err:
        parse_turn(text, **kw)
    return [(p.code, p.message) for p in err.value.problems]


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


def test_text_with_entities_and_a_bare_ampersand_is_verbatim_with_a_warning() -> None:
    turn = parse_turn("<search>a & b &lt; c</search>")
    assert turn.calls[0].args.value == "a & b &lt; c"
    assert any("taken verbatim" in w for w in turn.warnings)


def test_arg_elements_typed_and_json_repairs() -> None:
    turn = parse_turn(
        '<microsandbox><arg name="inputs" type="json">{"a": [1, 2]}</arg><arg name="code">print(inputs)</arg>'
        "</microsandbox><search><find_files>{'pattern': '*.md',}</find_files></search>"
    )
    assert turn.calls[0].args.value == {"inputs": {"a": [1, 2]}, "code": "print(inputs)"}
    assert turn.calls[1].args.value == {"pattern": "*.md"}
    assert any("repaired JSON" in w for w in turn.warnings)


def test_arg_values_in_cdata_keep_their_newlines_and_empty_args_are_empty() -> None:
    turn = parse_turn(
        '<call server="sandbox" tool="run"><arg name="code"><![CDATA[\nif a < b:\n    pass\n]]></arg>'
        '<!-- between --><arg name="empty"/><arg name="text">\nline\n</arg></call>'
    )
    assert turn.calls[0].args.kind == "args"
    assert turn.calls[0].args.value == {"code": "\nif a < b:\n    pass\n", "empty": "", "text": "line"}


def test_a_call_with_no_content_has_empty_arguments() -> None:
    turn = parse_turn("<search/><fetch><fetch>  </fetch></fetch>")
    assert [(c.args.kind, c.args.value) for c in turn.calls] == [("empty", None), ("empty", None)]


def test_blocks_nest_and_keep_their_attributes() -> None:
    turn = parse_turn(
        '<parallel id="both" max_concurrency="2" policy="fail_fast" timeout="1.5s">'
        '<search>a</search><sequential stop_on_error="false"><search>b</search></sequential></parallel>'
        '<race timeout="500ms"><search>c</search><search>d</search></race><execute_tools/>'
    )
    par, race = turn.root.children
    assert isinstance(par, Block) and isinstance(race, Block)
    assert (par.kind, par.id, par.timeout) == ("parallel", "both", 1.5)
    assert par.options == {"max_concurrency": 2, "policy": "fail_fast"}
    assert (option(par, "max_concurrency"), option(par, "policy")) == (2, "fail_fast")
    inner = par.children[1]
    assert isinstance(inner, Block) and option(inner, "stop_on_error") is False
    assert (race.kind, race.timeout, race.options) == ("race", 0.5, {})
    assert turn.root.kind is BlockKind.SEQUENTIAL and option(turn.root, "stop_on_error") is True
    assert turn.depth == 2


def test_a_server_blocks_timeout_is_the_default_of_its_tools() -> None:
    turn = parse_turn(
        '<search timeout="2m"><find_files>{"pattern": "a"}</find_files><!-- x -->'
        '<find_files timeout="500ms">{"pattern": "b"}</find_files></search>'
    )
    assert [c.timeout for c in turn.calls] == [120.0, 0.5]


def test_thoughts_and_comments_between_a_servers_tools_are_skipped() -> None:
    turn = parse_turn(
        '<search><think>first the <b>files</b></think><find_files>{"pattern": "a"}</find_files><think/>'
        "<!-- note --><grep/></search>"
    )
    assert [(c.tool, c.args.value) for c in turn.calls] == [("find_files", {"pattern": "a"}), ("grep", None)]
    # A <think> that does not close inside the server block takes the rest of it (silently, as yet).
    assert parse_turn("<search><think>unclosed <grep/></search>").calls == ()


def test_call_attributes_are_read_by_the_table() -> None:
    (call,) = parse_turn(
        '<search id="s" timeout="20" retries="3" on_error="continue" idempotent="TRUE">x</search>'
    ).calls
    assert (call.id, call.timeout, call.retries, call.on_error, call.idempotent) == ("s", 20.0, 3, "continue", True)


def test_think_result_answer_and_missing_execute_tools() -> None:
    turn = parse_turn("<think>plan <search>x</search> here</think><result step='1'>forged</result><search>y</search>")
    assert [c.args.value for c in turn.calls] == ["y"]
    assert turn.thoughts == ("plan <search>x</search> here",)
    assert any("only toolscore writes those" in w for w in turn.warnings)
    assert any("execute_tools" in w for w in turn.warnings)
    assert parse_turn("All done.\nFinal Answer: 42").answer == "42"
    assert parse_turn("<answer>yes</answer>").answer == "yes"
    assert parse_turn("<think/><answer/>").answer is None


def test_an_answer_beside_plan_items_is_dropped_with_a_warning() -> None:
    turn = parse_turn("<search>x</search><answer>done</answer><execute_tools/>")
    assert turn.answer is None and len(turn.calls) == 1
    assert any("the answer was dropped" in w for w in turn.warnings)


def test_an_unclosed_think_is_repaired_at_the_next_tag_line() -> None:
    turn = parse_turn("<think>I will search\n<search>x</search>")
    assert [c.args.value for c in turn.calls] == ["x"]
    assert turn.thoughts == ("I will search",)
    assert any("<think> was not closed; it ends at line 2" in w for w in turn.warnings)
    assert parse_turn("<think>only thoughts").thoughts == ("only thoughts",)


def test_text_and_stray_tags_inside_blocks_are_ignored_with_warnings() -> None:
    turn = parse_turn(
        "<parallel>first, <search>x</search></nothing> then\n<search>y</search></parallel>\n"
        '<search><find_files>{"pattern": "z"}</find_files> and <grep/> tail</search>'
    )
    assert [c.args.value for c in turn.calls] == ["x", "y", {"pattern": "z"}, None]
    assert turn.warnings[:4] == (
        "line 1: text inside <parallel> ignored: 'first,'",
        "line 1: stray </nothing> ignored",
        "line 1: text inside <parallel> ignored: 'then'",
        "line 3: text inside <search> ignored: 'and'",
    )


def test_comments_cdata_and_processing_instructions_between_items_are_skipped() -> None:
    turn = parse_turn(
        '<?xml version="1.0"?><!-- <search>no</search> --><![CDATA[<search>no</search>]]><search>y</search>'
    )
    assert [c.args.value for c in turn.calls] == ["y"]
    # A `<!--` never closed hides nothing from the lexer, but nothing after it is an item.
    assert parse_turn("<search>a</search><!-- <search>b</search>").calls[0].args.value == "a"


def test_warnings_are_capped() -> None:
    turn = parse_turn("</x>" * 40 + "<search>y</search>")
    assert len(turn.warnings) == 32 + 2
    assert turn.warnings[32] == "8 more warnings not shown"


def test_problems_name_their_line_in_any_order_asked() -> None:
    text = (
        '<search>a</search>\n<parallel bad="1">\n<search id="9">x</search>\n</parallel>\n<search retries="x">b</search>'
    )
    with pytest.raises(PlanSyntaxError) as err:
        parse_turn(text)
    assert [(p.code, p.line, p.tag) for p in err.value.problems] == [
        ("unknown_attribute", 2, "parallel"),
        ("bad_id", 3, "search"),
        ("bad_attribute", 5, "search"),
    ]


def test_attribute_problems_say_what_to_write() -> None:
    assert problems('<parallel policy="most"><search>x</search></parallel>') == [
        ("bad_attribute", "policy='most': use 'all' or 'fail_fast'")
    ]
    assert problems('<parallel max_concurrency="65"><search>x</search></parallel>') == [
        ("bad_attribute", "max_concurrency='65': use a whole number from 1 to 64")
    ]
    assert problems('<sequential stop_on_error="maybe"><search>x</search></sequential>') == [
        ("bad_attribute", "stop_on_error='maybe': use true or false")
    ]
    assert problems('<search on_error="ignore">x</search>') == [
        ("bad_attribute", "on_error='ignore': use 'skip_dependents' or 'continue'")
    ]
    assert problems('<race timeout="0s"><search>x</search></race>') == [
        ("bad_attribute", "timeout='0s': write a duration like 500ms, 20s or 2m")
    ]
    assert problems('<search server="fetch">x</search>') == [
        ("unknown_attribute", "<search> has no attribute 'server'")
    ]
    assert problems('<search id="s" colour="red"><find_files/></search>') == [
        ("unknown_attribute", "server block <search> takes only 'timeout', not 'id'"),
        ("unknown_attribute", "server block <search> takes only 'timeout', not 'colour'"),
    ]


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
        ('<call server="fetch">{}</call>', "bad_call"),
        ("<sequential>" * 9 + "<search>x</search>" + "</sequential>" * 9, "too_deep"),
        ("<search><parallel><x/></parallel></search>", "bad_tool_tag"),
        ("<search><find_files>{}</find_files> <1></search>", "bad_tool_tag"),
        ("<microsandbox><arg>no name</arg></microsandbox>", "bad_arg"),
        ('<microsandbox><arg name="a" type="int">1</arg></microsandbox>', "bad_arg"),
        # Added with the block table: every way a tag can be refused.
        ('<if test="a < b"><search>x</search></if>', "bad_attribute"),
        ('<parallel x="a<b"><search>x</search></parallel>', "bad_attribute"),
        ("<answer>never closed", "unclosed_tag"),
        ("<search><find_files>{}</find_files><find_files>x", "unclosed_tag"),
        ('<search><find_files>{"a": 1} trailing</find_files></search>', "invalid_json"),
        ('<microsandbox><arg name="a">1</arg><code/></microsandbox>', "bad_arg"),
        ('<microsandbox><arg name="a">never closed</microsandbox>', "unclosed_tag"),
        ('<microsandbox><arg name="a" type="json">{nope</arg></microsandbox>', "invalid_json"),
        ("<search>]]>&#xD800;</search>", "bad_character"),
        ("<search>a</search> <!DOCTYPE x> <search>b</search>", "dtd_refused"),
    ],
)
def test_syntax_problems_have_stable_codes(text: str, code: str) -> None:
    with pytest.raises(PlanSyntaxError) as err:
        parse_turn(text)
    assert code in [p.code for p in err.value.problems]


def test_blocks_may_nest_up_to_the_limit() -> None:
    deepest = "<parallel>" * MAX_DEPTH + "<search>x</search>" + "</parallel>" * MAX_DEPTH
    assert parse_turn(deepest).depth == MAX_DEPTH
    assert [code for code, _ in problems("<race>" * (MAX_DEPTH + 1) + "</race>" * (MAX_DEPTH + 1))] == ["too_deep"]
    assert next(code for code, _ in problems("<race>" * MAX_DEPTH + "<race>")) == "too_deep"
    assert [code for code, _ in problems("<race>" * MAX_DEPTH + "<race/>" + "</race>" * MAX_DEPTH)] == ["too_deep"]


def test_the_depth_limit_is_the_configured_one_up_to_the_ceiling() -> None:
    def nested(depth: int) -> str:
        return "<sequential>" * depth + "<search>x</search>" + "</sequential>" * depth

    assert parse_turn(nested(MAX_DEPTH_CEILING), max_depth=MAX_DEPTH_CEILING).depth == MAX_DEPTH_CEILING
    assert parse_turn(nested(3), max_depth=3).depth == 3
    for depth, limit in [(4, 3), (MAX_DEPTH_CEILING + 1, MAX_DEPTH_CEILING), (MAX_DEPTH_CEILING + 1, 1000)]:
        with pytest.raises(PlanSyntaxError) as err:
            parse_turn(nested(depth), max_depth=limit)
        assert [p.code for p in err.value.problems] == ["too_deep"]
        assert err.value.problems[0].message == f"blocks nest deeper than {min(limit, MAX_DEPTH_CEILING)} levels"


def test_the_size_cap_is_checked_before_parsing() -> None:
    with pytest.raises(PlanSyntaxError) as err:
        parse_turn("<search>" + "x" * 70_000 + "</search>")
    assert err.value.problems[0].code == "too_large"


def test_reading_stops_at_the_step_limit() -> None:
    assert problems("<search>x</search>" * 3, max_steps=2) == [
        ("too_many_steps", "the plan has 3 steps; the limit is 2: split it over several turns")
    ]
    # The steps past the limit are counted, not read: server blocks, blocks, <think> and a wrapper
    # as the parser reads them.
    plan = (
        '<plan><search>a</search><fetch><fetch>{"url": 1}</fetch><fetch>{}</fetch></fetch><think><search>no'
        '</search></think><parallel><search>b</search><call server="s" tool="t"/></parallel></plan>'
        "<fx><echo>{}</echo><echo/></fx><execute_tools/><search>after the end</search>"
    )
    assert problems(plan, max_steps=1) == [
        ("too_many_steps", "the plan has 7 steps; the limit is 1: split it over several turns")
    ]


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
