"""Constraint rules from servers.json, over real traffic: allowed calls pass, violating calls get a
tool error naming the rule, and nothing reaches the downstream (marker files prove it)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client

from tests.conftest import fixture_entry, make_config, running_gateway, text
from toolscore import MemoryAuditSink
from toolscore.errors import ConfigError
from toolscore.policy.redact import REDACTED

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


@asynccontextmanager
async def policy_client(
    tmp_path: Path, constraints: dict[str, Any], server: dict[str, Any] | None = None, **client: Any
) -> AsyncIterator[tuple[Client, MemoryAuditSink]]:
    cfg = make_config(
        {"fx": fixture_entry(tmp_path, **(server or {}))},
        constraints={"enabled": True, **constraints},
        toolscore={"audit": {"include_arguments": True}},
    )
    async with running_gateway(cfg, tmp_path) as (gw, sink), Client(gw.server, mode="legacy", **client) as c:
        yield c, sink


async def test_constraints_off_means_no_rule_applies(tmp_path: Path) -> None:
    cfg = make_config({"fx": fixture_entry(tmp_path)}, constraints={"enabled": False, "tools": {"deny": ["*"]}})
    async with running_gateway(cfg, tmp_path) as (gw, _), Client(gw.server, mode="legacy") as client:
        assert not (await client.call_tool("fx__echo", {"text": "x"})).is_error


async def test_tool_allow_and_deny_globally_and_per_server(tmp_path: Path) -> None:
    constraints = {"tools": {"deny": ["fx__counter"]}}
    server = {"constraints": {"tools": {"allow": ["echo", "counter", "add"], "deny": ["add"]}}}
    async with policy_client(tmp_path, constraints, server) as (client, sink):
        assert not (await client.call_tool("fx__echo", {"text": "ok"})).is_error
        for tool, args in [("fx__counter", {"key": "denied"}), ("fx__add", {"a": 1, "b": 1}), ("fx__pid", {})]:
            result = await client.call_tool(tool, args)
            assert result.is_error and "Call rejected by policy 'tools'" in text(result), tool
        assert not (tmp_path / "count-denied").exists()
    assert [r.violations for r in sink.records[1:]] == [
        (f"tools: tool '{t}' is not allowed by the gateway's policy",) for t in ("fx__counter", "fx__add", "fx__pid")
    ]


async def test_destructive_tools_can_be_denied(tmp_path: Path) -> None:
    async with policy_client(tmp_path, {"destructive": "deny"}) as (client, _):
        result = await client.call_tool("fx__delete", {"key": "k"})
        assert result.is_error and "'destructive'" in text(result)
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
    assert (tmp_path / "deleted-k").exists() is runs


async def test_confirmation_without_an_elicitation_capable_client_is_a_refusal(tmp_path: Path) -> None:
    async with policy_client(tmp_path, {"destructive": "confirm"}) as (client, _):
        result = await client.call_tool("fx__delete", {"key": "k"})
    assert result.is_error and "cannot give (no elicitation support)" in text(result)
    assert not (tmp_path / "deleted-k").exists()


async def test_argument_size_and_denied_patterns(tmp_path: Path) -> None:
    constraints = {"arguments": {"max_bytes": 64, "deny_patterns": [r"rm\s+-rf\s+/"]}}
    async with policy_client(tmp_path, constraints) as (client, _):
        big = await client.call_tool("fx__counter", {"key": "x" * 100})
        assert big.is_error and "the limit is 64" in text(big)
        bad = await client.call_tool("fx__counter", {"key": "please rm  -rf / now"})
        assert bad.is_error and "denied pattern" in text(bad)
        assert not (await client.call_tool("fx__counter", {"key": "fine"})).is_error
    assert sorted(p.name for p in tmp_path.glob("count-*")) == ["count-fine"]


async def test_paths_must_resolve_inside_the_roots(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, root / "link")
    constraints = {"arguments": {"paths": {"arguments": ["path"], "roots": [str(root)]}}}
    async with policy_client(tmp_path, constraints) as (client, _):
        assert not (await client.call_tool("fx__touch", {"path": str(root / "sub" / "ok")})).is_error
        for path in [str(root / ".." / "outside" / "dotdot"), str(root / "link" / "via-link"), "relative/x"]:
            result = await client.call_tool("fx__touch", {"path": path})
            assert result.is_error and "'paths'" in text(result), path
    assert (root / "sub" / "ok").exists()
    assert list(outside.iterdir()) == []


async def test_results_are_truncated_or_refused_over_the_limit(tmp_path: Path) -> None:
    async with policy_client(tmp_path, {"results": {"max_bytes": 100}}) as (client, _):
        result = await client.call_tool("fx__large", {"size": 1000})
        assert not result.is_error and text(result).startswith("x" * 100)
        assert "truncated by toolscore: 900 more bytes" in text(result)
    async with policy_client(tmp_path, {"results": {"max_bytes": 100, "on_exceed": "reject"}}) as (client, _):
        result = await client.call_tool("fx__large", {"size": 1000})
        assert result.is_error and "the result is 1000 bytes" in text(result)


async def test_secrets_are_redacted_in_results_and_in_the_audit(tmp_path: Path) -> None:
    secret = "sk-proj-" + "a1b2c3d4" * 4
    async with policy_client(tmp_path, {"results": {"redact": True}}) as (client, sink):
        result = await client.call_tool("fx__echo", {"text": f"the key is {secret}"})
        assert text(result) == f"the key is {REDACTED}"
        structured = await client.call_tool("fx__add", {"a": 1, "b": 2})
        assert structured.structured_content == {"sum": 3}  # nothing secret: untouched
    assert sink.records[0].arguments == {"text": f"the key is {REDACTED}"}


async def test_rate_limits_refuse_calls_beyond_the_bucket(tmp_path: Path) -> None:
    constraints = {"rate_limits": [{"scope": "tool", "match": "fx__counter", "rate": 0.5, "burst": 2}]}
    async with policy_client(tmp_path, constraints) as (client, sink):
        outcomes = [(await client.call_tool("fx__counter", {"key": "r"})).is_error for _ in range(3)]
        assert outcomes == [False, False, True]
        assert not (await client.call_tool("fx__echo", {"text": "other tools are not limited"})).is_error
    assert (tmp_path / "count-r").read_text() == "2"
    assert "rate limit of 0.5 calls/s per tool" in sink.records[2].violations[0]


async def test_a_concurrency_cap_queues_then_refuses(tmp_path: Path) -> None:
    constraints = {"concurrency": {"per_server": 1, "queue": 1}}
    async with policy_client(tmp_path, constraints) as (client, _):
        results: list[mcp_types.CallToolResult] = []

        async def sleep() -> None:
            results.append(await client.call_tool("fx__sleep", {"seconds": 0.5}))

        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(sleep)
    refused = [r for r in results if r.is_error]
    assert len(refused) == 1 and "concurrency limit (1 running, 1 waiting)" in text(refused[0])


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


async def test_identical_concurrent_read_only_calls_share_one_downstream_call(tmp_path: Path) -> None:
    async with policy_client(tmp_path, {"batching": True}) as (client, sink):
        results: list[mcp_types.CallToolResult] = []

        async def call(key: str) -> None:
            results.append(await client.call_tool("fx__slow_count", {"key": key, "seconds": 0.5}))

        async with anyio.create_task_group() as tg:
            for key in ["same"] * 5 + ["other"]:
                tg.start_soon(call, key)
        # Not read-only: never coalesced.
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(client.call_tool, "fx__counter", {"key": "c"})
    assert (tmp_path / "count-slow-same").read_text() == "1"
    assert (tmp_path / "count-slow-other").read_text() == "1"
    assert (tmp_path / "count-c").read_text() == "3"
    assert sorted(text(r) for r in results) == ["counted 1"] * 6
    assert sum(r.batched for r in sink.records) == 4


EXAMPLE_PLUGIN = Path(__file__).parent.parent / "docs" / "example_plugin"


@pytest.fixture
def example_plugin_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Register the docs' example plugin under its entry point, as `pip install` would."""
    site = tmp_path / "site"
    dist = site / "toolscore_example_plugin-0.1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toolscore-example-plugin\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[toolscore.constraints]\nmax_text = toolscore_example_plugin:MaxText\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(EXAMPLE_PLUGIN))


@pytest.mark.usefixtures("example_plugin_installed")
async def test_an_enforcing_plugin_refuses_and_tags_results(tmp_path: Path) -> None:
    plugins = [{"name": "max_text", "mode": "enforce", "options": {"limit": 5}}]
    async with policy_client(tmp_path, {"plugins": plugins}) as (client, sink):
        ok = await client.call_tool("fx__echo", {"text": "short"})
        assert not ok.is_error and ok.meta == {"example/checked_by": "max_text"}
        refused = await client.call_tool("fx__counter", {"key": "too long"})
        assert refused.is_error and "'max_text': argument 'key' is longer than 5" in text(refused)
    assert not (tmp_path / "count-too long").exists()
    assert sink.records[1].violations == ("max_text: argument 'key' is longer than 5 characters",)


@pytest.mark.usefixtures("example_plugin_installed")
@pytest.mark.parametrize(("mode", "refused"), [("enforce", True), ("permissive", False)])
async def test_a_failing_plugin_fails_closed_or_open_by_mode(tmp_path: Path, mode: str, refused: bool) -> None:
    plugins = [{"name": "max_text", "mode": mode, "options": {"fail": True}}]
    async with policy_client(tmp_path, {"plugins": plugins}) as (client, _):
        result = await client.call_tool("fx__counter", {"key": "k"})
    assert result.is_error is refused
    assert (tmp_path / "count-k").exists() is not refused
    if refused:
        assert "the check failed (RuntimeError: the plugin broke)" in text(result)


async def test_a_plugin_that_is_not_installed_is_a_config_error(tmp_path: Path) -> None:
    cfg = make_config({"fx": fixture_entry(tmp_path)}, constraints={"enabled": True, "plugins": [{"name": "nope"}]})
    with pytest.raises(ConfigError, match=r"constraints.plugins\[0\]: no plugin 'nope' is installed"):
        async with running_gateway(cfg, tmp_path):
            pass
