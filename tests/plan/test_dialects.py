"""The dialects models are trained on: references (NESTFUL, ReWOO, LLMCompiler, templates, <ref>)
and call forms (ReAct, <invoke>, <plan> wrappers), each read where it is unambiguous, refused with
the fix otherwise, and never leaving a stray character beside a reference.

The same dialects run end to end, in bulk and with gold answers, in `test_dialect_corpus.py`.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from tests.plan.conftest import REGISTRY, SHORTHANDS
from tests.security.test_plan_hardening import assert_linear, fill
from toolscore.config import PlanSettings
from toolscore.errors import PlanCheckError, PlanSyntaxError, RefError, RefSyntaxError
from toolscore.plan.check import check_plan
from toolscore.plan.dialects import Reading, Targets, read_references, read_string
from toolscore.plan.nodes import ArgsSpec, CheckedPlan
from toolscore.plan.parse import parse_turn
from toolscore.plan.refs import Ref, parse_template, resolve
from toolscore.plan.values import repair_json


def prepare(text: str, **kw: Any) -> CheckedPlan:
    """As `orchestrate` does: parse collecting problems, then check."""
    return check_plan(parse_turn(text, collect=True), REGISTRY, shorthands=SHORTHANDS, limits=PlanSettings(), **kw)


def refused(text: str) -> list[tuple[str, str]]:
    with pytest.raises((PlanSyntaxError, PlanCheckError)) as err:
        prepare(text)
    return [(p.code, p.message) for p in err.value.problems]


KNOWN = Targets(lambda target: target in (1, 2, 3, "var_1", "var_2", "a", "s1", "E7"), calls=(1, 2, 3), labelled=True)
"""Steps 1-3 of this turn, and ids var_1, var_2, a, s1 and E7 (then `#E<n>` names ids only)."""
POSITIONAL = Targets(lambda target: target in (1, 2, 3, "a"), calls=(1, 2, 3))


def read(text: str, targets: Targets = KNOWN) -> tuple[str, list[str], list[str]]:
    """The string as read, the dialects read in it, and the codes of what was refused."""
    out, readings, refusals = read_string(text, targets)
    return out, [r.dialect for r in readings], [r.code for r in refusals]


# -- each dialect ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "targets", "expected"),
    [
        # NESTFUL: the closing `$` goes with the reference, in a whole value or inside text.
        ("$var_1.result$", KNOWN, ("${var_1.result}", ["NESTFUL"], [])),
        ("$var_1$", KNOWN, ("${var_1}", ["NESTFUL"], [])),
        ("[$var_1.result$, $var_2.result[0]$]", KNOWN, ("[${var_1.result}, ${var_2.result[0]}]", ["NESTFUL"] * 2, [])),
        ("$HOME$PATH and $x$", KNOWN, ("$HOME$PATH and $x$", [], [])),  # naming nothing inside text: text
        ("$$var_1.result$", KNOWN, ("$$var_1.result$", [], [])),  # `$$` is a literal `$`, as always
        ("$var_9.result$", KNOWN, ("$var_9.result$", [], ["unknown_reference"])),  # a whole value names nothing
        ("x $var_9.result$ y", KNOWN, ("x $var_9.result$ y", [], ["unknown_reference"])),  # a label names nothing
        ("$var_1.x$var_2.y", KNOWN, ("$var_1.x$var_2.y", [], ["bad_reference"])),  # the `$` closes or opens
        ("$var_1.x$${a}", KNOWN, ("$var_1.x$${a}", [], ["bad_reference"])),
        ("$var_1.x$HOME", KNOWN, ("${var_1.x}HOME", ["NESTFUL"], [])),  # what follows names nothing
        # ReWOO: the call with id E<n> when ids are so named, else the n-th call of the turn.
        ("#E7", KNOWN, ("${E7}", ["ReWOO"], [])),
        ("#E1", KNOWN, ("#E1", [], ["unknown_reference"])),  # ids are E-named: positions do not count
        ("sum of #E1 and #E3.items[0]", POSITIONAL, ("sum of ${1} and ${3.items[0]}", ["ReWOO"] * 2, [])),
        ("#E4", POSITIONAL, ("#E4", [], ["unknown_reference"])),
        ("color: #E4; page#E1 &#E1 #E1x", POSITIONAL, ("color: #E4; page#E1 &#E1 #E1x", [], [])),
        # LLMCompiler: `$1` as a whole value or with a path; inside text without one it is money.
        ("$1", KNOWN, ("${1}", ["LLMCompiler"], [])),
        ("$2.items[0]", KNOWN, ("${2.items[0]}", ["LLMCompiler"], [])),
        ("${1}", KNOWN, ("${1}", [], [])),  # already canonical
        ("costs $1 or $9.50, awk '{print $1}'", KNOWN, ("costs $1 or $9.50, awk '{print $1}'", [], [])),
        ("$9", KNOWN, ("$9", [], [])),  # a price as a whole value: no step 9
        ("$9.result", KNOWN, ("$9.result", [], ["unknown_reference"])),  # a path: a reference, to nothing
        # A `$` without braces.
        ("$a.text and $step2", KNOWN, ("${a.text} and ${step2}", ["bare $"] * 2, [])),
        ("$step_9", KNOWN, ("$step_9", [], ["unknown_reference"])),
        ("$result_of_step_1 ${a} $$a", KNOWN, ("$result_of_step_1 ${a} $$a", [], [])),  # canonical, untouched
        # Templates: two or three braces, or `${{...}}`, each side matching.
        ("{{step1.output}} {{ a }} {{{a.x}}}", KNOWN, ("${step1.output} ${a} ${a.x}", ["template"] * 3, [])),
        ("${{ a.b }}", KNOWN, ("${a.b}", ["template"], [])),
        ("{{ nope }} {{a | upper}} ${{ secrets.X }}", KNOWN, ("{{ nope }} {{a | upper}} ${{ secrets.X }}", [], [])),
        ("{{{a}} {{a}}}", KNOWN, ("{{{a}} {{a}}}", [], ["bad_reference", "bad_reference"])),
        # <ref> elements: id or step, a path with or without `.` or `$.`.
        ('<ref id="s1" path="items[0]"/>', KNOWN, ("${s1.items[0]}", ["<ref>"], [])),
        ("<REF step='2' path='$.a.b'></ref>", KNOWN, ("${2.a.b}", ["<ref>"], [])),
        ('x <ref id="a"/> y', KNOWN, ("x ${a} y", ["<ref>"], [])),
        ('<ref id="zz"/>', KNOWN, ('<ref id="zz"/>', [], ["unknown_reference"])),
        ('<ref id="a" path="x[?(@.y)]"/>', KNOWN, ('<ref id="a" path="x[?(@.y)]"/>', [], ["bad_reference"])),
        ('<ref id="a" step="1"/><ref/><ref id="a" at="x"/><ref id="1x"/>', KNOWN, (None, [], ["bad_reference"] * 4)),
        ("<refs> <ref id=a/>", KNOWN, ("<refs> <ref id=a/>", [], [])),  # not the element: text
    ],
)
def test_each_dialect_is_read_only_where_it_is_unambiguous(
    written: str, targets: Targets, expected: tuple[str | None, list[str], list[str]]
) -> None:
    out, dialects, codes = read(written, targets)
    assert (out if expected[0] is not None else None, dialects, codes) == expected


def test_a_whole_value_stays_whole_so_the_value_keeps_its_json_type() -> None:
    value, readings, _ = read_references(
        {"n": "$var_1.result$", "xs": ["#E2", "$1"], "r": '<ref id="a" path="k"/>', "s": "n=$var_1.result$"},
        Targets(lambda target: target in (1, 2, "var_1", "a"), calls=(1, 2)),
    )
    records = {
        1: {"json": {"result": 115}},
        2: {"json": [67.73, 19.85]},
        "var_1": {"json": {"result": 115}},
        "a": {"json": {"k": None}},
    }
    lookup = {k: {"status": "ok", "text": "", "error": None, **v} for k, v in records.items()}.get
    assert resolve(value, lookup) == {"n": 115, "xs": [[67.73, 19.85], {"result": 115}], "r": None, "s": "n=115"}
    assert len(readings) == 5


# -- the property: nothing outside a recognised reference changes --------------------------------------

_PIECES = [
    *"$#{}<>/'\"[]. _-:;&?!",
    *"aEx19",
    "$$",
    "${",
    "{{",
    "}}",
    "#E",
    "<ref ",
    "/>",
    "$var_1",
    "$a",
    "$1",
    "$9",
    ".result",
    "[0]",
    " id='a'",
    'path="k"',
    "step",
    "\n",
    "é",
]
_REFS = [
    "$var_1.result$",
    "$a.x",
    "$2.items[1]",
    "#E1",
    "{{a}}",
    "{{{step1.x}}}",
    "${{ var_2 }}",
    '<ref id="a" path="k"/>',
    "<ref step='3'/>",
    "${a}",
]


def _model_text(rnd: random.Random) -> str:
    """A string of random pieces of the dialects' syntax, with whole references among them."""
    return "".join(rnd.choice(_REFS if rnd.random() < 0.2 else _PIECES) for _ in range(rnd.randint(0, 14)))


def _outside(text: str, spans: list[tuple[int, int]]) -> list[str]:
    """`text` less the `spans` (in order): what lies between them."""
    pieces, pos = [], 0
    for start, end in spans:
        pieces.append(text[pos:start])
        pos = end
    return [*pieces, text[pos:]]


@pytest.mark.parametrize("seed", range(4))
def test_no_repair_changes_anything_written_outside_a_recognised_reference(seed: int) -> None:
    # A seeded generator (the same strings every run): random pieces of every dialect's syntax,
    # read against targets that exist, exist partly, or not at all.
    rnd = random.Random(seed)
    worlds = [
        Targets(lambda target: target in (1, 2, 3, "a", "var_1", "var_2", "step1"), calls=(1, 2, 3)),
        Targets(lambda target: target in ("a", 4), calls=(4,)),
        Targets(lambda target: False),
    ]
    for _ in range(2500):
        text, targets = _model_text(rnd), rnd.choice(worlds)
        out, readings, refusals = read_string(text, targets)
        if not readings:
            assert out == text  # nothing read: nothing changed, refused or not
            continue
        # What is between the references read is exactly what was written there ...
        spans = [(r.start, r.end) for r in readings]
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), readings
        assert [text[r.start : r.end] for r in readings] == [r.written for r in readings]
        new_spans, pos = [], 0
        for piece, reading in zip(_outside(text, spans), readings, strict=False):
            pos += len(piece)
            if not out.startswith(reading.canonical, pos):
                assert out.startswith("$" + reading.canonical, pos), (text, out)
                pos += 1
            new_spans.append((pos, pos + len(reading.canonical)))
            pos += len(reading.canonical)
        for after, before in zip(_outside(out, new_spans), _outside(text, spans), strict=True):
            # A `$` written right before a reference stays text: escaped as `$$`, its canonical spelling.
            assert after == before or (after == before + "$" and _lone_dollar(before)), (text, out)
        # ... and each reference read is one canonical reference, to a target that exists.
        for reading in readings:
            (ref,) = parse_template(reading.canonical)
            assert isinstance(ref, Ref) and targets.known(ref.target), reading
        try:
            parts = parse_template(out)
        except RefSyntaxError:
            continue  # `${{ nope }}`, `${` never closed: the checker refuses those (bad_reference)
        if refusals:
            continue
        # No stray delimiter beside a reference: the canonical reader sees the references read,
        # in order, as separate parts (text it reads as another reference was written so).
        found = [part.raw for part in parts if isinstance(part, Ref)]
        read_raw = [r.canonical for r in readings]
        assert _subsequence(read_raw, found), (text, out)


def _lone_dollar(text: str) -> bool:
    return (len(text) - len(text.rstrip("$"))) % 2 == 1


def _subsequence(small: list[str], large: list[str]) -> bool:
    it = iter(large)
    return all(any(x == y for y in it) for x in small)


@pytest.mark.no_cover  # timed: coverage's tracer would be measured, not the code
@pytest.mark.parametrize(
    "unit",
    ["$var_1.x", "$a['$a['", "{{{", "{{ a", "#E1#E", "<ref id='a' ", "<ref id='a'/><", "$a.b[0]x", "${{", "$#E1"],
)
def test_reading_is_linear_in_the_string(unit: str) -> None:
    assert_linear(lambda n: fill("<search id='a'>x</search><search>x ", unit, "</search>", n), 4_000, 0.5)


@pytest.mark.no_cover  # timed: coverage's tracer would be measured, not the code
@pytest.mark.parametrize("unit", ["Action: a\nAction Input: {\n", "Action: a\nAction Input: x\n", "Action: a\n"])
def test_react_reading_is_linear_in_the_plan(unit: str) -> None:
    assert_linear(lambda n: fill("", unit, "", n), 4_000, 0.5, max_steps=1000)


# -- through the checker: one warning per dialect, refusals with the fix ------------------------------


def test_each_dialect_read_is_named_once_in_a_warning() -> None:
    plan = prepare(
        '<search id="var_1">x</search><search>y</search>'
        '<fetch><fetch>{"url": "$var_1.text$ #E2 $2.text", "max_length": "$var_1.n$"}</fetch></fetch>'
        "<fetch><fetch>{\"url\": \"$var_1.text$ {{step2.text}} <ref id='var_1' path='text'/>\"}</fetch></fetch>"
    )
    assert plan.calls[2].arguments == {"url": "${var_1.text} ${2} ${2.text}", "max_length": "${var_1.n}"}
    assert plan.calls[3].arguments == {"url": "${var_1.text} ${step2.text} ${var_1.text}"}
    assert plan.warnings == (
        "steps 3-4: read $var_1.text$ as ${var_1.text}, $var_1.n$ as ${var_1.n}, $var_1.text$ as ${var_1.text} "
        "(NESTFUL's $label.key$); write references as ${id.path} or ${N.path}",
        "step 3: read #E2 as ${2} (ReWOO's #E1); write references as ${id.path} or ${N.path}",
        "step 3: read $2.text as ${2.text} (LLMCompiler's $1); write references as ${id.path} or ${N.path}",
        "step 4: read {{step2.text}} as ${step2.text} (template braces {{...}}); "
        "write references as ${id.path} or ${N.path}",
        "step 4: read <ref id='var_1' path='text'/> as ${var_1.text} (a <ref id=\"...\" path=\"...\"/> element); "
        "write references as ${id.path} or ${N.path}",
    )


def test_a_long_run_of_one_dialect_is_one_short_warning() -> None:
    calls = "".join(f'<search id="var_{n}">$var_{n - 1}.text$</search>' for n in range(2, 12))
    plan = prepare('<search id="var_1">x</search>' + calls + "<search>$var_1.text$</search>")
    (warning,) = plan.warnings
    assert warning.startswith("steps 2-12: read $var_1.text$ as ${var_1.text}, $var_2.text$ as ${var_2.text}")
    assert " and 8 more (NESTFUL's $label.key$)" in warning


@pytest.mark.parametrize(
    ("plan", "problem"),
    [
        (
            '<search id="var_1">x</search><fetch><fetch>{"url": "$var_2.result$"}</fetch></fetch>',
            (
                "unknown_reference",
                "step 2 uses $var_2.result$ (NESTFUL's $label.key$), which names no step or id; "
                'label the call it means (id="var_2") and write ${var_2.result}',
            ),
        ),
        (
            '<search id="a">x</search><search id="b">x</search><search>$a.x$b.y</search>',
            (
                "bad_reference",
                "step 3 uses $a.x$: its last $ may close it (NESTFUL's $label.key$) or open what follows "
                "($a.x$b.y...); write ${a.x}, and $$ for a literal $",
            ),
        ),
        (
            "<search>x</search><search>#E5</search>",
            (
                "unknown_reference",
                "step 2 uses #E5 (ReWOO's #E1), which names no call: this plan has 2 calls; "
                'write ${N} for step N, or label the call id="E5"',
            ),
        ),
        (
            '<search id="a">x</search><fetch><fetch>{"url": "{{{a}}"}</fetch></fetch>',
            (
                "bad_reference",
                "step 2 uses {{{a}}: three braces open it and two close it, so a brace would be left beside the "
                "reference; write ${a}",
            ),
        ),
        (
            "<search>x</search><search><ref id='nope' path='x'/></search>",
            (
                "unknown_reference",
                "step 2 uses <ref id='nope' path='x'/>, which names no step or id 'nope'; "
                'write id="<a call\'s id>" or step="N" (this plan\'s steps are 1 to 2)',
            ),
        ),
        (
            "<search>x</search><search>$9.text</search>",
            (
                "unknown_reference",
                "step 2 uses $9.text (LLMCompiler's $1), which names no step (this plan's steps are 1 to 2); "
                "write ${N.text} for step N",
            ),
        ),
        (
            "<search>x</search><search><ref id='step_1'/></search>",
            (
                "unknown_reference",
                "step 2 uses <ref id='step_1'/>, which names no step or id 'step_1' (step 1 is ${1})",
            ),
        ),
        (
            "<search>x</search><search><ref id='1' path='a..b'/></search>",
            (
                "bad_reference",
                "step 2 uses <ref id='1' path='a..b'/>: its path 'a..b' is not one; write ids as "
                "[A-Za-z_][A-Za-z0-9_]*, paths as key.list[0]['odd key']",
            ),
        ),
        (
            "<search>x</search><search><ref to='1'/></search>",
            (
                "bad_reference",
                'step 2 uses <ref to=\'1\'/>: a <ref> names one step or id (id="...") and an optional path="..."; '
                "it has no to",
            ),
        ),
    ],
)
def test_a_dialect_reference_that_cannot_be_read_is_refused_with_the_fix(plan: str, problem: tuple[str, str]) -> None:
    assert refused(plan) == [problem]


def test_a_refused_reference_is_not_also_a_schema_problem() -> None:
    found = refused('<search>x</search><fetch><fetch>{"url": "x", "max_length": "#E9"}</fetch></fetch>')
    assert [code for code, _ in found] == ["unknown_reference"]


def test_in_a_later_turn_rewoo_counts_the_calls_of_that_turn() -> None:
    plan = check_plan(
        parse_turn("<search>x</search><search>#E1 $1 $1.text</search>", first_step=5),
        REGISTRY,
        shorthands=SHORTHANDS,
        limits=PlanSettings(),
        earlier_steps={1: None},
    )
    assert plan.calls[1].arguments == {"pattern": "${5} $1 ${1.text}"}  # `$1.text` is step 1's, as `${1.text}`


# -- <ref> where markup goes: JSON values, <arg>, text content ----------------------------------------


def test_a_ref_element_is_read_wherever_a_value_is_written() -> None:
    plan = prepare(
        '<search id="s1">x</search>'
        '<fetch><fetch>{"url": <ref id="s1" path="items[0].url"/>, "max_length": <ref id="s1" path="n" />}</fetch>'
        '<fetch><arg name="url"><ref id="s1"/></arg><arg name="max_length" type="json"><ref step="1"/></arg></fetch>'
        "</fetch>"
        '<search><ref id="s1" path="text"/></search>'
        '<search><find_files><pattern><ref id="s1"/></pattern></find_files></search>'
    )
    assert [c.arguments for c in plan.calls[1:]] == [
        {"url": "${s1.items[0].url}", "max_length": "${s1.n}"},
        {"url": "${s1}", "max_length": "${1}"},
        {"pattern": "${s1.text}"},
        {"pattern": "${s1}"},
    ]


def test_a_ref_element_outside_strings_is_repaired_into_one() -> None:
    repaired, repairs = repair_json("""{"a": <ref id="s" path="x/y"/>, "b": "<ref id='t'/>", "c": True}""")
    assert repaired == """{"a": "<ref id=\\"s\\" path=\\"x/y\\"/>", "b": "<ref id='t'/>", "c": true}"""
    assert set(repairs) == {"<ref/> as a string", "Python True"}


# -- call forms --------------------------------------------------------------------------------------


def test_a_plan_wrapper_is_ignored_not_read_as_a_server() -> None:
    turn = parse_turn("<plan>\n<search>x</search>\n<Plan><search>y</search></Plan></plan><execute_tools/>")
    assert [c.shorthand for c in turn.calls] == ["search", "search"]
    assert turn.warnings == (
        "line 1: the <plan> wrapper is ignored; its content is the plan",
        "line 3: <Plan> read as <plan>",
    )
    assert prepare("<plan><search>x</search></plan>").calls[0].route.public_name == "search__find_files"


def test_anthropic_invoke_calls_are_plan_calls() -> None:
    plan = prepare(
        "<function_calls>\n"
        '<invoke name="fetch__fetch"><parameter name="url">http://a/?x=1&amp;y=2</parameter>\n'
        '<parameter name="max_length">5</parameter></invoke>\n'
        '<invoke name="search.find_files" id="s"><parameter name="pattern"><ref id="1" path="text"/></parameter>'
        "</invoke>\n"
        '<invoke name="fetch__fetch"><parameter name="url"><![CDATA[http://b/<x>]]></parameter></invoke>\n'
        "</function_calls>"
    )
    assert [(c.route.public_name, c.node.id, c.arguments) for c in plan.calls] == [
        ("fetch__fetch", None, {"url": "http://a/?x=1&y=2", "max_length": 5}),
        ("search__find_files", "s", {"pattern": "${1.text}"}),
        ("fetch__fetch", None, {"url": "http://b/<x>"}),
    ]


@pytest.mark.parametrize(
    ("plan", "problem"),
    [
        ('<invoke name="fetch__fetch"><parameter name="uri">x</parameter></invoke>', "'uri' is no parameter of it"),
        ("<invoke><parameter name='url'>x</parameter></invoke>", '<invoke> needs name="<tool>"'),
        ('<invoke name="fetch__fetch">url: x</invoke>', "value</parameter> elements, not 'url: x'"),
        ('<invoke name="fetch__fetch"><url>x</url></invoke>', "not '<url>'"),
        (
            '<invoke name="fetch__fetch"><parameter name="url">x</parameter><parameter name="url">y</parameter>'
            "</invoke>",
            "not a name given twice",
        ),
        ('<invoke name="fetch__fetch"><parameter name="url">x</parameter> and</invoke>', "elements, not 'and'"),
        ('<invoke name="fetch__fetch"><parameter name="url">x</invoke>', "<parameter> is never closed"),
        ('<invoke name="fetch__fetch">', "<invoke> is never closed"),
        ('<parameter name="url">x</parameter>', '<parameter> belongs inside <invoke name="...">'),
        ('<invoke name="fetch">{}</invoke>', "tool 'fetch' needs its server"),
    ],
)
def test_invoke_slips_are_refused_with_the_fix(plan: str, problem: str) -> None:
    found = refused(plan)
    assert any(problem in message for _, message in found), found


def test_react_action_blocks_are_plan_calls() -> None:
    text = (
        "Thought: find the files, then fetch the first.\n"
        "Action: search__find_files\n"
        'Action Input: {"pattern": "*.py"}\n'
        "Observation: (the model imagined this)\n"
        "Thought: now fetch it\n"
        "Action: `fetch.fetch`\n"
        "Action Input:\n```json\n"
        '{"url": "#E1", "max_length": 10}\n```\n'
        "Action: search__find_files\n"
        "Action Input: src/<a>*.py\n"
        "<execute_tools />"
    )
    turn = parse_turn(text, collect=True)
    assert [(c.public, c.args) for c in turn.calls] == [
        ("search__find_files", ArgsSpec("json", {"pattern": "*.py"})),
        ("fetch.fetch", ArgsSpec("json", {"url": "#E1", "max_length": 10})),
        ("search__find_files", ArgsSpec("text", "src/<a>*.py")),
    ]
    assert turn.warnings == (
        "line 4: an Observation: written in the plan is ignored (the tool's answer is the result)",
        "line 2: ReAct Action: search__find_files read as a call of 'search__find_files'; "
        'in a plan write <call tool="search__find_files">{...}</call>',
    )
    plan = check_plan(turn, REGISTRY, shorthands=SHORTHANDS, limits=PlanSettings())
    assert [c.arguments for c in plan.calls] == [
        {"pattern": "*.py"},
        {"url": "${1}", "max_length": 10},
        {"pattern": "src/<a>*.py"},
    ]


def test_empty_arguments_in_the_other_call_forms() -> None:
    turn = parse_turn(
        'Action: fetch__fetch\nAction Input:\n<invoke name="fetch__fetch"/>'
        '<invoke name="fetch__fetch"><parameter name="url"/></invoke>'
    )
    assert [c.args for c in turn.calls] == [
        ArgsSpec("empty"),
        ArgsSpec("parameters", {}),
        ArgsSpec("parameters", {"url": ""}),
    ]


def test_react_prose_that_is_no_action_block_stays_prose() -> None:
    turn = parse_turn(
        "Thought: I need the sum.\nAction: I'll use a plan.\nAction: search__find_files\nthen Action Input: x\n"
        "<search>x</search>"
    )
    assert [c.shorthand for c in turn.calls] == ["search"]


@pytest.mark.parametrize(
    ("text", "code", "fragment"),
    [
        ('Action: fetch__fetch\nAction Input: {"url": "x" "y"}', "invalid_json", "arguments are not valid JSON"),
        ("Action: find_files\nAction Input: x", "unknown_tool", "tool 'find_files' needs its server"),
        ("Action: sandbox__run\nAction Input: print(1)", "no_primary", "no single required string parameter"),
    ],
)
def test_react_slips_are_refused_with_the_fix(text: str, code: str, fragment: str) -> None:
    found = refused(text)
    assert [c for c, _ in found] == [code] and fragment in found[0][1], found


def test_react_calls_count_toward_the_step_limit() -> None:
    with pytest.raises(PlanSyntaxError) as err:
        parse_turn("Action: search__find_files\nAction Input: x\n" * 3, max_steps=2)
    assert [p.message for p in err.value.problems] == [
        "the plan has 3 steps; the limit is 2: split it over several turns"
    ]


def test_a_json_list_of_calls_is_a_plan_as_nestful_writes_it() -> None:
    plan = prepare(
        '```json\n[{"name": "search__find_files", "label": "$var_1", "arguments": {"pattern": "x"}},\n'
        ' {"name": "fetch__fetch", "label": "$var_2", "arguments": "{\\"url\\": \\"$var_1.text$\\"}"}]\n```'
    )
    assert [(c.route.public_name, c.node.id, c.arguments) for c in plan.calls] == [
        ("search__find_files", "var_1", {"pattern": "x"}),
        ("fetch__fetch", "var_2", {"url": "${var_1.text}"}),
    ]
    assert parse_turn('[{"name": "a", "arguments": {}}]').warnings == (
        "a JSON list of 1 call read as a plan, in order; in a plan write <call tool=...>{...}</call>",
    )
    fix = 'each item is {"name": "<tool>", "arguments": {...}} (and an optional "label")'
    found = refused('[{"name": "search__find_files", "arguments": {"pattern": "x"}}, 3, {"name": "x", "label": "$1a"}]')
    assert found == [("bad_call", f"item {n} of the JSON list of calls: {fix}") for n in (2, 3)]
    assert [m for _, m in refused("[]")] == [f"the plan is a JSON value but no list of calls: {fix}"]
    with pytest.raises(PlanSyntaxError) as err:
        parse_turn('[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]', max_steps=1)
    assert [p.message for p in err.value.problems] == [
        "the plan has 2 steps; the limit is 1: split it over several turns"
    ]


def test_an_id_spelt_as_another_step_is_refused() -> None:
    # `${step1}` and `{{step1.output}}` are step 1: an id "step1" on step 2 would hand them step 1's data.
    assert refused('<search>x</search><search id="step1">y</search><search>x {{step1.text}}</search>') == [
        ("bad_id", "id 'step1' reads as step 1 in references, but this is step 2: choose another id")
    ]
    assert refused('<parallel id="result_of_step_1"><search>x</search></parallel>') == [
        ("bad_id", "id 'result_of_step_1' reads as step 1 in references, but this is a <parallel>: choose another id")
    ]
    assert prepare('<search id="step1">x</search><search>x {{step1.text}}</search>').calls[1].arguments == {
        "pattern": "x ${step1.text}"
    }


def test_nestful_labels_name_calls() -> None:
    plan = prepare(
        '<tool_call>{"name": "search__find_files", "label": "$var_1", "arguments": {"pattern": "x"}}</tool_call>'
        '<search id="$var_2">$var_1.text$</search><search id="#E3">$var_2$</search><search>#E3</search>'
    )
    assert [(c.node.id, c.arguments) for c in plan.calls] == [
        ("var_1", {"pattern": "x"}),
        ("var_2", {"pattern": "${var_1.text}"}),
        ("E3", {"pattern": "${var_2}"}),
        (None, {"pattern": "${E3}"}),
    ]


# -- at run time -------------------------------------------------------------------------------------


def test_a_path_into_plain_text_suggests_its_text_field() -> None:
    lookup = {"first": {"status": "ok", "text": "hello", "json": "hello", "error": None}}.get
    with pytest.raises(RefError) as err:
        resolve("${first.output}", lookup)
    assert str(err.value) == (
        "${first.output}: no key 'output' (the result is plain text: write ${first.text}): "
        "found a string of 5 characters"
    )
    assert resolve("${first.text}", lookup) == "hello"


def test_readings_report_where_they_were() -> None:
    _, readings, _ = read_string("ab $var_1.x$ c", KNOWN)
    assert readings == [Reading("$var_1.x$", "${var_1.x}", "NESTFUL", 3, 12)]
