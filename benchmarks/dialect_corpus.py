"""A model-dialect corpus: nested-call plans written the way models trained on each dialect write
them, run through the gateway against real functions, scored against gold answers.

    .venv/bin/python benchmarks/dialect_corpus.py [--plans 240] [--seed 34] [--show N]

The plans are generated deterministically (a seeded generator over templates): chains of 2 to 50
calls where each call takes an earlier call's output by reference (a number, a list, an element
of one, a key of an integer-keyed dict, bytes), written in one reference dialect (canonical,
NESTFUL, ReWOO, LLMCompiler, a `$` without braces, templates, `<ref/>` elements) and one call
form (server blocks, `<call>`, Hermes `<tool_call>` with NESTFUL labels, ReAct `Action:` blocks,
Anthropic `<invoke>`, NESTFUL's JSON list of calls), some wrapped in `<plan>`. About one in eight
carries a fault a model makes in its dialect (a label that names nothing, a `$` that closes one
reference or opens the next, unmatched braces, evidence past the last call, a `<ref>` to nothing
or with a bad path); those must be refused with the fix.

The functions (add, divide, mean, minmax, histogram with integer keys, pack to bytes...) are
served by an in-memory MCP server (`toolscore.testing.FakeDownstream`); the gold answer of each
plan is computed by calling the same functions directly, in order, resolving references as the
plan language defines them. Reported:

- accepted: the plan ran; exact: every call ran, and got exactly the gold arguments, and the last
  result is the gold answer;
- refused with fix: refused before anything ran, every `<plan_error>` saying what to write;
- ran with wrong data: some call received arguments other than the gold ones, or the answer
  differs with every step ok. It must be 0.

The same corpus runs in the test suite's fast tier (tests/plan/test_dialect_corpus.py); its figures
are in docs/plan-language.md.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types
from mcp import Client

from toolscore._logging import configure_logging
from toolscore.plan.encoding import decode, encode
from toolscore.testing import FakeDownstream, running_gateway

NUMBER, ARRAY, STRING, OBJECT = {"type": "number"}, {"type": "array"}, {"type": "string"}, {"type": "object"}

# -- the functions: (schema of their parameters, what they compute, the kind of their result) --------


def _divide(a: float, b: float) -> float:
    return a / b  # a string or a zero raises, as NESTFUL's executable functions do


FUNCTIONS: dict[str, tuple[dict[str, Any], Any, str]] = {
    "add": ({"a": NUMBER, "b": NUMBER}, lambda a, b: a + b, "number"),
    "subtract": ({"a": NUMBER, "b": NUMBER}, lambda a, b: a - b, "number"),
    "multiply": ({"a": NUMBER, "b": NUMBER}, lambda a, b: a * b, "number"),
    "divide": ({"a": NUMBER, "b": NUMBER}, _divide, "number"),
    "mean": ({"xs": ARRAY}, lambda xs: sum(xs) / len(xs), "number"),
    "total": ({"xs": ARRAY}, lambda xs: sum(xs), "number"),
    "minmax": ({"xs": ARRAY}, lambda xs: [min(xs), max(xs)], "pair"),
    "scale": ({"xs": ARRAY, "k": NUMBER}, lambda xs, k: [x * k for x in xs], "array"),
    "histogram": ({"xs": ARRAY}, lambda xs: dict(Counter(int(x) % 3 for x in xs)), "histogram"),
    "describe": ({"text": STRING}, lambda text: text.upper(), "string"),
    "pack": ({"text": STRING}, lambda text: text.encode("utf-8"), "bytes"),
    "unpack": ({"data": OBJECT}, lambda data: data.decode("utf-8"), "string"),
}
# Which functions take a result of each kind, and as which parameter.
TAKES: dict[str, list[tuple[str, str]]] = {
    "number": [("add", "a"), ("add", "b"), ("subtract", "a"), ("multiply", "b"), ("divide", "a")],
    "array": [("mean", "xs"), ("total", "xs"), ("minmax", "xs"), ("scale", "xs"), ("histogram", "xs")],
    "string": [("pack", "text"), ("describe", "text")],
    "bytes": [("unpack", "data")],
}


def fake_server() -> FakeDownstream:
    """The functions as an MCP server; `bytes` parameters read the encoding back."""
    fx = FakeDownstream("fx")
    for name, (params, fn, _) in FUNCTIONS.items():
        schema = {"type": "object", "properties": params, "required": list(params)}

        def tool(_fn: Any = fn, **arguments: Any) -> dict[str, Any]:
            return {"result": _fn(**decode(arguments))}

        fx.tool(name, schema=schema)(tool)
    return fx


def call_gold(name: str, arguments: dict[str, Any]) -> Any:
    """What the server answers (its structured content), computed directly."""
    return encode({"result": FUNCTIONS[name][1](**decode(arguments))})


# -- plans ------------------------------------------------------------------------------------------


@dataclass
class Ref:
    """A reference to step `step` (1-based), through `path` (keys and indices) into its result."""

    step: int
    path: tuple[str | int, ...]


@dataclass
class Interp:
    """Text with one reference inside: `before` + the value as text + `after`."""

    before: str
    ref: Ref
    after: str


@dataclass
class Call:
    tool: str
    args: dict[str, Any]


@dataclass
class Case:
    name: str
    dialect: str
    form: str
    plan: str
    gold_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    gold: Any = None
    fault: str | None = None


DIALECTS = ["canonical", "nestful", "rewoo", "llmcompiler", "bare", "template", "ref"]
FORMS = ["block", "call", "hermes", "react", "invoke", "json_list"]
LENGTHS = [2, 2, 3, 3, 4, 5, 6, 8, 10, 12, 16, 20, 25, 32, 40, 50]


def _label(dialect: str, step: int) -> str | None:
    """The id a call gets in this dialect (None: the dialect names calls by position)."""
    return {"nestful": f"var_{step}", "canonical": f"r{step}", "bare": f"r{step}", "template": f"t{step}"}.get(
        dialect, f"s{step}" if dialect == "ref" else None
    )


def _path_text(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f"['{p}']" if p.isdigit() else f".{p}" for p in path)


def render_ref(ref: Ref, dialect: str, form: str) -> str:
    """A reference as a model trained on `dialect` writes it."""
    label, path = _label(dialect, ref.step), _path_text(ref.path)
    if form == "react" and dialect in ("canonical", "bare", "template", "ref"):
        label = None  # ReAct calls carry no ids: by step number
    if dialect == "nestful":
        return f"${label}{path}$"
    if dialect == "rewoo":
        return f"#E{ref.step}{path}"
    if dialect == "llmcompiler":
        return f"${ref.step}{path}"
    if dialect == "bare":
        return f"${label or f'step{ref.step}'}{path}"
    if dialect == "template":
        return "{{" + f"{label or f'step{ref.step}'}{path}" + "}}"
    if dialect == "ref":
        where = f'id="{label}"' if label else f'step="{ref.step}"'
        return f'<ref {where} path="{path.lstrip(".")}"/>'
    return "${" + f"{label or ref.step}{path}" + "}"


def _json_arg(value: Any, dialect: str, form: str) -> str:
    """One argument value in JSON, a reference as the dialect writes it (a `<ref/>` bare)."""
    if isinstance(value, Ref):
        written = render_ref(value, dialect, form)
        return written if dialect == "ref" and form not in ("hermes", "json_list") else json.dumps(written)
    if isinstance(value, Interp):
        return json.dumps(value.before + render_ref(value.ref, dialect, form) + value.after)
    return json.dumps(value)


def _json_args(args: dict[str, Any], dialect: str, form: str) -> str:
    return "{" + ", ".join(f'"{k}": {_json_arg(v, dialect, form)}' for k, v in args.items()) + "}"


def render_call(step: int, call: Call, dialect: str, form: str) -> str:
    label = _label(dialect, step)
    ident = f' id="{label}"' if label else ""
    if form == "block":
        return f"<fx><{call.tool}{ident}>{_json_args(call.args, dialect, form)}</{call.tool}></fx>"
    if form == "call":
        return f'<call server="fx" tool="{call.tool}"{ident}>{_json_args(call.args, dialect, form)}</call>'
    if form == "json_list":  # one item of NESTFUL's list of calls
        named = f', "label": "${label}"' if label else ""
        return f'{{"name": "fx__{call.tool}"{named}, "arguments": {_json_args(call.args, dialect, form)}}}'
    if form == "hermes":
        named = f', "label": "${label}"' if label else ""
        arguments = _json_args(call.args, dialect, form)
        return f'<tool_call>{{"name": "fx__{call.tool}"{named}, "arguments": {arguments}}}</tool_call>'
    if form == "react":
        return f"Thought: step {step}.\nAction: fx__{call.tool}\nAction Input: {_json_args(call.args, dialect, form)}\n"
    parameters = "".join(f'<parameter name="{k}">{_param(v, dialect, form)}</parameter>' for k, v in call.args.items())
    return f'<invoke name="fx__{call.tool}"{ident}>{parameters}</invoke>'


def _param(value: Any, dialect: str, form: str) -> str:
    if isinstance(value, Ref):
        return render_ref(value, dialect, form)
    if isinstance(value, Interp):
        return value.before + render_ref(value.ref, dialect, form) + value.after
    return value if isinstance(value, str) else json.dumps(value)


def _chain(rnd: random.Random, length: int) -> list[Call]:
    """`length` calls, each taking the one before it by reference (a chain `length` calls deep),
    some also taking an earlier one."""
    xs = [round(rnd.uniform(1, 50), 2) for _ in range(rnd.randint(2, 5))]
    calls = [Call("scale", {"xs": xs, "k": rnd.randint(2, 4)})]
    kinds = ["array"]
    while len(calls) < length:
        step = len(calls)  # the previous call's step number
        kind = kinds[-1]
        if kind == "pair":
            ref, kind = Ref(step, ("result", rnd.randint(0, 1))), "number"
        elif kind == "histogram":
            ref, kind = Ref(step, ("result", "0")), "number"  # every histogram here has a key 0
        else:
            ref = Ref(step, ("result",))
        if kind == "number" and rnd.random() < 0.25 and len(calls) < length - 1:
            # a number into text, then the text back: interpolation, then a string result
            calls.append(Call("describe", {"text": Interp("total ", ref, " units")}))
            kinds.append("string")
            continue
        tool, param = rnd.choice(TAKES[kind])
        args: dict[str, Any] = {param: ref}
        for other, schema in FUNCTIONS[tool][0].items():
            if other != param:
                earlier = [n for n, k in enumerate(kinds, 1) if k == "number" and n != step]
                if schema is NUMBER and earlier and tool != "divide" and rnd.random() < 0.3:
                    args[other] = Ref(rnd.choice(earlier), ("result",))
                else:
                    args[other] = rnd.randint(2, 9)
        calls.append(Call(tool, dict(sorted(args.items()))))
        kinds.append(FUNCTIONS[tool][2])
    return calls


def _resolve(value: Any, results: list[Any]) -> Any:
    def at(ref: Ref) -> Any:
        out = results[ref.step - 1]
        for part in ref.path:
            out = out[part]
        return out

    if isinstance(value, Ref):
        return at(value)
    if isinstance(value, Interp):
        inner = at(value.ref)
        text = inner if isinstance(inner, str) else json.dumps(inner, separators=(",", ":"), ensure_ascii=False)
        return value.before + text + value.after
    return value


def gold_of(calls: list[Call]) -> tuple[list[tuple[str, dict[str, Any]]], Any]:
    """Each call's arguments as the server must receive them, and the last result."""
    results: list[Any] = []
    sent: list[tuple[str, dict[str, Any]]] = []
    for call in calls:
        args = {k: _resolve(v, results) for k, v in call.args.items()}
        sent.append((call.tool, args))
        results.append(call_gold(call.tool, args))
    return sent, results[-1]


def _with_histogram_key(calls: list[Call]) -> bool:
    """Whether every histogram's input has a value ≡ 0 (mod 3), so key '0' exists."""
    results: list[Any] = []
    for call in calls:
        args = {k: _resolve(v, results) for k, v in call.args.items()}
        result = call_gold(call.tool, args)
        if call.tool == "histogram" and "0" not in result["result"]:
            return False
        results.append(result)
    return True


FAULTS: dict[str, list[tuple[str, str]]] = {
    # dialect: (fault, the text a model writes with it), each a whole argument value
    "nestful": [("unknown_label", "$var_99.result$"), ("ambiguous_dollar", "$var_1.result$var_2.result")],
    "template": [("unmatched_braces", "{{{t1.result}}"), ("unmatched_braces", "{{{step1.result}}")],
    "rewoo": [("evidence_past_end", "#E99"), ("evidence_past_end", "#E99.result")],
    "llmcompiler": [("step_past_end", "$99.result")],
    "ref": [("ref_to_nothing", '<ref id="nope" path="result"/>'), ("ref_bad_path", '<ref step="1" path="result..x"/>')],
    "bare": [("label_to_nothing", "$step_99.result")],
    "canonical": [("id_to_nothing", "${nope.result}")],
}


def _fault(rnd: random.Random, dialect: str, form: str) -> tuple[str, str]:
    """A fault a model makes in `dialect`, and the text it writes (a whole argument value)."""
    choices = FAULTS[dialect]
    if form == "react":  # no ids in ReAct: the faults that need one name nothing anyway
        choices = [c for c in choices if "t1" not in c[1]] or choices
    return rnd.choice(choices)


def build(n_plans: int = 240, seed: int = 34) -> list[Case]:
    """The corpus: `n_plans` plans over every dialect and call form, deterministic in `seed`."""
    rnd = random.Random(seed)
    cases: list[Case] = []
    combos = [(d, f) for d in DIALECTS for f in FORMS if not (d == "nestful" and f == "react")]
    while len(cases) < n_plans:
        dialect, form = combos[len(cases) % len(combos)]
        length = LENGTHS[len(cases) * 7 % len(LENGTHS)]
        while not _with_histogram_key(calls := _chain(rnd, length)):
            pass
        gold_calls, gold = gold_of(calls)
        body = [render_call(step, call, dialect, form) for step, call in enumerate(calls, 1)]
        fault = None
        if len(cases) % 8 == 7:
            fault, written = _fault(rnd, dialect, form)
            # The fault replaces the last call's argument: a text the model wrote.
            body[-1] = render_call(len(calls), Call("describe", {"text": "__FAULT__"}), dialect, form)
            body[-1] = body[-1].replace('"__FAULT__"', json.dumps(written)).replace("__FAULT__", written)
        text = ("\n" if form == "react" else ",\n" if form == "json_list" else "").join(body)
        if form == "json_list":
            text = f"[{text}]"
        elif form == "invoke":
            text = f"<function_calls>\n{text}\n</function_calls>"
        elif len(cases) % 5 == 0 and form not in ("react", "json_list"):
            text = f"<plan>\n{text}\n</plan>"
        if form != "react" or len(cases) % 2:
            text += "\n<execute_tools />"
        cases.append(Case(f"{dialect}/{form}/{length}", dialect, form, text, gold_calls, gold, fault))
    return cases


# -- running ----------------------------------------------------------------------------------------

_ERROR_RE = re.compile(r'<plan_error code="(\w+)"[^>]*>(.*?)</plan_error>', re.DOTALL)
_FIX_RE = re.compile(r"\bwrite\b|did you mean|\bstep \d+ is\b|\blabel the call\b")


@dataclass
class Outcome:
    case: Case
    verdict: str
    """`exact`, `refused_with_fix`, `ran_with_wrong_data`, `stopped` (a step failed, no wrong data),
    `refused_without_fix`, `refused_valid` (a valid plan refused), `accepted_fault` (a fault ran)."""
    detail: str = ""


async def run_corpus(cases: list[Case]) -> list[Outcome]:
    fx = fake_server()
    outcomes: list[Outcome] = []
    async with running_gateway({"fx": fx}) as (gateway, _), Client(gateway.server, mode="legacy") as client:
        for case in cases:
            fx.calls.clear()
            result = await client.call_tool("orchestrate", {"plan": case.plan})
            outcomes.append(judge(case, result, list(fx.calls)))
    return outcomes


def judge(case: Case, result: mcp_types.CallToolResult, received: list[tuple[str, dict[str, Any]]]) -> Outcome:
    text = "\n".join(b.text for b in result.content if isinstance(b, mcp_types.TextContent))
    wrong = [
        (got, want) for got, want in zip(received, case.gold_calls, strict=False) if got != want
    ]  # a fault plan refused calls nothing
    if wrong or len(received) > len(case.gold_calls):
        return Outcome(case, "ran_with_wrong_data", repr(wrong[:1]) or "extra calls")
    if result.is_error:
        errors = _ERROR_RE.findall(text)
        if case.fault is None:
            return Outcome(case, "refused_valid", text[:300])
        if errors and all(_FIX_RE.search(message) for _, message in errors):
            return Outcome(case, "refused_with_fix", errors[0][1][:200])
        return Outcome(case, "refused_without_fix", text[:300])
    if case.fault is not None:
        return Outcome(case, "accepted_fault", text[:300])
    assert result.structured_content is not None
    steps = result.structured_content["steps"]
    if all(s["status"] == "ok" for s in steps) and len(received) == len(case.gold_calls):
        if steps[-1]["result"] == case.gold:
            return Outcome(case, "exact")
        return Outcome(case, "ran_with_wrong_data", f"{steps[-1]['result']!r} != {case.gold!r}")
    failed = next(s for s in steps if s["status"] != "ok")
    return Outcome(case, "stopped", f"step {failed['step']} {failed['status']}: {failed['error']}")


def figures(outcomes: list[Outcome]) -> dict[str, Any]:
    verdicts = Counter(o.verdict for o in outcomes)
    faults = sum(1 for o in outcomes if o.case.fault is not None)
    depths = [len(o.case.gold_calls) for o in outcomes]
    return {
        "plans": len(outcomes),
        "calls": sum(depths),
        "deepest": max(depths),
        "with_fault": faults,
        "accepted": sum(
            1 for o in outcomes if o.verdict in ("exact", "stopped", "ran_with_wrong_data", "accepted_fault")
        ),
        "exact": verdicts["exact"],
        "refused_with_fix": verdicts["refused_with_fix"],
        "ran_with_wrong_data": verdicts["ran_with_wrong_data"],
        "other": {k: v for k, v in verdicts.items() if k not in ("exact", "refused_with_fix", "ran_with_wrong_data")},
        "by_dialect": {
            d: f"{sum(1 for o in outcomes if o.case.dialect == d and o.verdict == 'exact')}/"
            f"{sum(1 for o in outcomes if o.case.dialect == d and o.case.fault is None)}"
            for d in DIALECTS
        },
        "by_form": {
            f: f"{sum(1 for o in outcomes if o.case.form == f and o.verdict == 'exact')}/"
            f"{sum(1 for o in outcomes if o.case.form == f and o.case.fault is None)}"
            for f in FORMS
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", type=int, default=240)
    parser.add_argument("--seed", type=int, default=34)
    parser.add_argument("--show", type=int, default=0, help="print the first N plans that were not exact")
    args = parser.parse_args()
    configure_logging("ERROR")
    cases = build(args.plans, args.seed)
    began = time.perf_counter()
    outcomes = anyio.run(run_corpus, cases)
    seconds = time.perf_counter() - began
    print(json.dumps({**figures(outcomes), "seconds": round(seconds, 2)}, indent=2))
    shown = [o for o in outcomes if o.verdict not in ("exact", "refused_with_fix")][: args.show]
    for o in shown:
        print(f"\n== {o.case.name} {o.verdict}: {o.detail}\n{o.case.plan[:600]}", file=sys.stderr)


if __name__ == "__main__":
    main()
