"""The HTTP front's hot path for 2026-07-28 `tools/call` (`front.http_modern`): raw HTTP, real servers.

One front for the module (`serve --transport http` as `http_app` builds it, on uvicorn here), with
the byte corpus server and the conformance fixture as stdio servers in the handshake era, so each
2026-07-28 call is bridged. Each answer of the hot path is compared with the SDK path's answer to
the same call: a request that asks for progress goes to the SDK, and must get the same result.
`served` counts the calls the hot path took, so each test fails if the path is not taken, or is
taken where the SDK must answer.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.conftest import FIXTURES, wait_for, write_config
from tests.fixtures.corpus_server import CASES
from tests.front.test_http_fast import JSON, SSE, events, front
from tests.front.test_mcp_headers import _ENVELOPE as ENVELOPE
from toolscore.front import http_modern
from toolscore.front.http_modern import ModernCalls

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

MODERN = "2026-07-28"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


class Front:
    """The front's URL, its 2026-07-28 hot path, and where the corpus server notes cancellations."""

    def __init__(self, url: str, calls: ModernCalls, log: Path, http: httpx2.AsyncClient) -> None:
        self.url = url
        self.calls = calls
        self.log = log
        self.http = http

    def request(self, request_id: int | str, name: str, arguments: dict[str, Any] | None, **meta: Any) -> bytes:
        params: dict[str, Any] = {"name": name, "_meta": {**ENVELOPE, **meta}}
        if arguments is not None:
            params["arguments"] = arguments
        return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}).encode()

    def headers(self, name: str, **extra: str) -> dict[str, str]:
        base = {
            "Accept": f"{JSON}, {SSE}",
            "Content-Type": JSON,
            "Mcp-Protocol-Version": MODERN,
            "Mcp-Method": "tools/call",
            "Mcp-Name": name,
        }
        return {**base, **extra}

    async def post(self, body: bytes, headers: dict[str, str]) -> httpx2.Response:
        return await self.http.post(self.url, content=body, headers=headers)

    async def call(self, request_id: int, name: str, arguments: dict[str, Any] | None, **meta: Any) -> httpx2.Response:
        return await self.post(self.request(request_id, name, arguments, **meta), self.headers(name))


@pytest.fixture(scope="module")
async def gateway(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Front]:
    tmp = tmp_path_factory.mktemp("modern")
    log = tmp / "cancelled.log"
    servers = {
        "c": {"command": sys.executable, "args": [str(FIXTURES / "corpus_server.py")], "env": {"CORPUS_LOG": str(log)}},
        "cf": {"command": sys.executable, "args": [str(FIXTURES / "conformance_server.py")]},
    }
    async with front(write_config(tmp, servers)) as (url, calls), httpx2.AsyncClient(timeout=60) as http:
        modern = calls._modern
        assert modern is not None
        yield Front(url, modern, log, http)


def body_of(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC answer: the body, or an event stream's last message."""
    if response.headers["content-type"].startswith(SSE):
        found: dict[str, Any] = json.loads([e["data"] for e in events(response) if e.get("data")][-1])
        return found
    answer: dict[str, Any] = response.json()
    return answer


CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
SAMPLING = {CAPABILITIES: {"sampling": {}}}
CALLS: list[tuple[str, dict[str, Any] | None, dict[str, Any]]] = [
    *[("c__case", {"name": name}, {}) for name in CASES if name != "large"],
    ("c__case", {"name": 5}, {}),  # refused by the gateway's validation: an error result
    ("c__case", None, {}),
    ("c__rpc_error", {}, {}),  # the server's JSON-RPC error
    ("cf__test_simple_text", {}, {}),
    ("cf__test_missing_capability", {}, {}),  # the server needs sampling, which this client did not declare
    ("cf__test_input_required_result_sampling", {}, SAMPLING),  # bridged: an input-required round
]


@pytest.mark.parametrize(("name", "arguments", "meta"), CALLS, ids=[f"{n}-{a}-{bool(m)}" for n, a, m in CALLS])
async def test_the_hot_path_answers_a_call_as_the_sdk_path_does(
    gateway: Front, name: str, arguments: dict[str, Any] | None, meta: dict[str, Any]
) -> None:
    before = gateway.calls.served
    hot = await gateway.call(1, name, arguments, **meta)
    assert gateway.calls.served == before + 1
    # Asking for progress makes it the SDK's: the same call, the same answer.
    sdk = await gateway.call(1, name, arguments, progressToken="p", **meta)
    assert gateway.calls.served == before + 1
    assert hot.headers["content-type"] == JSON and "mcp-session-id" not in hot.headers
    assert hot.status_code == sdk.status_code, (hot.text, sdk.text)
    hot_answer, sdk_answer = body_of(hot), body_of(sdk)
    if sdk_answer.get("result", {}).get("resultType") == "input_required":  # the request state is the call's own
        assert hot_answer["result"].pop("requestState") and sdk_answer["result"].pop("requestState")
    for answer in (hot_answer, sdk_answer):
        if answer.get("result", {}).get("resultType") == "complete":
            # Absent is false: the hot path passes the server's bytes on, the SDK's model writes it.
            answer["result"].setdefault("isError", False)
    assert hot_answer == sdk_answer
    result = hot_answer.get("result")
    if result is not None:
        assert result["resultType"] in ("complete", "input_required")
        assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "toolscore"


async def test_the_hot_path_passes_the_servers_result_bytes_on(gateway: Front) -> None:
    # The fixture's stdio server (2025-11-25) writes no `isError` for a result that is not one; the
    # SDK's path decodes the result and writes `isError: false`. The hot path splices the server's
    # bytes into the answer, with `resultType` and the gateway's `serverInfo` after them.
    hot = await gateway.call(1, "c__case", {"name": "text"})
    sdk = await gateway.call(1, "c__case", {"name": "text"}, progressToken="p")
    assert b'"isError"' not in hot.content and "isError" in body_of(sdk)["result"]
    tail = b',"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":'
    assert hot.content.startswith(b'{"jsonrpc":"2.0","id":1,"result":{"content":[') and tail in hot.content


async def test_an_input_required_round_from_the_hot_path_is_answered_by_the_retry(gateway: Front) -> None:
    name = "cf__test_input_required_result_sampling"
    first = body_of(await gateway.call(1, name, {}, **SAMPLING))["result"]
    assert first["resultType"] == "input_required"
    (key, asked), *_ = first["inputRequests"].items()
    assert asked["method"] == "sampling/createMessage"
    answer = {"role": "assistant", "content": {"type": "text", "text": "forty-two"}, "model": "m"}
    params = {
        "name": name,
        "arguments": {},
        "inputResponses": {key: answer},
        "requestState": first["requestState"],
        "_meta": {**ENVELOPE, **SAMPLING},
    }
    retry = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
    done = body_of(await gateway.post(json.dumps(retry).encode(), gateway.headers(name)))["result"]
    assert done["resultType"] == "complete" and "forty-two" in json.dumps(done["content"])


REFUSED: list[tuple[str, dict[str, Any], dict[str, str], int]] = [
    ("another tool in Mcp-Name", {}, {"Mcp-Name": "c__other"}, -32020),
    ("another method in Mcp-Method", {}, {"Mcp-Method": "tools/list"}, -32020),
    ("no Mcp-Method", {}, {"Mcp-Method": ""}, -32020),
    ("another version in the header", {}, {"Mcp-Protocol-Version": "2026-01-01"}, -32020),
    ("no capabilities in the envelope", {"io.modelcontextprotocol/clientCapabilities": None}, {}, -32602),
    (
        "an unsupported version",
        {"io.modelcontextprotocol/protocolVersion": "2099-01-01"},
        {"Mcp-Protocol-Version": "2099-01-01"},
        -32022,
    ),
]


@pytest.mark.parametrize(("why", "meta", "headers", "code"), REFUSED, ids=[r[0] for r in REFUSED])
async def test_what_the_sdk_refuses_goes_to_the_sdk(
    gateway: Front, why: str, meta: dict[str, Any], headers: dict[str, str], code: int
) -> None:
    before = gateway.calls.served
    envelope = {key: value for key, value in {**ENVELOPE, **meta}.items() if value is not None}
    params = {"name": "c__case", "arguments": {"name": "text"}, "_meta": envelope}
    body = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params}).encode()
    sent = {key: value for key, value in gateway.headers("c__case", **headers).items() if value}
    response = await gateway.post(body, sent)
    assert body_of(response)["error"]["code"] == code, response.text
    assert response.status_code == 400
    assert gateway.calls.served == before


async def test_requests_this_path_does_not_serve_go_to_the_sdk(gateway: Front) -> None:
    before = gateway.calls.served
    listed = await gateway.post(
        json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": ENVELOPE}}).encode(),
        {**gateway.headers(""), "Mcp-Method": "tools/list"},
    )
    assert "c__case" in listed.text
    unknown = await gateway.call(5, "nosuch__tool", {})
    assert "nosuch__tool" in unknown.text
    logged = await gateway.call(6, "c__case", {"name": "text"}, **{"io.modelcontextprotocol/logLevel": "debug"})
    assert body_of(logged)["result"]["content"][0]["text"] == "hello"
    only_json = await gateway.post(
        gateway.request(7, "c__case", {"name": "text"}), gateway.headers("c__case", Accept=JSON)
    )
    assert only_json.status_code == 406  # the SDK's answer to an Accept without event streams
    batch = b"[" + gateway.request(8, "c__case", {"name": "text"}) + b"]"
    assert (await gateway.post(batch, gateway.headers("c__case"))).status_code == 400
    assert gateway.calls.served == before


async def test_mcp_param_headers_are_checked_against_the_tools_schema(gateway: Front) -> None:
    name = "cf__test_header_param"
    before = gateway.calls.served
    body = gateway.request(9, name, {"region": "eu-west"})
    agreed = await gateway.post(body, gateway.headers(name, **{"Mcp-Param-Region": "eu-west"}))
    assert agreed.status_code == 200 and "eu-west" in agreed.text
    assert gateway.calls.served == before + 1
    for headers in ({"Mcp-Param-Region": "us-east"}, {}):
        refused = await gateway.post(body, gateway.headers(name, **headers))
        assert refused.status_code == 400 and body_of(refused)["error"]["code"] == -32020, headers
    assert gateway.calls.served == before + 1


async def test_a_long_call_answers_on_a_stream_that_pings(gateway: Front, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_modern, "PING_SECONDS", 0.3)
    before = gateway.calls.served
    response = await gateway.call(10, "c__sleep", {"seconds": 3})  # ten pings due: two at the least
    assert gateway.calls.served == before + 1
    assert response.headers["content-type"] == SSE
    assert response.text.count(": ping") >= 2
    answer = body_of(response)
    assert answer["id"] == 10 and answer["result"]["resultType"] == "complete"
    assert answer["result"]["content"] == json.loads(CASES["text"])["content"]


async def test_a_client_that_closes_its_stream_cancels_its_call(gateway: Front) -> None:
    # In this era closing the response stream is how a client cancels: the server gets notifications/cancelled.
    before = gateway.calls.served
    body = gateway.request(11, "c__sleep", {"seconds": 60})
    sleeping = gateway.log.with_name(gateway.log.name + ".sleeping")
    asleep = len(sleeping.read_text().splitlines()) if sleeping.exists() else 0
    cancelled = len(gateway.log.read_text().splitlines()) if gateway.log.exists() else 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(gateway.post, body, gateway.headers("c__sleep"))
        await wait_for(lambda: sleeping.exists() and len(sleeping.read_text().splitlines()) > asleep)
        tg.cancel_scope.cancel()  # the client drops the request
    await wait_for(lambda: gateway.log.exists() and len(gateway.log.read_text().splitlines()) > cancelled)
    assert gateway.calls.served == before + 1


async def test_hostile_bodies_get_an_answer_and_leave_the_front_serving(gateway: Front) -> None:
    deep = b'{"a":' * 50_000 + b"1" + b"}" * 50_000
    head = gateway.request(12, "c__case", {"name": "text"})
    bodies = [
        head.replace(b'{"name": "text"}', deep),  # nested past any recursion limit
        head.replace(b'"text"', b'"\xff\xfe"'),  # not UTF-8
        head.replace(b'"text"', b'"\\ud800"'),  # a lone surrogate
        head.replace(b'"id": 12', b'"id": true'),  # an id JSON-RPC does not allow
        head.replace(b'"id": 12', b'"id": 12, "id": 13'),  # a duplicate key
        head[: len(head) // 2],  # cut short
    ]
    for body in bodies:
        response = await gateway.post(body, gateway.headers("c__case"))
        assert response.status_code < 500, (body[:80], response.text)
    assert body_of(await gateway.call(13, "c__case", {"name": "text"}))["result"]["content"][0]["text"] == "hello"
