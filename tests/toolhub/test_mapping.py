from __future__ import annotations

import mcp_types

from tests.toolhub.conftest import routes, tool
from toolscore.toolhub.mapping import map_arguments


def route(props: dict[str, object], required: list[str], **extra: object):  # type: ignore[no-untyped-def]
    found, _ = routes({"s": [tool("t", "", props, required=required, **extra)]})
    return found[0]


def test_arguments_are_renamed_by_the_map_and_undeclared_ones_left_out() -> None:
    r = route({"q": {"type": "string"}, "limit": {"type": "integer"}}, ["q"])
    mapped = map_arguments({"query": "mcp", "limit": 3, "lang": "en"}, r, {"query": "q"})
    assert mapped.arguments == {"q": "mcp", "limit": 3} and mapped.dropped == ("lang",)
    assert mapped.skipped is None


def test_a_schema_that_cannot_be_met_skips_the_candidate_with_the_reason() -> None:
    r = route({"q": {"type": "string"}}, ["q"])
    url = route({"url": {"type": "string"}}, ["url"])
    missing = map_arguments({"query": "mcp"}, url, {})
    assert (
        missing.arguments is None and "'url'" in (missing.skipped or "") and "argument_maps" in (missing.skipped or "")
    )
    wrong = map_arguments({"q": 5}, r, {})
    assert wrong.arguments is None and "q: 5 is not of type 'string'" in (wrong.skipped or "")


def test_a_schema_without_properties_takes_everything() -> None:
    bare = mcp_types.Tool(name="t", input_schema={"type": "object"})
    found, _ = routes({"s": [bare]})
    assert map_arguments({"x": 1}, found[0], {"y": "z"}).arguments == {"x": 1}


def test_a_query_fills_the_one_required_string_named_like_a_query() -> None:
    """code-index-mcp wants `pattern`, a research tool `topic`: `{"query": …}` reaches both unmapped."""
    code = route({"pattern": {"type": "string"}, "case_sensitive": {"type": "boolean"}}, ["pattern"])
    mapped = map_arguments({"query": "def main", "case_sensitive": True}, code, {})
    assert mapped.arguments == {"pattern": "def main", "case_sensitive": True} and mapped.dropped == ()
    topic = route({"topic": {"type": "string"}, "depth": {"type": "integer", "default": 1}}, ["topic", "depth"])
    assert map_arguments({"query": "mcp"}, topic, {}).arguments == {"topic": "mcp"}
    # Not when the choice is not obvious: two required parameters, another type, another name.
    both = route({"pattern": {"type": "string"}, "path": {"type": "string"}}, ["pattern", "path"])
    assert "'pattern', 'path'" in (map_arguments({"query": "x"}, both, {}).skipped or "")
    numeric = route({"q": {"type": "integer"}}, ["q"])
    assert map_arguments({"query": "x"}, numeric, {}).arguments is None
    url = route({"url": {"type": "string"}}, ["url"])
    assert map_arguments({"query": "x"}, url, {}).arguments is None
    # A query already given under the tool's own name is not overwritten.
    assert map_arguments({"query": "x", "pattern": "y"}, code, {}).arguments == {"pattern": "y"}
