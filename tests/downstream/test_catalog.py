"""The resource and prompt catalog: reversible URI namespacing, routing, clashes; pure."""

from __future__ import annotations

import time

import mcp_types

from tests.conftest import make_config
from toolscore.downstream.catalog import ServerLists, build_catalog, namespaced_uri

STDIO = {"command": "true"}


def lists(*uris: str, templates: tuple[str, ...] = (), prompts: tuple[str, ...] = ()) -> ServerLists:
    return ServerLists(
        tuple(mcp_types.Resource(uri=u, name=u) for u in uris),
        tuple(mcp_types.ResourceTemplate(uri_template=t, name=t) for t in templates),
        tuple(mcp_types.Prompt(name=p) for p in prompts),
    )


def test_prefixed_servers_namespace_uris_reversibly_and_plain_ones_keep_them() -> None:
    config = make_config({"a/b": STDIO, "plain": {**STDIO, "prefix": ""}})
    catalog = build_catalog(
        {
            "a/b": lists("file:///x", templates=("db://{table}/rows",), prompts=("p",)),
            "plain": lists("file:///x", templates=("note://{+path}",), prompts=("p",)),
        },
        config,
    )
    public = namespaced_uri("a/b", "file:///x")
    assert public == "toolscore://a%2Fb/file:///x"
    assert catalog.route_uri(public) == ("a/b", "file:///x")
    assert catalog.route_uri("file:///x") == ("plain", "file:///x")
    assert catalog.route_uri("toolscore://a%2Fb/db://t/rows") == ("a/b", "db://t/rows")
    assert catalog.route_uri("note://deep/er/path") == ("plain", "note://deep/er/path")
    assert catalog.route_uri("toolscore://plain/file:///x") is None  # not a namespaced server
    assert catalog.route_uri("toolscore://nobody") is None
    assert catalog.route_template("toolscore://a%2Fb/db://{table}/rows") == ("a/b", "db://{table}/rows")
    assert catalog.route_template("nope") is None
    assert sorted(catalog.prompts) == ["a/b__p", "p"] or sorted(catalog.prompts) == ["a_b__p", "p"]
    assert catalog.public_uri("a/b", "x://1") == "toolscore://a%2Fb/x://1"
    assert catalog.public_uri("plain", "x://1") == "x://1"


def test_a_clash_keeps_the_first_server_in_config_order_and_is_reported() -> None:
    config = make_config({"one": {**STDIO, "prefix": ""}, "two": {**STDIO, "prefix": ""}})
    catalog = build_catalog(
        {
            "two": lists("x://1", templates=("t://{a}",), prompts=("p",)),
            "one": lists("x://1", templates=("t://{a}",), prompts=("p",)),
        },
        config,
    )
    assert catalog.resources["x://1"].server == "one"
    assert catalog.prompts["p"].server == "one"
    assert catalog.templates["t://{a}"].server == "one"
    assert len(catalog.problems) == 3 and all("'two'" in p for p in catalog.problems)
    assert catalog.route_uri("x://1") == ("one", "x://1")
    assert catalog.route_uri("y://unlisted") is None  # two unprefixed servers: no guess


def test_an_original_uri_from_a_tool_result_routes_to_the_one_server_listing_it() -> None:
    config = make_config({"a": STDIO, "b": STDIO})
    catalog = build_catalog(
        {
            "a": lists("x://only-a"),
            "b": lists("x://both"),
        },
        config,
    )
    assert catalog.route_uri("x://only-a") == ("a", "x://only-a")
    both = build_catalog({"a": lists("x://both"), "b": lists("x://both")}, config)
    assert both.route_uri("x://both") is None


def test_an_original_uri_matching_one_prefixed_servers_template_routes_to_it() -> None:
    config = make_config({"a": STDIO, "b": STDIO})
    catalog = build_catalog(
        {"a": lists(templates=("test://template/{id}/data",)), "b": lists(templates=("demo://{kind}/{n}",))},
        config,
    )
    assert catalog.route_uri("test://template/42/data") == ("a", "test://template/42/data")
    assert catalog.route_uri("demo://resource/2") == ("b", "demo://resource/2")
    assert catalog.route_uri("other://x") is None
    both = build_catalog({"a": lists(templates=("t://{x}",)), "b": lists(templates=("t://{y}",))}, config)
    assert both.route_uri("t://1") is None  # two owners: no guess


def test_down_servers_are_routed_but_not_listed() -> None:
    config = make_config({"a": STDIO})
    catalog = build_catalog({"a": lists("x://1", templates=("t://{a}",), prompts=("p",))}, config, down={"a"})
    assert catalog.listed_resources() == [] and catalog.listed_templates() == [] and catalog.listed_prompts() == []
    assert catalog.route_uri("toolscore://a/x://1") == ("a", "x://1")


def test_hostile_templates_match_in_linear_time_or_not_at_all() -> None:
    config = make_config({"p": {**STDIO, "prefix": ""}})
    huge = build_catalog({"p": lists(templates=("t://" + "{a}" * 5000,))}, config)
    assert huge.templates and next(iter(huge.templates.values())).literals is None

    def cost(n: int) -> float:
        template = "t://" + "{a}x" * 200
        catalog = build_catalog(
            {"p": lists(templates=(template,)), "q": lists()},
            make_config({"p": {**STDIO, "prefix": ""}, "q": {**STDIO, "prefix": ""}}),
        )
        uri = "t://" + "x" * n + "!"
        start = time.process_time()
        assert catalog.route_uri(uri) is None
        return time.process_time() - start

    cost(1000)
    small, large = cost(2000), cost(8000)
    assert large < max(small, 0.001) * 40  # 4x the input: far below quadratic-or-worse growth
