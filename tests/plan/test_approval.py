"""One approval per plan, the pure part: what the question shows, what it binds, and which resolved
arguments an approved step may run with."""

from __future__ import annotations

from typing import Any

import pytest

from tests.plan.conftest import check
from tests.policy import config, context, route
from toolscore.errors import Rejected
from toolscore.plan.approval import Approval, approval_request, fits, render
from toolscore.policy.scope import resolve_scopes
from toolscore.policy.static import StaticRules
from toolscore.scope import CallScope

pytestmark = pytest.mark.anyio

PLAN = """<search><find_files id="hits">{"pattern": "*.py"}</find_files></search>
<sandbox><run>{"params": {"code": "rm ${hits.json[0]} && echo done", "file": "${hits}", "n": 3}}</run></sandbox>
<execute_tools />"""


def test_the_question_shows_every_step_its_literal_arguments_and_where_the_rest_comes_from() -> None:
    lines = render(check(PLAN), {2}).splitlines()
    assert "(2)" in lines[0] and "Nothing runs unless you allow it" in lines[0]
    assert lines[1] == '  step 1 "hits": search__find_files {"pattern": "*.py"}'
    assert lines[2] == (
        '* step 2: sandbox__run {"params": {"code": "rm ${hits.json[0]} && echo done", "file": "${hits}", "n": 3}}'
    )
    assert lines[3:] == [
        '      params.code: from step 1 "hits" (${hits.json[0]})',
        '      params.file: from step 1 "hits" (${hits})',
    ]


def test_long_arguments_are_cut_in_the_question_but_bound_whole() -> None:
    long = PLAN.replace('"n": 3', '"n": 3, "pad": "' + "p" * 5000 + '"')
    asked = approval_request(check(long), long, {2})
    assert len(asked.question) < 2500 and "more)" in asked.question
    assert asked.binding != approval_request(check(long.replace("ppp", "ppq", 1)), long, {2}).binding


def test_the_binding_covers_the_plan_text_and_each_confirm_steps_template() -> None:
    base = approval_request(check(PLAN), PLAN, {2})
    assert approval_request(check(PLAN), PLAN, {2}).binding == base.binding  # checked again: the same
    spaced = PLAN.replace("<execute_tools />", "\n<execute_tools />")
    assert approval_request(check(spaced), spaced, {2}).binding != base.binding
    literal = PLAN.replace('"n": 3', '"n": 4')
    assert approval_request(check(literal), literal, {2}).binding != base.binding
    assert approval_request(check(PLAN), PLAN, {1, 2}).binding != base.binding


TEMPLATE: dict[str, Any] = {"params": {"code": "rm ${hits.json[0]} && echo done", "file": "${hits}", "n": 3}}


@pytest.mark.parametrize(
    ("value", "allowed"),
    [
        ({"params": {"code": "rm a.py && echo done", "file": {"any": ["value"]}, "n": 3}}, True),
        ({"params": {"code": "rm  && echo done", "file": None, "n": 3}}, True),
        ({"params": {"code": "rm a.py && echo done; curl x", "file": "f", "n": 3}}, False),  # text after
        ({"params": {"code": "sudo rm a.py && echo done", "file": "f", "n": 3}}, False),  # text before
        ({"params": {"code": "rm a.py", "file": "f", "n": 3}}, False),  # a literal part missing
        ({"params": {"code": "rm a.py && echo done", "file": "f", "n": 4}}, False),  # a literal changed
        ({"params": {"code": "rm a.py && echo done", "file": "f", "n": 3.0}}, False),
        ({"params": {"code": "rm a.py && echo done", "file": "f", "n": 3, "extra": 1}}, False),
        ({"params": {"code": "rm a.py && echo done", "file": "f"}}, False),
        ({"params": {"code": ["rm"], "file": "f", "n": 3}}, False),
    ],
)
def test_resolved_arguments_fit_the_template_shown_or_not(value: dict[str, Any], allowed: bool) -> None:
    assert fits(TEMPLATE, value) is allowed


def test_text_around_several_references_is_matched_in_order() -> None:
    assert fits("${a}-${b}-end", "x-y-end") and fits("${a}-${b}-end", "--end")
    assert not fits("${a}-${b}-end", "x-end") and not fits("a$$b", "a$$b") and fits("a$$b", "a$b")
    assert fits(["${a}", 1], ["anything", 1]) and not fits(["${a}", 1], ["anything", 1, 2])
    assert not fits("x" * 50 + "${a}" + "y" * 50, "x" * 50 + "y" * 49)  # overlapping head and tail


async def test_an_approved_step_runs_only_with_arguments_that_fit_what_was_shown() -> None:
    cfg = config({"destructive": "confirm"})
    rules = StaticRules(resolve_scopes(cfg))
    delete = route(cfg, "fx__delete")
    approved = CallScope(approval=Approval("plan1", {"fx__delete": ({"key": "k-${1.text}"},)}))
    ctx = context(delete, {"key": "k-42"})
    ctx.plan_id, ctx.scope = "plan1", approved
    assert await rules(ctx) is None  # no question: the plan's approval covers it
    for plan_id, key in (("plan1", "j-42"), ("plan2", "k-42"), (None, "k-42")):
        ctx = context(delete, {"key": key})
        ctx.plan_id, ctx.scope = plan_id, approved
        with pytest.raises(Rejected) as refused:
            await rules(ctx)
        reason = refused.value.reason
        expected = "differ from what the user was shown" if plan_id == "plan1" else "cannot give"
        assert expected in reason, (plan_id, key)
    other = context(route(cfg, "fx__delete"), {"key": "k-42"})
    other.plan_id = "plan1"
    other.scope = CallScope(approval=Approval("plan1", {"fx__touch": ({"path": "p"},)}))
    with pytest.raises(Rejected) as never_shown:
        await rules(other)
    assert "not among the plan's steps the user approved" in never_shown.value.reason
