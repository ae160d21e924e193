"""Plan fuzzing: thousands of hostile plans, each answered with a plan or plan problems, and fast.

Two sources: hypothesis over a small plan grammar, and a seeded mutation loop over a corpus of
valid plans (byte flips, truncation, duplication, splicing of tags, entities, references and JSON,
huge numbers, deep nesting). Then such plans through a running gateway while a heartbeat watches
the event loop. Each runs twice: a short run in the in-memory tier, and a long one under other
seeds marked `soak` (`./scripts/test` runs it).
"""

from __future__ import annotations

import gc
import json
import random
import re
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client

from tests.conftest import make_config, memory_gateway
from tests.security.test_plan_hardening import SHAPES
from toolscore.config import PlanSettings, Shorthand
from toolscore.downstream.registry import build_registry
from toolscore.errors import PlanCheckError, PlanProblem, PlanSyntaxError
from toolscore.plan.check import check_plan, shorthand_table
from toolscore.plan.nodes import CheckedPlan
from toolscore.plan.parse import parse_turn

pytestmark = pytest.mark.anyio

PER_PLAN = 0.05
"""Seconds one plan may take to parse and check."""
MUTANT_SIZE = 16 * 1024
"""Mutants are cut to this: enough for anything superlinear to show (the 64 KiB worst cases are
timed in test_plan_hardening, against a looser bound)."""
LIMITS = PlanSettings()


def _tool(name: str, props: dict[str, Any], required: list[str], **kw: Any) -> mcp_types.Tool:
    return mcp_types.Tool(name=name, input_schema={"type": "object", "properties": props, "required": required}, **kw)


REGISTRY = build_registry(
    {
        "search": [_tool("find_files", {"pattern": {"type": "string"}}, ["pattern"])],
        "fetch": [
            _tool(
                "fetch",
                {"url": {"type": "string"}, "max_length": {"type": "integer"}},
                ["url"],
                annotations=mcp_types.ToolAnnotations(read_only_hint=True),
            )
        ],
        "sandbox": [_tool("run", {"params": {"type": "object"}}, [])],
    },
    make_config({"search": {"command": "x"}, "fetch": {"command": "x"}, "sandbox": {"command": "x"}}),
)
SHORTHANDS = shorthand_table(
    [
        ("search", (Shorthand(tag="search", tool="find_files", primary="pattern"),)),
        ("sandbox", (Shorthand(tag="microsandbox", tool="run", primary="params.code"),)),
    ]
)

CORPUS = [
    'Sure.\n<search><find_files id="py">{"pattern": "**/*.py"}</find_files></search>\n'
    '<call server="fetch" tool="fetch" id="page">{"url": "http://127.0.0.1/a"}</call>\n'
    "<search>is_error=True</search>\n<execute_tools />",
    "<microsandbox>print([x for x in range(9) if x < 5 and x & 1])</microsandbox>",
    "<search>a &lt; b &amp;&amp; c</search><search><![CDATA[x </search> &lt;]]></search>",
    '<microsandbox><arg name="inputs" type="json">{"a": [1, 2]}</arg><arg name="code">print(inputs)</arg>'
    "</microsandbox><search><find_files>{'pattern': '*.md',}</find_files></search>",
    '<parallel id="both" max_concurrency="2" policy="fail_fast" timeout="1.5s"><search>a</search>'
    '<sequential stop_on_error="false"><search>b</search></sequential></parallel>'
    '<race timeout="500ms"><search>c</search><search>d</search></race><execute_tools/>',
    "<think>plan <search>x</search> here</think><result step='1'>forged</result><search>y</search>",
    "<think>I will search\n<search>x</search>",
    "All done.\nFinal Answer: 42",
    "<answer>yes</answer>",
    '<search id="a">x</search><fetch><fetch>{"url": "{{a.text}} {{ nope }} {{1}} ${a.text}"}</fetch></fetch>',
    '<fetch><fetch retries="2">{"url": "u", "max_length": 5}</fetch></fetch>',
    '<search id="hits">x</search><fallback><call server="fetch" tool="fetch">'
    '{"url": "${hits.json.items[0].url}", "max_length": 5000}</call>'
    "<search>${hits['odd key'][-1]}?</search></fallback>",
    '<sequential><parallel id="p"><search id="a">x</search><search id="b">y</search></parallel>'
    '<microsandbox id="cmp"><arg name="inputs" type="json">{"a": "${a.text}", "b": "${b.text}", "all": "${p}"}</arg>'
    '<arg name="code"><![CDATA[\nprint(compare(inputs["a"], inputs["b"]) if 1 < 2 else "</arg>")\n]]></arg>'
    "</microsandbox></sequential><execute_tools />",
    "<!-- a comment <search>x</search> --><search>$result_of_step_1 $$HOME ${step1} ${result_of_step_1}</search>",
    '<?xml version="1.0"?><search>&#65;&#x42;&quot;&apos;&#x1F600;</search>',
    '<search timeout="20s" on_error="continue" idempotent="true" retries="1">x</search>',
    '<search id="r">x</search><race><search>${r.items[*].name}</search><search>${r.missing?}</search></race>',
    '<fetch><fetch>{"url": "a", "nested": {"deep": [[[{"x": null, "y": true, "z": 1.5e3}]]]}}</fetch></fetch>',
    "<search>line one\nline two\n</search>\n\n<search/>",
    '<call server="search" tool="find_files"><arg name="pattern">*.py</arg></call>',
    '<search><find_files>{"pattern": "a"}</find_files><!-- note --><find_files>{"pattern": "b"}</find_files></search>',
]
FRAGMENTS = [
    *("<search>", "</search>", "<parallel>", "</parallel>", "<race>", "</race>", "<fallback>", "</fallback>"),
    *("<sequential>", "</sequential>", "<execute_tools/>", "<think>", "</think>", "<answer>", "<result>"),
    *("<arg name='x'>", "</arg>", "<arg name='j' type='json'>", "<call server='fetch' tool='fetch'>", "</call>"),
    *(
        "<fetch>",
        "</fetch>",
        "<!--",
        "-->",
        "<![CDATA[",
        "]]>",
        "<?",
        "?>",
        "<!DOCTYPE x>",
        "<dag>",
        "<if test='a < b'>",
    ),
    *("&amp;", "&lt;", "&#65;", "&#xD800;", "&#x110000;", "&#99999999999999999999;", "&#", "&", "&#x1F600;"),
    *("${", "}", "${1}", "${a}", "${a.b[0]}", "${a[*].x}", "${a|json}", "$result_of_step_1", "$$", "{{a}}", "{{ 1 }}"),
    *('{"url": "', '"}', "{", "}", "[", "]", '"\\ud800"', "NaN", ",", "'", '"\\u00e9"', "1e999", ": null"),
    *(' id="a"', ' retries="²"', ' timeout="1ms"', ' max_concurrency="99"', ' policy="quorum:2"', ' view="x"'),
    *(" a='<'", "\u00e9", "\U0001f600", "\u2028", "\x00", "\ufeff", "²", "٣", "\n", " ", "\ud800"),
]
ALPHABET = "<>/=\"'{}[]$&#;!?-_.: \nabx019\\"


def mutate(rnd: random.Random, text: str) -> str:
    """One to four random edits of `text`, cut to `MUTANT_SIZE`."""
    for _ in range(rnd.randint(1, 4)):
        pos = rnd.randint(0, len(text))
        end = rnd.randint(pos, min(len(text), pos + 200))
        edit = rnd.randrange(9)
        if edit == 0:  # flip a character
            text = text[:pos] + rnd.choice(ALPHABET) + text[pos + 1 :]
        elif edit == 1:
            text = text[:pos]
        elif edit == 2:  # duplicate a slice
            text = text[:end] + text[pos:end] * rnd.randint(1, 20) + text[end:]
        elif edit == 3:
            text = text[:pos] + text[end:]
        elif edit == 4:
            text = text[:pos] + rnd.choice(FRAGMENTS) + text[pos:]
        elif edit == 5:  # a huge number, bare, as a character reference or as a step
            digits = "9" * rnd.choice([20, 400, 1500, 5000])
            text = text[:pos] + rnd.choice([digits, f"&#{digits};", f"${{{digits}}}", f"[{digits}]"]) + text[pos:]
        elif edit == 6:  # deep nesting
            unit = rnd.choice(["[", '{"a":', "<parallel>", "<sequential>", "<search>", "${a", "{{"])
            text = text[:pos] + unit * rnd.choice([10, 70, 1000, 4000]) + text[pos:]
        elif edit == 7:  # splice with another plan
            other = rnd.choice(CORPUS)
            text = text[:pos] + other[rnd.randint(0, len(other)) :]
        else:
            text = text * rnd.randint(2, 8)
    return text[:MUTANT_SIZE]


def process(plan: str) -> tuple[float, CheckedPlan | list[PlanProblem]]:
    """Parse and check one plan: the CPU seconds it took (GC paused; a busy machine does not
    stretch them) and what came out."""
    gc.disable()
    try:
        began = time.thread_time()
        try:
            outcome: CheckedPlan | list[PlanProblem] = check_plan(
                parse_turn(plan, collect=True), REGISTRY, shorthands=SHORTHANDS, limits=LIMITS
            )  # collect=True: what orchestrate runs (the parser's problems go on to the checker)
        except (PlanSyntaxError, PlanCheckError) as exc:
            outcome = exc.problems
        return time.thread_time() - began, outcome
    finally:
        gc.enable()


def cost(plan: str) -> float:
    """What a plan counts for against `PER_PLAN`: its CPU seconds to parse and check (the best of
    five, spread over half a second), or just under the bound when it is over only because the
    machine is busy.

    CPU time still grows on a machine whose cores are shared with other work (a virtual machine
    counts stolen time as the thread's), so a plan over the bound is measured again beside a plain
    plan of the same length, and judged by how much slower it is than that: a plan that is really
    slow (superlinear) is slow against the plain one on any machine; a busy machine slows both.
    """
    seconds, _ = process(plan)
    for _ in range(4):
        if seconds <= PER_PLAN:
            return seconds
        time.sleep(0.1)
        seconds = min(seconds, process(plan)[0])
    if seconds <= PER_PLAN:
        return seconds
    plain = _plain(len(plan))
    baseline = min(process(plain)[0] for _ in range(3))
    return seconds if seconds > _SLOWER_THAN_PLAIN * baseline else min(seconds, PER_PLAN * 0.99)


_SLOWER_THAN_PLAIN = 6
"""How much slower than a plain plan of its length a plan may be before it counts as slow (the
corpus's mutants measure about 1-2 times on an idle machine; anything superlinear, hundreds)."""


def _plain(size: int) -> str:
    """A well-formed plan of about `size` characters: calls to one tool, the linear case."""
    call = '<search><find_files>{"pattern": "**/*.py"}</find_files></search>\n'
    return (call * (size // len(call) + 1))[:size]


def assert_well_formed(outcome: CheckedPlan | list[PlanProblem]) -> None:
    """Problems name a code and a message; a checked plan's arguments can be sent as they are."""
    if isinstance(outcome, list):
        assert outcome
        for problem in outcome:
            assert re.fullmatch(r"[a-z_]+", problem.code), problem
            assert problem.message.strip(), problem
            problem.message.encode()  # no lone surrogate in what goes back to the client
        return
    for call in outcome.calls:
        json.dumps(call.arguments, ensure_ascii=False, allow_nan=False).encode()


@pytest.mark.no_cover  # timed: coverage's tracer would be measured, not the code
@pytest.mark.parametrize(
    ("seed", "mutants"),
    [
        # 1,500 walk every corpus plan through every kind of edit many times over (2 s of CPU).
        pytest.param(20_261_123, 1_500, id="short"),
        pytest.param(20_261_124, 10_000, id="long", marks=pytest.mark.soak),
    ],
)
def test_mutated_plans_are_answered_fast(seed: int, mutants: int) -> None:
    rnd = random.Random(seed)
    slowest, answered = 0.0, 0
    for n in range(mutants):
        plan = mutate(rnd, CORPUS[n % len(CORPUS)])
        seconds, outcome = process(plan)
        assert_well_formed(outcome)
        slowest = max(slowest, cost(plan) if seconds > PER_PLAN else seconds)
        answered += isinstance(outcome, CheckedPlan)
    assert slowest < PER_PLAN
    assert 0 < answered < mutants  # the mutations reach both outcomes


_text = st.lists(
    st.sampled_from([*"ab <>&;$\"'{}[]\\\n", "&amp;", "&#65;", "&#xD800;", "${a}", "{{a}}", "${1}", "\u00e9", "]]>"]),
    max_size=12,
).map("".join)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=4,
)
_attrs = st.lists(
    st.sampled_from([' id="a"', ' id="b"', ' retries="2"', ' timeout="2s"', ' on_error="continue"', ' x="1"']),
    max_size=2,
).map("".join)
_call = st.one_of(
    st.builds(lambda a, body: f"<search{a}>{body}</search>", _attrs, _text),
    st.builds(lambda a, obj: f"<fetch><fetch{a}>{json.dumps({'url': obj})}</fetch></fetch>", _attrs, _json),
    st.builds(
        lambda code, obj: (
            f'<microsandbox><arg name="code">{code}</arg><arg name="d" type="json">{json.dumps(obj)}</arg>'
            "</microsandbox>"
        ),
        _text,
        _json,
    ),
    st.sampled_from(FRAGMENTS),
)
_items = st.recursive(
    _call.map(lambda item: [item]),
    lambda inner: st.builds(
        lambda kind, a, children: [f"<{kind}{a}>", *(part for child in children for part in child), f"</{kind}>"],
        st.sampled_from(["sequential", "parallel", "race", "fallback", "dag"]),
        _attrs,
        st.lists(inner, max_size=3),
    ),
    max_leaves=6,
)
_plans = st.one_of(
    st.lists(_items, max_size=4).map(lambda items: "".join(part for item in items for part in item)),
    st.text(max_size=300),
)


@pytest.mark.no_cover  # timed: coverage's tracer would be measured, not the code
@pytest.mark.parametrize(
    "examples", [pytest.param(100, id="short"), pytest.param(500, id="long", marks=pytest.mark.soak)]
)
def test_plans_from_a_grammar_are_answered_fast(examples: int) -> None:
    # Drawing from the grammar costs more than checking what it draws: the short run's examples
    # differ from run to run, so the in-memory tier covers the grammar over time.
    @settings(max_examples=examples, deadline=None)
    @given(_plans)
    def answered_fast(plan: str) -> None:
        seconds, outcome = process(plan)
        assert_well_formed(outcome)
        assert seconds < PER_PLAN or cost(plan) < PER_PLAN

    answered_fast()


# -- through the front ----------------------------------------------------------------------------

FX_CORPUS = [
    '<think>Add, then say.</think><parallel><fx><add id="a">{"a": 2, "b": 3}</add></fx><say id="b">x < y & z</say>'
    '</parallel><fx><add id="c">{"a": "${a.sum}", "b": 10}</add></fx>'
    '<call server="fx" tool="echo">{"text": "sum ${c.sum}; said ${b.text}"}</call><execute_tools />',
    '<say id="s">1</say><fx><add>{"a": "${s.json}", "b": 2}</add></fx><say>{{s.text}} $$ &amp;</say>',
    '<fallback><fx><fail>{"message": "no"}</fail></fx><say>second</say></fallback><race><say>r</say></race>',
    '<sequential stop_on_error="false"><fx><fail id="f">{}</fail></fx><say>saw: ${f.error}</say></sequential>',
    '<fx><echo>{"text": "&#65;&#x1F600; ${nope?}"}</echo></fx><say><![CDATA[</say> raw]]></say>',
]


@pytest.mark.no_cover  # timed: coverage's tracer would be measured, not the code
@pytest.mark.parametrize(
    ("seed", "mutants"),
    [pytest.param(7, 60, id="short"), pytest.param(8, 250, id="long", marks=pytest.mark.soak)],
)
async def test_hostile_plans_through_the_front_neither_stall_nor_break_the_gateway(
    tmp_path: Path, seed: int, mutants: int
) -> None:
    rnd = random.Random(seed)
    plans = [(mutate(rnd, rnd.choice(FX_CORPUS)), rnd.random() < 0.5) for _ in range(mutants)]
    plans += [(build(8 * 1024), True) for build in SHAPES.values()]
    plans += [('<say id="a">x</say><say>a {{' + " " * 3000 + "a</say>", True)]
    # Lone surrogates, raw and as JSON escapes, whatever the mutations drew.
    plans += [('<say>a \ud800 b</say><fx><echo>{"text": "\\udc00"}</echo></fx>', False)]
    say = {"tag": "say", "tool": "echo", "primary": "text"}
    servers = {"fx": {"shorthand": say, "tools": {"allow": ["echo", "add", "fail"]}}}
    # A stall is a beat over 50 ms late while this process was busy (its CPU time moving on as much):
    # a busy machine may delay a beat, but only the gateway's own work (on the loop, or in a worker
    # thread holding the GIL, as a long regex does) stalls it.
    stalls: list[float] = []
    done = anyio.Event()

    async def heartbeat() -> None:
        while not done.is_set():
            wall, cpu = time.perf_counter(), time.process_time()
            await anyio.sleep(0.005)
            late, busy = time.perf_counter() - wall - 0.005, time.process_time() - cpu
            if late > 0.05 and busy > 0.05:
                stalls.append(busy)

    results: list[mcp_types.CallToolResult] = []
    # The test process's own heap (pytest, hypothesis) makes a full collection take about 90 ms;
    # frozen, a collection walks only what the gateway made.
    gc.collect()
    gc.freeze()
    async with (
        memory_gateway(tmp_path, servers, toolscore={"plan": {"budget_seconds": 5}}) as (gateway, _),
        Client(gateway.server, mode="legacy") as client,
    ):
        async with anyio.create_task_group() as tg:
            tg.start_soon(heartbeat)
            for plan, dry_run in plans:
                with anyio.fail_after(30):
                    results.append(await client.call_tool("orchestrate", {"plan": plan, "dry_run": dry_run}))
            done.set()
        alive = await client.call_tool("orchestrate", {"plan": "<say>alive</say>"})
    gc.unfreeze()
    assert stalls == []
    answers = [block.text for r in results for block in r.content if isinstance(block, mcp_types.TextContent)]
    assert len(answers) == len(plans)
    assert not [a for a in answers if "internal gateway error" in a]
    assert any("<plan_error" in a for a in answers) and any("<result step=" in a for a in answers)
    assert alive.structured_content is not None
    assert [s["result"] for s in alive.structured_content["steps"]] == ["alive"]
