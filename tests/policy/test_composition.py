"""The composition table: which rule runs in which phase, and the constraints in force on each server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import anyio
import mcp_types
import pytest
from mcp import Client

from tests.conftest import memory_gateway, wait_for
from tests.policy import config
from toolscore.config import ConstraintsConfig, ServerConstraints, ToolRules
from toolscore.policy import Policy, build_policy
from toolscore.policy.scope import check_overrides, in_force, resolve_scopes

pytestmark = pytest.mark.anyio

EVERYTHING_ON: dict[str, Any] = {
    "tools": {"deny": ["*__nothing"]},
    "rate_limits": [{"rate": 1000}],
    "batching": True,
    "concurrency": {"per_server": 4},
    "results": {"redact": True},
}


def names(hooks: tuple[Any, ...]) -> list[str]:
    return [hook.name for hook in hooks]


async def test_constraints_off_means_no_rule_applies(tmp_path: Path) -> None:
    off = {"enabled": False, "tools": {"deny": ["*"]}, "results": {"redact": True}}
    async with memory_gateway(tmp_path, constraints=off) as (gw, _), Client(gw.server, mode="legacy") as client:
        assert not (await client.call_tool("fx__echo", {"text": "x"})).is_error
    policy = build_policy(config({}).model_copy(update={"constraints": ConstraintsConfig.model_validate(off)}))
    assert policy == Policy()
    assert policy.gateway_tool_refusal("orchestrate") is None
    assert policy.plan_problems(cast(Any, None)) == []  # not even looked at when off


def test_each_phase_runs_its_rules_in_table_order() -> None:
    policy = build_policy(config(EVERYTHING_ON))
    assert names(policy.pre) == ["policy", "rate_limits", "batching"]
    assert names(policy.wrap) == ["batching", "concurrency"]  # outermost first: a batched call takes no slot
    assert names(policy.post) == ["results"]
    assert policy.redactor is not None and policy.static is not None


def test_rules_the_config_leaves_off_add_no_hook() -> None:
    policy = build_policy(config({}))
    assert (names(policy.pre), policy.wrap, policy.post, policy.redactor) == (["policy"], (), (), None)
    assert policy.gateway_tool_refusal("orchestrate") is None


def test_audit_records_are_redacted_by_the_global_results_section_only() -> None:
    per_server = config({}, fx={"constraints": {"results": {"redact": True}}})
    assert build_policy(per_server).redactor is None
    assert build_policy(config({"results": {"redact": True, "redact_patterns": ["ACME-[0-9]+"]}})).redactor


def test_a_servers_section_replaces_the_global_one_and_its_tool_rules_add_to_the_global_ones() -> None:
    constraints = ConstraintsConfig.model_validate(
        {"destructive": "deny", "arguments": {"max_bytes": 10}, "tools": {"deny": ["x"]}}
    )
    own = ServerConstraints.model_validate({"arguments": {"deny_patterns": ["y"]}, "tools": {"allow": ["*"]}})
    rules = in_force(constraints, own)
    assert rules.arguments.max_bytes is None and rules.arguments.deny_patterns == ("y",)  # the whole section
    assert rules.destructive == "deny"  # not overridden
    assert rules.tools == ToolRules(deny=("x",))  # still the global tool rules; the server's apply as well
    assert in_force(constraints, ServerConstraints()) is constraints


def test_only_enabled_servers_get_a_scope_and_unknown_ones_get_the_gateways() -> None:
    scopes = resolve_scopes(config({"destructive": "deny"}, fx={}, off={"disabled": True}))
    assert list(scopes.servers) == ["fx"]
    assert scopes.of("off") is scopes.gateway and scopes.of(None) is scopes.gateway
    assert scopes.map(lambda scope: scope.rules.destructive).servers == {"fx": "deny"}


def test_a_per_server_section_without_a_global_one_of_its_type_is_refused_at_import() -> None:
    class Unknown(ServerConstraints):
        colour: str | None = None

    class Mistyped(ServerConstraints):
        batching: int | None = None

    class Required(ServerConstraints):
        batching: bool

    check_overrides()
    for model in (Unknown, Mistyped, Required):
        with pytest.raises(TypeError, match="must override a ConstraintsConfig section"):
            check_overrides(model)


Probe = Callable[[Client, str, Path], Awaitable[bool]]


def calling(tool: str, arguments: dict[str, Any]) -> Probe:
    """A probe: whether this call to `<server>__<tool>` is refused."""

    async def probe(client: Client, server: str, state_dir: Path) -> bool:
        return bool((await client.call_tool(f"{server}__{tool}", arguments)).is_error)

    return probe


async def two_at_once(client: Client, server: str, state_dir: Path) -> bool:
    """A probe: whether a call made while another is in flight on the server is refused."""
    held: list[mcp_types.CallToolResult] = []

    async def hold() -> None:
        held.append(await client.call_tool(f"{server}__hold", {"text": server}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold)
        await wait_for(lambda: (state_dir / f"held-{server}").exists(), 60)  # in flight, however slow the machine
        second = await client.call_tool(f"{server}__echo", {"text": "x"})
        (state_dir / f"release-{server}").write_text("go")
    assert not held[0].is_error
    return bool(second.is_error)


# One override per `ServerConstraints` section, and a call that it refuses: adding a section
# without a probe here fails `test_every_per_server_section_is_honoured_on_its_server_only`.
PROBES: dict[str, tuple[Any, Probe]] = {
    "tools": ({"deny": ["echo"]}, calling("echo", {"text": "x"})),
    "destructive": ("deny", calling("delete", {"key": "k"})),
    "arguments": ({"max_bytes": 10}, calling("echo", {"text": "more than ten bytes"})),
    "results": ({"max_bytes": 10, "on_exceed": "reject"}, calling("large", {"size": 50})),
    "concurrency": ({"per_server": 1}, two_at_once),
}


@pytest.mark.parametrize("section", sorted(ServerConstraints.model_fields))
async def test_every_per_server_section_is_honoured_on_its_server_only(tmp_path: Path, section: str) -> None:
    override, probe = PROBES[section]
    servers = {"fx": {"constraints": {section: override}, "extra_tools": ["hold"]}, "gx": {"extra_tools": ["hold"]}}
    async with (
        memory_gateway(tmp_path, servers, constraints={"enabled": True}) as (gw, _),
        Client(gw.server, mode="legacy") as client,
    ):
        assert await probe(client, "fx", tmp_path) is True
        assert await probe(client, "gx", tmp_path) is False


@pytest.mark.parametrize("catalog", ["full", "search"])
async def test_a_tool_the_policy_always_refuses_is_neither_listed_nor_found(tmp_path: Path, catalog: str) -> None:
    """It was listed (every call refused) and `search_tools` showed its definition."""
    constraints = {"enabled": True, "tools": {"deny": ["fx__delete"]}}
    async with (
        memory_gateway(tmp_path, constraints=constraints, toolscore={"catalog": catalog}) as (gw, _),
        Client(gw.server) as client,
    ):
        listed = [t.name for t in (await client.list_tools()).tools]
        found = await client.call_tool("search_tools", {"query": "delete a key", "k": 20})
        called = await client.call_tool("fx__delete", {"key": "k"})
        allowed = await client.call_tool("fx__echo", {"text": "still here"})
    assert "fx__delete" not in listed
    assert catalog == "search" or "fx__echo" in listed
    assert "fx__delete" not in (found.content[0].text if isinstance(found.content[0], mcp_types.TextContent) else "")
    assert called.is_error and "not allowed" in cast(mcp_types.TextContent, called.content[0]).text
    assert not allowed.is_error
