"""`Mcp-Method` and `Mcp-Name` from clients on the HTTP front (2026-07-28, SEP-2243).

On a 2026-07-28 request both are required and must agree with the body, else the answer is 400
with JSON-RPC error -32020 (HeaderMismatch), as the spec says; the front's SDK checks them before
any handler runs. A handshake-era request's headers are not judged (the 2025-11-25 revision
defines neither), on the SDK path as on the hot path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.front.test_http_fast import JSON, SSE, corpus_config, front, raw_session

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

_MODERN = "2026-07-28"
_ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": _MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
}
_CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "c__case", "arguments": {"name": "text"}, "_meta": _ENVELOPE},
}


async def _post(url: str, body: dict[str, Any], **headers: str) -> httpx2.Response:
    base = {"Accept": f"{JSON}, {SSE}", "Content-Type": JSON, "Mcp-Protocol-Version": _MODERN}
    async with httpx2.AsyncClient(timeout=60) as http:
        return await http.post(url, content=json.dumps(body).encode(), headers={**base, **headers})


def _error(response: httpx2.Response) -> dict[str, Any]:
    text = response.text
    if text.startswith(("event:", "id:", "data:", "retry:")):  # an SSE stream: its last message
        text = [line[5:] for line in text.splitlines() if line.startswith("data:") and line[5:].strip()][-1]
    found: dict[str, Any] = json.loads(text).get("error") or {}
    return found


async def test_2026_headers_that_disagree_with_the_body_are_400_header_mismatch(tmp_path: Path) -> None:
    async with front(corpus_config(tmp_path)) as (url, _):
        agreed = await _post(url, _CALL, **{"Mcp-Method": "tools/call", "Mcp-Name": "c__case"})
        assert agreed.status_code == 200, agreed.text
        assert not _error(agreed)
        for headers in (
            {"Mcp-Method": "tools/list", "Mcp-Name": "c__case"},  # another method
            {"Mcp-Method": "tools/call", "Mcp-Name": "c__other"},  # another tool
            {"Mcp-Name": "c__case"},  # Mcp-Method missing
            {"Mcp-Method": "tools/call"},  # Mcp-Name missing
        ):
            refused = await _post(url, _CALL, **headers)
            assert refused.status_code == 400, (headers, refused.text)
            assert _error(refused)["code"] == -32020, headers


async def test_handshake_era_headers_are_not_judged(tmp_path: Path) -> None:
    async with front(corpus_config(tmp_path)) as (url, calls), raw_session(url) as client:
        await client.hot(calls)  # from here its calls take the hot path
        for headers in ({}, {"Mcp-Method": "tools/list", "Mcp-Name": "c__other"}):
            response = await client.post(
                {
                    "jsonrpc": "2.0",
                    "id": 7,
                    "method": "tools/call",
                    "params": {"name": "c__case", "arguments": {"name": "text"}},
                },
                **headers,
            )
            assert response.status_code == 200, response.text
            assert not _error(response)
        # The SDK path (a list is not a hot call) alike.
        listed = await client.post({"jsonrpc": "2.0", "id": 8, "method": "tools/list"}, **{"Mcp-Method": "ping"})
        assert listed.status_code == 200, listed.text
        assert not _error(listed)
