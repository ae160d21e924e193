"""Policy cannot be walked around: paths in any shape, symlink races, renames, look-alike names,
the gateway's own tool, object keys, and other clients' state. Every attempt is refused and audited."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client

from tests.conftest import memory_gateway, text
from toolscore import Gateway, MemoryAuditSink

pytestmark = pytest.mark.anyio

SECRET = "the-host-secret"


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """An allowed root with one file, and a secret outside it."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "ok.txt").write_text("allowed content")
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    return root, secret


@asynccontextmanager
async def gateway(
    tmp_path: Path, constraints: dict[str, Any], **servers: dict[str, Any]
) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    """A gateway over fixture servers in this process (default: `fx`), with `constraints` on."""
    async with memory_gateway(
        tmp_path,
        servers or {"fx": {}},
        constraints={"enabled": True, **constraints},
        toolscore={"audit": {"include_arguments": True}},
    ) as pair:
        yield pair


def confined(root: Path) -> dict[str, Any]:
    return {"arguments": {"paths": {"roots": [str(root)], "arguments": ["path"]}}}


def refused(result: mcp_types.CallToolResult, rule: str) -> bool:
    return result.is_error and f"Call rejected by policy '{rule}'" in text(result) and SECRET not in text(result)


async def test_every_shape_of_path_argument_is_confined(tmp_path: Path, tree: tuple[Path, Path]) -> None:
    root, secret = tree
    attempts: list[dict[str, Any]] = [
        {"paths": [str(root / "ok.txt"), str(secret)]},
        {"path": [str(secret)]},
        {"file_path": str(secret)},
        {"spec": {"source": {"path": str(secret)}}},
        {"location": str(secret)},  # named by the schema's `format: path`, not by its name
        {"uri": secret.as_uri()},
        {"path": str(root / ".." / secret.name)},
        {"path": "~/" + secret.name},
        {"path": 7},  # not a path string where a path belongs: refused, not guessed at
    ]
    async with gateway(tmp_path, confined(root)) as (gw, sink), Client(gw.server, mode="legacy") as client:
        assert text(await client.call_tool("fx__read", {"paths": [str(root / "ok.txt")]})) == "allowed content"
        for arguments in attempts:
            assert refused(await client.call_tool("fx__read", arguments), "paths"), arguments
    rejected = [r for r in sink.records if r.error_kind == "rejected"]
    assert len(rejected) == len(attempts)
    assert all(r.violations and r.violations[0].startswith("paths: ") for r in rejected)


async def test_references_that_resolve_to_paths_at_run_time_are_confined(
    tmp_path: Path, tree: tuple[Path, Path]
) -> None:
    root, secret = tree
    listing = json.dumps([str(secret)])
    plans = [
        f'<fx><echo id="l">{{"text": {json.dumps(listing)}}}</echo></fx>'
        '<fx><read>{"paths": "${l.json}"}</read></fx>',
        f'<fx><echo id="l">{{"text": {json.dumps(listing)}}}</echo></fx>'
        '<fx><read>{"path": "${l.json}"}</read></fx>',
        f'<fx><echo id="p">{{"text": "{secret}"}}</echo></fx><fx><read>{{"file_path": "${{p.text}}"}}</read></fx>',
    ]
    async with gateway(tmp_path, confined(root)) as (gw, sink), Client(gw.server, mode="legacy") as client:
        for plan in plans:
            result = await client.call_tool("orchestrate", {"plan": plan})
            assert result.structured_content is not None
            steps = result.structured_content["steps"]
            assert [s["status"] for s in steps] == ["ok", "error"], plan
            assert "policy 'paths'" in steps[1]["error"] and SECRET not in text(result)
    assert sum(1 for r in sink.records if r.violations and r.violations[0].startswith("paths: ")) == len(plans)


async def test_a_symlink_flipped_during_calls_never_reads_outside_the_root(
    tmp_path: Path, tree: tuple[Path, Path]
) -> None:
    root, secret = tree
    link = root / "link"
    os.symlink(root / "ok.txt", link)
    stop = threading.Event()

    def flip() -> None:
        # Swap the link between an allowed file and the secret as fast as possible.
        staged = root / ".staged"
        while not stop.is_set():
            for target in (secret, root / "ok.txt"):
                os.symlink(target, staged)
                os.replace(staged, link)

    flipper = threading.Thread(target=flip, daemon=True)
    outcomes = {"ok": 0, "refused": 0, "leaked": 0}
    async with gateway(tmp_path, confined(root)) as (gw, _), Client(gw.server, mode="legacy") as client:
        flipper.start()
        try:
            for _ in range(300):
                result = await client.call_tool("fx__read", {"path": str(link)})
                if SECRET in text(result):
                    outcomes["leaked"] += 1
                elif result.is_error:
                    outcomes["refused"] += 1
                else:
                    outcomes["ok"] += 1
        finally:
            stop.set()
            flipper.join(5)
    assert outcomes["leaked"] == 0, outcomes
    assert outcomes["ok"] > 0 and outcomes["refused"] > 0, outcomes  # the race really was exercised


async def test_deny_rules_see_the_tools_real_identity_through_renames(tmp_path: Path) -> None:
    servers = {"fx2": {"tools": {"rename": {"delete": "remove"}}}}
    async with (
        gateway(tmp_path, {"tools": {"deny": ["*__delete*"]}}, **servers) as (gw, sink),
        Client(gw.server, mode="legacy") as client,
    ):
        assert refused(await client.call_tool("fx2__remove", {"key": "a"}), "tools")
        plan = '<call server="fx2" tool="delete">{"key": "b"}</call>'
        result = await client.call_tool("orchestrate", {"plan": plan})
        assert result.is_error and 'code="policy"' in text(result)
    assert not list(tmp_path.glob("deleted-*"))
    assert sink.records[0].violations == ("tools: tool 'fx2__remove' is not allowed by the gateway's policy",)


async def test_deny_rules_match_look_alike_spellings(tmp_path: Path) -> None:
    # Case and compatibility forms (fullwidth letters) of a denied name are still denied.
    async with (
        gateway(tmp_path, {"tools": {"deny": ["FX__ＤＥＬＥＴＥ"]}}) as (gw, _),
        Client(gw.server, mode="legacy") as client,
    ):
        assert refused(await client.call_tool("fx__delete", {"key": "a"}), "tools")
    assert not list(tmp_path.glob("deleted-*"))


async def test_orchestrate_itself_can_be_denied(tmp_path: Path) -> None:
    async with (
        gateway(tmp_path, {"tools": {"deny": ["orchestrate"]}}) as (gw, sink),
        Client(gw.server, mode="legacy") as client,
    ):
        names = [t.name for t in (await client.list_tools()).tools]
        assert "orchestrate" not in names and "fx__echo" in names
        plan = '<fx><counter>{"key": "k"}</counter></fx>'
        assert refused(await client.call_tool("orchestrate", {"plan": plan}), "tools")
    assert not list(tmp_path.glob("count-*"))
    assert sink.records[-1].tool == "orchestrate" and sink.records[-1].violations


async def test_denied_patterns_see_object_keys(tmp_path: Path) -> None:
    async with (
        gateway(tmp_path, {"arguments": {"deny_patterns": [r"rm\s+-rf"]}}) as (gw, _),
        Client(gw.server, mode="legacy") as client,
    ):
        result = await client.call_tool("fx__read", {"spec": {"rm -rf /": "x"}})
        assert refused(result, "arguments")


async def test_plan_steps_use_the_callers_own_rate_limit_bucket(tmp_path: Path) -> None:
    limits = {"rate_limits": [{"scope": "session", "match": "fx__counter", "rate": 0.001, "burst": 1}]}
    plan = '<fx><counter>{"key": "k"}</counter></fx>'
    async with (
        gateway(tmp_path, limits) as (gw, _),
        Client(gw.server, mode="legacy") as alice,
        Client(gw.server, mode="legacy") as bob,
    ):
        first = await alice.call_tool("orchestrate", {"plan": plan})
        assert first.structured_content is not None and first.structured_content["steps"][0]["status"] == "ok"
        # Bob's bucket is his own: Alice spending hers does not refuse him.
        second = await bob.call_tool("orchestrate", {"plan": plan})
        assert second.structured_content is not None and second.structured_content["steps"][0]["status"] == "ok"
        # Alice's plan step counted against Alice: her direct call is now refused.
        assert refused(await alice.call_tool("fx__counter", {"key": "k"}), "rate_limits")


async def test_episodes_belong_to_the_client_that_started_them(tmp_path: Path) -> None:
    async with (
        gateway(tmp_path, {}) as (gw, _),
        Client(gw.server, mode="legacy") as alice,
        Client(gw.server, mode="legacy") as bob,
    ):
        plan = '<fx><echo id="mine">{"text": "alice private data"}</echo></fx>'
        started = await alice.call_tool("orchestrate", {"plan": plan})
        assert started.structured_content is not None
        episode = started.structured_content["episode"]
        stolen = await bob.call_tool(
            "orchestrate", {"plan": '<fx><echo>{"text": "${mine.text}"}</echo></fx>', "episode": episode}
        )
        assert stolen.is_error and "alice private data" not in text(stolen)
        # Bob's many plans evict only Bob's episodes.
        for _ in range(70):
            await bob.call_tool("orchestrate", {"plan": '<fx><echo>{"text": "b"}</echo></fx>'})
        again = await alice.call_tool(
            "orchestrate", {"plan": '<fx><echo>{"text": "${mine.text}"}</echo></fx>', "episode": episode}
        )
        assert again.structured_content is not None
        assert again.structured_content["steps"][0]["result"] == "alice private data"
