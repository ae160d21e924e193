"""The web console at /ui: headless chromium loads it, clicks a server, tries a tool; and its guard."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.conftest import fixture_entry, http_gateway_process, write_config
from tests.scaleout.cdp import CHROMIUM, Browser

pytestmark = pytest.mark.e2e

TOKEN = "console-test-token-0123456789"
ARTIFACTS = os.environ.get("TOOLSCORE_TEST_ARTIFACTS")
"""Where the screenshot is copied for CI to keep (also left in the test's tmp_path)."""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A token-guarded HTTP gateway over the fixture server; yields its base URL."""
    tmp_path = tmp_path_factory.mktemp("console")
    config = write_config(tmp_path, {"fx": fixture_entry(tmp_path)})
    with http_gateway_process(config, env={"TOOLSCORE_TOKEN": TOKEN}) as base:
        yield base


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_the_data_needs_the_token_and_another_origin_is_refused(gateway: str) -> None:
    for path in ("/ui/api/servers", "/ui/api/tools", "/ui/api/stats", "/ui/api/audit"):
        assert httpx2.get(gateway + path, timeout=60).status_code == 401, path
    call = {"tool": "fx__echo", "arguments": {"text": "x"}}
    assert httpx2.post(gateway + "/ui/api/call", json=call, timeout=60).status_code == 401
    evil = {**AUTH, "Origin": "http://evil.example"}
    for path in ("/ui", "/ui/api/servers"):
        assert httpx2.get(gateway + path, headers=evil, timeout=60).status_code == 403, path
    # Another site's page posting to the try-a-call form: refused before anything runs.
    assert httpx2.post(gateway + "/ui/api/call", json=call, headers=evil, timeout=60).status_code == 403
    # The page itself holds no data: it loads without the token, then asks for it.
    page = httpx2.get(gateway + "/ui", timeout=60)
    assert page.status_code == 200 and "toolscore console" in page.text
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]


def test_the_api_answers_and_refuses_bad_requests(gateway: str) -> None:
    servers = httpx2.get(gateway + "/ui/api/servers", headers=AUTH, timeout=60).json()
    assert servers[0]["name"] == "fx" and servers[0]["state"] == "up" and servers[0]["start_seconds"] > 0
    tools = httpx2.get(gateway + "/ui/api/tools", headers=AUTH, timeout=60).json()
    echo = next(t for t in tools if t["tool"]["name"] == "fx__echo")
    assert echo["server"] == "fx" and echo["tool"]["inputSchema"]["type"] == "object"
    url = gateway + "/ui/api/call"
    ok = httpx2.post(url, json={"tool": "fx__echo", "arguments": {"text": "hi"}}, headers=AUTH, timeout=60).json()
    assert ok.get("content") == [{"type": "text", "text": "hi"}], ok
    plan = {"tool": "orchestrate", "arguments": {"plan": '<fx><echo id="a">{"text": "planned"}</echo></fx>'}}
    assert "planned" in httpx2.post(url, json=plan, headers=AUTH, timeout=60).text
    assert httpx2.post(url, content=b"{", headers={**AUTH, "Content-Type": "application/json"}).status_code == 400
    assert httpx2.post(url, json={"tool": 3}, headers=AUTH).status_code == 400
    assert httpx2.post(url, content=b"tool=x", headers={**AUTH, "Content-Type": "text/plain"}).status_code == 415
    big = b'{"tool": "fx__echo", "arguments": {"text": "' + b"x" * (2 << 20) + b'"}}'
    assert httpx2.post(url, content=big, headers={**AUTH, "Content-Type": "application/json"}).status_code == 413
    assert httpx2.get(url, headers=AUTH).status_code == 405
    assert httpx2.post(gateway + "/ui/api/servers", headers=AUTH).status_code == 405
    stats = httpx2.get(gateway + "/ui/api/stats", headers=AUTH, timeout=60).json()
    assert stats["calls"] >= 2


@pytest.mark.skipif(not shutil.which("chromium") and not os.path.exists(CHROMIUM), reason="chromium is not installed")
def test_chromium_loads_the_console_clicks_a_server_and_tries_a_tool(gateway: str, tmp_path: Path) -> None:
    browser = Browser(tmp_path / "profile")
    try:
        # The token in the fragment: the page keeps it and sends it as a header; servers never see it.
        browser.open(f"{gateway}/ui#token={TOKEN}")
        browser.wait_for("!!document.querySelector('#servers tr[data-server=\"fx\"]')")
        assert browser.evaluate("location.hash") == ""  # the token left the address bar
        browser.click('#servers tr[data-server="fx"]')
        browser.wait_for("document.querySelector('#servers tr.selected')?.dataset.server === 'fx'")
        listed = browser.wait_for("[...document.querySelectorAll('#tools .tool')].map(e => e.dataset.tool)")
        assert "fx__echo" in listed and "orchestrate" not in listed  # only the clicked server's tools
        browser.type_into("#tool-search", "echo")
        browser.wait_for("document.querySelectorAll('#tools .tool').length === 1")
        browser.click('#tools .tool[data-tool="fx__echo"]')
        assert browser.wait_for("document.querySelector('#try-tool').value") == "fx__echo"
        assert '"text"' in browser.evaluate("document.querySelector('#tool-schema').textContent")
        browser.type_into("#try-args", '{"text": "from the console"}')
        browser.click("#try-run")
        assert browser.wait_for("document.querySelector('#try-result').textContent === 'from the console'")
        # The call shows up in the live audit tail.
        browser.wait_for("[...document.querySelectorAll('#audit li')].some(e => e.textContent.includes('fx.echo ok'))")
        png = browser.screenshot(tmp_path / "console.png")
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        if ARTIFACTS:
            Path(ARTIFACTS).mkdir(parents=True, exist_ok=True)
            shutil.copy(tmp_path / "console.png", Path(ARTIFACTS) / "console.png")
    finally:
        browser.close()
