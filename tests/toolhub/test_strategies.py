"""Capability calls over two real search servers (SDK, in this process) with different latencies and
failure patterns: first_success cancels the loser, all merges, fallback keeps order, and the
order learns from the audit stream. The CLI's listing runs them as subprocesses.

The strategies are the gateway's, not the transport's: the servers run in memory (a real SDK
server behind a real client session), each test's own, and only the CLI test starts processes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import FIXTURES, text, wait_for, write_config
from tests.fixtures.search_server import build_search_server
from toolscore import Gateway, MemoryAuditSink, testing
from toolscore.cli import main

pytestmark = pytest.mark.anyio

SEARCH_SERVER = str(FIXTURES / "search_server.py")


def engine(state: Path, name: str, latency: float, **extra: Any) -> dict[str, Any]:
    """A servers.json entry running the search server as a stdio subprocess (for the CLI)."""
    env = {"SEARCH_ENGINE": name, "SEARCH_LATENCY": str(latency), "SEARCH_STATE_DIR": str(state)}
    env.update(extra.pop("env", {}))
    return {"command": sys.executable, "args": [SEARCH_SERVER], "env": env, **extra}


@asynccontextmanager
async def in_memory(
    tmp_path: Path, engines: dict[str, tuple[float, str]], entries: dict[str, dict[str, Any]], **sections: Any
) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    """A gateway over search servers in this process: `engines` maps each name to its (latency,
    query parameter), `entries` to its servers.json options; markers go to `tmp_path`."""
    servers = {
        name: build_search_server(name, tmp_path, latency=latency, query_arg=query_arg)
        for name, (latency, query_arg) in engines.items()
    }
    config = testing.memory_config({name: entries.get(name, {}) for name in engines}, **sections)
    async with testing.running_gateway(servers, config=config) as pair:
        yield pair


@asynccontextmanager
async def engines(
    tmp_path: Path, fast: float = 0.05, slow: float = 5.0, *, strategy: str = "first_success", **alpha: Any
) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    """alpha (fast, `query`) and beta (slow, `q`, mapped from `query`), both tagged `search`."""
    async with in_memory(
        tmp_path,
        {"alpha": (fast, "query"), "beta": (slow, "q")},
        {
            "alpha": {"capabilities": {"web_search": ["search"]}, **alpha},
            "beta": {"capabilities": {"web_search": ["search"]}, "argument_maps": {"web_search": {"query": "q"}}},
        },
        toolscore={"startup_grace_seconds": None, "toolhub": {"capabilities": {"search": {"strategy": strategy}}}},
    ) as pair:
        yield pair


async def test_first_success_answers_with_the_fast_server_and_cancels_the_slow_one(tmp_path: Path) -> None:
    async with engines(tmp_path) as (gw, audit), Client(gw.server) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert "call_capability" in listed
        result = await client.call_tool("call_capability", {"capability": "search", "arguments": {"query": "mcp"}})
        assert not result.is_error
        assert "alpha.test" in text(result) and "beta.test" not in text(result)
        note = result.content[-1].text  # type: ignore[union-attr]
        assert "alpha__web_search ok" in note and "beta__web_search cancelled" in note
        # The slow server saw its call cancelled: the marker is written by the downstream itself.
        await wait_for(lambda: (tmp_path / "cancelled-beta").exists())
        assert not (tmp_path / "done-beta").exists()
        # Both candidate calls are ordinary engine calls: one audit record each, the loser's cancelled.
        kinds = {r.tool: r.error_kind for r in audit.records}
        assert kinds == {"alpha__web_search": None, "beta__web_search": "cancelled"}
        # Each got the arguments its schema names (beta's `q` through its argument map).
        names = {r.tool: r.argument_names for r in audit.records}
        assert names == {"alpha__web_search": ("query",), "beta__web_search": ("q",)}


async def test_all_merges_deduplicates_and_keeps_every_source(tmp_path: Path) -> None:
    async with engines(tmp_path, slow=0.2, strategy="all") as (gw, _), Client(gw.server) as client:
        result = await client.call_tool("call_capability", {"capability": "search", "arguments": {"query": "mcp"}})
        assert not result.is_error, text(result)
        items = result.structured_content["items"]  # type: ignore[index]
        # 3 results each, 2 of them the same (one by URL spelled differently, one by identical text).
        assert len(items) == 4
        by_url = {i.get("url"): i for i in items}
        assert by_url["https://example.org/mcp"]["sources"] == ["alpha__web_search", "beta__web_search"]
        assert by_url["https://alpha.test/mcp"]["sources"] == ["alpha__web_search"]
        assert by_url["https://beta.test/mcp"]["sources"] == ["beta__web_search"]
        same = next(i for i in items if "url" not in i)
        assert same["sources"] == ["alpha__web_search", "beta__web_search"]
        assert "from: alpha__web_search, beta__web_search" in text(result)


async def test_fallback_goes_in_order_and_stops_at_the_first_success(tmp_path: Path) -> None:
    async with engines(tmp_path, slow=0.05, strategy="fallback") as (gw, audit), Client(gw.server) as client:
        args = {"capability": "search", "arguments": {"query": "mcp"}}
        first = await client.call_tool("call_capability", args)
        assert "alpha.test" in text(first)
        assert not (tmp_path / "done-beta").exists()  # never reached
        (tmp_path / "fail-alpha").write_text("")
        second = await client.call_tool("call_capability", args)
        assert "beta.test" in text(second)
        assert [r.tool for r in audit.records] == ["alpha__web_search", "alpha__web_search", "beta__web_search"]
        candidates = second.meta["toolscore/capability"]["candidates"]  # type: ignore[index]
        assert [(c["tool"], c["status"]) for c in candidates] == [
            ("alpha__web_search", "failed"),
            ("beta__web_search", "ok"),
        ]


async def test_a_failing_server_moves_down_and_back_up_once_it_recovers(tmp_path: Path) -> None:
    async with (
        engines(tmp_path, slow=0.1, strategy="all", priority=5) as (gw, _),
        Client(gw.server) as client,
    ):
        assert gw.toolhub is not None

        def order() -> list[str]:
            assert gw.toolhub is not None
            return [t.route.server for t in gw.toolhub.ranked("search")]

        args = {"capability": "search", "arguments": {"query": "mcp"}}
        assert order() == ["alpha", "beta"]  # untried: priority decides
        (tmp_path / "fail-alpha").write_text("")
        for _ in range(2):
            result = await client.call_tool("call_capability", args)
            assert not result.is_error  # beta still answers
        assert order() == ["beta", "alpha"]
        (tmp_path / "fail-alpha").unlink()
        for _ in range(3):
            await client.call_tool("call_capability", args)
        assert order() == ["alpha", "beta"]  # healthy again, and the faster


async def test_a_candidate_whose_schema_cannot_be_met_is_skipped_visibly(tmp_path: Path) -> None:
    # A required `url` is no query by another name (a `q` would now be filled with it).
    servers = {"alpha": (0.0, "query"), "beta": (0.0, "url")}
    entries = {"alpha": {"capabilities": ["search"]}, "beta": {"capabilities": ["search"]}}
    async with in_memory(tmp_path, servers, entries) as (gw, _), Client(gw.server) as client:
        result = await client.call_tool(
            "call_capability", {"capability": "search", "arguments": {"query": "mcp"}, "strategy": "all"}
        )
        meta = result.meta["toolscore/capability"]  # type: ignore[index]
        statuses = {c["tool"]: (c["status"], c.get("reason", "")) for c in meta["candidates"]}
        assert statuses["alpha__web_search"][0] == "ok"
        assert statuses["beta__web_search"][0] == "skipped" and "'url'" in statuses["beta__web_search"][1]
        # `calculate` has no `query`: skipped too, never called.
        assert statuses["alpha__calculate"][0] == "skipped"
        assert "beta__web_search skipped (needs 'url'" in result.content[-1].text  # type: ignore[union-attr]


async def test_near_equal_tools_on_two_servers_are_one_capability(tmp_path: Path) -> None:
    servers = {"alpha": (0.0, "query"), "beta": (0.3, "query")}
    async with in_memory(tmp_path, servers, {}) as (gw, _), Client(gw.server) as client:
        result = await client.call_tool(
            "call_capability", {"capability": "calculate", "arguments": {"expression": "2+2"}}
        )
        assert text(result) == "4 (by alpha)"
        found = json.loads(text(await client.call_tool("search_tools", {"query": "calculate arithmetic"})))
        assert [f["name"] for f in found if "calculate" in f["name"]] == ["alpha__calculate"]
        assert found[0]["same_as"] == ["beta__calculate"] and found[0]["capability"] == "calculate"


@pytest.mark.e2e  # the CLI's gateway starts both servers as subprocesses
def test_the_cli_lists_the_tools_of_a_capability_best_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(
        tmp_path,
        {
            "alpha": engine(tmp_path, "alpha", 0.0, capabilities={"web_search": ["search"]}),
            "beta": engine(tmp_path, "beta", 0.0, capabilities={"web_search": ["search"]}, priority=2),
        },
    )
    # `toolscore.cli.main`, as the console script runs it (tests/test_cli.py does the same).
    assert main(["tools", "--capability", "search", "--config", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["beta__web_search", "alpha__web_search"]  # priority first
    # both take `query`: near-equal, so `web_search` is a capability of its own too
    assert lines[0].endswith("[read-only, search, web, web_search]")
    assert main(["tools", "--capability", "math", "--json", "--config", str(path)]) == 0
    assert [t["name"] for t in json.loads(capsys.readouterr().out)] == ["beta__calculate", "alpha__calculate"]
    assert main(["tools", "--capability", "nope", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert "no tool has capability 'nope'" in err
    assert "search" in err and "Traceback" not in err
