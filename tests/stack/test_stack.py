"""The shipped servers.json's stack (installed by `toolscore install`), through the real front:
the sandbox runs code and cannot get out; search finds things in its tree and nowhere else."""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import loopback_http, running_gateway, text, wait_for
from toolscore import Gateway, parse_config

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

ROOT = Path(__file__).parents[2]
STAMPS = ROOT / ".toolscore" / "servers" / ".installed"
requires_stack = pytest.mark.skipif(
    not all((STAMPS / f"{name}.json").exists() for name in ("search", "microsandbox", "browser")),
    reason="run ./scripts/setup (toolscore install) to install the shipped servers",
)


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Gateway, Path]]:
    """The shipped stack, started once for the module (each test is a new client of it)."""
    tmp_path = tmp_path_factory.mktemp("stack")
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "alpha.py").write_text("def needle_function():\n    return 'found me'\n")
    (tree / "notes.md").write_text("# Notes\nnothing to see\n")
    source = ROOT / "servers.json"
    data = json.loads(source.read_text())
    servers = {name: data["mcpServers"][name] for name in ("search", "microsandbox", "deepsearch", "browser")}
    env = {**os.environ, "TOOLSCORE_SEARCH_ROOT": str(tree)}
    # The shipped `"catalog": "auto"` lists only the search tools for the whole stack; these tests
    # read the listing of four servers, so they ask for all of it.
    settings = {**data["toolscore"], "catalog": "full"}
    config = parse_config({**data, "mcpServers": servers, "toolscore": settings}, source=str(source), env=env)
    async with running_gateway(config, tmp_path) as (gw, _):
        yield gw, tree


async def run_code(client: Client, code: str) -> dict[str, Any]:
    result = await client.call_tool("microsandbox__repl_run_code", {"params": {"code": code}})
    assert not result.is_error, text(result)
    return json.loads(text(result))


@requires_stack
async def test_the_sandbox_runs_code_as_nobody(stack: tuple[Gateway, Path]) -> None:
    async with Client(stack[0].server, mode="legacy") as client:
        out = await run_code(client, "import os; print(sum(range(10)), os.getuid())")
    assert out["status"] == "completed" and out["stdout"] == "45 65534\n"


@requires_stack
async def test_sandboxed_code_cannot_reach_the_network(stack: tuple[Gateway, Path]) -> None:
    with socket.socket() as listener:  # a service the host can reach on loopback
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
        async with Client(stack[0].server, mode="legacy") as client:
            out = await run_code(
                client,
                f"import socket\ns = socket.socket()\ns.settimeout(2)\nprint(s.connect_ex(('127.0.0.1', {port})))",
            )
    assert out["stdout"].strip() != "0"  # refused or unreachable: not the host's listener


@requires_stack
async def test_sandboxed_code_cannot_see_the_home_or_the_gateways_files(stack: tuple[Gateway, Path]) -> None:
    marker = Path.home() / f".toolscore-test-{uuid.uuid4().hex}"
    marker.write_text("secret")
    try:
        paths = [str(marker), str(ROOT / "pyproject.toml"), str(ROOT / "servers.json"), str(stack[1] / "notes.md")]
        async with Client(stack[0].server, mode="legacy") as client:
            out = await run_code(client, f"import os\nprint([os.path.exists(p) for p in {paths!r}])")
    finally:
        marker.unlink()
    assert out["stdout"] == "[False, False, False, False]\n"


@requires_stack
async def test_the_system_is_read_only_and_memory_is_bounded(stack: tuple[Gateway, Path]) -> None:
    async with Client(stack[0].server, mode="legacy") as client:
        write = await run_code(client, "open('/usr/toolscore-test', 'w')")
        memory = await run_code(client, "x = bytearray(3 * 1024 ** 3)")
        work = await run_code(
            client, "open('/tmp/work/ok.txt', 'w').write('fine'); print(open('/tmp/work/ok.txt').read())"
        )
    assert write["error_type"] == "OSError" and "Read-only file system" in write["error_message"]
    assert memory["error_type"] == "MemoryError"
    assert work["stdout"] == "fine\n"


@requires_stack
async def test_a_fork_bomb_hits_the_process_limit(stack: tuple[Gateway, Path]) -> None:
    if not os.access("/sys/fs/cgroup/pids", os.W_OK) and not os.access("/sys/fs/cgroup", os.W_OK):
        pytest.skip("no writable pids cgroup on this machine: the limit cannot be enforced here")
    code = (
        "import os, time\nok = 0\nkids = []\n"
        "for _ in range(500):\n"
        "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
        "    if pid == 0:\n        time.sleep(1)\n        os._exit(0)\n"
        "    ok += 1\n    kids.append(pid)\n"
        "for pid in kids:\n    os.waitpid(pid, 0)\nprint(ok)"
    )
    async with Client(stack[0].server, mode="legacy") as client:
        out = await run_code(client, code)
        after = await run_code(client, "print('still alive')")
    assert int(out["stdout"]) < 64
    assert after["stdout"] == "still alive\n"


@requires_stack
async def test_search_finds_code_in_its_tree_and_nothing_outside(stack: tuple[Gateway, Path]) -> None:
    async with Client(stack[0].server, mode="legacy") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "search__search_code_advanced" in names and "search__set_project_path" not in names
        hits = json.loads(text(await client.call_tool("search__search_code_advanced", {"pattern": "needle_function"})))
        assert [r["text"] for r in hits["results"]] == ["def needle_function():"]
        files = text(await client.call_tool("search__find_files", {"pattern": "*.py"}))
        assert files.split() == ["pkg/alpha.py"]
        for path in ("../../../etc/passwd", "/etc/passwd"):
            refused = await client.call_tool("search__get_file_summary", {"file_path": path})
            assert refused.is_error, path
        rerooted = await client.call_tool("search__set_project_path", {"path": "/etc"})
        assert rerooted.is_error and "Unknown tool" in text(rerooted)


PAGE = b"""<!doctype html><html><head><title>Fixture page</title></head><body>
<h1>Hello from the fixture</h1>
<p id="status">not pressed</p>
<button onclick="document.getElementById('status').textContent = 'pressed: ' +
  document.getElementById('name').value">Press me</button>
<input id="name" aria-label="Your name">
</body></html>"""


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def page_url() -> Iterator[str]:
    with loopback_http(_Page) as url:
        yield url + "/"


@requires_stack
async def test_one_plan_over_all_four_roles(stack: tuple[Gateway, Path], page_url: str) -> None:
    plan = (
        "<parallel>"
        '<search id="s">needle_function</search>'
        '<deepsearch id="d">How do plans pass results between steps?</deepsearch>'
        f'<browser id="b">{page_url}</browser>'
        "</parallel>"
        '<microsandbox><arg name="params" type="json">'
        '{"code": "hits = ${s.json.pagination.total_matches}\\nprint(hits * 10, ${d.json.sources[0].n})"}'
        "</arg></microsandbox>"
        "<execute_tools />"
    )
    async with Client(stack[0].server, mode="legacy") as client:
        result = await client.call_tool("orchestrate", {"plan": plan})
    assert result.structured_content is not None, text(result)
    steps = result.structured_content["steps"]
    assert [(s["server"], s["status"]) for s in steps] == [
        ("search", "ok"),
        ("deepsearch", "ok"),
        ("browser", "ok"),
        ("microsandbox", "ok"),
    ]
    assert "Fixture page" in text(result)  # the browser step's page title
    assert '"stdout": "10 1\\n"' in text(result)  # one search match, times ten; first source cited as [1]


def _chromium_pids() -> set[int]:
    out = subprocess.run(["pgrep", "-f", "chromium"], capture_output=True, text=True, check=False).stdout
    return {int(pid) for pid in out.split()}


def _descends_from(pid: int, ancestor: int) -> bool:
    """Whether `ancestor` is among `pid`'s parents (read from /proc; False once `pid` is gone)."""
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state: the parent's pid
        if pid == ancestor:
            return True
    return False


@requires_stack
async def test_a_search_capability_call_with_a_query_runs_out_of_the_box(stack: tuple[Gateway, Path]) -> None:
    """`{"query": …}` reaches code search's `pattern` and research's `question`; no candidate is
    skipped for a parameter it names otherwise, and the browser is not a search candidate."""
    async with Client(stack[0].server, mode="legacy") as client:
        args = {"capability": "search", "arguments": {"query": "needle_function"}, "strategy": "all"}
        result = await client.call_tool("call_capability", args)
    assert not result.is_error, text(result)
    assert "def needle_function():\n   from: search__search_code_advanced" in text(result)
    candidates = (result.meta or {})["toolscore/capability"]["candidates"]
    assert {c["tool"] for c in candidates} == {"search__search_code_advanced", "deepsearch__research"}, candidates


def test_the_shipped_catalog_is_auto() -> None:
    assert json.loads((ROOT / "servers.json").read_text())["toolscore"]["catalog"] == "auto"


def _ref(snapshot: str, role: str, name: str) -> str:
    match = re.search(rf'{role} "{re.escape(name)}"[^\n]*\[ref=(\w+)\]', snapshot)
    assert match, snapshot
    return match.group(1)


@requires_stack
async def test_the_browser_reads_clicks_types_and_leaves_no_chromium(
    stack: tuple[Gateway, Path], page_url: str
) -> None:
    gw = stack[0]
    async with Client(gw.server, mode="legacy") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "browser__browser_navigate" in names and "browser__browser_run_code_unsafe" not in names
        await client.call_tool("browser__browser_navigate", {"url": page_url})
        snapshot = text(await client.call_tool("browser__browser_snapshot", {}))
        assert "Hello from the fixture" in snapshot
        field = _ref(snapshot, "textbox", "Your name")
        typed = await client.call_tool("browser__browser_type", {"target": field, "text": "Ada"})
        assert not typed.is_error, text(typed)
        clicked = await client.call_tool("browser__browser_click", {"target": _ref(snapshot, "button", "Press me")})
        assert not clicked.is_error, text(clicked)
        after = text(await client.call_tool("browser__browser_snapshot", {}))
        assert "pressed: Ada" in after
        shot = await client.call_tool("browser__browser_take_screenshot", {"type": "png", "scale": "css"})
        images = [b for b in shot.content if getattr(b, "type", "") == "image"]
        assert images and base64.b64decode(images[0].data)[:8] == b"\x89PNG\r\n\x1a\n"
        blocked = await client.call_tool("browser__browser_navigate", {"url": "file:///etc/passwd"})
        assert blocked.is_error or "root:" not in text(blocked)
        assert _chromium_pids()  # a browser is running (started by this test or an earlier one)


@requires_stack
async def test_no_chromium_is_left_after_the_gateway_stops(tmp_path: Path, page_url: str) -> None:
    before = _chromium_pids()
    source = ROOT / "servers.json"
    data = json.loads(source.read_text())
    config = parse_config({**data, "mcpServers": {"browser": data["mcpServers"]["browser"]}}, source=str(source))
    async with running_gateway(config, tmp_path) as (gw, _), Client(gw.server, mode="legacy") as client:
        await client.call_tool("browser__browser_navigate", {"url": page_url})
        # This gateway's own: a test on another worker may run a browser of its own meanwhile.
        ours = {pid for pid in _chromium_pids() - before if _descends_from(pid, os.getpid())}
        assert ours
    # Chromium exits when its Playwright parent's pipe closes, a moment after the gateway is done.
    await wait_for(lambda: not (ours & _chromium_pids()))


@requires_stack
async def test_the_shipped_stack_raises_no_poisoning_finding(stack: tuple[Gateway, Path]) -> None:
    gw, _ = stack
    assert len(gw.hub.registry.routes) > 40  # the scan ran over the real definitions
    assert gw.hub.registry.suspects == () and gw.hub.catalog.suspects == ()
