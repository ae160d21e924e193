"""Argument values from model text: character data and bounded JSON."""

from __future__ import annotations

import json

import pytest

from toolscore.plan.values import (
    MAX_JSON_DEPTH,
    CharData,
    char_data,
    has_surrogate,
    loads,
    relaxed_json,
    surrogate_at,
)


def test_well_formed_text_has_entities_and_character_references_decoded() -> None:
    assert char_data("a &lt; b &amp;&amp; &quot;c&quot; &apos;&#65;&#x1F600;&gt;") == CharData(
        'a < b && "c" \'A\U0001f600>'
    )


def test_text_with_a_bare_less_than_or_ampersand_is_taken_verbatim() -> None:
    assert char_data("x < y &amp; z") == CharData("x < y &amp; z", verbatim=True)
    assert char_data("x & y &lt; z") == CharData("x & y &lt; z", verbatim=True)
    # Nothing would have been decoded: nothing to warn about.
    assert char_data("x < y & z") == CharData("x < y & z")


def test_a_reference_to_no_character_is_named_and_replaced() -> None:
    assert char_data("a&#xD800;b&#1114112;") == CharData("a\ufffdb\ufffd", bad_reference="#xD800")
    long = char_data("&#" + "9" * 40 + ";")
    assert long.bad_reference == "#" + "9" * 11 + "…"
    assert char_data("&#000000065;").text == "A"  # leading zeros are not digits that count


def test_json_is_read_with_nesting_and_number_length_bounded() -> None:
    assert loads('{"a": [1, "]]]]"]}') == {"a": [1, "]]]]"]}
    assert loads("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH) is not None
    with pytest.raises(ValueError, match="nests deeper than 64"):
        loads("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
    with pytest.raises(ValueError, match="more than 1000 digits"):
        loads("1" * 1001)
    with pytest.raises(ValueError, match="NaN is not JSON"):
        loads("[NaN]")
    with pytest.raises(json.JSONDecodeError):
        loads("{nope")


def test_trailing_commas_and_single_quotes_are_relaxed() -> None:
    assert json.loads(relaxed_json("{'a': [1, 2,], }")) == {"a": [1, 2]}
    # With a double quote about, a single quote may be inside a string: left alone.
    assert relaxed_json('{"it\'s": 1,}') == '{"it\'s": 1}'


def test_lone_surrogates_are_found_in_keys_and_nested_values() -> None:
    assert not has_surrogate({"a": ["\U0001f600", 1, None]})
    assert has_surrogate({"\ud800": 1})
    assert has_surrogate([{"k": ["\udfff"]}])
    assert surrogate_at("ab\udc00") == 2
    assert surrogate_at("ab") is None
