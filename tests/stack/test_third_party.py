"""End to end against real third-party servers (installed by scripts/setup): the reference
`server-everything` and `server-filesystem`, through the real front."""

from __future__ import annotations

from pathlib import Path

import mcp_types
import pytest
from mcp import Client

from tests.conftest import make_config, running_gateway, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

NPM = Path(__file__).parents[2] / ".toolscore" / "servers" / "npm"
EVERYTHING = NPM / "everything" / "node_modules" / ".bin" / "mcp-server-everything"
FILESYSTEM = NPM / "docs" / "node_modules" / ".bin" / "mcp-server-filesystem"

requires_npm_servers = pytest.mark.skipif(
    not (EVERYTHING.exists() and FILESYSTEM.exists()), reason="run ./scripts/setup to install the npm servers"
)


@requires_npm_servers
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_server_everything_through_the_gateway(tmp_path: Path, mode: str) -> None:
    cfg = make_config({"ev": {"command": str(EVERYTHING), "args": ["stdio"]}})
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with running_gateway(cfg, tmp_path) as (gw, sink), Client(gw.server, mode=mode) as client:
        direct = {t.name for t in gw.hub.downstreams["ev"].tools}
        exposed = {t.name for t in (await client.list_tools()).tools}
        assert exposed == {"orchestrate"} | {f"ev__{name}" for name in direct}

        total = await client.call_tool("ev__get-sum", {"a": 2, "b": 40})
        assert "42" in total.content[0].text  # type: ignore[union-attr]

        weather = await client.call_tool("ev__get-structured-content", {"location": "Chicago"})
        assert weather.structured_content is not None and set(weather.structured_content) >= {"temperature"}

        image = await client.call_tool("ev__get-tiny-image", {})
        assert any(isinstance(block, mcp_types.ImageContent) for block in image.content)

        bad = await client.call_tool("ev__get-sum", {"a": "two"})
        assert bad.is_error and "Invalid arguments" in bad.content[0].text  # type: ignore[union-attr]

        done = await client.call_tool(
            "ev__trigger-long-running-operation", {"duration": 0.3, "steps": 3}, progress_callback=on_progress
        )
        assert not done.is_error
        if mode == "legacy":  # in-process, the 2026 client's progress callback carries no token
            await wait_for(lambda: len(seen) >= 3)
    assert [r.success for r in sink.records] == [True, True, True, False, True]


@requires_npm_servers
async def test_server_filesystem_with_denied_write_tools(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "note.md").write_text("hello from a file\n")
    cfg = make_config(
        {"fs": {"command": str(FILESYSTEM), "args": [str(root)], "tools": {"deny": ["write_file", "edit_file"]}}}
    )
    async with running_gateway(cfg, tmp_path) as (gw, _), Client(gw.server, mode="legacy") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "fs__read_text_file" in names
        assert "fs__write_file" not in names
        read = await client.call_tool("fs__read_text_file", {"path": str(root / "note.md")})
        assert "hello from a file" in read.content[0].text  # type: ignore[union-attr]
        denied = await client.call_tool("fs__write_file", {"path": str(root / "x"), "content": "x"})
        assert denied.is_error and "Unknown tool 'fs__write_file'" in denied.content[0].text  # type: ignore[union-attr]
        outside = await client.call_tool("fs__read_text_file", {"path": "/etc/hostname"})
        assert outside.is_error  # the server's own confinement, passed through verbatim
    assert not (root / "x").exists()


@requires_npm_servers
async def test_one_plan_over_both_third_party_servers(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.md").write_text("alpha\n")
    cfg = make_config(
        {
            "ev": {"command": str(EVERYTHING), "args": ["stdio"]},
            "fs": {
                "command": str(FILESYSTEM),
                "args": [str(root)],
                "shorthand": {"tag": "read", "tool": "read_text_file", "primary": "path"},
            },
        }
    )
    plan = (
        f'<parallel><ev><get-sum id="s">{{"a": 20, "b": 22}}</get-sum></ev><read id="f">{root}/a.md</read></parallel>'
        '<call server="ev" tool="echo">{"message": "${s.text} / ${f.text}"}</call><execute_tools />'
    )
    async with running_gateway(cfg, tmp_path) as (gw, _), Client(gw.server, mode="legacy") as client:
        result = await client.call_tool("orchestrate", {"plan": plan})
    assert result.structured_content is not None, result.content
    steps = result.structured_content["steps"]
    assert [s["status"] for s in steps] == ["ok", "ok", "ok"]
    assert "42" in steps[2]["result"] and "alpha" in steps[2]["result"]
