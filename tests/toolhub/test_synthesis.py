from __future__ import annotations

import json
import time

import mcp_types

from toolscore.toolhub.synthesis import cut_at_sentence, extract_items, merge, url_key


def result(
    payload: object = None, text: str | None = None, structured: dict[str, object] | None = None
) -> mcp_types.CallToolResult:
    body = text if text is not None else json.dumps(payload)
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=body)], structured_content=structured)


def test_urls_that_differ_only_in_spelling_are_one() -> None:
    assert url_key("HTTPS://www.Example.org/a/#frag") == url_key("http://example.org/a")
    assert url_key("https://example.org:8443/a") != url_key("https://example.org/a")
    assert url_key("https://example.org:99999/a") == url_key("https://example.org/a")  # out of range: ignored
    assert url_key("https://example.org/a?x=1") != url_key("https://example.org/a?x=2")
    assert url_key(" http://[::1 ") == "http://[::1"  # unparsable: compared as written


def test_items_come_from_json_lists_structured_content_or_paragraphs() -> None:
    listed = extract_items(result([{"title": "T", "link": "https://a.test", "content": "C"}, 5, {}]))
    assert [(i.title, i.url, i.text) for i in listed] == [("T", "https://a.test", "C")]
    wrapped = extract_items(result(text="ignored", structured={"results": [{"url": "https://b.test"}]}))
    assert [(i.url, i.text) for i in wrapped] == [("https://b.test", "https://b.test")]
    paragraphs = extract_items(result(text="One, see https://c.test/x.\n\n  \n\nTwo."))
    assert [(i.text, i.url) for i in paragraphs] == [
        ("One, see https://c.test/x.", "https://c.test/x."),
        ("Two.", None),
    ]
    broken = extract_items(result(text="[not json"))
    assert [i.text for i in broken] == ["[not json"]
    deep = extract_items(result(text="[" * 100_000))
    assert len(deep) == 1  # a hostile nesting is text, not a crash


def test_merge_dedupes_keeps_sources_and_interleaves() -> None:
    a = result([{"url": "https://x.test/1", "snippet": "x1"}, {"url": "https://x.test/2", "snippet": "x2"}])
    b = result([{"url": "https://www.x.test/1/", "snippet": "other words"}, {"snippet": " X2 "}, {"snippet": "b3"}])
    items = merge([("a", a), ("b", b)], item_bytes=100, max_items=10)
    # b's first is a's first by URL, its second a's second by text (case and spacing aside).
    assert [(i.text, i.url, i.sources) for i in items] == [
        ("x1", "https://x.test/1", ["a", "b"]),
        ("x2", "https://x.test/2", ["a", "b"]),
        ("b3", None, ["b"]),
    ]
    assert items[0].to_json() == {"url": "https://x.test/1", "text": "x1", "sources": ["a", "b"]}


def test_max_items_bounds_the_merge_but_sources_still_accumulate() -> None:
    a = result([{"snippet": f"a{i}"} for i in range(10)])
    b = result([{"snippet": "a0"}])
    items = merge([("a", a), ("b", b)], item_bytes=100, max_items=2)
    assert [i.text for i in items] == ["a0", "a1"] and items[0].sources == ["a", "b"]


def test_cut_at_a_sentence_boundary_within_the_byte_budget() -> None:
    text = "First sentence here. Second one is longer than that. Third."
    assert cut_at_sentence(text, 1000) == text
    assert cut_at_sentence(text, 40) == "First sentence here."
    assert cut_at_sentence("no sentence ends in this long run of words at all", 20).endswith("…")
    assert len(cut_at_sentence("ü" * 100, 21).encode()) <= 21  # never splits a character
    assert cut_at_sentence("Ein Satz. " + "Wörter " * 50, 30) == "Ein Satz."


def test_merge_is_linear_in_hostile_sizes() -> None:
    def cpu(n: int) -> float:
        payload = result([{"url": f"https://h.test/{i}", "snippet": "word " * 50} for i in range(n)])
        began = time.process_time()
        merge([("a", payload), ("b", payload)], item_bytes=200, max_items=500)
        return time.process_time() - began

    assert cpu(800) < cpu(200) * 8 + 0.05
