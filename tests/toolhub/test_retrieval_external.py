"""benchmarks/retrieval_external.py reads corpora in MetaTool's and BFCL's layouts and reports each ranker."""

from __future__ import annotations

import csv
import importlib
import json
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


def _run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """What the script prints for `argv`, run as its command line runs it."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setattr("sys.argv", ["retrieval_external.py", *argv])
    importlib.import_module("retrieval_external").main()
    return capsys.readouterr().out


def _all_line(out: str, ranker: str) -> str:
    """The `all` row of `ranker`'s figures."""
    return next(line for line in out.split(f"{ranker}:", 1)[1].splitlines() if line.strip().startswith("all"))


def test_it_reads_the_layout_and_reports_each_ranker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a corpus of our own in the layout the script reads: three plugins, four requests
    (tmp_path / "dataset" / "data").mkdir(parents=True)
    plugins = {
        "WeatherTool": "Provide you with the latest weather information.",
        "ExchangeTool": "Convert currencies with our currency conversion tool.",
        "Job Finder": "Find job openings and interview tips.",
    }
    (tmp_path / "dataset" / "plugin_des.json").write_text(json.dumps(plugins))
    with (tmp_path / "dataset" / "data" / "all_clean_data.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["Query", "Tool"])
        writer.writerow(["What is the weather in Oslo?", "WeatherTool"])
        writer.writerow(["Convert 20 dollars to euros", "ExchangeTool"])
        writer.writerow(["Any job openings for a nurse?", "Job Finder"])
        writer.writerow(["A plugin that is not there", "Missing"])  # left out: no such plugin
    out = _run(monkeypatch, capsys, "metatool", str(tmp_path))
    assert "metatool: 3 requests over 3 tools" in out
    # every request names a word of its plugin's description: both rankers find each first
    for ranker in ("plain BM25", "search_tools"):
        all_line = _all_line(out, ranker)
        assert "recall@1 1.000" in all_line and "MRR 1.000" in all_line, out


def test_it_reads_the_leaderboards_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a corpus of our own in the layout the script reads: Python type names in the schemas, a
    # function offered twice, a question answered by two calls (left out)
    data = tmp_path / "berkeley-function-call-leaderboard" / "bfcl_eval" / "data"
    (data / "possible_answer").mkdir(parents=True)
    area = {
        "name": "geometry.circle_area",
        "description": "Area of a circle.",
        "parameters": {"type": "dict", "properties": {"radius": {"type": "float", "description": "The radius."}}},
    }
    convert = {"name": "convert_currency", "description": "Convert money between currencies.", "parameters": {}}
    questions = [
        ("q0", "What is the area of a circle of radius 2?", [area, convert], [{"geometry.circle_area": {}}]),
        ("q1", "Convert 5 dollars to yen", [convert, area], [{"convert_currency": {}}]),
        ("q2", "Both, please", [area, convert], [{"geometry.circle_area": {}}, {"convert_currency": {}}]),
    ]
    for part in ("simple_python", "multiple", "live_simple", "live_multiple"):
        asked = questions if part == "multiple" else []
        (data / f"BFCL_v4_{part}.json").write_text(
            "".join(
                json.dumps({"id": i, "question": [[{"role": "user", "content": q}]], "function": f}) + "\n"
                for i, q, f, _ in asked
            )
        )
        (data / "possible_answer" / f"BFCL_v4_{part}.json").write_text(
            "".join(json.dumps({"id": i, "ground_truth": a}) + "\n" for i, _, _, a in asked)
        )
    out = _run(monkeypatch, capsys, "bfcl", str(tmp_path))
    assert "bfcl: 2 requests over 2 tools" in out
    assert "recall@1 1.000" in _all_line(out, "search_tools"), out
