"""Hostile plans: every input becomes a plan or plan problems, never an exception, in linear time.

One test per reproduced defect (each failed on the code before the hardening), then timing tests
over adversarial shapes: an absolute bound, and 4x the input costing well under 16x (quadratic).
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client
from pydantic import ValidationError

from tests.conftest import make_config, memory_gateway, text
from toolscore import Gateway, MemoryAuditSink
from toolscore.config import PlanSettings, Shorthand
from toolscore.downstream.registry import build_registry
from toolscore.errors import PlanCheckError, PlanSyntaxError, RefError, RefSyntaxError
from toolscore.plan.check import check_plan, shorthand_table
from toolscore.plan.dialects import Targets, read_references
from toolscore.plan.nodes import CheckedPlan
from toolscore.plan.parse import parse_turn
from toolscore.plan.refs import parse_template, resolve
from toolscore.plan.values import MAX_JSON_DEPTH

pytestmark = pytest.mark.anyio


def _tool(name: str, props: dict[str, Any], required: list[str]) -> mcp_types.Tool:
    return mcp_types.Tool(name=name, input_schema={"type": "object", "properties": props, "required": required})


REGISTRY = build_registry(
    {
        "search": [_tool("find_files", {"pattern": {"type": "string"}}, ["pattern"])],
        "sandbox": [_tool("run", {"params": {"type": "object"}}, [])],
    },
    make_config({"search": {"command": "x"}, "sandbox": {"command": "x"}}),
)
SHORTHANDS = shorthand_table(
    [
        ("search", (Shorthand(tag="search", tool="find_files", primary="pattern"),)),
        ("sandbox", (Shorthand(tag="microsandbox", tool="run", primary="params.code"),)),
    ]
)


def check(plan: str, limits: PlanSettings | None = None, **parse: Any) -> CheckedPlan:
    """Parse and check as `orchestrate` does (the parser's problems go on to the checker)."""
    turn = parse_turn(plan, collect=True, **parse)
    return check_plan(turn, REGISTRY, shorthands=SHORTHANDS, limits=limits or PlanSettings())


def codes(plan: str, limits: PlanSettings | None = None, **parse: Any) -> list[str]:
    """The plan's problem codes, [] if it passes; any other exception fails the test."""
    try:
        check(plan, limits, **parse)
    except (PlanSyntaxError, PlanCheckError) as exc:
        return [p.code for p in exc.problems]
    return []


def timed(work: Callable[[], object], repeat: int = 5) -> tuple[float, float]:
    """The best wall-clock and CPU seconds of `repeat` runs, with the GC paused.

    CPU time (this thread's) leaves out the time a busy machine gave to others, so ratios of it
    hold steady under load; wall-clock time is what a waiting client sees.
    """
    wall = cpu = float("inf")
    for _ in range(repeat):
        gc.disable()
        try:
            began, began_cpu = time.perf_counter(), time.thread_time()
            work()
            wall, cpu = min(wall, time.perf_counter() - began), min(cpu, time.thread_time() - began_cpu)
        finally:
            gc.enable()
    return wall, cpu


def seconds(work: Callable[[], object], repeat: int = 3) -> float:
    """The best CPU seconds of `repeat` runs: the work itself, however busy the machine is."""
    return timed(work, repeat)[1]


def parse_and_check(plan: str, limits: PlanSettings | None = None, **parse: Any) -> Callable[[], object]:
    return lambda: codes(plan, limits, **parse)


def assert_linear(build: Callable[[int], str], n: int, bound: float, **kw: Any) -> None:
    """Plans of size n and 4n: the smaller within `bound`, the larger far from 16x (quadratic) it."""
    _, small_cpu = timed(parse_and_check(build(n), **kw))
    assert small_cpu < bound  # checked first: a quadratic parser would take minutes on the larger one

    def linear(large_cpu: float) -> bool:
        # Linear is 4x, quadratic 16x. Below 20 ms the ratio of two timings is mostly noise, and a
        # machine kept busy by others (their cache misses are ours too) stretches it to about 9x.
        # The larger's own bound is 4x (linear) the smaller's: its CPU time once passed 0.51 s
        # against 0.09 s for the smaller, 5.5x, with every core busy; `bound` is a hang detector.
        return large_cpu < 4 * bound and (large_cpu <= 0.02 or large_cpu / small_cpu < 12)

    # The larger plan is timed once, and best of five only if that once fails: a busy machine
    # only ever adds to a timing, so a run that passes is a pass (and the tier stays fast).
    large = parse_and_check(build(4 * n), **kw)
    _, large_cpu = timed(large, 1)
    if not linear(large_cpu):
        large_cpu = min(large_cpu, timed(large)[1])
    assert linear(large_cpu), (small_cpu, large_cpu, bound)


# -- 1. characters that are no characters ----------------------------------------------------------


@pytest.mark.parametrize(
    "ref", ["&#xD800;", "&#xdfff;", "&#55296;", "&#x110000;", "&#1114112;", "&#99999999999999999999;", "&#x0110000;"]
)
def test_a_character_reference_to_no_character_is_a_plan_error(ref: str) -> None:
    assert codes(f"<search>a {ref}</search>") == ["bad_character"]
    assert codes(f'<call server="search" tool="find_files">{{"pattern": "{ref}"}}</call>') == ["bad_character"]
    assert codes(f'<microsandbox><arg name="code">{ref}</arg></microsandbox>') == ["bad_character"]


def test_character_references_to_real_characters_still_decode() -> None:
    plan = check("<search>&#65;&#x1F600;&#00000065;&#x10FFFF;&#0;</search>")
    assert plan.calls[0].arguments == {"pattern": "A\U0001f600A\U0010ffff\x00"}


@pytest.mark.parametrize(
    "plan",
    [
        '<search><find_files>{"pattern": "\\ud800"}</find_files></search>',
        '<search><find_files>{"pattern": "a\\uDC00b"}</find_files></search>',
        '<search><find_files>{"pattern": "x", "\\ud83d": 1}</find_files></search>',
        '<search><find_files>{"pattern": "x", "n": [{"k": "\\udbff"}]}</find_files></search>',
        '<microsandbox><arg name="data" type="json">["\\ud800"]</arg></microsandbox>',
    ],
)
def test_json_escapes_of_lone_surrogates_are_plan_errors(plan: str) -> None:
    assert codes(plan) == ["bad_character"]


def test_a_json_escaped_surrogate_pair_is_one_character() -> None:
    plan = check('<search><find_files>{"pattern": "\\ud83d\\ude00"}</find_files></search>')
    assert plan.calls[0].arguments == {"pattern": "\U0001f600"}


def test_a_lone_surrogate_in_the_plan_text_is_a_plan_error() -> None:
    with pytest.raises(PlanSyntaxError) as err:
        parse_turn("<search>ok</search>\n<search>a\ud800b</search>")
    assert [(p.code, p.line) for p in err.value.problems] == [("bad_character", 2)]
    assert "\ud800" not in err.value.problems[0].message  # a message that could not be sent either


# -- 3. everything the checker or parser used to raise --------------------------------------------


@pytest.mark.parametrize(
    "plan",
    [
        '<search retries="²" idempotent="true">x</search>',
        '<search retries="¹⁰" idempotent="true">x</search>',
        '<parallel max_concurrency="²"><search>x</search></parallel>',
        '<parallel max_concurrency="9999999999999999999999"><search>x</search></parallel>',
        '<search timeout="99999999999999999999999999999999999999s">x</search>',
    ],
)
def test_numbers_int_refuses_are_bad_attributes(plan: str) -> None:
    assert codes(plan) == ["bad_attribute"]


@pytest.mark.parametrize(
    "arguments",
    [
        '{"pattern": "x", "n": ' + "9" * 5000 + "}",
        '{"pattern": "x", "n": [' + "[" * 900 + "]" * 900 + "]}",
        '{"pattern": "x", "n": ' + "[" * 30000 + "]" * 30000 + "}",
        '{"pattern": "x", "n": ' + '{"a":' * 2000 + "1" + "}" * 2000 + "}",
        '{"pattern": "x", "n": NaN}',
        '{"pattern": "x", "n": -Infinity}',
    ],
)
def test_json_the_decoder_would_raise_on_or_mangle_is_invalid_json(arguments: str) -> None:
    assert codes(f"<search><find_files>{arguments}</find_files></search>") == ["invalid_json"]
    assert codes(f'<microsandbox><arg name="a" type="json">{arguments}</arg></microsandbox>') == ["invalid_json"]


def test_json_nesting_is_allowed_up_to_the_limit() -> None:
    def nested(depth: int) -> str:  # the arguments object itself is one level
        return '{"pattern": "x", "n": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"

    assert codes(f"<search><find_files>{nested(MAX_JSON_DEPTH)}</find_files></search>") == []
    assert codes(f"<search><find_files>{nested(MAX_JSON_DEPTH + 1)}</find_files></search>") == ["invalid_json"]
    # Brackets inside strings are text, not nesting.
    assert codes('<search><find_files>{"pattern": "' + "[" * 5000 + '"}</find_files></search>') == []


@pytest.mark.parametrize(
    "ref",
    [
        "${" + "9" * 5000 + "}",
        "${step" + "9" * 5000 + "}",
        "$result_of_step_" + "9" * 5000,
        "${a[" + "9" * 5000 + "]}",
        "${a[-" + "9" * 5000 + "]}",
        "${a" + "[*]" * 100 + "}",
    ],
)
def test_references_with_endless_numbers_or_paths_are_bad_references(ref: str) -> None:
    assert codes(f'<search id="a">x</search><search>{ref}</search>') == ["bad_reference"]
    with pytest.raises(RefSyntaxError):
        parse_template(ref)


def test_a_mustache_with_an_endless_number_is_left_alone() -> None:
    mustache = "x {{" + "9" * 5000 + "}}"
    assert check(f"<search>{mustache}</search>").calls[0].arguments == {"pattern": mustache}


def test_the_plan_size_setting_has_a_ceiling() -> None:
    assert PlanSettings(max_bytes=1024 * 1024).max_bytes == 1024 * 1024
    with pytest.raises(ValidationError):
        PlanSettings(max_bytes=1024 * 1024 + 1)


@pytest.mark.no_cover  # timed: coverage's tracer would be measured, not the code
def test_too_many_steps_is_one_problem_found_before_the_rest_is_read() -> None:
    plan = "<nosuch>x</nosuch>" * 10_000  # 180 KB, and each step would be a problem of its own
    turn = parse_turn(plan, max_bytes=1024 * 1024, max_steps=10_000)
    with pytest.raises(PlanCheckError) as err:
        check_plan(turn, REGISTRY, shorthands=SHORTHANDS, limits=PlanSettings(max_steps=64))
    assert [p.code for p in err.value.problems] == ["too_many_steps"]
    # The parser stops counting at its own limit, one problem too.
    assert codes(plan, max_bytes=1024 * 1024, max_steps=64) == ["too_many_steps"]
    # Stopping at the limit costs a fraction of reading every step (about 0.27 of it, measured in
    # the same process, so a busy machine slows both).
    capped = seconds(parse_and_check(plan, max_bytes=1024 * 1024, max_steps=64))
    whole = seconds(parse_and_check(plan, max_bytes=1024 * 1024, max_steps=10_000))
    assert capped < 0.6 * whole, (capped, whole)


@pytest.mark.parametrize(
    ("plan", "expected"),
    [
        ('<search id="a">x</search><search>${a}</search>', []),
        ('<sequential id="s"><search>x</search><search>${s}</search></sequential>', ["forward_reference"]),
        ("<search>${1}</search>", ["forward_reference"]),
        ('<race><search>${b}</search><search id="b">x</search></race>', ["forward_reference"]),
        ('<parallel><sequential><search id="a">x</search><search>${a}</search></sequential></parallel>', []),
        (
            '<parallel><search id="a">x</search><sequential><search>${a}</search></sequential></parallel>',
            ["sibling_reference"],
        ),
        ('<fallback><search id="a">x</search><search>${a}</search></fallback>', ["sibling_reference"]),
        ('<sequential><parallel><search id="a">x</search></parallel><search>${a}</search></sequential>', []),
        ('<search id="a">x</search><parallel><race><search>${a}</search></race></parallel>', []),
        ('<parallel id="p"><search>x</search></parallel><search>${p}</search>', []),
        ('<parallel id="p"><search>${p}</search></parallel>', ["forward_reference"]),
        ('<parallel><race id="r"><search>x</search></race><search>${r}</search></parallel>', ["sibling_reference"]),
    ],
)
def test_references_see_exactly_what_finishes_before_them(plan: str, expected: list[str]) -> None:
    assert codes(plan) == expected


def chain(n: int) -> str:
    return '<search id="s0">x</search>' + "".join(f'<search id="s{i}">${{s{i - 1}}}</search>' for i in range(1, n))


@pytest.mark.no_cover  # timed: coverage's tracer would be measured, not the code
def test_chained_references_check_in_linear_time() -> None:
    assert codes(chain(1000), PlanSettings(max_steps=1000), max_bytes=1024 * 1024) == []
    assert seconds(parse_and_check(chain(1000), PlanSettings(max_steps=1000), max_bytes=1024 * 1024)) < 0.5
    # Beyond the config's ceiling of steps, to see the cost per reference: 10k took 11 s before.
    limits = PlanSettings.model_construct(**{**PlanSettings().model_dump(), "max_steps": 10_000})
    _, small_cpu = timed(parse_and_check(chain(2_500), limits, max_bytes=1024 * 1024, max_steps=10_000), 2)
    assert small_cpu < 1
    large = parse_and_check(chain(10_000), limits, max_bytes=1024 * 1024, max_steps=10_000)
    _, large_cpu = timed(large, 1)  # again only if it fails, as in assert_linear
    if not (large_cpu < 3 and large_cpu / small_cpu < 8):
        large_cpu = min(large_cpu, timed(large, 2)[1])
    assert large_cpu < 3 and large_cpu / small_cpu < 8, (small_cpu, large_cpu)


# -- 2. the mustache repair -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "repaired"),
    [
        ("{{a.text}} {{ a }} {{1}}", "${a.text} ${a} ${1}"),
        ("{{{a}}}", "${a}"),  # handlebars' triple braces: no brace is left beside the reference
        ("{{ nope }} {{}} {{   }} {{a} {{a.x}", "{{ nope }} {{}} {{   }} {{a} {{a.x}"),
        ("{{" + " " * 3000 + "a" + " " * 3000 + "}}", "${a}"),
    ],
)
def test_mustache_repair_reads_what_it_did(written: str, repaired: str) -> None:
    value, _, _ = read_references({"p": written}, Targets(lambda target: target in ("a", 1)))
    assert value == {"p": repaired}


@pytest.mark.no_cover  # timed: coverage's tracer would be measured, not the code
def test_mustache_repair_takes_linear_time() -> None:
    def bomb(n: int) -> dict[str, str]:
        return {"p": "{{" + " " * n + "x"}

    everything = Targets(lambda _: True)
    small = seconds(lambda: read_references(bomb(2_000), everything))
    assert small < 0.05  # 2.5 KB once blocked the event loop for 9.7 s
    large = seconds(lambda: read_references(bomb(64_000), everything))
    assert large < 0.05
    assert codes('<search id="a">x</search><search>a {{' + " " * 3000 + "a</search>") == []


# -- 4. linear time over adversarial shapes -------------------------------------------------------


def fill(head: str, unit: str, tail: str, size: int) -> str:
    """`head`, then `unit` repeated, then `tail`: at most `size` characters."""
    return head + unit * ((size - len(head) - len(tail)) // len(unit)) + tail


SHAPES: dict[str, Callable[[int], str]] = {
    "open attribute values": lambda n: fill("<search>x</search>", '<a x="', "", n),
    "bare <": lambda n: fill("", "<", "", n),
    "bare < in a block": lambda n: fill("<parallel>", "<", "</parallel>", n),
    "&#": lambda n: fill("<search>", "&#", "</search>", n),
    "digits of a character reference": lambda n: fill("<search>&#", "9", ";</search>", n),
    "${": lambda n: fill("<search>", "${", "</search>", n),
    "[[[[": lambda n: fill('<search><find_files>{"pattern": ', "[", "}</find_files></search>", n),
    "nested blocks": lambda n: fill("", "<parallel>", "", n),
    "closed nested blocks": lambda n: (
        "<sequential>" * 8 + fill("", "<search>x</search>", "", n - 300) + "</sequential>" * 8
    ),
    "{{ then spaces": lambda n: fill('<search id="a">x</search><search>a {{', " ", "a</search>", n),
    "many {{": lambda n: fill("<search>", "{{ ", "</search>", n),
    "<!-- never closed": lambda n: fill("", "<!--", "", n),
    "<? before one ?>": lambda n: fill("", "<?", "?>", n),
    "<![CDATA[ in a call": lambda n: fill("<search>", "<![CDATA[", "</search>", n),
    "stray close tags": lambda n: fill("<parallel>", "</a>", "</parallel>", n),
    "unclosed tags": lambda n: fill("", "<a>", "", n),
    "unclosed calls": lambda n: fill("", "<search>", "", n),
    "unclosed thinks": lambda n: fill("", "<think>\n", "", n),
    "self-closing calls": lambda n: fill("", "<search/>", "", n),
    "tools of a server block": lambda n: fill("<search>", "<a/>", "</search>", n),
    "args": lambda n: fill("<microsandbox>", "<arg name='a'/>", "</microsandbox>", n),
    "JSON strings": lambda n: fill(
        '<search><find_files>{"pattern": "x", "a": [', '"\\"\\\\",', '""]}</find_files></search>', n
    ),
    "numbers": lambda n: fill(
        '<search><find_files>{"pattern": "x", "a": [', "1" * 900 + ",", "1]}</find_files></search>", n
    ),
    "lines of problems": lambda n: fill("", '<search retries="x">\n</search>', "", n),
    "references": lambda n: fill('<search id="a">x</search><search>', "${a.b[0]}", "</search>", n),
    "bare references": lambda n: fill("<search>", "$result_of_step_1['", "</search>", n),
}


@pytest.mark.no_cover  # timed: coverage's tracer would be measured, not the code
@pytest.mark.parametrize("shape", SHAPES)
def test_adversarial_plans_parse_and_check_in_linear_time(shape: str) -> None:
    build = SHAPES[shape]
    assert len(build(64 * 1024).encode()) <= 64 * 1024
    assert_linear(build, 16 * 1024, 0.5)


# -- 5. resolve bounds what it builds -------------------------------------------------------------


def record(value: Any) -> dict[str, Any]:
    return {
        "status": "ok",
        "text": "",
        "json": value,
        "error": None,
        "ms": 1,
        "attempts": 1,
        "server": "s",
        "tool": "t",
    }


@pytest.mark.no_cover  # timed: coverage's tracer would be measured, not the code
def test_resolve_stops_a_reference_repeated_to_a_large_value() -> None:
    lookup = {"big": record("x" * 1_000_000)}.get

    def refused(arguments: dict[str, Any]) -> None:
        with pytest.raises(RefError, match="exceed 4194304 bytes"):
            resolve(arguments, lookup, max_bytes=4 * 1024 * 1024)

    for repeated in ({"a": ["${big}"] * 1000}, {"a": "${big} " * 1000}):
        assert seconds(lambda arguments=repeated: refused(arguments)) < 0.5


def test_resolve_counts_bytes_of_the_result() -> None:
    lookup = {"r": record({"k": "é"})}.get  # {"k":"é"}: 10 bytes as compact UTF-8 JSON
    arguments = {"a": "${r}", "b": "<${r.k}>"}  # 10 + 1 + 2 + 1 = 14
    assert resolve(arguments, lookup, max_bytes=14) == resolve(arguments, lookup) == {"a": {"k": "é"}, "b": "<é>"}
    with pytest.raises(RefError):
        resolve(arguments, lookup, max_bytes=13)


# -- through the front ----------------------------------------------------------------------------


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    say = {"tag": "say", "tool": "echo", "primary": "text"}
    async with memory_gateway(tmp_path, {"fx": {"shorthand": say}}) as pair:
        yield pair


async def test_a_plan_naming_no_character_is_a_plan_error_and_the_gateway_serves_on(
    gw: tuple[Gateway, MemoryAuditSink],
) -> None:
    async with Client(gw[0].server, mode="legacy") as client:
        for plan, dry_run in [
            ('<call server="fx" tool="echo">{"text":"&#xD800;"}</call>', True),
            ('<call server="fx" tool="echo">{"text":"\\ud800"}</call>', False),
            ("<say>&#99999999999999999999;</say>", False),
        ]:
            result = await client.call_tool("orchestrate", {"plan": plan, "dry_run": dry_run})
            assert result.is_error and 'code="bad_character"' in text(result)
            json.dumps(result.model_dump(mode="json"), ensure_ascii=False).encode()  # sendable as it is
        after = await client.call_tool("orchestrate", {"plan": "<say>still here</say>"})
    assert after.structured_content is not None
    assert [s["result"] for s in after.structured_content["steps"]] == ["still here"]


@pytest.mark.no_cover  # timed: coverage's tracer would be measured, not the code
async def test_a_mustache_bomb_does_not_block_the_event_loop(gw: tuple[Gateway, MemoryAuditSink]) -> None:
    late = 0.0
    done = anyio.Event()

    async def heartbeat() -> None:
        # The loop's CPU time between two ticks: what a stall costs every client, and unlike wall
        # time it does not grow when other processes take the cores.
        nonlocal late
        while not done.is_set():
            began = time.thread_time()
            await anyio.sleep(0.005)
            late = max(late, time.thread_time() - began)

    plan = '<say id="a">x</say><say>a {{' + " " * 3000 + "a</say>"
    # What earlier tests left in this worker is collected first: a full collection of their
    # objects falling in the window would be charged to the plan (a worker after tests/security
    # spent 0.16 s of CPU in one; 0.28 s were charged once, in a fresh clone's run).
    gc.collect()
    async with Client(gw[0].server, mode="legacy") as client, anyio.create_task_group() as tg:
        tg.start_soon(heartbeat)
        await anyio.sleep(0.05)
        result = await client.call_tool("orchestrate", {"plan": plan, "dry_run": True})
        done.set()
    assert not result.is_error, text(result)
    assert late < 0.25  # the 2.5 KB form of this plan once stalled every client for 9.7 s


async def test_a_lone_surrogate_in_the_plan_text_is_a_plan_error_through_the_front(
    gw: tuple[Gateway, MemoryAuditSink],
) -> None:
    async with Client(gw[0].server, mode="legacy") as client:
        result = await client.call_tool("orchestrate", {"plan": "<say>a\ud800b</say>", "dry_run": True})
    assert result.is_error and 'code="bad_character"' in text(result)
