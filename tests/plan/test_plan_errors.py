"""The `<plan_error>` wording, one plan per code: a contract, since models act on these messages.

Each message names where the problem is and what to change. Changing one changes the contract:
say so in CHANGELOG.md.
"""

# ruff: noqa: E501  (each message is one exact string)

from __future__ import annotations

from typing import Any

import pytest

from tests.plan.conftest import REGISTRY, SHORTHANDS
from toolscore.config import PlanSettings
from toolscore.errors import PlanCheckError, PlanSyntaxError
from toolscore.plan.check import check_plan
from toolscore.plan.parse import parse_turn
from toolscore.plan.transcript import render_plan_errors

CONTRACT: dict[str, tuple[str, dict[str, Any], str]] = {
    "too_large": (
        "<search>" + "x" * 70000 + "</search>",
        {},
        '<plan_error code="too_large">the plan is 70017 bytes; the limit is 65536</plan_error>',
    ),
    "too_deep": (
        "<sequential>" * 9 + "<search>x</search>" + "</sequential>" * 9,
        {},
        '<plan_error code="too_deep" tag="sequential" line="1">blocks nest deeper than 8 levels</plan_error>',
    ),
    "too_many_steps": (
        "<search>x</search>" * 3,
        {"max_steps": 2},
        '<plan_error code="too_many_steps" tag="search" line="1">the plan has 3 steps; the limit is 2: split it over several turns</plan_error>',
    ),
    "too_many_alternatives": (
        "<race>" + "<search>x</search>" * 9 + "</race>",
        {},
        '<plan_error code="too_many_alternatives" tag="race" line="1">&lt;race&gt; has 9 alternatives; the limit is 8</plan_error>',
    ),
    "empty_block": (
        "<race></race><search>x</search>",
        {},
        '<plan_error code="empty_block" tag="race" line="1">&lt;race&gt; needs at least one alternative</plan_error>',
    ),
    "dtd_refused": (
        "<search>a</search><!DOCTYPE x>",
        {},
        '<plan_error code="dtd_refused" line="1">DTDs and entity declarations are not allowed in a plan</plan_error>',
    ),
    "bad_character": (
        "<search>&#xD800;</search>",
        {},
        '<plan_error code="bad_character" step="1" tag="search" line="1">step 1 &lt;search&gt;: &amp;#xD800; is not a Unicode character (surrogates and values above #x10FFFF are not)</plan_error>',
    ),
    "unclosed_tag": (
        "<parallel><search>x</search>",
        {},
        '<plan_error code="unclosed_tag" tag="parallel" line="1">&lt;parallel&gt; is never closed: add &lt;/parallel&gt;</plan_error>',
    ),
    "unsupported": (
        "<foreach><search>x</search></foreach>",
        {},
        '<plan_error code="unsupported" tag="foreach" line="1">&lt;foreach&gt; is plan language v2 and not available yet</plan_error>',
    ),
    "unknown_attribute": (
        '<search retry="2">x</search>',
        {},
        '<plan_error code="unknown_attribute" step="1" tag="search" line="1">&lt;search&gt; has no attribute \'retry\' (did you mean \'retries\'?)</plan_error>',
    ),
    "bad_attribute": (
        '<fetch><fetch retries="9">{"url": "u"}</fetch></fetch>',
        {},
        '<plan_error code="bad_attribute" step="1" tag="fetch" line="1">retries=\'9\': use a whole number from 0 to 5</plan_error>',
    ),
    "bad_id": (
        '<search id="1x">x</search>',
        {},
        '<plan_error code="bad_id" step="1" tag="search" line="1">id=\'1x\' must match [A-Za-z_][A-Za-z0-9_]{0,63}</plan_error>',
    ),
    "duplicate_id": (
        '<search id="a">x</search><search id="a">y</search>',
        {},
        '<plan_error code="duplicate_id" step="2" tag="search" id="a" line="1">id \'a\' is used twice; ids are unique per episode: rename one</plan_error>',
    ),
    "bad_call": (
        '<call server="fetch">{}</call>',
        {},
        '<plan_error code="bad_call" tag="call" line="1">&lt;call&gt; needs server="..." and tool="..."</plan_error>',
    ),
    "bad_tool_tag": (
        "<search><parallel/></search>",
        {},
        '<plan_error code="bad_tool_tag" tag="parallel" line="1">&lt;parallel&gt; cannot be a tool of server &lt;search&gt;; use &lt;call server="search" tool="parallel"&gt;</plan_error>',
    ),
    "misplaced_arg": (
        '<arg name="x">1</arg><search>x</search>',
        {},
        '<plan_error code="misplaced_arg" tag="arg" line="1">&lt;arg&gt; belongs inside a call or shorthand</plan_error>',
    ),
    "bad_arg": (
        "<microsandbox><arg>x</arg></microsandbox>",
        {},
        '<plan_error code="bad_arg" step="1" tag="arg" line="1">step 1 &lt;microsandbox&gt;: &lt;arg&gt; needs name="..."</plan_error>',
    ),
    "invalid_json": (
        '<fetch><fetch>{"url": "u" "max_length": 3}</fetch></fetch>',
        {},
        '<plan_error code="invalid_json" step="1" tag="fetch" line="1">step 1 &lt;fetch&gt;: arguments are not valid JSON: Expecting \',\' delimiter at line 1 column 13: \'{"url": "u" ⟨here⟩"max_length": 3}\'; write one JSON object with double-quoted keys and strings, true/false/null, no comments</plan_error>',
    ),
    "unknown_tag": (
        "<find_files>x</find_files>",
        {},
        '<plan_error code="unknown_tag" step="1" tag="find_files" line="1">&lt;find_files&gt;: a tool needs its server: write &lt;search&gt;&lt;find_files&gt;...&lt;/find_files&gt;&lt;/search&gt;</plan_error>',
    ),
    "unknown_server": (
        "<serch><find_files>x</find_files></serch>",
        {},
        '<plan_error code="unknown_server" step="1" tag="find_files" line="1">no server \'serch\' is connected (did you mean \'search\'?); servers: search, fetch, sandbox</plan_error>',
    ),
    "unknown_tool": (
        "<search><find_file>{}</find_file></search>",
        {},
        '<plan_error code="unknown_tool" step="1" tag="find_file" line="1">server \'search\' has no tool \'find_file\' (did you mean \'find_files\'?); its tools: find_files, grep</plan_error>',
    ),
    "no_primary": (
        "<search><grep>x</grep></search>",
        {},
        '<plan_error code="no_primary" step="1" tag="grep" line="1">text content needs a parameter to go to: tool \'grep\' has no single required string parameter; pass a JSON object</plan_error>',
    ),
    "invalid_arguments": (
        '<fetch><fetch>{"url": 3}</fetch></fetch>',
        {},
        '<plan_error code="invalid_arguments" step="1" tag="fetch" line="1">fetch__fetch: url: 3 is not of type \'string\'</plan_error>',
    ),
    "bad_reference": (
        '<search id="a">x</search><search>${a + 1}</search>',
        {},
        '<plan_error code="bad_reference" step="2" tag="search" line="1">${a + 1}: not a reference; write ${N}, ${id} or ${id.path[0]} (a JavaScript template literal or a shell ${VAR} meant as text is written $${...})</plan_error>',
    ),
    "forward_reference": (
        '<search>${b.text}</search><search id="b">x</search>',
        {},
        '<plan_error code="forward_reference" step="1" tag="search" ref="${b.text}" line="1">step 1 uses ${b.text}, which is step 2 and runs later; move step 1 after it</plan_error>',
    ),
    "sibling_reference": (
        '<parallel><search id="a">x</search><search>${a.text}</search></parallel>',
        {},
        '<plan_error code="sibling_reference" step="2" tag="search" ref="${a.text}" line="1">step 2 uses ${a.text}, which runs beside it in a &lt;parallel&gt;, &lt;race&gt; or &lt;fallback&gt;; put the source before that block</plan_error>',
    ),
    "unknown_reference": (
        "<search>${hits}</search>",
        {},
        '<plan_error code="unknown_reference" step="1" tag="search" ref="${hits}" line="1">step 1 uses ${hits}: no step or id \'hits\'; if ${hits} is meant as text (a JavaScript template literal, a shell variable), write $${hits}</plan_error>',
    ),
    "unsafe_retries": (
        '<search><grep retries="2">{"q": "x"}</grep></search>',
        {},
        '<plan_error code="unsafe_retries" step="1" tag="grep" line="1">retries on \'search__grep\', which is not annotated readOnly or idempotent; add idempotent="true" if repeating it is harmless</plan_error>',
    ),
}


def prepare(plan: str, limits: dict[str, Any]) -> None:
    """Parse (collecting problems) and check, as `orchestrate` does."""
    turn = parse_turn(plan, collect=True, max_steps=limits.get("max_steps", 1000))
    check_plan(turn, REGISTRY, shorthands=SHORTHANDS, limits=PlanSettings(**limits))


@pytest.mark.parametrize("code", CONTRACT)
def test_each_code_reads_exactly_so(code: str) -> None:
    plan, limits, expected = CONTRACT[code]
    with pytest.raises((PlanSyntaxError, PlanCheckError)) as err:
        prepare(plan, limits)
    lines = render_plan_errors(err.value.problems).split("\n")
    assert lines == [expected, "Nothing was run. Fix the plan and send it again."]


def test_every_code_of_the_docs_is_in_the_contract() -> None:
    documented = {
        "too_large",
        "too_deep",
        "too_many_steps",
        "too_many_alternatives",
        "empty_block",
        "dtd_refused",
        "bad_character",
        "unclosed_tag",
        "unsupported",
        "unknown_attribute",
        "bad_attribute",
        "bad_id",
        "duplicate_id",
        "bad_call",
        "bad_tool_tag",
        "misplaced_arg",
        "bad_arg",
        "invalid_json",
        "unknown_tag",
        "unknown_server",
        "unknown_tool",
        "no_primary",
        "invalid_arguments",
        "bad_reference",
        "forward_reference",
        "sibling_reference",
        "unknown_reference",
        "unsafe_retries",
    }  # `empty_plan` is the orchestrate tool's own (tests/plan/test_tool.py)
    assert set(CONTRACT) == documented
