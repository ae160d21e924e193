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
from toolscore.toolhub.rerank import INSTALL_HINT, POOL, Reranker, reranker_for, tool_text
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


def _hub(rerank: dict[str, Any], servers: dict[str, list[mcp_types.Tool]] = FILES) -> Any:
    """A `ToolHub` over `servers` (one, `files`) with `rerank` in the toolhub section."""
    from toolscore.downstream.registry import build_registry
    from toolscore.toolhub.hub import ToolHub
    from toolscore.toolhub.scoring import Scoreboard

    config = parse_config({"mcpServers": {"files": {"type": "memory"}}, "toolscore": {"toolhub": rerank}})
    registry = build_registry(servers, config)

    class Source:
        def __init__(self) -> None:
            self.registry = registry

    return ToolHub(tools=Source(), engine=None, config=config, scores=Scoreboard())  # type: ignore[arg-type]


def _hub_search(rerank: dict[str, Any], query: str = "remove the file") -> list[dict[str, Any]]:
    """`ToolHub.search` over three tools, with `rerank` in the toolhub section."""
    found: list[dict[str, Any]] = _hub(rerank).search(query, 3)
    return found


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


def _space(vectors: dict[str, list[float]]) -> Any:
    """A synthetic catalog's vectors (the tools need no definitions here: only their names and rows)."""
    import numpy as np

    from toolscore.toolhub.rerank import _Space

    names = sorted(vectors)
    matrix = np.array([vectors[n] for n in names], dtype=np.float64)
    return _Space({}, names, matrix, {n: i for i, n in enumerate(names)})


def test_the_candidates_are_the_first_fifty_and_the_nearest_tools() -> None:
    # with synthetic vectors, so this holds whatever the model: the head is the first stage's best
    # fifty and the nearest tools it lacked, the tail follows in its own order, never above the head
    import numpy as np

    hits = [Hit(f"t{i:03d}", 100.0 - i, ("w",)) for i in range(80)]
    vectors = {h.name: [(i % 7) / 7, 0.0] if i < POOL else [0.0, 1.0] for i, h in enumerate(hits)}
    vectors["t070"] = [0.9, 0.1]  # past the fifty, near the query: pulled forward
    vectors["u-near"] = [1.0, 0.0]  # not found by the first stage at all, near
    vectors["u-far"] = [0.1, 0.9]  # not found, under the floor
    reranker = Reranker("unused", Path("w"), Path("t"), weight=0.9)
    query = np.array([1.0, 0.0])
    out = reranker.rerank(_space(vectors), query, hits)
    head = len(out) - (len(hits) - POOL - 1)
    assert sorted(h.name for h in out[:head]) == sorted([h.name for h in hits[:POOL]] + ["t070", "u-near"])
    assert [h.name for h in out[head:]] == [h.name for h in hits[POOL:] if h.name != "t070"]
    assert "u-far" not in {h.name for h in out}
    assert out[0].name == "u-near" and out[0].matched == ()  # the model's alone, at weight 0.9
    assert [h.name for h in out[:POOL]] != [h.name for h in hits[:POOL]]  # it did reorder
    assert max(h.score for h in out[head:]) <= min(h.score for h in out[:head])
    scores = [h.score for h in out[:head]]
    assert scores == sorted(scores, reverse=True)
    # a filter's rows: a tool it leaves out is never pulled in
    names = sorted(vectors)
    kept = reranker.rerank(_space(vectors), query, hits, [n != "u-near" for n in names])
    assert "u-near" not in {h.name for h in kept}
    # equal blends go by name
    flat = reranker.rerank(_space({"a": [1.0, 0.0], "b": [1.0, 0.0]}), query, [Hit("b", 1.0, ()), Hit("a", 1.0, ())])
    assert [h.name for h in flat] == ["a", "b"]


def test_at_most_nearest_tools_join_and_none_under_the_floor() -> None:
    import numpy as np

    from toolscore.toolhub.rerank import FLOOR, NEAREST

    vectors = {f"n{i:03d}": [1.0 - i / 1000, 0.0] for i in range(NEAREST + 10)}
    vectors["low"] = [FLOOR - 0.01, 0.0]
    out = Reranker("unused", Path("w"), Path("t")).rerank(_space(vectors), np.array([1.0, 0.0]), [])
    assert [h.name for h in out] == [f"n{i:03d}" for i in range(NEAREST)]


@needs_model
def test_with_the_model_the_candidates_are_the_fifty_and_the_nearest() -> None:
    from toolscore.toolhub.rerank import FLOOR, NEAREST

    tools = catalog()
    index = SearchIndex(tools)
    reranker = on()
    for query in ("wipe all cookies", "show me what changed in the last commit", "take a picture of the page"):
        first = [h.name for h in index.search(query, 100)]
        second = [h.name for h in reranker.search(index, tools, query, 100)]
        # the model's nearest, as the definition says: by the cosine over the whole catalog (ties by
        # name), those the fifty lack, at least FLOOR
        model = reranker._loaded()
        assert model is not None
        q = model.embed(query)
        nearness = sorted((-round(float(model.embed(tool_text(t)) @ q), 6), n) for n, t in tools.items())
        pulled = [n for c, n in nearness if -c >= FLOOR and n not in first[:POOL]][:NEAREST]
        head = POOL + len(pulled)
        assert sorted(second[:head]) == sorted(first[:POOL] + pulled)
        assert second[head:] == [n for n in first[POOL:] if n not in pulled][: 100 - head]


@needs_model
def test_a_request_in_words_no_tool_has_still_finds_its_tool() -> None:
    # hybrid: the first stage finds nothing, the model's nearest tools are the answer
    found, config = routes(
        {
            "kit": [
                tool("get_weather", "Current weather conditions for a city.", {"city": {}}),
                tool("send_email", "Send an email message.", {"to": {}, "body": {}}),
                tool("convert_currency", "Convert an amount of money between currencies.", {"amount": {}}),
            ],
            "other": [tool("forecast", "Weather forecast for the coming days.", {"place": {}})],
        }
    )
    tools = index_capabilities(found, config).tools
    index = SearchIndex(tools)
    query = "how windy will it be in Chicago"
    assert index.search(query, 5) == []
    hits = on().search(index, tools, query, 5)
    assert hits[0].name in ("kit__get_weather", "other__forecast") and all(h.matched == () for h in hits)
    # within the first stage's filters
    narrowed = on().search(index, tools, query, 5, server="kit")
    assert narrowed[0].name == "kit__get_weather"
    assert all(tools[h.name].route.server == "kit" for h in narrowed)


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


@needs_model
@pytest.mark.anyio
async def test_search_tools_loads_the_model_and_embeds_the_catalog_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the real model, read by the real loader; only the thread each read and each embedding runs on
    # is noted
    import threading

    from toolscore.toolhub import rerank

    threads: list[int] = []
    embedded: list[tuple[str, int]] = []

    class Noted(rerank._Model):
        def __init__(self, weights: Path, tokenizer: Path) -> None:
            threads.append(threading.get_ident())
            super().__init__(weights, tokenizer)

        def embed(self, text: str) -> Any:
            embedded.append((text, threading.get_ident()))
            return super().embed(text)

    monkeypatch.setattr(rerank, "_Model", Noted)
    hub = _hub({"rerank": "embedding"})
    expected = _hub_search({"rerank": "embedding"}, "rename or read a file")  # loaded inline, as before
    threads.clear()
    embedded.clear()
    loop = threading.get_ident()
    with anyio.fail_after(60):  # a hang detector
        async with anyio.create_task_group() as tg:  # two first searches at once: one load
            for _ in range(2):
                tg.start_soon(hub.answer, "search_tools", {"query": "rename or read a file", "k": 3})
        result = await hub.answer("search_tools", {"query": "rename or read a file", "k": 3})
    assert len(threads) == 1 and threads[0] != loop
    # each tool once, in the worker thread; on the loop, only the query (three searches)
    assert sorted(text for text, thread in embedded if thread != loop) == sorted(
        rerank.tool_text(t) for t in hub.capabilities.tools.values()
    )
    assert [text for text, thread in embedded if thread == loop] == ["rename or read a file"] * 3
    assert not result.is_error
    assert json.loads(result.content[0].text) == expected  # the same answer as a load on the loop gives


@needs_model
def test_the_stage_on_the_golden_set_stays_at_least_this_good() -> None:
    # floors a little under what benchmarks/retrieval.py --rerank measured (docs/toolhub.md), so a
    # change of the blend or of the candidates that makes retrieval worse fails here
    golden = json.loads(GOLDEN.read_text())
    tools = catalog()
    index = SearchIndex(tools)
    reranker = on()
    original = [q for q in golden["queries"] if "set" not in q]
    ranks = {}
    for group, queries in (("original", original), ("all", golden["queries"])):
        firsts = []
        for entry in queries:
            ranked = [h.name for h in reranker.search(index, tools, entry["query"], 100)]
            firsts.append(next((i + 1 for i, n in enumerate(ranked) if entry["relevant"].get(n) == 2), None))
        ranks[group] = (
            sum(1 for f in firsts if f is not None and f <= 5) / len(firsts),
            sum(1 / f for f in firsts if f) / len(firsts),
        )
    assert ranks["original"][0] >= 0.96 and ranks["original"][1] >= 0.80, ranks
    assert ranks["all"][0] >= 0.79 and ranks["all"][1] >= 0.64, ranks


@needs_model
def test_a_new_catalog_embeds_only_its_new_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    # a reload makes a new mapping: the tools it kept as they were are not embedded again
    from toolscore.toolhub import rerank

    embedded: list[str] = []

    class Noted(rerank._Model):
        def embed(self, text: str) -> Any:
            embedded.append(text)
            return super().embed(text)

    monkeypatch.setattr(rerank, "_Model", Noted)
    reranker = on()
    before = catalog()
    reranker.search(SearchIndex(before), before, "wipe all cookies", 5)
    assert len(embedded) == len(before) + 1  # every tool, and the query
    servers: dict[str, list[dict[str, Any]]] = json.loads(GOLDEN.read_text())["servers"]
    first = next(iter(servers))
    servers[first] = [{**servers[first][0], "description": "Something else entirely."}, *servers[first][1:]]
    found, config = routes({name: [mcp_types.Tool.model_validate(t) for t in defs] for name, defs in servers.items()})
    after = index_capabilities(found, config).tools
    embedded.clear()
    hits = reranker.search(SearchIndex(after), after, "wipe all cookies", 5)
    assert embedded == [rerank.tool_text(after[f"{first}__{servers[first][0]['name']}"]), "wipe all cookies"]
    assert hits == on().search(SearchIndex(after), after, "wipe all cookies", 5)  # as a fresh one ranks


@needs_model
@pytest.mark.anyio
async def test_search_tools_through_the_front_finds_a_tool_no_word_names(tmp_path: Path) -> None:
    # a real client against the gateway in this process, over a fixture server: the words find
    # nothing for this request; with the stage on, the model's nearest tool is the answer
    from mcp import Client

    from tests.conftest import text
    from tests.fixtures.search_server import build_search_server
    from toolscore import testing

    servers = {"alpha": build_search_server("alpha", tmp_path)}
    for rerank, expected in (("off", None), ("embedding", "alpha__calculate")):
        config = testing.memory_config(
            {"alpha": {}}, toolscore={"startup_grace_seconds": None, "toolhub": {"rerank": rerank}}
        )
        async with testing.running_gateway(servers, config=config) as (gw, _), Client(gw.server) as client:
            result = await client.call_tool("search_tools", {"query": "total of these numbers", "k": 1})
        if expected is None:
            assert result.is_error and "No tool matches" in text(result), text(result)
        else:
            (found,) = json.loads(text(result))
            assert found["name"] == expected and found["matched"] == [] and 0 < found["score"] <= 1


@needs_model
@pytest.mark.anyio
async def test_lone_surrogates_in_a_description_or_a_query_are_searched_not_raised() -> None:
    # JSON may escape a lone surrogate; the tokenizer takes no such text, so it is replaced first
    hostile = {"files": [tool("read_file", "Read a file \ud800 from disk.", {"path": {}}), *FILES["files"][:1]]}
    hub = _hub({"rerank": "embedding"}, hostile)
    for query in ("open the file", "open \udfff the file"):
        result = await hub.answer("search_tools", {"query": query, "k": 2})
        assert not result.is_error
        assert json.loads(result.content[0].text)[0]["name"] == "files__read_file"


@needs_model
def test_a_text_the_model_refuses_fails_no_search(monkeypatch: pytest.MonkeyPatch) -> None:
    # whatever else a tokenizer may refuse: that tool is near nothing, that query ranks by its words
    from toolscore.toolhub import rerank

    class Refusing(rerank._Model):
        def embed(self, text: str) -> Any:
            if "refuse" in text:
                raise ValueError("cannot read this")
            return super().embed(text)

    monkeypatch.setattr(rerank, "_Model", Refusing)
    found, config = routes(
        {"kit": [tool("get_weather", "Current weather for a city; refuse me.", {"city": {}}), *FILES["files"]]}
    )
    tools = index_capabilities(found, config).tools
    index = SearchIndex(tools)
    reranker = on()
    with captured_logs() as logs:
        hits = reranker.search(index, tools, "read the file", 3)
        assert hits[0].name == "kit__read_file"
        assert reranker.search(index, tools, "refuse to delete the file", 2) == index.search(
            "refuse to delete the file", 2
        )
    assert [e["log_level"] for e in logs] == ["warning"]  # once, for the first refusal
