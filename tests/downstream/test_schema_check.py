"""The compiled argument check never accepts what jsonschema refuses, and does accept common arguments."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema.validators import validator_for

from toolscore.downstream.schema_check import compile_check

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-5, 5, allow_nan=False) | st.text("ab", max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
    max_leaves=10,
)
_types = st.sampled_from(["object", "array", "string", "integer", "number", "boolean", "null"])


def _schemas() -> st.SearchStrategy[dict[str, Any]]:
    leaf = st.fixed_dictionaries(
        {},
        optional={
            "type": _types | st.lists(_types, min_size=1, max_size=3),
            "enum": st.lists(st.text("ab", max_size=2), max_size=3),
            "minimum": st.integers(-3, 3),
            "maximum": st.floats(-3, 3, allow_nan=False),
            "minLength": st.integers(0, 3),
            "maxLength": st.integers(0, 3),
            "description": st.text(max_size=3),
            "format": st.sampled_from(["path", "uri", "date-time"]),
        },
    )
    return st.recursive(
        leaf,
        lambda inner: st.fixed_dictionaries(
            {},
            optional={
                "type": _types,
                "properties": st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
                "required": st.lists(st.sampled_from("abc"), max_size=3, unique=True),
                "additionalProperties": st.booleans() | inner,
                "items": inner,
            },
        ),
        max_leaves=6,
    )


@pytest.mark.parametrize(
    "examples", [pytest.param(100, id="short"), pytest.param(400, id="long", marks=pytest.mark.soak)]
)
def test_the_check_never_accepts_what_jsonschema_refuses(examples: int) -> None:
    # Drawing schemas costs more than checking them, so each schema is checked against up to three
    # values. The short run's examples differ from run to run; the `soak` run (in ./scripts/test)
    # draws four times as many.
    @settings(max_examples=examples, deadline=None)
    @given(schema=_schemas(), values=st.lists(_json, min_size=1, max_size=3))
    def never_accepts(schema: dict[str, Any], values: list[Any]) -> None:
        check = compile_check(schema)
        assert check is not None  # every schema drawn is in the subset
        for value in values:
            if check(value):
                assert validator_for(schema)(schema).is_valid(value), (schema, value)

    never_accepts()


def test_common_arguments_are_accepted_without_jsonschema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "format": "path", "description": "where"},
            "count": {"type": "integer", "minimum": 1},
            "mode": {"type": "string", "enum": ["fast", "slow"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "options": {"type": "object", "additionalProperties": {"type": ["string", "null"]}},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    check = compile_check(schema)
    assert check is not None
    assert check({"path": "a", "count": 2, "mode": "fast", "tags": ["x"], "options": {"k": None}})
    assert not check({"count": 2})  # required missing
    assert not check({"path": "a", "extra": 1})  # additionalProperties: false
    assert not check({"path": "a", "count": 0})
    assert not check({"path": "a", "count": True})  # a bool is not an integer


def test_schemas_outside_the_subset_get_no_check() -> None:
    for schema in (
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}},
        {"anyOf": [{"type": "string"}]},
        {"type": "object", "patternProperties": {"^x": {}}},
        {"type": "string", "pattern": "^(a+)+$"},
        {"enum": [1, True]},
    ):
        assert compile_check(schema) is None, schema
