from __future__ import annotations

import time
from typing import Any

import mcp_types

from tests.toolhub.conftest import routes, tool
from toolscore.toolhub.capabilities import index_capabilities
from toolscore.toolhub.search import SearchIndex
from toolscore.toolhub.synonyms import related
from toolscore.toolhub.text import stem, terms


def index(n_servers: int = 1, extra: list[mcp_types.Tool] | None = None) -> SearchIndex:
    server_tools = {
        f"s{i}": [
            tool("web_search", "Search the web for pages."),
            tool("read_file", "Read a file from disk.", {"path": {}}),
            tool("run_python", "Execute Python code in a sandbox.", {"code": {}}),
            tool("get_weather", "Weather forecast for a city.", {"city": {}}),
            *(extra or []),
        ]
        for i in range(n_servers)
    }
    found, config = routes(server_tools, s0={"capabilities": {"get_weather": ["forecast"]}})
    return SearchIndex(index_capabilities(found, config).tools)


def names(idx: SearchIndex, query: str, k: int = 1, **filters: Any) -> list[str]:
    return [hit.name for hit in idx.search(query, k, **filters)]


def test_names_descriptions_and_tags_all_count() -> None:
    idx = index()
    assert names(idx, "search the web") == ["s0__web_search"]
    assert names(idx, "python sandbox") == ["s0__run_python"]
    assert names(idx, "forecast") == ["s0__get_weather"]  # description and tag
    assert names(idx, "files") == ["s0__read_file"]  # the inferred tag `files`, stemmed
    assert idx.search("zebra quartz", 3) == []
    assert idx.search("", 3) == []
    assert idx.search("the of and", 3) == []  # stop words alone find nothing


def test_word_forms_meet_through_the_stemmer() -> None:
    for a, b in [
        ("invoices", "invoice"),
        ("searching", "search"),
        ("saved", "save"),
        ("creation", "create"),
        ("deleting", "delete"),
        ("queries", "query"),
        ("running", "run"),
        ("directories", "directory"),
        ("removal", "remove"),
    ]:
        assert stem(a) == stem(b), (a, b)
    assert stem("status") == "status" and stem("analysis") == "analysis" and stem("cat") == "cat"
    assert stem("x" * 1000 + "ing") == "x" * 1000 + "ing"  # no word is that long: left alone, not memoised
    assert terms("listUnpaidInvoices for my-customer") == ["list", "unpaid", stem("invoice"), "customer"]
    extra = [tool("list_invoices", "List invoices of a customer.", {"customer": {}})]
    assert names(index(extra=extra), "unpaid invoice") == ["s0__list_invoices"]


def test_synonyms_find_a_tool_named_with_another_verb() -> None:
    extra = [
        tool("delete_directory", "Delete a directory and what it holds.", {"path": {}}),
        tool("list_directory", "List the entries of a directory.", {"path": {}}),
    ]
    idx = index(extra=extra)
    assert names(idx, "remove a folder") == ["s0__delete_directory"]
    assert names(idx, "enumerate folder contents") == ["s0__list_directory"]
    assert names(idx, "open a document") == ["s0__read_file"]
    assert stem("remove") in related(stem("delete")) and stem("delete") in related(stem("remove"))
    # a synonym counts less than the word itself
    hits = idx.search("delete directory", 2)
    assert hits[0].name == "s0__delete_directory" and hits[0].score > hits[1].score


def test_titles_parameters_and_annotations_are_searched() -> None:
    extra = [
        tool("t1", "", {"latitude": {"description": "Where the station is."}}),
        tool("t2", "", title="Spreadsheet exporter"),
        tool("t3", "", {"x": {"type": "object", "properties": {"isbn": {}}}}),
        tool("t4", "", annotations=mcp_types.ToolAnnotations(destructive_hint=True, title="Purge cache")),
    ]
    idx = index(extra=extra)
    assert names(idx, "latitude") == ["s0__t1"]  # a parameter's name
    assert names(idx, "station") == ["s0__t1"]  # a parameter's description
    assert names(idx, "spreadsheet") == ["s0__t2"]  # the title
    assert names(idx, "isbn") == ["s0__t3"]  # a nested parameter
    assert names(idx, "purge") == ["s0__t4"] and names(idx, "destructive") == ["s0__t4"]


def test_a_word_in_the_name_outweighs_the_same_word_in_a_description() -> None:
    extra = [
        tool("send_email", "Send an email to someone."),
        tool("post_message", "Post a chat message; an email is sent when someone is offline."),
    ]
    assert names(index(extra=extra), "email", 2) == ["s0__send_email", "s0__post_message"]


def test_filters_keep_one_server_or_one_capability() -> None:
    idx = index(3)
    assert names(idx, "web search", 5, server="s2") == ["s2__web_search"]
    assert names(idx, "weather", 5, capability="forecast") == ["s0__get_weather"]  # configured on s0 only
    assert names(idx, "weather", 5, server="s1", capability="forecast") == []
    assert names(idx, "weather", 5, server="nope") == []


def test_ranking_is_deterministic_and_ties_go_by_name() -> None:
    found = [hit.name for hit in index(3).search("web search", 3)]
    assert found == ["s0__web_search", "s1__web_search", "s2__web_search"]
    scores = {hit.score for hit in index(3).search("web search", 3)}
    assert len(scores) == 1
    assert [index(3).search("python code weather", 12) for _ in range(2)] == [
        index(3).search("python code weather", 12)
    ] * 2


def test_hits_say_which_query_words_matched() -> None:
    extra = [tool("delete_directory", "Delete a directory.", {"path": {}})]
    hit = index(extra=extra).search("Remove the folder quickly", 1)[0]
    assert hit.name == "s0__delete_directory"
    assert hit.matched == ("remove", "folder")  # by synonym; `quickly` matched nothing


def test_hostile_schemas_and_texts_are_bounded() -> None:
    deep: dict[str, Any] = {"type": "object", "properties": {}}
    node = deep
    for i in range(40):
        child: dict[str, Any] = {"type": "object", "properties": {}}
        node["properties"][f"deep{chr(97 + i // 26)}{chr(97 + i % 26)}"] = child
        node = child
    wide = {f"p{i}": {"description": "x" * 5_000} for i in range(1_000)}
    huge = tool("huge", "word " * 200_000, wide)
    nested = mcp_types.Tool(name="nested", input_schema=deep)
    idx = index(extra=[huge, nested])
    assert names(idx, "deepac") == ["s0__nested"]  # the third level
    assert names(idx, "deepbe") == []  # the 31st: past the depth that is read
    assert names(idx, "\udcff\x00 ö " + "é" * 10_000) == []


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


def test_values_in_a_query_name_a_kind_of_thing_and_adjacent_words_join() -> None:
    extra = [
        tool("get_config", "Get the browser configuration."),
        tool("fetch_page", "Fetch a URL and return it as markdown.", {"url": {}}),
        tool("localstorage_get", "Get one local storage item.", {"key": {}}),
        tool("issue_42", "Nothing but a number in its name."),
    ]
    idx = index(extra=extra)
    assert names(idx, "show me config.yaml") == ["s0__read_file"]  # a file name counts as `file`
    assert names(idx, "https://example.org/docs/config") == ["s0__fetch_page"]  # a URL as `url`
    assert names(idx, "local storage") == ["s0__localstorage_get"]  # two words, one in the name
    assert names(idx, "42") == []  # a bare number says nothing of a tool


def test_a_servers_own_words_count_once_not_in_every_field() -> None:
    server_tools = {
        "browser": [
            tool("browser_close", "Close the page."),
            tool("browser_resize", "Resize the browser window of the browser."),
            tool("browser_tabs", "Browser tabs: list, open, close in the browser."),
        ],
        "files": [tool("close_file", "Close an open file handle.")],
    }
    found, config = routes(server_tools)
    idx = SearchIndex(index_capabilities(found, config).tools)
    # `browser` is every one of that server's tools: it picks the server, and `close` the tool
    assert names(idx, "close the browser", 2) == ["browser__browser_close", "browser__browser_tabs"]
    assert names(idx, "close", 1, server="files") == ["files__close_file"]


def test_a_word_as_written_in_a_name_counts_beside_its_stem() -> None:
    extra = [
        tool("get_notification_details", "Get one notification's details."),
        tool("list_notifications", "List notifications."),
    ]
    idx = index(extra=extra)
    assert names(idx, "my unread notifications") == ["s0__list_notifications"]  # the plural, as written
    assert names(idx, "one notification in detail") == ["s0__get_notification_details"]
    assert idx.search("notifications", 1)[0].matched == ("notifications",)  # once, though it matched twice
