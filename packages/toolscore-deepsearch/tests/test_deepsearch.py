"""toolscore-deepsearch: retrieval and citations on a fixture corpus, as a real server behind the
gateway, and in web mode against a SearXNG-compatible stub on loopback."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

import pytest
from mcp import Client
from tests.conftest import loopback_http, make_config, running_gateway, text

from toolscore_deepsearch._corpus import Corpus, html_to_text, query_terms
from toolscore_deepsearch._research import research

# The server as a process, from its source (`toolscore install` puts it in a venv of its own).
SRC = Path(__file__).resolve().parents[1] / "src"


def deepsearch(*args: str) -> dict[str, object]:
    """A servers.json entry running the server from source."""
    return {"command": sys.executable, "args": ["-m", "toolscore_deepsearch", *args], "env": {"PYTHONPATH": str(SRC)}}


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "otters.md").write_text(
        "# Sea otters\n\nSea otters use rocks as tools to crack open shellfish.\n"
        "They keep a favourite rock in a pouch under the forearm.\n\nSee [diet](diet.md) for what they eat.\n"
    )
    (root / "diet.md").write_text(
        "# Otter diet\n\nAn adult sea otter eats about a quarter of its body weight every day, mostly sea urchins,\n"
        "crabs and clams.\n"
    )
    (root / "bridges.html").write_text(
        "<html><head><title>Bridges</title><style>p{}</style></head><body><p>Suspension bridges hang the deck "
        "from cables.</p><script>var x = 'otters';</script><p>Cable-stayed bridges run cables straight to the "
        "towers.</p></body></html>"
    )
    (root / ".hidden.md").write_text("Sea otters secret hidden file")
    return root


def test_html_is_reduced_to_text_title_and_links() -> None:
    title, body, links = html_to_text("<title>T</title><p>One &amp; two</p><script>x()</script><a href='/a'>a</a>")
    assert (title, links) == ("T", ["/a"])
    assert "One & two" in body and "x()" not in body


def test_query_terms_drop_stopwords_and_repeats() -> None:
    assert query_terms("How do sea otters use the tools, the TOOLS?") == ["sea", "otters", "use", "tools"]


def test_research_answers_with_cited_sentences_and_numbered_sources(corpus_dir: Path) -> None:
    corpus = Corpus()
    assert corpus.add_folder(corpus_dir) == 3  # the hidden file is skipped
    report = research(corpus, "How do sea otters use rocks as tools?", max_sources=3)
    assert report.sources[0].title == "Sea otters"
    assert report.answer.startswith("Sea otters use rocks as tools to crack open shellfish. [1]")
    assert re.fullmatch(r"[^\[\]]+ \[\d\](?: [^\[\]]+ \[\d\])*", report.answer), report.answer  # each cited
    assert "Bridges" not in [s.title for s in report.sources]
    assert "script" not in report.as_text()


def test_links_between_documents_are_followed_within_bounds(corpus_dir: Path) -> None:
    corpus = Corpus()
    corpus.add_folder(corpus_dir)
    report = research(corpus, "sea otter diet urchins", max_sources=1, depth=1)
    assert report.sources[0].title in ("Otter diet", "Sea otters")
    none = research(corpus, "sea otter diet urchins", max_sources=1, depth=0)
    assert none.pages_followed == 0


def test_a_question_with_no_match_says_so(corpus_dir: Path) -> None:
    corpus = Corpus()
    corpus.add_folder(corpus_dir)
    report = research(corpus, "quantum chromodynamics")
    assert report.sources == [] and "No passage in the corpus (3 documents)" in report.answer


@pytest.mark.anyio
@pytest.mark.e2e
async def test_the_server_behind_the_gateway_and_as_a_plan_shorthand(corpus_dir: Path, tmp_path: Path) -> None:
    cfg = make_config(
        {
            "deepsearch": {
                **deepsearch("--corpus", str(corpus_dir)),
                "shorthand": {"tool": "research", "primary": "question"},
            }
        }
    )
    async with running_gateway(cfg, tmp_path) as (gw, _), Client(gw.server, mode="legacy") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"deepsearch__research", "deepsearch__quick_research", "deepsearch__comprehensive_research"} <= names
        result = await client.call_tool("deepsearch__research", {"question": "What do sea otters eat?"})
        assert not result.is_error
        assert result.structured_content is not None
        sources = result.structured_content["sources"]
        assert sources[0]["title"] == "Otter diet" and sources[0]["url"].endswith("diet.md")
        assert "[1]" in result.structured_content["answer"] and "Sources:\n[1] Otter diet" in text(result)
        plan = await client.call_tool(
            "orchestrate", {"plan": "<deepsearch id='r'>otters rocks tools</deepsearch><execute_tools />"}
        )
        assert plan.structured_content is not None
        assert plan.structured_content["steps"][0]["status"] == "ok"
        assert "crack open shellfish" in text(plan)


class _StubSearx(BaseHTTPRequestHandler):
    """`/search?format=json` lists the two pages; `/page/N` serves them."""

    pages: ClassVar[dict[str, str]] = {
        "/page/1": "<title>Glaciers</title><p>Glaciers move because ice deforms under its own weight.</p>",
        "/page/2": "<title>Moraines</title><p>A moraine is debris left behind by a retreating glacier.</p>",
    }

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/search":
            assert parse_qs(url.query)["format"] == ["json"]
            base = f"http://127.0.0.1:{self.server.server_port}"
            body = json.dumps({"results": [{"url": base + p, "title": p} for p in self.pages]}).encode()
            kind = "application/json"
        elif url.path in self.pages:
            body, kind = self.pages[url.path].encode(), "text/html; charset=utf-8"
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def searx() -> Iterator[str]:
    with loopback_http(_StubSearx) as url:
        yield url


@pytest.mark.anyio
@pytest.mark.e2e
async def test_web_mode_searches_fetches_and_cites_pages(searx: str, corpus_dir: Path, tmp_path: Path) -> None:
    cfg = make_config({"ds": deepsearch("--corpus", str(corpus_dir), "--searxng", searx)})
    async with running_gateway(cfg, tmp_path) as (gw, _), Client(gw.server, mode="legacy") as client:
        result = await client.call_tool("ds__quick_research", {"question": "Why do glaciers move?"})
    assert result.structured_content is not None
    assert result.structured_content["sources"][0]["url"] == f"{searx}/page/1"
    assert "ice deforms under its own weight. [1]" in result.structured_content["answer"]


def _long_corpus(root: Path) -> Corpus:
    """Long paragraphs (split into several passages) and a document that matches but says little."""
    root.mkdir()
    facts = [
        f"Fact {i}: the harbour lighthouse keeper logged {i} storms and repaired the lantern {i} times."
        for i in range(40)
    ]
    (root / "lighthouse.md").write_text("# Lighthouse\n\n" + " ".join(facts) + "\n")
    (root / "unbroken.md").write_text("# Unbroken\n\n" + " ".join(["seabird"] * 600) + " lighthouse lantern\n")
    (root / "noise.md").write_text("# Noise\n\nA lighthouse.\n")
    corpus = Corpus()
    corpus.add_folder(root)
    return corpus


def test_passages_split_between_sentences_and_never_inside_a_word(tmp_path: Path) -> None:
    corpus = _long_corpus(tmp_path / "c")
    texts = [h.text for h in corpus.search(["lighthouse", "lantern", "storms"], limit=50)]
    assert len([t for t in texts if t.startswith("Fact") or "Fact 0" in t]) >= 3  # the paragraph was split
    for passage in texts:
        if "Fact" in passage:
            assert passage.rstrip().endswith("."), passage[-40:]
        assert passage[:1].isupper() or passage.startswith(("#", "seabird")), passage[:20]
    unbroken = [t for t in texts if "seabird" in t]
    assert unbroken
    for passage in unbroken:  # no sentence end at all: cut between words
        assert set(passage.split()) <= {"seabird", "lighthouse", "lantern", "#", "Unbroken"}, passage[-30:]


@pytest.mark.parametrize("question", ["lighthouse lantern storms", "how many times was the lantern repaired?"])
def test_every_citation_points_at_a_whole_sentence_of_its_source_in_the_answer(tmp_path: Path, question: str) -> None:
    corpus = _long_corpus(tmp_path / "c")
    for report in (
        research(corpus, question, max_sources=3, depth=0),  # quick_research
        research(corpus, question, max_sources=10, depth=2, max_sentences=10),
    ):
        cited = re.findall(r"(.+?) \[(\d+)\](?: |$)", report.answer)
        assert cited and " ".join(f"{s} [{n}]" for s, n in cited) == report.answer
        numbers = {int(n) for _, n in cited}
        assert [s.n for s in report.sources] == list(range(1, len(report.sources) + 1))
        assert {s.n for s in report.sources} == numbers  # no source that the answer does not use
        for sentence, n in cited:
            assert sentence.endswith((".", "!", "?")), sentence
            source = report.sources[int(n) - 1]
            assert any(sentence in p["text"] for p in report.passages if p["source"] == int(n))
            assert source.snippet in report.answer and source.snippet.endswith("."), source.snippet


def test_an_answer_with_no_term_in_any_sentence_still_cites_its_one_source(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "runs.md").write_text("# Runs\n\nThe marathon runner trained daily for the race.\n")
    corpus = Corpus()
    corpus.add_folder(root)
    report = research(corpus, "running")  # FTS5's porter stemmer matches "runner"; the sentence scorer does not
    assert report.answer == "The marathon runner trained daily for the race. [1]"
    assert [(s.n, s.title, s.snippet) for s in report.sources] == [
        (1, "Runs", "The marathon runner trained daily for the race.")
    ]
