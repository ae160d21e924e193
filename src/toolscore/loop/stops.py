"""How a model's turn ended and what it said: calls, an answer, or neither; pure.

A turn is taken as calls when it holds complete calls, whether or not it ended on
`<execute_tools />` (the implicit stop: some models and servers drop stop sequences). Otherwise an
`<answer>` (closed, or left open because the model stopped on `</answer>`) or a `Final Answer:`
line ends the task. A turn with neither gets one reminder, and the next such turn is the answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from toolscore.loop.scan import Item

__all__ = ["TurnEnd", "classify", "strip_think"]

_FINAL = re.compile(r"(?im)^[ \t>*_#]*final answer\s*:\s*")
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S)


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """What a turn amounts to."""

    kind: Literal["calls", "answer", "none"]
    answer: str | None = None
    step_done: bool = False


def strip_think(text: str) -> str:
    """The text without its `<think>` parts (an unclosed one runs to the end)."""
    return _THINK.sub("", text)


def _answer_of(items: list[Item]) -> str | None:
    for item in items:
        if item.kind == "answer":
            body = item.text[len("<answer") :]
            body = body[body.find(">") + 1 :] if ">" in body else ""
            return body.removesuffix("</answer>").strip()
    return None


def classify(text: str, items: list[Item]) -> TurnEnd:
    """The end of a turn, from its full text and the items the scanner found in it."""
    calls = [i for i in items if i.kind in ("call", "cut") and i.name != "step_done"]
    done = any(i.kind == "call" and i.name == "step_done" for i in items)
    if calls:
        return TurnEnd("calls", step_done=done)
    answer = _answer_of(items)
    if answer is None:
        visible = strip_think(text)
        match = _FINAL.search(visible)
        if match is not None:
            answer = visible[match.end() :].strip()
    if answer is not None:
        return TurnEnd("answer", answer, step_done=done)
    return TurnEnd("none", step_done=done)
