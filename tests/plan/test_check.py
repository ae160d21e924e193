"""Checking a parsed plan against the live tools before anything runs: every problem, at once."""

from __future__ import annotations

import pytest

from tests.conftest import make_config
from tests.plan.conftest import REGISTRY, SHORTHANDS, check, codes, tool
from toolscore.config import PlanSettings, Shorthand
from toolscore.downstream.registry import build_registry
from toolscore.errors import PlanCheckError
from toolscore.plan.check import check_plan, shorthand_table
from toolscore.plan.nodes import Block, CheckedBlock
from toolscore.plan.parse import parse_turn


def messages(text: str) -> list[str]:
    with pytest.raises(PlanCheckError) as err:
        check(text)
    return [p.message for p in err.value.problems]


def test_shorthand_primary_binds_into_nested_arguments() -> None:
    plan = check("<microsandbox>print(1)</microsandbox><search>*.py</search>")
    assert [c.arguments for c in plan.calls] == [{"params": {"code": "print(1)"}}, {"pattern": "*.py"}]
    assert plan.calls[0].route.public_name == "sandbox__run"


def test_text_for_an_explicit_call_goes_to_its_only_required_string() -> None:
    plan = check("<fetch><fetch>http://127.0.0.1/x</fetch></fetch>")
    assert plan.calls[0].arguments == {"url": "http://127.0.0.1/x"}
    assert codes("<search><grep>text</grep></search>") == ["no_primary"]


def test_a_shorthand_without_a_primary_takes_no_text() -> None:
    shorthands = shorthand_table([("search", (Shorthand(tag="find", tool="find_files"),))])
    turn = parse_turn("<find>x</find>")
    with pytest.raises(PlanCheckError) as err:
        check_plan(turn, REGISTRY, shorthands=shorthands, limits=PlanSettings())
    assert [p.code for p in err.value.problems] == ["no_primary"]
    assert "shorthand <find> has no 'primary' parameter configured" in err.value.problems[0].message
    plan = check_plan(
        parse_turn('<find>{"pattern": "x"}</find>'), REGISTRY, shorthands=shorthands, limits=PlanSettings()
    )
    assert plan.calls[0].arguments == {"pattern": "x"}


def test_the_first_server_to_bind_a_tag_keeps_it() -> None:
    table = shorthand_table(
        [
            ("a", (Shorthand(tag="t", tool="one"),)),
            ("b", (Shorthand(tag="t", tool="two"), Shorthand(tag="u", tool="x"))),
        ]
    )
    assert {tag: (server, binding.tool) for tag, (server, binding) in table.items()} == {
        "t": ("a", "one"),
        "u": ("b", "x"),
    }


def test_the_checked_tree_mirrors_the_parsed_one() -> None:
    plan = check('<parallel id="p"><search id="a">x</search><race><search>y</search></race></parallel>')
    (par,) = plan.root.children
    assert isinstance(par, CheckedBlock) and par.block.id == "p"
    assert [type(c).__name__ for c in par.children] == ["CheckedCall", "CheckedBlock"]
    assert isinstance(plan.ids["p"], Block) and plan.ids["a"] == 1
    assert [c.step for c in plan.calls] == [1, 2]


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


def test_a_sibling_reference_names_the_blocks_that_run_their_children_beside_each_other() -> None:
    assert messages('<race><search id="a">x</search><search>${a}</search></race>') == [
        "step 2 uses ${a}, which runs beside it in a <parallel>, <race> or <fallback>; put the source before that block"
    ]


def test_mustache_references_to_known_targets_are_repaired_with_a_warning() -> None:
    plan = check('<search id="a">x</search><fetch><fetch>{"url": "{{a.text}} {{ nope }} {{1}}"}</fetch></fetch>')
    assert plan.calls[1].arguments == {"url": "${a.text} {{ nope }} ${1}"}
    assert plan.warnings == (
        "step 2: read {{a.text}} as ${a.text}, {{1}} as ${1} (template braces {{...}}); "
        "write references as ${id.path} or ${N.path}",
    )


def test_earlier_turns_of_the_episode_are_visible() -> None:
    plan = check_plan(
        parse_turn('<fetch><fetch>{"url": "${old.text} ${2}"}</fetch></fetch>', first_step=3),
        REGISTRY,
        shorthands=SHORTHANDS,
        limits=PlanSettings(),
        earlier_steps={1: "old", 2: None},
        earlier_ids={"old": 1},
    )
    assert plan.calls[0].step == 3
    assert [r.target for r in plan.calls[0].refs] == ["old", 2]


def test_an_id_of_an_earlier_turn_cannot_be_used_again() -> None:
    assert codes('<search id="old">x</search>', earlier_ids={"old": 1}) == ["duplicate_id"]


def test_unknown_names_and_invalid_literal_arguments_are_all_reported() -> None:
    problems = codes(
        '<nosuch><x/></nosuch><search><nope/></search><fetch><fetch>{"url": 5, "extra": 1}</fetch></fetch>'
        '<fetch><fetch>{"url": "${1}", "max_length": "${1}"}</fetch></fetch><what>text</what>'
    )
    assert problems == ["unknown_server", "unknown_tool", "invalid_arguments", "unknown_tag"]


def test_unknown_names_are_told_what_there_is() -> None:
    assert messages("<nosuch><x/></nosuch><search><nope/></search><fetch>x</fetch>") == [
        "no server 'nosuch' is connected; servers: search, fetch, sandbox",
        "server 'search' has no tool 'nope'; its tools: find_files, grep",
        "<fetch>: server 'fetch' has no shorthand configured; write <fetch><tool>{...}</tool></fetch>",
    ]
    assert messages("<what>x</what>") == [
        "<what>: unknown tag; servers: search, fetch, sandbox; shorthand tags: <microsandbox>, <search>"
    ]


def test_a_shorthand_bound_to_a_missing_tool_is_an_unknown_tool() -> None:
    shorthands = shorthand_table([("search", (Shorthand(tag="gone", tool="deleted"),))])
    with pytest.raises(PlanCheckError) as err:
        check_plan(parse_turn("<gone>x</gone>"), REGISTRY, shorthands=shorthands, limits=PlanSettings())
    assert [(p.code, p.message) for p in err.value.problems] == [
        ("unknown_tool", "<gone> is bound to search.deleted, which is not available")
    ]


def test_invalid_arguments_name_the_place_in_them() -> None:
    assert messages('<call server="sandbox" tool="run">{"params": [1]}</call><fetch><fetch>{}</fetch></fetch>') == [
        "sandbox__run: params: [1] is not of type 'object'",
        "fetch__fetch: (top level): 'url' is a required property",
    ]
    nested = tool(
        "deep", {"items": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}}}}
    )
    registry = build_registry({"s": [nested]}, make_config({"s": {"command": "x"}}))
    turn = parse_turn('<s><deep>{"items": [{"n": 1}, {"n": "two"}]}</deep></s>')
    with pytest.raises(PlanCheckError) as err:
        check_plan(turn, registry, shorthands={}, limits=PlanSettings())
    assert [p.message for p in err.value.problems] == ["s__deep: items[1].n: 'two' is not of type 'integer'"]


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
    assert codes("<fallback/>") == ["empty_block"]
    assert codes("<fallback>" + "<search>x</search>" * 9 + "</fallback>") == ["too_many_alternatives"]
    # A parallel is no block of alternatives: empty is fine, and so are many.
    assert codes("<parallel/><parallel>" + "<search>x</search>" * 9 + "</parallel>") == []
