"""References into earlier results: what `${...}` means, and what it resolves to."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolscore.errors import RefError, RefSyntaxError
from toolscore.plan.dialects import Targets, read_references
from toolscore.plan.refs import STAR, Ref, contains_ref, find_refs, parse_template, resolve


def record(value: Any, **fields: Any) -> dict[str, Any]:
    """A step's value record holding `value` as its JSON."""
    base = {"status": "ok", "text": "t", "json": value, "error": None, "ms": 1, "attempts": 1, "server": "s"}
    return {**base, "tool": "t", **fields}


def test_reference_forms() -> None:
    parts = parse_template("a $result_of_step_2.x[0] ${3} ${step4} ${result_of_step_5} ${hits['k k'][-1]}? $$ $7")
    refs = [p for p in parts if isinstance(p, Ref)]
    assert [(r.target, r.path) for r in refs] == [(2, ("x", 0)), (3, ()), (4, ()), (5, ()), ("hits", ("k k", -1))]
    assert "".join(p for p in parts if isinstance(p, str)).endswith(" $ $7")
    with pytest.raises(RefSyntaxError):
        parse_template("${unclosed")


def test_paths_stars_and_optional_references() -> None:
    (ref,) = parse_template("${ r.items[*].name? }")
    assert (ref.raw, ref.target, ref.path, ref.optional) == (
        "${ r.items[*].name? }",
        "r",
        ("items", STAR, "name"),
        True,
    )
    assert repr(STAR) == "[*]"
    assert parse_template("$$${a}") == ("$", Ref("${a}", "a"))
    assert parse_template("cost: $5 or $x") == ("cost: $5 or $x",)


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("${a|json}", "filters ('|...') are not available yet"),
        ("${a b}", "not a reference; write ${N}, ${id} or ${id.path[0]}"),
        ("${" + "x" * 100 + "!}", "${xxxxxxxx"),
        ("${a[" + "1" * 16 + "]}", "a number of more than 15 digits"),
        ("${a" + ".b" * 65 + "}", "a path of more than 64 segments"),
    ],
)
def test_a_malformed_reference_says_what_is_wrong(template: str, reason: str) -> None:
    with pytest.raises(RefSyntaxError) as err:
        parse_template(template)
    assert reason in str(err.value)
    assert len(str(err.value)) < 200  # model input is quoted, not all of it


def test_references_are_found_in_string_values_only_in_document_order() -> None:
    value = {"${key}": "${a}", "list": ["x ${b.c}", 1, None, {"d": "${2}"}], "n": 3}
    assert [r.target for r in find_refs(value)] == ["a", "b", 2]
    assert find_refs({"k": "no refs", "n": [1, 2]}) == []
    assert contains_ref(["x", {"y": "${a}"}])
    assert not contains_ref({"${key}": 1})
    assert contains_ref({"a": "${bad ref}"})  # a malformed one counts: never validated as a literal


def test_mustache_repair_leaves_everything_else_alone() -> None:
    value = {"keep": 1, "list": ["{{a}}", "{{b}}"], "{{a}}": "{{ 2 }}"}
    repaired, which, refused = read_references(value, Targets(lambda target: target in ("a", 2)))
    assert repaired == {"keep": 1, "list": ["${a}", "{{b}}"], "{{a}}": "${2}"}
    assert [r.written for r in which] == ["{{a}}", "{{ 2 }}"]
    assert refused == []


def test_resolution_is_typed_for_whole_values_and_interpolated_in_text() -> None:
    lookup = {"r": record({"n": 3, "xs": [{"u": "a"}, {"u": "b"}]})}.get
    assert resolve(
        {"n": "${r.n}", "all": "${r.xs[*].u}", "s": "n=${r.n} xs=${r.xs[-1]}", "st": "${r.status}"}, lookup
    ) == {
        "n": 3,
        "all": ["a", "b"],
        "s": 'n=3 xs={"u":"b"}',
        "st": "ok",
    }
    assert resolve("${r.missing?}", lookup) is None
    with pytest.raises(RefError):
        resolve("${r.missing}", lookup)


def test_a_path_starts_at_the_json_unless_it_names_a_record_field() -> None:
    lookup = {"r": record({"text": "from json"}, text="from the record"), 1: record([10, 20])}.get
    assert resolve(["${r.text}", "${r.json.text}", "${1[1]}", "${r.attempts}", 7, None], lookup) == [
        "from the record",
        "from json",
        20,
        1,
        7,
        None,
    ]


def test_a_path_sees_through_one_json_string_wrapper() -> None:
    # The shipped sandbox answers {"result": "<its JSON as a string>"}.
    inner = json.dumps({"stdout": "45\n", "runs": [{"n": 1}, {"n": 2}], "status": "completed"})
    lookup = {
        "c": record({"result": inner}, text=json.dumps({"result": inner})),
        "s": record(inner, text=inner),
        "twice": record({"result": json.dumps({"result": inner})}),
        "plain": record({"result": "not json", "other": inner}),
    }.get
    assert resolve(
        ["${c.json.stdout}", "${c.stdout}", "${c.runs[*].n}", "${c.result.status}", "${s.runs[-1].n}", "${c.result}"],
        lookup,
    ) == ["45\n", "45\n", [1, 2], "completed", 2, inner]
    assert resolve("out: ${c.stdout}", lookup) == "out: 45\n"
    # Only where the path leads nowhere otherwise, and only one wrapper deep.
    assert resolve("${c.result}", lookup) == inner
    for template, reason in [
        ("${twice.stdout}", "no key 'stdout'"),
        ("${plain.stdout}", "no key 'stdout'"),
        ("${c.missing}", "no key 'missing'"),
    ]:
        with pytest.raises(RefError, match=reason):
            resolve(template, lookup)
    assert resolve("${c.missing?}", lookup) is None


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("${gone}", "${gone}: no finished step 'gone'"),
        ("${r[5]}", "${r[5]}: no index [5]: found an array of 3 items"),
        ("${r[-4]}", "${r[-4]}: no index [-4]: found an array of 3 items"),
        ("${r.key}", "${r.key}: no key 'key': found an array of 3 items"),
        ("${r[0].x[*]}", "${r[0].x[*]}: at [0].x: [*] needs an array, found an integer (1)"),
        ("${r[*].x}", "${r[*].x}: at [*]: no key 'x': found an integer (2)"),
        ("${r[0].y}", "${r[0].y}: at [0]: no key 'y': found an object with keys x"),
        ("${r[0].X}", "${r[0].X}: at [0]: no key 'X' (did you mean 'x'?): found an object with keys x"),
    ],
)
def test_a_reference_that_does_not_resolve_says_why(template: str, reason: str) -> None:
    lookup = {"r": record([{"x": 1}, 2, 3])}.get
    with pytest.raises(RefError) as err:
        resolve({"a": template}, lookup)
    assert str(err.value) == reason


def test_resolve_stops_at_the_byte_limit_at_the_first_string_past_it() -> None:
    lookup = {"r": record("x" * 10)}.get
    assert resolve(["${r}", "ab"], lookup, max_bytes=12) == ["x" * 10, "ab"]
    with pytest.raises(RefError, match="literal text: the resolved arguments would exceed 11 bytes"):
        resolve(["${r}", "ab"], lookup, max_bytes=11)
