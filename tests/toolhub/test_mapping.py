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
    missing = map_arguments({"query": "mcp"}, r, {})
    assert missing.arguments is None and "'q'" in (missing.skipped or "") and "argument_maps" in (missing.skipped or "")
    wrong = map_arguments({"q": 5}, r, {})
    assert wrong.arguments is None and "q: 5 is not of type 'string'" in (wrong.skipped or "")


def test_a_schema_without_properties_takes_everything() -> None:
    bare = mcp_types.Tool(name="t", input_schema={"type": "object"})
    found, _ = routes({"s": [bare]})
    assert map_arguments({"x": 1}, found[0], {"y": "z"}).arguments == {"x": 1}
