from __future__ import annotations

import mcp_types

from tests.toolhub.conftest import routes, tool
from toolscore.config import Config
from toolscore.downstream.registry import Route
from toolscore.toolhub.capabilities import extract_tags, index_capabilities
from toolscore.toolhub.text import stem, words


def test_words_split_names_the_way_people_write_them() -> None:
    assert words("searchCode_v2") == ["search", stem("code"), "v", "2"]
    assert words("HTTPFetch-pages") == ["http", "fetch", stem("page")]
    assert stem("searches") == "search" and stem("queries") == "query" and stem("is") == "is"
    assert len(words("a " * 100_000)) <= 4096  # only the head of a hostile text is read


def test_the_extractor_reads_the_name_and_the_first_sentence_only() -> None:
    assert extract_tags("web_search", "Search the web.") == {"search", "web"}
    assert extract_tags("run_python", None) == {"code"}
    # The second sentence mentions files; the tool is not a file tool.
    assert extract_tags("echo", "Return the text unchanged. Not for files.") == set()
    assert extract_tags("x", "Fetch a URL\nand the rest") == {"fetch"}


def test_configured_tags_are_explicit_and_win_over_guesswork() -> None:
    found, config = routes(
        {
            "a": [tool("web_search", "Search the web."), tool("grep", "Find text in files.")],
            "b": [tool("lookup", "Look things up.")],
        },
        a={"capabilities": {"web_search": ["search"]}, "priority": 3},
        b={"capabilities": ["search", "kb"]},
    )
    caps = index_capabilities(found, config)
    # grep also looks like search, but two tools are search by the operator's word.
    assert [t.route.public_name for t in caps.candidates("search")] == ["a__web_search", "b__lookup"]
    assert caps.tools["a__grep"].inferred >= {"search", "files"}
    assert caps.tools["a__web_search"].priority == 3 and caps.tools["b__lookup"].explicit == {"search", "kb"}
    assert caps.candidates("files") == (caps.tools["a__grep"],)  # inferred tags answer when none is explicit
    assert caps.candidates("nothing") == ()


def test_annotations_add_tags() -> None:
    notes = mcp_types.ToolAnnotations(read_only_hint=True, destructive_hint=False, title="Weather forecast")
    found, config = routes(
        {
            "a": [
                tool("get", "", annotations=notes),
                tool("rm", "", annotations=mcp_types.ToolAnnotations(destructive_hint=True)),
            ]
        }
    )
    caps = index_capabilities(found, config)
    assert caps.tools["a__get"].tags == {"read-only", "weather"}
    assert caps.tools["a__rm"].tags == {"destructive"}


def test_near_equal_tools_on_different_servers_are_one_capability(search_pair: tuple[list[Route], Config]) -> None:
    caps = index_capabilities(*search_pair)
    # Same name, same parameters: one group. Same name, different parameters: not the same tool.
    assert caps.duplicates == {"calculate": ("alpha__calculate", "beta__calculate")}
    assert [t.route.public_name for t in caps.candidates("calculate")] == ["alpha__calculate", "beta__calculate"]
    assert "web_search" not in caps.duplicates


def test_the_summary_counts_the_most_common_capabilities_first(search_pair: tuple[list[Route], Config]) -> None:
    caps = index_capabilities(*search_pair)
    assert caps.summary(2) == [("calculate", 2), ("math", 2)]  # ties by name
    assert dict(caps.summary(10)) == {"calculate": 2, "math": 2, "search": 2, "web": 2}
