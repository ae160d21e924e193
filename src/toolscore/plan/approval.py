"""One approval per plan: the checked plan rendered for a person, what the approval binds, and
the check each approved step's resolved arguments must pass; pure.

A plan whose steps need the user's confirmation (`destructive: "confirm"`) is shown once, before
anything runs: every step, its tool, its literal arguments, and which arguments come from which
earlier step. What the user approves is bound by `ApprovalRequest.binding`, a digest of the plan
text, the question shown and each confirm step's tool and argument template. While the plan runs,
the approval travels in its steps' scope (`CallScope.approval`): a confirm step may run only if
its resolved arguments fit a template that was shown (literal values equal, a whole-string
reference any value, a reference inside text only text between the literal parts shown around it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from toolscore._glob import pieces_match
from toolscore._json import JsonPath, format_path, map_strings_at
from toolscore.errors import RefSyntaxError
from toolscore.plan.nodes import Block, CheckedCapability, CheckedPlan, CheckedStep
from toolscore.plan.refs import Ref, parse_template

__all__ = ["NEEDS_APPROVAL", "Approval", "ApprovalRequest", "Approve", "approval_request", "fits"]

NEEDS_APPROVAL = "needs_approval"
"""The code of a plan problem that the user's approval of the whole plan lifts (a confirm step)."""

Approve = Callable[[str, str], Awaitable[bool]]
"""Asks the user to approve a plan: (the rendered plan, the binding digest) -> yes or no. Raises
`errors.InputRequired` to pause for a 2026-07-28 client's answer, `errors.Rejected` for an answer
that does not belong to this plan."""

_ARGUMENT_CHARS = 1000
"""The most of one step's arguments the question quotes (the binding covers all of them)."""
_QUESTION_CHARS = 12_000


@dataclass(frozen=True, slots=True)
class Approval:
    """The user's yes to one plan run: the argument templates shown, per tool as clients name it."""

    plan_id: str
    shown: Mapping[str, tuple[dict[str, Any], ...]]

    def allows(self, tool: str, arguments: Any) -> bool:
        """Whether a call of `tool` with these resolved arguments is one the user was shown."""
        return any(fits(template, arguments) for template in self.shown.get(tool, ()))


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What to ask, what the answer binds, and the templates a yes allows."""

    question: str
    binding: str
    shown: Mapping[str, tuple[dict[str, Any], ...]]

    def approval(self, plan_id: str) -> Approval:
        return Approval(plan_id, self.shown)


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _step_name(plan: CheckedPlan, target: int | str) -> str:
    """Where a reference reads from, in words."""
    if isinstance(target, int):
        named = next((c.node.id for c in plan.steps if c.step == target and c.node.id), None)
        return f'step {target} "{named}"' if named else f"step {target}"
    local = plan.ids.get(target)
    if isinstance(local, int):
        return f'step {local} "{target}"'
    if isinstance(local, Block):
        return f'the block "{target}"'
    return f'"{target}" of an earlier plan in this episode'


def _sources(plan: CheckedPlan, arguments: dict[str, Any]) -> list[str]:
    """One line per argument that takes a value from an earlier step."""
    lines: list[str] = []

    def note(text: str, path: JsonPath) -> str:
        try:
            refs = [part for part in parse_template(text) if isinstance(part, Ref)]
        except RefSyntaxError:  # the checker refused these; nothing to show
            return text
        if refs:
            sources = ", ".join(f"{_step_name(plan, ref.target)} ({ref.raw})" for ref in refs)
            lines.append(f"      {format_path(path)}: from {sources}")
        return text

    map_strings_at(arguments, note)
    return lines


def _quoted(arguments: dict[str, Any]) -> str:
    text = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= _ARGUMENT_CHARS else f"{text[:_ARGUMENT_CHARS]}… ({len(text) - _ARGUMENT_CHARS} more)"


def _tool(step: CheckedStep) -> str:
    if isinstance(step, CheckedCapability):
        return f"capability {step.capability}"
    return step.route.public_name


def render(plan: CheckedPlan, confirm: Collection[int]) -> str:
    """The plan as a person reads it: each step, its tool, its literal arguments, where the rest
    comes from; the steps that need the approval marked `*`."""
    marked = ", ".join(str(n) for n in sorted(confirm))
    lines = [
        f"Allow this plan of {len(plan.steps)} step(s) to run? Nothing runs unless you allow it; "
        f"the steps marked * ({marked}) change things and run only with the arguments shown."
    ]
    for step in plan.steps:
        named = f' "{step.node.id}"' if step.node.id else ""
        mark = "*" if step.step in confirm else " "
        lines.append(f"{mark} step {step.step}{named}: {_tool(step)} {_quoted(step.arguments)}")
        lines.extend(_sources(plan, step.arguments))
    question = "\n".join(lines)
    if len(question) > _QUESTION_CHARS:
        question = question[:_QUESTION_CHARS] + "\n… (the rest of the plan is cut here)"
    return question


def approval_request(plan: CheckedPlan, text: str, confirm: Collection[int]) -> ApprovalRequest:
    """The question for a checked plan, and what a yes binds: the plan `text`, the question, and
    each confirm step's tool and argument template."""
    question = render(plan, confirm)
    shown: dict[str, list[dict[str, Any]]] = {}
    bound: list[list[Any]] = []
    for call in plan.calls:
        if call.step in confirm:
            shown.setdefault(call.route.public_name, []).append(call.arguments)
            bound.append([call.step, call.route.server, call.route.remote_name, _digest(call.arguments)])
    binding = _digest(
        {
            "plan": hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
            "question": question,
            "steps": bound,
        }
    )
    return ApprovalRequest(question, binding, {tool: tuple(t) for tool, t in shown.items()})


def fits(template: Any, value: Any) -> bool:
    """Whether `value` is something `template` (a step's arguments as checked) may resolve to."""
    if isinstance(template, str):
        try:
            parts = parse_template(template)
        except RefSyntaxError:
            return False
        if len(parts) == 1 and isinstance(parts[0], Ref):
            return True  # a whole-string reference: the value shown as "from step N"
        if not any(isinstance(part, Ref) for part in parts):
            return isinstance(value, str) and value == "".join(part for part in parts if isinstance(part, str))
        return isinstance(value, str) and _text_fits(parts, value)
    if isinstance(template, dict):
        return (
            isinstance(value, dict)
            and template.keys() == value.keys()
            and all(fits(item, value[key]) for key, item in template.items())
        )
    if isinstance(template, list):
        return isinstance(value, list) and len(template) == len(value) and all(map(fits, template, value))
    return type(template) is type(value) and bool(template == value)


def _text_fits(parts: tuple[str | Ref, ...], value: str) -> bool:
    """Literal text around references: `value` holds the literals in order, the first at its
    start and the last at its end (leftmost matches, so linear in practice and never exponential)."""
    literals = [""]
    for part in parts:
        if isinstance(part, Ref):
            literals.append("")
        else:
            literals[-1] += part
    return pieces_match(value, literals)
