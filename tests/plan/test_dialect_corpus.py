"""The model-dialect corpus (benchmarks/dialect_corpus.py) in the test suite: every plan checked,
the short plans run end to end in this tier, all of them under `soak`; none ever runs with data the
model did not mean.

Its figures (docs/plan-language.md, "How the dialects fare") are the full run's.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import mcp_types
import pytest

from tests.conftest import make_config
from toolscore.config import PlanSettings
from toolscore.downstream.registry import build_registry
from toolscore.errors import PlanCheckError, PlanProblem, PlanSyntaxError
from toolscore.plan.check import check_plan
from toolscore.plan.parse import parse_turn


def _corpus() -> ModuleType:
    path = Path(__file__).parents[2] / "benchmarks" / "dialect_corpus.py"
    spec = importlib.util.spec_from_file_location("dialect_corpus", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


corpus = _corpus()
CASES = corpus.build()
FIGURES = {"plans": 240, "calls": 3570, "deepest": 50, "with_fault": 30, "exact": 210, "refused_with_fix": 30}
"""The full run's figures, as docs/plan-language.md gives them."""


def test_the_corpus_covers_every_dialect_and_call_form_and_depth() -> None:
    assert len(CASES) == FIGURES["plans"] >= 200
    assert {c.dialect for c in CASES} == set(corpus.DIALECTS) and {c.form for c in CASES} == set(corpus.FORMS)
    depths = [len(c.gold_calls) for c in CASES]
    assert min(depths) == 2 and max(depths) == 50 and sum(depths) == FIGURES["calls"]
    assert sum(c.fault is not None for c in CASES) == FIGURES["with_fault"]
    assert {c.fault for c in CASES if c.fault} >= {"unknown_label", "unmatched_braces", "evidence_past_end"}


def test_every_plan_is_read_as_meant_or_refused_with_the_fix() -> None:
    tools = [
        mcp_types.Tool(name=name, input_schema={"type": "object", "properties": params, "required": list(params)})
        for name, (params, _, _) in corpus.FUNCTIONS.items()
    ]
    registry = build_registry({"fx": tools}, make_config({"fx": {"command": "x"}}))
    for case in CASES:
        problems: list[PlanProblem] = []
        try:
            plan = check_plan(parse_turn(case.plan, collect=True), registry, shorthands={}, limits=PlanSettings())
        except (PlanSyntaxError, PlanCheckError) as exc:
            problems = exc.problems
        if case.fault is not None:
            assert problems, case.name
            assert all(corpus._FIX_RE.search(p.message) for p in problems), (case.name, problems)
            continue
        assert not problems, (case.name, problems)
        assert [c.route.remote_name for c in plan.calls] == [tool for tool, _ in case.gold_calls], case.name


@pytest.mark.anyio
async def test_the_short_plans_run_exactly_with_the_gold_data() -> None:
    # Every dialect and call form, and the faults, in plans of up to 6 calls (or the shortest of a
    # pair that has none): the in-memory tier's share (about a second); the long chains run under
    # `soak` below and in the benchmark.
    short = [c for c in CASES if len(c.gold_calls) <= 6]
    for combo in {(c.dialect, c.form) for c in CASES} - {(c.dialect, c.form) for c in short}:
        short.append(min((c for c in CASES if (c.dialect, c.form) == combo), key=lambda c: len(c.gold_calls)))
    assert len(short) < len(CASES) // 2
    outcomes = await corpus.run_corpus(short)
    verdicts = {o.verdict for o in outcomes}
    assert verdicts <= {"exact", "refused_with_fix"}, [(o.case.name, o.verdict, o.detail) for o in outcomes]
    assert sum(o.verdict == "exact" for o in outcomes) == sum(c.fault is None for c in short)


@pytest.mark.soak
@pytest.mark.anyio
async def test_the_whole_corpus_gives_the_documented_figures() -> None:
    figures = corpus.figures(await corpus.run_corpus(CASES))
    assert {k: figures[k] for k in FIGURES} == FIGURES
    assert figures["ran_with_wrong_data"] == 0 and figures["other"] == {}


def test_the_judge_sees_wrong_data() -> None:
    case = next(c for c in CASES if c.fault is None and len(c.gold_calls) >= 3)
    (tool, args), *_ = case.gold_calls
    result = mcp_types.CallToolResult(content=[mcp_types.TextContent(text="")], structured_content={"steps": []})
    wrong = corpus.judge(case, result, [(tool, {**args, "k": "115$"})])
    assert wrong.verdict == "ran_with_wrong_data"
    answer = {"steps": [{"status": "ok", "step": n, "result": 0} for n in range(1, len(case.gold_calls) + 1)]}
    result = mcp_types.CallToolResult(content=[], structured_content=answer)
    assert corpus.judge(case, result, case.gold_calls).verdict == "ran_with_wrong_data"  # the answer differs
