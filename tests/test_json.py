"""The one JSON walker, the path formatter, and replies safe from unpaired surrogates."""

from __future__ import annotations

import mcp_types

from toolscore._json import (
    format_path,
    iter_strings,
    map_strings,
    map_strings_at,
    nested_deeper_than,
    repaired_json_line,
    scrub_unpaired_surrogates,
    unpaired_surrogate_free,
)

VALUE = {"a": ["x", {"b": "y", "n": 1}], "c": "z"}


def test_every_string_is_visited_keys_only_on_request() -> None:
    assert list(iter_strings(VALUE)) == ["x", "y", "z"]
    assert list(iter_strings(VALUE, keys=True)) == ["a", "c", "x", "b", "n", "y", "z"]


def test_strings_are_replaced_by_any_value_with_their_place_known() -> None:
    assert map_strings(VALUE, str.upper) == {"a": ["X", {"b": "Y", "n": 1}], "c": "Z"}
    assert map_strings("${n}", lambda s: 5) == 5
    seen: list[str] = []
    map_strings_at(VALUE, lambda s, path: seen.append(format_path(path)) or s)
    assert seen == ["a[0]", "a[1].b", "c"]


def test_paths_read_as_people_write_them() -> None:
    assert format_path(("mcpServers", "fx", "args", 2)) == "mcpServers.fx.args[2]"
    assert format_path(()) == "(top level)"
    assert format_path((0, "k")) == "[0].k"


def test_unpaired_surrogates_are_replaced_and_sound_text_is_kept() -> None:
    assert unpaired_surrogate_free("a\ud800b") == "a\ufffdb"
    assert unpaired_surrogate_free("é😀") == "é😀"
    broken = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text="x\udc00")], structured_content={"k": "\ud800"}
    )
    fixed = scrub_unpaired_surrogates(broken)
    assert fixed.content[0].text == "x\ufffd"  # type: ignore[union-attr]
    assert fixed.structured_content == {"k": "\ufffd"}
    fine = mcp_types.CallToolResult(content=[mcp_types.TextContent(text="ok")])
    assert scrub_unpaired_surrogates(fine) is fine


def test_a_json_line_with_unpaired_surrogates_or_bad_utf8_is_repaired_and_others_are_left_alone() -> None:
    assert repaired_json_line(rb'{"a":"x\ud800y","\udc00":1}') == '{"a":"x\ufffdy","\ufffd":1}'.encode()
    assert repaired_json_line(b'{"a":"caf\xe9"}') == '{"a":"caf\ufffd"}'.encode()
    assert repaired_json_line(rb'{"a":"\ud83d\ude00"}') is None  # a pair: nothing to repair
    assert repaired_json_line(b'{"a":"fine"}') is None
    assert repaired_json_line(b"not json") is None
    assert repaired_json_line(b"[" * 100_000 + b"]" * 100_000) is None  # too deep for json: not repaired


def test_nesting_depth_is_measured_without_recursion() -> None:
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    assert nested_deeper_than(deep, 64)
    assert not nested_deeper_than({"a": [{"b": []}]}, 4)  # four levels: object, array, object, array
    assert nested_deeper_than({"a": [{"b": []}]}, 3)
    assert not nested_deeper_than("text", 0)
