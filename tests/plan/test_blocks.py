"""The block table: one spec per block tag, and each kind's strategy run over fake children."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import anyio
import anyio.lowlevel
import pytest

from tests.plan.conftest import REGISTRY
from toolscore.plan.blocks import (
    COMMON_ATTRIBUTES,
    SPECS,
    BadValue,
    BlockKind,
    Choice,
    Duration,
    Flag,
    Ident,
    IntRange,
    either,
    option,
)
from toolscore.plan.nodes import ArgsSpec, Block, CallNode, CheckedBlock, CheckedCall, CheckedNode, Status

pytestmark = pytest.mark.anyio

ROUTE = REGISTRY.find("search", "find_files")
assert ROUTE is not None


def call(step: int, *, on_error: Any = "skip_dependents") -> CheckedCall:
    return CheckedCall(CallNode(step, "search", 1, ArgsSpec("empty"), on_error=on_error), ROUTE, {}, ())


def block(kind: BlockKind, *children: CheckedNode, **options: Any) -> CheckedBlock:
    nodes = tuple(c.node if isinstance(c, CheckedCall) else c.block for c in children)
    return CheckedBlock(Block(kind, nodes, options=options), children)


class Children:
    """A fake `run_child`: each step ends as told (`"hang"`: until cancelled); it records what ran."""

    def __init__(self, outcomes: Mapping[int, Status | Literal["hang"]]) -> None:
        self.outcomes = outcomes
        self.started: list[int] = []
        self.finished: list[int] = []
        self.cancelled: list[int] = []
        self.running = self.most_at_once = 0

    async def __call__(self, child: CheckedNode, deadline: float) -> Status:
        assert isinstance(child, CheckedCall)
        self.started.append(child.step)
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            outcome = self.outcomes[child.step]
            if outcome == "hang":
                await anyio.sleep_forever()
                raise AssertionError("a hanging child is only ever cancelled")
            await anyio.lowlevel.checkpoint()  # let siblings start, as a real call would
        except anyio.get_cancelled_exc_class():
            self.cancelled.append(child.step)
            raise
        finally:
            self.running -= 1
        self.finished.append(child.step)
        return outcome


async def run(node: CheckedBlock, children: Children) -> Status:
    with anyio.fail_after(60):  # a hang detector; the block's own deadline is the 5 s below
        return await SPECS[node.block.kind].run(node, children, anyio.current_time() + 5)


# -- the table -----------------------------------------------------------------------------------


def test_every_block_tag_has_exactly_one_spec() -> None:
    assert list(SPECS) == list(BlockKind)
    assert all(kind is spec.kind for kind, spec in SPECS.items())
    assert all(not spec.attributes.keys() & COMMON_ATTRIBUTES.keys() for spec in SPECS.values())


def test_options_are_as_written_or_the_kinds_default() -> None:
    assert option(Block(BlockKind.SEQUENTIAL, ()), "stop_on_error") is True
    assert option(Block(BlockKind.SEQUENTIAL, (), options={"stop_on_error": False}), "stop_on_error") is False
    assert option(Block(BlockKind.PARALLEL, ()), "policy") == "all"
    assert option(Block(BlockKind.PARALLEL, ()), "max_concurrency") is None
    with pytest.raises(KeyError):
        option(Block(BlockKind.RACE, ()), "policy")


@pytest.mark.parametrize(
    ("attribute", "raw", "value"),
    [
        (Duration(), "500ms", 0.5),
        (Duration(), " 20 ", 20.0),
        (Duration(), "1.5s", 1.5),
        (Duration(), "2m", 120.0),
        (Flag(default=False), "True", True),
        (Flag(default=True), "false", False),
        (IntRange(1, 64), "64", 64),
        (Choice(("all", "fail_fast")), "fail_fast", "fail_fast"),
        (Ident(), "a_1", "a_1"),
    ],
)
def test_attribute_values_parse(attribute: Any, raw: str, value: Any) -> None:
    assert attribute.parse(raw, "key") == value


@pytest.mark.parametrize(
    ("attribute", "key", "raw", "code", "message"),
    [
        (Duration(), "timeout", "0s", "bad_attribute", "timeout='0s': write a duration like 500ms, 20s or 2m"),
        (Duration(), "timeout", "9" * 19 + "s", "bad_attribute", "write a duration"),
        (Flag(default=True), "stop_on_error", "yes", "bad_attribute", "stop_on_error='yes': use true or false"),
        (IntRange(0, 5), "retries", "6", "bad_attribute", "retries='6': use a whole number from 0 to 5"),
        (IntRange(0, 5), "retries", "²", "bad_attribute", "use a whole number"),
        (IntRange(0, 5), "retries", "1" * 10, "bad_attribute", "use a whole number"),
        (Choice(("a", "b", "c")), "policy", "d", "bad_attribute", "policy='d': use 'a', 'b' or 'c'"),
        (Choice(("all",), "quorum:"), "policy", "quorum:2", "unsupported", "policy 'quorum:k' is plan language v2"),
        (Ident(), "id", "1a", "bad_id", "id='1a' must match [A-Za-z_][A-Za-z0-9_]{0,63}"),
    ],
)
def test_bad_attribute_values_say_what_to_write(attribute: Any, key: str, raw: str, code: str, message: str) -> None:
    with pytest.raises(BadValue) as err:
        attribute.parse(raw, key)
    assert err.value.code == code
    assert message in str(err.value)


def test_either_joins_alternatives_in_prose() -> None:
    assert [either(words) for words in ([], ["a"], ["a", "b"], ["a", "b", "c"])] == ["", "a", "a or b", "a, b or c"]


# -- strategies ----------------------------------------------------------------------------------


async def test_a_sequence_runs_in_order_and_stops_at_the_first_failure() -> None:
    children = Children({1: "ok", 2: "error", 3: "ok"})
    assert await run(block(BlockKind.SEQUENTIAL, call(1), call(2), call(3)), children) == "error"
    assert children.started == [1, 2]


async def test_a_sequence_may_go_on_after_a_failure() -> None:
    children = Children({1: "timeout", 2: "ok"})
    node = block(BlockKind.SEQUENTIAL, call(1), call(2), stop_on_error=False)
    assert await run(node, children) == "timeout"
    assert children.started == [1, 2]


async def test_a_call_that_says_continue_does_not_fail_its_sequence() -> None:
    children = Children({1: "error", 2: "ok"})
    node = block(BlockKind.SEQUENTIAL, call(1, on_error="continue"), call(2))
    assert await run(node, children) == "ok"
    assert children.started == [1, 2]
    # Only a call can say so: a failed block stops the sequence.
    children = Children({})
    node = block(BlockKind.SEQUENTIAL, block(BlockKind.RACE), call(2))

    async def failing_block(child: CheckedNode, deadline: float) -> Status:
        return "error" if isinstance(child, CheckedBlock) else await children(child, deadline)

    assert await SPECS[BlockKind.SEQUENTIAL].run(node, failing_block, 0) == "error"
    assert children.started == []


async def test_a_parallel_runs_every_child_at_once_and_fails_if_one_does() -> None:
    children = Children({1: "ok", 2: "error", 3: "ok"})
    assert await run(block(BlockKind.PARALLEL, call(1), call(2), call(3)), children) == "error"
    assert sorted(children.finished) == [1, 2, 3] and children.most_at_once == 3
    assert await run(block(BlockKind.PARALLEL, call(1), call(3)), Children({1: "ok", 3: "ok"})) == "ok"


async def test_fail_fast_cancels_the_siblings_still_running() -> None:
    children = Children({1: "hang", 2: "error"})
    assert await run(block(BlockKind.PARALLEL, call(1), call(2), policy="fail_fast"), children) == "error"
    assert children.cancelled == [1]


async def test_max_concurrency_caps_the_children_running_at_once() -> None:
    children = Children({n: "ok" for n in range(1, 6)})
    node = block(BlockKind.PARALLEL, *(call(n) for n in range(1, 6)), max_concurrency=2)
    assert await run(node, children) == "ok"
    assert children.most_at_once == 2 and sorted(children.finished) == [1, 2, 3, 4, 5]


async def test_a_race_is_won_by_the_first_success_and_the_rest_are_cancelled() -> None:
    children = Children({1: "hang", 2: "error", 3: "ok"})
    assert await run(block(BlockKind.RACE, call(1), call(2), call(3)), children) == "ok"
    assert children.cancelled == [1] and children.finished == [2, 3]
    assert await run(block(BlockKind.RACE, call(1), call(2)), Children({1: "error", 2: "timeout"})) == "error"


async def test_a_fallback_tries_alternatives_in_turn_until_one_succeeds() -> None:
    children = Children({1: "error", 2: "ok", 3: "ok"})
    assert await run(block(BlockKind.FALLBACK, call(1), call(2), call(3)), children) == "ok"
    assert children.started == [1, 2]
    assert await run(block(BlockKind.FALLBACK, call(1)), Children({1: "ref_error"})) == "error"


# -- values --------------------------------------------------------------------------------------


def value(status: str, json: Any = None) -> dict[str, Any]:
    return {"status": status, "json": json}


def test_a_sequences_value_is_its_last_childs() -> None:
    of = SPECS[BlockKind.SEQUENTIAL].value
    assert of([("a", value("ok", 1)), (None, value("error", 2))], "error") == value("error", 2)
    assert of([], "ok") is None


def test_a_race_or_fallback_is_worth_its_winner() -> None:
    for kind in (BlockKind.RACE, BlockKind.FALLBACK):
        of = SPECS[kind].value
        assert of([("a", value("error")), ("b", None), ("c", value("ok", 3)), ("d", value("ok", 4))], "ok") == value(
            "ok", 3
        )
        assert of([("a", value("cancelled"))], "error") is None


def test_a_parallel_is_worth_its_childrens_json_by_id_or_in_order() -> None:
    of = SPECS[BlockKind.PARALLEL].value
    keyed = of([("a", value("ok", 1)), ("b", value("ok", {"x": "é"}))], "ok")
    assert keyed is not None
    assert (keyed["json"], keyed["text"], keyed["status"]) == ({"a": 1, "b": {"x": "é"}}, '{"a":1,"b":{"x":"é"}}', "ok")
    listed = of([("a", value("ok", 1)), (None, None)], "error")
    assert listed is not None and (listed["json"], listed["status"]) == ([1, None], "error")
