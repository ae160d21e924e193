from __future__ import annotations

import time

from tests.toolhub.conftest import routes, tool
from toolscore.toolhub.capabilities import index_capabilities
from toolscore.toolhub.search import SearchIndex


def index(n_servers: int = 1) -> SearchIndex:
    server_tools = {
        f"s{i}": [
            tool("web_search", "Search the web for pages."),
            tool("read_file", "Read a file from disk.", {"path": {}}),
            tool("run_python", "Execute Python code in a sandbox.", {"code": {}}),
            tool("get_weather", "Weather forecast for a city.", {"city": {}}),
        ]
        for i in range(n_servers)
    }
    found, config = routes(server_tools, s0={"capabilities": {"get_weather": ["forecast"]}})
    return SearchIndex(index_capabilities(found, config).tools)


def test_names_descriptions_and_tags_all_count() -> None:
    idx = index()
    assert idx.search("search the web", 1)[0][0] == "s0__web_search"
    assert idx.search("python sandbox", 1)[0][0] == "s0__run_python"
    assert idx.search("forecast", 1)[0][0] == "s0__get_weather"  # description and tag
    assert idx.search("files", 1)[0][0] == "s0__read_file"  # the inferred tag `files`, stemmed
    assert idx.search("nothing matches this", 3) == []
    assert idx.search("", 3) == []


def test_k_bounds_the_answer_and_ties_keep_list_order() -> None:
    idx = index(3)
    found = idx.search("web search", 2)
    assert [name for name, _ in found] == ["s0__web_search", "s1__web_search"]
    assert len(idx) == 12


def test_search_time_does_not_grow_with_the_query_past_its_cap() -> None:
    idx = index(50)

    def cpu(query: str) -> float:
        began = time.process_time()
        for _ in range(20):
            idx.search(query, 5)
        return time.process_time() - began

    capped = cpu("web search " * 1_000)  # already past the cap
    huge = cpu("web search " * 100_000)
    assert huge < capped * 3 + 0.05  # only the head of a query is read
