"""Data-flow labels: where a value came from, and which tools it may reach; pure.

Every result carries labels: `server:NAME` always, and `untrusted` when its server (or tool) is
marked so in servers.json, because text someone else wrote (a web page, a search hit) can carry
instructions aimed at the model. A label keeps where it came from (its *origin*: the first step
or result that carried it), so a refusal can name the source.

Labels reach a call two ways:

- **by reference** (plans): a step's arguments carry the labels of every result they reference,
  and its own result carries those plus its server's. This is exact: `${r.text}` names its source.
- **by quotation** (`delegate`, a client's own calls): the model saw results and may copy from
  them. A call whose arguments hold 8 or more characters in a row of a labelled text carries its
  labels. Text that was paraphrased, re-encoded or split into shorter pieces escapes this.

A rule can narrow or widen both: `identifiers: pass` lets a reference whose value is an
identifier (`identifier`) bring no label, and `after_reading: every_call` labels every call a model
wrote after it read such data, quoted or not (it may have been steered).

The `flow` rule (`FlowRules`) then says which labels may reach which tools. A running step's
labels (`StepTaint`) and a `delegate` task's reading (`Seen`) travel in the call's scope
(`CallScope.taint`, `CallScope.seen`) from the plan runner and the loop to the policy hook.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from toolscore._glob import matches
from toolscore._json import iter_strings
from toolscore.config import Config, FlowRule
from toolscore.errors import PlanProblem
from toolscore.plan.nodes import Block, CheckedBlock, CheckedCall, CheckedPlan

__all__ = [
    "MIN_QUOTE",
    "UNTRUSTED",
    "FlowRules",
    "Seen",
    "StepTaint",
    "Taint",
    "Trust",
    "block_steps",
    "identifier",
    "join",
    "plan_problems",
    "quoted",
    "refusal",
]

UNTRUSTED = "untrusted"
MIN_QUOTE = 8
"""The shortest run of characters that counts as quoting a result (substring provenance)."""

Taint = Mapping[str, str]
"""Label -> its origin, a phrase naming the result that first carried it (`step 2 (web__fetch)`)."""

T = TypeVar("T")


def join(*taints: Taint) -> dict[str, str]:
    """The union of labels; where two carry one label, the first origin stays."""
    out: dict[str, str] = {}
    for taint in taints:
        for label, origin in taint.items():
            out.setdefault(label, origin)
    return out


@dataclass(frozen=True, slots=True)
class Trust:
    """Which results are untrusted: whole servers, or some tools of a trusted one (servers.json)."""

    untrusted: frozenset[str] = frozenset()
    tools: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Server -> downstream tool globs whose results are untrusted."""

    @classmethod
    def of(cls, config: Config) -> Trust:
        servers = config.enabled_servers
        return cls(
            frozenset(s.name for s in servers if s.trust == "untrusted"),
            {s.name: s.untrusted_tools for s in servers if s.untrusted_tools},
        )

    def labels(self, server: str, tool: str, origin: str) -> dict[str, str]:
        """The labels of a result of `tool` (its downstream name) on `server`."""
        out = {f"server:{server}": origin}
        if server in self.untrusted or matches(tool, self.tools.get(server, ())):
            out[UNTRUSTED] = origin
        return out


Outcome = Literal["deny", "confirm"]

IDENTIFIER_CHARS = 64
"""The longest string that counts as an identifier."""


def identifier(value: Any) -> bool:
    """Whether a value is too small to hold an instruction: a number, a boolean, null, or one token
    (at most `IDENTIFIER_CHARS` characters, none of them a space, a line break, a control or an
    invisible character): an id, an e-mail address, an account number, a date, a channel's name."""
    if value is None or isinstance(value, bool | int | float):
        return True
    return isinstance(value, str) and len(value) <= IDENTIFIER_CHARS and value.isprintable() and " " not in value


class FlowRules:
    """The `flow` rule: label -> tools it may not reach (`deny`) or only with the user's yes (`confirm`)."""

    def __init__(self, rules: Mapping[str, FlowRule]) -> None:
        self._rules = dict(rules)

    def passes_identifiers(self, label: str) -> bool:
        """Whether a reference whose value is an identifier brings no `label` (`identifiers: pass`)."""
        rule = self._rules.get(label)
        return rule is not None and rule.identifiers == "pass"

    def every_call(self, label: str) -> bool:
        """Whether every call a model wrote after reading `label` data carries it (`after_reading`)."""
        rule = self._rules.get(label)
        return rule is not None and rule.after_reading == "every_call"

    def verdict(self, names: Sequence[str], taint: Taint) -> tuple[Outcome, str, str] | None:
        """(outcome, label, glob) for a call of the tool known by `names` whose arguments carry
        `taint`, or None when it may run; a `deny` anywhere wins over a `confirm`."""
        found: tuple[Outcome, str, str] | None = None
        for label in taint:
            rule = self._rules.get(label)
            if rule is None:
                continue
            for outcome, globs in (("deny", rule.deny), ("confirm", rule.confirm)):
                glob = next((g for g in globs if any(matches(n, g, fold=True) for n in names)), None)
                if glob is not None:
                    if outcome == "deny":
                        return "deny", label, glob
                    found = found or ("confirm", label, glob)
        return found


def _windows(arguments: Any) -> set[str]:
    """Every run of `MIN_QUOTE` characters in the arguments' strings (object keys included)."""
    out: set[str] = set()
    for text in iter_strings(arguments, keys=True):
        out.update(text[i : i + MIN_QUOTE] for i in range(len(text) - MIN_QUOTE + 1))
    return out


# Searching a text once per window runs at C speed (about 0.5 ns a character); past this many
# windows one pass over the text, looking each of its windows up in the set, costs less.
_SEARCH_WINDOWS = 512


def quoted(arguments: Any, texts: Iterable[tuple[str, T]]) -> T | None:
    """The first source whose text the arguments quote (`MIN_QUOTE` or more characters in a row),
    or None. Cost: linear in the texts' length, with a factor bounded whatever the arguments hold
    (`benchmarks/flow.py`)."""
    windows = _windows(arguments)
    if not windows:
        return None
    for text, source in texts:
        if len(text) < MIN_QUOTE:
            continue
        if len(windows) <= _SEARCH_WINDOWS:
            if any(w in text for w in windows):
                return source
        elif any(text[i : i + MIN_QUOTE] in windows for i in range(len(text) - MIN_QUOTE + 1)):
            return source
    return None


def block_steps(plan: CheckedPlan) -> dict[str, tuple[int, ...]]:
    """Each block id of the plan -> the steps inside that block (a reference to it reads them all)."""
    out: dict[str, tuple[int, ...]] = {}

    def walk(node: CheckedBlock) -> list[int]:
        steps: list[int] = []
        for child in node.children:
            steps.extend(walk(child) if isinstance(child, CheckedBlock) else [child.step])
        if node.block.id:
            out[node.block.id] = tuple(steps)
        return steps

    walk(plan.root)
    return out


def _phrase(call: CheckedCall) -> str:
    return f"step {call.step} ({call.route.public_name})"


def _names(call: CheckedCall) -> tuple[str, str]:
    return call.route.public_name, call.route.canonical


def refusal(step: int, tool: str, verdict: tuple[Outcome, str, str], taint: Taint, *, plan: bool) -> str:
    """The message of a call the flow rule refuses: the step, the label, its source, the rule."""
    outcome, label, glob = verdict
    where = f"step {step} ({tool})" if step else f"'{tool}'"
    verb = "denies" if outcome == "deny" else "asks the user before"
    rule = f"the flow rule {verb} {label} data in '{glob}'"
    text = f"{where} may not receive {label} data: its arguments carry the result of {taint[label]}; {rule}"
    if outcome == "confirm" and plan:
        text += (
            " (a plan with such a step is shown to the user once, before it runs, which needs a client that can"
            " ask (elicitation); a step the user was not shown cannot ask: call it directly)"
        )
    return text


def plan_problems(plan: CheckedPlan, trust: Trust, rules: FlowRules) -> list[PlanProblem]:
    """Every step of a plan whose references bring it labels the flow rule refuses, before any step
    runs; a `confirm` is a step the user must approve with the plan (`NEEDS_APPROVAL`: lifted when
    the client can be asked). References to earlier turns are checked when the step runs, and so
    are labels whose rule lets identifiers pass (the values are known then)."""
    from toolscore.plan.approval import NEEDS_APPROVAL  # loaded with the first plan, as the plan machinery

    blocks = block_steps(plan)
    results: dict[int, dict[str, str]] = {}
    problems: list[PlanProblem] = []
    for call in plan.steps:
        taint: dict[str, str] = {}
        for ref in call.refs:
            target = ref.target
            if isinstance(target, str):
                ident = plan.ids.get(target)
                steps: Iterable[int] = blocks.get(target, ()) if isinstance(ident, Block) else (ident,) if ident else ()
            else:
                steps = (target,)
            taint = join(taint, *(results.get(s, {}) for s in steps))
        if not isinstance(call, CheckedCall):
            results[call.step] = taint  # a capability's tools are known when it runs
            continue
        verdict = rules.verdict(_names(call), {k: v for k, v in taint.items() if not rules.passes_identifiers(k)})
        if verdict is None and (loose := rules.verdict(_names(call), taint)) is not None and loose[0] == "confirm":
            verdict = loose  # asked with the plan; its values decide when the step runs
        if verdict is not None:
            node = call.node
            message = refusal(call.step, call.route.public_name, verdict, taint, plan=True)
            code = NEEDS_APPROVAL if verdict[0] == "confirm" else "flow"
            problems.append(PlanProblem(code, message, step=node.step, tag=node.tag, id=node.id))
        results[call.step] = join(taint, trust.labels(call.route.server, call.route.remote_name, _phrase(call)))
    return problems


@dataclass
class StepTaint:
    """The labels of a plan step running now: set by the plan runner, read (and completed) by the
    flow hook, which knows the servers' trust."""

    step: int
    arguments: dict[str, str]
    result: dict[str, str] | None = None
    """The labels of the step's result, once the hook saw its call (None: no hook ran)."""
    text: dict[str, str] | None = None
    """Of `arguments`, the labels some reference brought with a value that is no identifier (None:
    not told apart, all of them): a rule with `identifiers: pass` drops the others."""


Seen = Callable[[], Iterable[tuple[str, str]]]
"""The untrusted results the model of a `delegate` task has seen so far, as (text, origin) pairs."""
