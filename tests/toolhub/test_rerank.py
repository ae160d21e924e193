"""The optional embedding re-rank of `search_tools` (toolhub/rerank.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest

from tests.toolhub.conftest import routes, tool
from toolscore.config import ToolHubSettings, parse_config
from toolscore.testing import captured_logs
from toolscore.toolhub.capabilities import Tagged, index_capabilities
from toolscore.toolhub.rerank import INSTALL_HINT, POOL, Reranker, reranker_for
from toolscore.toolhub.search import Hit, SearchIndex

HAS_MODEL = importlib.util.find_spec("wordllama") is not None
needs_model = pytest.mark.skipif(
    not HAS_MODEL, reason="the re-ranker's model is not installed (pip install 'toolscore[rerank]')"
)
GOLDEN = Path(__file__).parents[2] / "benchmarks" / "data" / "toolhub_golden.json"


def catalog() -> dict[str, Tagged]:
    """The golden set's 239 published tool definitions, tagged as the gateway tags them."""
    servers: dict[str, list[dict[str, Any]]] = json.loads(GOLDEN.read_text())["servers"]
    found, config = routes({name: [mcp_types.Tool.model_validate(t) for t in defs] for name, defs in servers.items()})
    return index_capabilities(found, config).tools


def on() -> Reranker:
    reranker = reranker_for(ToolHubSettings(rerank="embedding"))
    assert reranker is not None
    return reranker


def test_off_by_default_and_then_nothing_is_looked_up() -> None:
    settings = parse_config({"mcpServers": {}}).settings.toolhub
    assert settings.rerank == "off"
    with captured_logs() as logs:
        assert reranker_for(settings) is None
    assert logs == []


def test_a_model_that_cannot_be_imported_gets_one_warning_and_search_goes_on() -> None:
    config = parse_config(
        {"mcpServers": {}, "toolscore": {"toolhub": {"rerank": "embedding", "rerank_model": "no_such_model_pkg"}}}
    )
    with captured_logs() as logs:
        assert reranker_for(config.settings.toolhub) is None
    assert len(logs) == 1
    (entry,) = logs
    assert entry["log_level"] == "warning"
    assert "'no_such_model_pkg' is not installed" in entry["event"] and INSTALL_HINT in entry["event"]


def test_a_model_package_without_the_bundled_files_is_named() -> None:
    # an installed package that holds no model: the warning says which file is missing
    with captured_logs() as logs:
        assert reranker_for(ToolHubSettings(rerank="embedding", rerank_model="json")) is None
    assert len(logs) == 1 and "'json' has no weights" in logs[0]["event"]


def test_the_model_field_is_checked() -> None:
    with pytest.raises(Exception, match="rerank_model"):
        parse_config({"mcpServers": {}, "toolscore": {"toolhub": {"rerank_model": "../weights"}}})
    with pytest.raises(Exception, match="rerank"):
        parse_config({"mcpServers": {}, "toolscore": {"toolhub": {"rerank": "yes"}}})


FILES = {
    "files": [
        tool("delete_file", "Delete a file from disk.", {"path": {}}),
        tool("read_file", "Read a file.", {"path": {}}),
        tool("move_file", "Move or rename a file.", {"source": {}, "destination": {}}),
    ]
}


def _hub_search(rerank: dict[str, Any], query: str = "remove the file") -> list[dict[str, Any]]:
    """`ToolHub.search` over three tools, with `rerank` in the toolhub section."""
    from toolscore.downstream.registry import build_registry
    from toolscore.toolhub.hub import ToolHub
    from toolscore.toolhub.scoring import Scoreboard

    config = parse_config({"mcpServers": {"files": {"type": "memory"}}, "toolscore": {"toolhub": rerank}})
    registry = build_registry(FILES, config)

    class Source:
        def __init__(self) -> None:
            self.registry = registry

    hub = ToolHub(tools=Source(), engine=None, config=config, scores=Scoreboard())  # type: ignore[arg-type]
    return hub.search(query, 3)


def test_the_missing_model_leaves_the_hubs_answers_byte_identical() -> None:
    with captured_logs() as logs:
        without = _hub_search({"rerank": "embedding", "rerank_model": "no_such_model_pkg"})
    assert json.dumps(without) == json.dumps(_hub_search({}))
    assert [e["log_level"] for e in logs] == ["warning"]


def test_off_leaves_search_byte_identical_to_the_first_stage() -> None:
    found, config = routes(FILES)
    first = SearchIndex(index_capabilities(found, config).tools).search("rename or read a file", 3)
    answered = _hub_search({"rerank": "off"}, "rename or read a file")
    assert len(answered) == 3
    assert [(e["name"], e["score"], e["matched"]) for e in answered] == [
        (h.name, h.score, list(h.matched)) for h in first
    ]
    assert json.dumps(_hub_search({}, "rename or read a file")) == json.dumps(answered)


def test_rerank_reorders_only_within_the_first_fifty() -> None:
    # with synthetic vectors, so this holds whatever the model: the head is a permutation of the
    # first stage's best fifty, the tail follows in its own order, never scored above the head
    hits = [Hit(f"t{i:03d}", 100.0 - i, ("w",)) for i in range(80)]
    reranker = Reranker("unused", Path("w"), Path("t"), weight=0.9)
    import numpy as np

    query = np.zeros(4)
    query[0] = 1.0
    vectors = [np.array([(i % 7) / 7, 0.0, 0.0, 0.0]) for i in range(POOL)]
    out = reranker.rerank(query, hits, vectors)
    assert sorted(h.name for h in out[:POOL]) == [h.name for h in hits[:POOL]]
    assert [h.name for h in out[POOL:]] == [h.name for h in hits[POOL:]]
    assert [h.name for h in out[:POOL]] != [h.name for h in hits[:POOL]]  # it did reorder
    assert max(h.score for h in out[POOL:]) <= min(h.score for h in out[:POOL])
    scores = [h.score for h in out[:POOL]]
    assert scores == sorted(scores, reverse=True)
    # equal blends go by name
    flat = reranker.rerank(query, [Hit("b", 1.0, ()), Hit("a", 1.0, ())], [query, query])
    assert [h.name for h in flat] == ["a", "b"]


@needs_model
def test_with_the_model_only_the_first_stages_fifty_move() -> None:
    tools = catalog()
    index = SearchIndex(tools)
    for query in ("wipe all cookies", "show me what changed in the last commit", "take a picture of the page"):
        first = index.search(query, 100)
        second = on().search(index, tools, query, 100)
        assert sorted(h.name for h in second[:POOL]) == sorted(h.name for h in first[:POOL])
        assert [h.name for h in second[POOL:]] == [h.name for h in first[POOL:]]


@needs_model
def test_the_same_query_gives_the_same_order() -> None:
    tools = catalog()
    index = SearchIndex(tools)
    queries = ["wipe all cookies", "who am I signed in as on GitHub", "run some python", "save a note"]
    warm = on()
    for query in reversed(queries):  # vectors cached in another order first
        warm.search(index, tools, query, 20)
    for query in queries:
        cold = on().search(index, tools, query, 20)
        assert cold == warm.search(index, tools, query, 20) == warm.search(index, tools, query, 20)
        # and over a new index of the same tools, listed in reverse
        again = SearchIndex(dict(reversed(list(tools.items()))))
        assert warm.search(again, tools, query, 20) == cold


@needs_model
def test_a_paraphrase_without_shared_words_ranks_the_right_tool_higher() -> None:
    server_tools = {
        "kit": [
            tool("get_weather", "Current weather conditions for a city.", {"city": {}}),
            tool("send_email", "Send an email message.", {"to": {}, "body": {}}),
            tool("translate_text", "Translate text between languages.", {"text": {}, "target": {}}),
            tool("create_event", "Create a calendar event.", {"title": {}, "start": {}}),
            tool("convert_currency", "Convert an amount of money between currencies.", {"amount": {}, "to": {}}),
            tool("archive_project", "Archive a project.", {"project": {}}),
        ]
    }
    found, config = routes(server_tools)
    tools = index_capabilities(found, config).tools
    index = SearchIndex(tools)
    for query, right in (
        ("kit: will it rain in Paris tomorrow", "get_weather"),
        ("kit: say this in Spanish", "translate_text"),
    ):
        # no word of the query is in any tool's text, nor a synonym of one: the first stage finds
        # every tool by the server's name alone, so ties go by name
        first = [h.name for h in index.search(query, 6)]
        assert first == sorted(first)
        second = [h.name for h in on().search(index, tools, query, 6)]
        assert second.index(f"kit__{right}") < first.index(f"kit__{right}"), (query, second)


@needs_model
def test_the_hub_searches_through_the_rerank_when_it_is_on() -> None:
    off = _hub_search({}, "rename or read a file")
    with captured_logs() as logs:
        on_ = _hub_search({"rerank": "embedding"}, "rename or read a file")
    assert logs == []
    assert sorted(e["name"] for e in on_) == sorted(e["name"] for e in off)
    # the blend's scores (at most 1), not the first stage's
    assert [e["score"] for e in on_] != [e["score"] for e in off] and max(e["score"] for e in on_) <= 1.0


def _hub(rerank: dict[str, Any]) -> Any:
    """A `ToolHub` over FILES with `rerank` in the toolhub section."""
    from toolscore.downstream.registry import build_registry
    from toolscore.toolhub.hub import ToolHub
    from toolscore.toolhub.scoring import Scoreboard

    config = parse_config({"mcpServers": {"files": {"type": "memory"}}, "toolscore": {"toolhub": rerank}})
    registry = build_registry(FILES, config)

    class Source:
        def __init__(self) -> None:
            self.registry = registry

    return ToolHub(tools=Source(), engine=None, config=config, scores=Scoreboard())  # type: ignore[arg-type]


@needs_model
@pytest.mark.anyio
async def test_search_tools_loads_the_model_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # the real model, read by the real loader; only the thread each read runs on is noted
    import threading

    from toolscore.toolhub import rerank

    threads: list[int] = []

    class Noted(rerank._Model):
        def __init__(self, weights: Path, tokenizer: Path) -> None:
            threads.append(threading.get_ident())
            super().__init__(weights, tokenizer)

    monkeypatch.setattr(rerank, "_Model", Noted)
    hub = _hub({"rerank": "embedding"})
    expected = _hub_search({"rerank": "embedding"}, "rename or read a file")  # loaded inline, as before
    threads.clear()
    loop = threading.get_ident()
    with anyio.fail_after(60):  # a hang detector
        async with anyio.create_task_group() as tg:  # two first searches at once: one load
            for _ in range(2):
                tg.start_soon(hub.answer, "search_tools", {"query": "rename or read a file", "k": 3})
        result = await hub.answer("search_tools", {"query": "rename or read a file", "k": 3})
    assert len(threads) == 1 and threads[0] != loop
    assert not result.is_error
    assert json.loads(result.content[0].text) == expected  # the same answer as a load on the loop gives
