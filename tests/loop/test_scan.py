"""The streaming item scanner and stop handling (pure)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolscore.loop.scan import Item, ItemScanner
from toolscore.loop.stops import classify, strip_think

TURN = (
    "<think>a <b>bold</b> thought with </fx> in it</think> prose a<b and c<d, x < y "
    '<fx><echo>{"text": "hi > there"}</echo></fx><!-- <fx> in a comment -->'
    "<parallel><fx><add>{}</add></fx><parallel><pid/></parallel></parallel>"
    '<pid/><step goal="a > b"><x/></step></stray><execute_tools />after the marker <fx>x</fx>'
)


def scan(text: str, size: int) -> list[Item]:
    scanner = ItemScanner()
    out: list[Item] = []
    for i in range(0, len(text), size):
        out += scanner.feed(text[i : i + size])
    return out + scanner.close()


def test_items_of_a_turn() -> None:
    items = scan(TURN, 10_000)
    assert [(i.kind, i.name) for i in items] == [
        ("think", "think"),
        ("call", "fx"),
        ("call", "parallel"),
        ("call", "pid"),
        ("call", "step"),
        ("stop", "execute_tools"),
    ]
    assert items[1].text == '<fx><echo>{"text": "hi > there"}</echo></fx>'
    assert items[2].text.endswith("</parallel></parallel>")


@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=60))
def test_any_split_gives_the_same_items(cuts: list[int]) -> None:
    scanner = ItemScanner()
    out: list[Item] = []
    pos = 0
    for n in cuts:
        out += scanner.feed(TURN[pos : pos + n])
        pos += n
    out += scanner.feed(TURN[pos:]) + scanner.close()
    assert out == scan(TURN, 10_000)


def test_open_answer_at_the_end_is_the_answer_and_a_cut_call_is_reported() -> None:
    assert [(i.kind, i.text) for i in scan("<answer>42", 3)] == [("answer", "<answer>42")]
    assert [(i.kind, i.name) for i in scan('<fx><echo>{"text": ', 5)] == [("cut", "fx")]


@pytest.mark.parametrize(
    "unit",
    ["<", "a<b ", "<fx>", "<fx " + "x" * 10, "<think>", "<!--", "</", "<a><a>", "<a></a ", '<a b="'],
)
@pytest.mark.parametrize("prefix", ["", "<fx x='", "<fx><a>", "<!--"])
def test_hostile_streams_are_linear(unit: str, prefix: str) -> None:
    """Token by token, 4x the input takes about 4x the time (not 16x)."""

    def cost(n: int) -> float:
        text = prefix + unit * n
        began = time.process_time()
        scanner = ItemScanner()
        for i in range(0, len(text), 4):
            scanner.feed(text[i : i + 4])
        scanner.close()
        return time.process_time() - began

    small, large = min(cost(1000) for _ in range(3)), min(cost(4000) for _ in range(3))
    assert large < 10 * max(small, 1e-3)


def test_classify() -> None:
    def kind(text: str) -> tuple[str, str | None]:
        end = classify(text, scan(text, 7))
        return end.kind, end.answer

    assert kind("<think>x</think><fx><echo>{}</echo></fx>") == ("calls", None)
    assert kind("<answer> 4 </answer>") == ("answer", "4")
    assert kind("<answer>4") == ("answer", "4")
    assert kind("so\nFinal Answer: 12\n") == ("answer", "12")
    assert kind("<think>Final Answer: not yet</think>hmm") == ("none", None)
    assert kind("just prose") == ("none", None)
    assert classify("<step_done />", scan("<step_done />", 3)).step_done
    assert strip_think("<think>a</think>b<think>c") == "b"
