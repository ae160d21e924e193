"""benchmarks/retrieval_metatool.py reads a corpus in MetaTool's layout and reports each ranker."""

from __future__ import annotations

import csv
import importlib
import json
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


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
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setattr("sys.argv", ["retrieval_metatool.py", str(tmp_path)])
    importlib.import_module("retrieval_metatool").main()
    out = capsys.readouterr().out
    assert "3 requests over 3 plugins" in out
    # every request names a word of its plugin's description: both rankers find each first
    for ranker in ("plain BM25:", "search_tools:"):
        block = out.split(ranker, 1)[1]
        all_line = next(line for line in block.splitlines() if line.strip().startswith("all"))
        assert "recall@1 1.000" in all_line and "MRR 1.000" in all_line, out
