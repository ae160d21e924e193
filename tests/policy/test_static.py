"""The static rules (tools, destructive, arguments): allowed calls pass, violating calls get a tool error
naming the rule, and nothing reaches the downstream (marker files in tmp_path prove it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types
import pytest

from tests.conftest import text
from tests.policy import config, context, policy_client, refused, route
from toolscore.errors import Rejected
from toolscore.policy.scope import resolve_scopes
from toolscore.policy.static import StaticRules, compile_rules, violations

pytestmark = pytest.mark.anyio


def static_violations(
    constraints: dict[str, Any],
    tool: str,
    arguments: dict[str, Any],
    *,
    servers: dict[str, dict[str, Any]] | None = None,
    plan: bool = False,
) -> list[str]:
    """The `rule: reason` of every static rule a direct call (or, with `plan`, a plan step) breaks."""
    cfg = config(constraints, **(servers or {}))
    call = route(cfg, tool)
    found, _ = violations(call, arguments, compile_rules(resolve_scopes(cfg).of(call.server)), plan=plan)
    return [f"{rule}: {reason}" for rule, reason in found]


async def test_tools_are_allowed_and_denied_globally_and_per_server(tmp_path: Path) -> None:
    constraints = {"tools": {"deny": ["fx__counter"]}}
    server = {"constraints": {"tools": {"allow": ["echo", "counter", "add"], "deny": ["add"]}}}
    async with policy_client(tmp_path, constraints, server) as (client, sink):
        assert not (await client.call_tool("fx__echo", {"text": "ok"})).is_error
        for tool, args in [("fx__counter", {"key": "denied"}), ("fx__add", {"a": 1, "b": 1}), ("fx__pid", {})]:
            result = await client.call_tool(tool, args)
            assert refused(result, "tools"), tool
        assert not (tmp_path / "count-denied").exists()
    assert [r.violations for r in sink.records[1:]] == [
        (f"tools: tool '{t}' is not allowed by the gateway's policy",) for t in ("fx__counter", "fx__add", "fx__pid")
    ]


def test_deny_rules_fold_look_alike_spellings_but_allow_rules_match_exactly() -> None:
    assert static_violations({"tools": {"deny": ["FX__ＥＣＨＯ"]}}, "fx__echo", {"text": "x"}) == [
        "tools: tool 'fx__echo' is not allowed by the gateway's policy"
    ]
    # A look-alike in an allow list lets nothing through: only an exact match does.
    assert static_violations({"tools": {"allow": ["FX__ＥＣＨＯ"]}}, "fx__echo", {"text": "x"}) != []
    assert static_violations({"tools": {"allow": ["fx__e*"]}}, "fx__echo", {"text": "x"}) == []


def test_global_rules_see_exposed_and_canonical_names_and_server_rules_downstream_and_renamed_ones() -> None:
    renamed = {"fx": {"tools": {"rename": {"delete": "remove"}}}}
    for deny in ("fx__remove", "fx__delete"):  # exposed, canonical
        assert static_violations({"tools": {"deny": [deny]}}, "fx__remove", {"key": "k"}, servers=renamed)
    assert not static_violations({"tools": {"deny": ["remove"]}}, "fx__remove", {"key": "k"}, servers=renamed)
    for deny in ("remove", "delete"):  # renamed, downstream
        server = {"fx": {**renamed["fx"], "constraints": {"tools": {"deny": [deny]}}}}
        assert static_violations({}, "fx__remove", {"key": "k"}, servers=server)
    server = {"fx": {**renamed["fx"], "constraints": {"tools": {"deny": ["fx__remove"]}}}}
    assert not static_violations({}, "fx__remove", {"key": "k"}, servers=server)


def test_a_servers_own_tool_rules_add_to_the_global_ones_rather_than_replacing_them() -> None:
    server = {"fx": {"constraints": {"tools": {"allow": ["*"]}}}}
    assert static_violations({"tools": {"deny": ["fx__echo"]}}, "fx__echo", {"text": "x"}, servers=server)


async def test_destructive_tools_can_be_denied(tmp_path: Path) -> None:
    async with policy_client(tmp_path, {"destructive": "deny"}) as (client, _):
        result = await client.call_tool("fx__delete", {"key": "k"})
        assert refused(result, "destructive")
        assert not (await client.call_tool("fx__counter", {"key": "c"})).is_error  # not destructive
    assert not (tmp_path / "deleted-k").exists()


@pytest.mark.parametrize(("answer", "runs"), [(True, True), (False, False)])
async def test_destructive_tools_can_require_the_users_confirmation(tmp_path: Path, answer: bool, runs: bool) -> None:
    asked: list[str] = []

    async def elicit(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"confirm": answer})

    async with policy_client(tmp_path, {"destructive": "confirm"}, elicitation_callback=elicit) as (client, _):
        result = await client.call_tool("fx__delete", {"key": "k"})
    assert asked and "fx__delete" in asked[0]
    assert result.is_error is not runs
    if not runs:
        assert refused(result, "destructive") and "the user did not confirm 'fx__delete'" in text(result)
    assert (tmp_path / "deleted-k").exists() is runs


async def test_confirmation_without_an_elicitation_capable_client_is_a_refusal(tmp_path: Path) -> None:
    async with policy_client(tmp_path, {"destructive": "confirm"}) as (client, _):
        result = await client.call_tool("fx__delete", {"key": "k"})
    assert result.is_error and "cannot give (no elicitation support)" in text(result)
    assert not (tmp_path / "deleted-k").exists()


async def test_the_confirmation_question_names_the_tool_and_its_arguments() -> None:
    cfg = config({"destructive": "confirm"})
    asked: list[str] = []

    async def confirm(question: str) -> bool:
        asked.append(question)
        return True

    ctx = context(route(cfg, "fx__delete"), {"key": "k" * 1000})
    ctx.confirm = confirm
    assert await StaticRules(resolve_scopes(cfg))(ctx) is None
    assert asked[0].startswith('Allow the destructive tool \'fx__delete\' with arguments {"key": "kkk')
    assert len(asked[0]) < 600  # the arguments are cut


async def test_arguments_over_the_size_limit_or_matching_a_denied_pattern_are_refused(tmp_path: Path) -> None:
    constraints = {"arguments": {"max_bytes": 64, "deny_patterns": [r"rm\s+-rf\s+/"]}}
    async with policy_client(tmp_path, constraints) as (client, _):
        big = await client.call_tool("fx__counter", {"key": "x" * 100})
        assert refused(big, "arguments") and "the limit is 64" in text(big)
        bad = await client.call_tool("fx__counter", {"key": "please rm  -rf / now"})
        assert refused(bad, "arguments") and "denied pattern" in text(bad)
        assert not (await client.call_tool("fx__counter", {"key": "fine"})).is_error
    assert sorted(p.name for p in tmp_path.glob("count-*")) == ["count-fine"]


def test_the_size_limit_counts_utf8_bytes_of_compact_json() -> None:
    limits = {"arguments": {"max_bytes": 15}}
    assert static_violations(limits, "fx__echo", {"text": "éé"}) == []  # {"text":"éé"}: 15 bytes
    assert static_violations(limits, "fx__echo", {"text": "ééé"}) == [
        "arguments: the arguments are 17 bytes; the limit is 15"
    ]


def test_a_lone_surrogate_is_measured_not_a_crash() -> None:
    # Plan arguments come from stdlib JSON, which accepts "\ud800"; UTF-8 cannot encode it.
    limits = {"arguments": {"max_bytes": 14}}
    assert static_violations(limits, "fx__echo", {"text": "\ud800"}) == []  # {"text":"?"}: 3 bytes for it
    assert static_violations(limits, "fx__echo", {"text": "\ud800\ud800"}) == [
        "arguments: the arguments are 17 bytes; the limit is 14"
    ]


def test_denied_patterns_see_nested_values_and_object_keys() -> None:
    rules = {"arguments": {"deny_patterns": [r"rm\s+-rf", "DROP TABLE"]}}
    assert static_violations(rules, "fx__read", {"spec": {"rm -rf /": "x"}}) == [
        "arguments: an argument matches the denied pattern 'rm\\\\s+-rf'"
    ]
    assert static_violations(rules, "fx__read", {"paths": ["a", "DROP TABLE users"]}) == [
        "arguments: an argument matches the denied pattern 'DROP TABLE'"
    ]
    assert static_violations(rules, "fx__read", {"spec": {"n": 1, "ok": [True, None]}}) == []


def test_a_plan_leaves_references_and_the_size_limit_to_the_steps_run_time_check() -> None:
    rules = {"arguments": {"max_bytes": 10, "deny_patterns": ["secret"]}}
    arguments = {"text": "${a.text} and more than ten bytes"}
    assert static_violations(rules, "fx__echo", arguments, plan=True) == []
    assert len(static_violations(rules, "fx__echo", {"text": "secret"}, plan=True)) == 1
    assert [v.split(":")[0] for v in static_violations(rules, "fx__echo", {"text": "${a.secret}"})] == [
        "arguments",
        "arguments",
    ]


def test_a_plan_step_that_needs_the_users_confirmation_needs_the_plans_approval() -> None:
    assert static_violations({"destructive": "confirm"}, "fx__delete", {"key": "k"}, plan=True) == [
        "needs_approval: 'fx__delete' needs the user's confirmation: a plan with such steps is shown to the user "
        "once, before it runs, which needs a client that can ask (elicitation); call it directly otherwise"
    ]
    assert static_violations({"destructive": "confirm"}, "fx__delete", {"key": "k"}) == []  # asked when it runs


async def test_a_call_breaking_several_rules_is_refused_by_the_first() -> None:
    cfg = config({"tools": {"deny": ["fx__delete"]}, "destructive": "deny"})
    with pytest.raises(Rejected) as refusal:
        await StaticRules(resolve_scopes(cfg))(context(route(cfg, "fx__delete"), {"key": "k"}))
    assert refusal.value.hook == "tools"


def test_the_gateways_own_tools_obey_the_global_tool_rules() -> None:
    checks = StaticRules(resolve_scopes(config({"tools": {"deny": ["ORCH*"]}})))
    assert checks.gateway_tool_refusal("orchestrate") == "tool 'orchestrate' is not allowed by the gateway's policy"
    assert StaticRules(resolve_scopes(config({}))).gateway_tool_refusal("orchestrate") is None


async def test_a_plan_with_one_forbidden_step_runs_nothing(tmp_path: Path) -> None:
    async with policy_client(tmp_path, {"tools": {"deny": ["fx__delete"]}}) as (client, _):
        plan = '<fx><counter>{"key": "first"}</counter></fx><fx><delete>{"key": "k"}</delete></fx>'
        result = await client.call_tool("orchestrate", {"plan": plan})
        assert result.is_error and 'code="policy" step="2"' in text(result)
    assert not (tmp_path / "count-first").exists()
    assert not (tmp_path / "deleted-k").exists()


async def test_plan_steps_are_checked_again_with_their_resolved_arguments(tmp_path: Path) -> None:
    async with policy_client(tmp_path, {"arguments": {"deny_patterns": [r"rm\s+-rf\s+/"]}}) as (client, _):
        # Neither literal matches; the value assembled from references at run time does.
        plan = (
            '<fx><echo id="a">{"text": "rm -rf"}</echo></fx><fx><echo id="b">{"text": "/"}</echo></fx>'
            '<fx><counter>{"key": "${a.text} ${b.text}"}</counter></fx>'
        )
        result = await client.call_tool("orchestrate", {"plan": plan})
    assert result.structured_content is not None
    assert [s["status"] for s in result.structured_content["steps"]] == ["ok", "ok", "error"]
    assert "denied pattern" in result.structured_content["steps"][2]["error"]
    assert list(tmp_path.glob("count-*")) == []
