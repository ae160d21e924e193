"""The HTTP front's hot path for `tools/call` (`front.http_fast`): real clients, real downstreams.

The front runs as `serve --transport http` builds it (`http_app`: guard, hot path, the SDK's app),
on uvicorn in this process, its servers as subprocesses; one test runs the `toolscore serve`
process itself. A raw HTTP client sees the bytes and the content type: the SDK answers every
request with an SSE stream and re-encodes results, the hot path answers `application/json` with
the downstream's result bytes, so each test about the hot path fails without it (and `served`
counts the calls it took). Fallback tests show the same session taking the hot path first.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types
import pytest
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import FIXTURE_SERVER, free_port, http_gateway_process, wait_for, write_config
from tests.fixtures.corpus_server import CASES, ENVELOPES
from toolscore import load_config, open_gateway
from toolscore.front import http_fast
from toolscore.front.http import resolve_exposure
from toolscore.front.http_fast import JSON_WINDOW, HttpCalls
from toolscore.front.serve import http_app
from toolscore.telemetry import tracing

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

CORPUS_SERVER = str(Path(__file__).parent.parent / "fixtures" / "corpus_server.py")
CONFORMANCE_SERVER = str(Path(__file__).parent.parent / "fixtures" / "conformance_server.py")
LATEST = "2025-11-25"
JSON = "application/json"
SSE = "text/event-stream"


def corpus_config(tmp_path: Path, **entry: Any) -> Path:
    env = {"CORPUS_LOG": str(tmp_path / "cancelled.log")}
    return write_config(tmp_path, {"c": {"command": sys.executable, "args": [CORPUS_SERVER], "env": env, **entry}})


@asynccontextmanager
async def front(config: Path, *, json_window: float = 30.0) -> AsyncIterator[tuple[str, HttpCalls]]:
    """The HTTP front on a free loopback port; yields its /mcp URL and its hot path.

    `json_window`: how long a call may take and still be answered as JSON. The front's own 0.1 s
    is widened, so a busy machine does not turn an answer a test reads as JSON into a stream;
    the tests of the stream pass `JSON_WINDOW`.
    """
    loaded = load_config(config)
    port = free_port()
    exposure = resolve_exposure(loaded.settings.http, host="127.0.0.1", port=port, env={})
    window, http_fast.JSON_WINDOW = http_fast.JSON_WINDOW, json_window
    stopped = anyio.Event()

    async def serve() -> None:
        try:
            await server.serve()
        finally:
            stopped.set()

    try:
        async with open_gateway(loaded) as gw, anyio.create_task_group() as tg:
            await gw.hub.wait_started()
            app = http_app(gw.server, host="127.0.0.1", exposure=exposure, max_request_bytes=64 << 20)
            assert gw.server.http_calls is not None
            options = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
            server = uvicorn.Server(options)
            tg.start_soon(serve)
            with anyio.fail_after(60):
                while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to await
                    await anyio.sleep(0.01)
            try:
                yield f"http://127.0.0.1:{port}/mcp", gw.server.http_calls
            finally:
                # Shut down, even when the test failed: cancelled instead, uvicorn left its
                # listening socket open, and the next test failed on its ResourceWarning.
                server.should_exit = True
                with anyio.CancelScope(shield=True), anyio.move_on_after(60):
                    await stopped.wait()
    finally:
        http_fast.JSON_WINDOW = window


class RawSession:
    """A handshake-era client that speaks JSON-RPC over HTTP by hand and keeps every answer's bytes."""

    def __init__(self, http: httpx2.AsyncClient, url: str) -> None:
        self.http = http
        self.url = url
        self.headers = {"Accept": f"{JSON}, {SSE}", "Content-Type": JSON}

    async def open(self, capabilities: dict[str, Any] | None = None, version: str = LATEST) -> None:
        hello = {"protocolVersion": version, "capabilities": capabilities or {}, "clientInfo": {"name": "raw"}}
        init = await self.post({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": hello})
        assert init.status_code == 200, init.text
        session = {"Mcp-Session-Id": init.headers["mcp-session-id"], "Mcp-Protocol-Version": version}
        self.headers = {**self.headers, **session}
        await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def post(self, message: dict[str, Any] | bytes, **headers: str) -> httpx2.Response:
        body = message if isinstance(message, bytes) else json.dumps(message).encode()
        return await self.http.post(self.url, content=body, headers={**self.headers, **headers})

    async def call(self, request_id: int | str, name: str, arguments: dict[str, Any], **params: Any) -> httpx2.Response:
        request = {"name": name, "arguments": arguments, **params}
        return await self.post({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": request})

    async def hot(self, calls: HttpCalls, tool: str = "c__case", arguments: Any = None) -> None:
        """Wait until the front has seen this client's handshake (its calls take the hot path from then on)."""
        before = calls.served
        with anyio.fail_after(60):
            while calls.served == before:
                await self.call("warm-up", tool, arguments if arguments is not None else {"name": "text"})
                await anyio.sleep(0.01)


@asynccontextmanager
async def raw_session(url: str, **open_args: Any) -> AsyncIterator[RawSession]:
    async with httpx2.AsyncClient(timeout=60) as http:
        session = RawSession(http, url)
        await session.open(**open_args)
        yield session


def envelope(request_id: int | str, result: bytes) -> bytes:
    return b'{"jsonrpc":"2.0","id":' + json.dumps(request_id).encode() + b',"result":' + result + b"}"


def content_type(response: httpx2.Response) -> str:
    return response.headers.get("content-type", "").split(";")[0]


def events(response: httpx2.Response) -> list[dict[str, str]]:
    """The SSE events of a response body, each as its fields (`data` lines joined with newlines)."""
    out: list[dict[str, str]] = []
    for block in response.content.decode().replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            name, _, value = line.partition(": ")
            if name and not name.startswith(":"):
                fields[name] = f"{fields[name]}\n{value}" if name in fields else value
        if fields:
            out.append(fields)
    return out


def answer_of(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC answer a response carries: its JSON body, or its stream's last message."""
    if content_type(response) == JSON:
        answer: dict[str, Any] = json.loads(response.content)
        return answer
    return [json.loads(e["data"]) for e in events(response) if e.get("data")][-1]


def audit(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]


async def test_every_corpus_result_reaches_the_client_byte_for_byte_as_json(tmp_path: Path) -> None:
    async with front(corpus_config(tmp_path)) as (url, calls), raw_session(url) as client:
        await client.hot(calls)
        before = calls.served
        n = 0
        for style in ENVELOPES:
            for name, expected in CASES.items():
                n += 1
                response = await client.call(n, "c__case", {"name": name, "envelope": style})
                assert response.status_code == 200 and content_type(response) == JSON, (name, style)
                assert response.content == envelope(n, expected), (name, style)
        n += 1  # a tool with an outputSchema: the structured result is not re-checked or rebuilt
        response = await client.call(n, "c__with_schema", {})
        assert response.content == envelope(n, CASES["structured"])
        assert response.headers["mcp-session-id"] == client.headers["Mcp-Session-Id"]
        assert calls.served - before == n


async def test_the_serve_process_answers_a_call_with_the_servers_bytes(tmp_path: Path) -> None:
    with http_gateway_process(corpus_config(tmp_path)) as base:
        async with raw_session(f"{base}/mcp") as client:
            with anyio.fail_after(60):
                # Until the front has handled the client's handshake (in another process: no event to await).
                while content_type(response := await client.call(1, "c__case", {"name": "spaced"})) != JSON:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            assert response.content == envelope(1, CASES["spaced"])


async def test_progress_switches_the_answer_to_an_event_stream(tmp_path: Path) -> None:
    async with front(corpus_config(tmp_path)) as (url, calls), raw_session(url) as client:
        await client.hot(calls)
        arguments = {"steps": 3, "case": "spaced"}
        response = await client.call(7, "c__progress", arguments, _meta={"progressToken": "tok"})
    assert content_type(response) == SSE
    priming, *notes, last = events(response)
    assert priming["data"] == "" and priming["retry"] == "1000" and priming["id"]  # resumable, as the SDK's
    assert [json.loads(n["data"])["params"]["progress"] for n in notes] == [1, 2, 3]
    assert all(n["event"] == "message" and n["id"] for n in notes)
    assert last["data"].encode() == envelope(7, CASES["spaced"]) and last["id"]  # the server's bytes, stored
    ids = [int(e["id"]) for e in (priming, *notes, last)]
    assert ids == sorted(ids)


async def test_a_long_call_gets_a_resumable_stream_that_a_reconnect_resumes(tmp_path: Path) -> None:
    # The front's own window (a quick call's JSON answer is the corpus test's subject).
    async with front(corpus_config(tmp_path), json_window=JSON_WINDOW) as (url, calls), raw_session(url) as client:
        await client.hot(calls)
        before = calls.served
        # Longer than the JSON window: the answer comes on a stream that opens with a priming event.
        request = {"name": "c__sleep", "arguments": {"seconds": 4 * JSON_WINDOW}}
        body = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": request}).encode()
        async with client.http.stream("POST", client.url, content=body, headers=client.headers) as response:
            assert content_type(response) == SSE
            first = b""
            async for chunk in response.aiter_bytes():
                first += chunk
                if b"\n\n" in first.replace(b"\r\n", b"\n"):
                    break  # the priming event: the client now drops the stream, as a lost connection would
        priming = events(httpx2.Response(200, content=first))[0]
        assert priming["data"] == "" and priming["id"]
        resume = {**client.headers, "Last-Event-ID": priming["id"]}
        replayed = b""
        with anyio.fail_after(60):
            async with client.http.stream("GET", client.url, headers=resume) as stream:
                assert content_type(stream) == SSE
                async for chunk in stream.aiter_bytes():
                    replayed += chunk
                    if b'"id":2' in replayed and replayed.replace(b"\r\n", b"\n").endswith(b"\n\n"):
                        break  # the replay stream stays open for more: the answer is what was missed
        assert calls.served - before == 1
    answers = [json.loads(e["data"]) for e in events(httpx2.Response(200, content=replayed)) if e.get("data")]
    assert answers[-1]["id"] == 2 and answers[-1]["result"] == json.loads(CASES["text"])


async def test_logs_and_sampling_of_a_hot_call_reach_an_mcp_client(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"cf": {"command": sys.executable, "args": [CONFORMANCE_SERVER], "prefix": ""}})
    logs: list[str] = []

    async def sample(context: Any, params: mcp_types.CreateMessageRequestParams) -> mcp_types.CreateMessageResult:
        return mcp_types.CreateMessageResult(
            role="assistant", content=mcp_types.TextContent(text="forty-two"), model="test-model"
        )

    async def log(params: mcp_types.LoggingMessageNotificationParams) -> None:
        logs.append(str(params.data))

    async with front(config) as (url, calls), httpx2.AsyncClient(timeout=60) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode="legacy", sampling_callback=sample, logging_callback=log) as client:
            await wait_for(lambda: calls.sessions > 0)  # the front has handled the handshake
            sampled = await client.call_tool("test_sampling", {"prompt": "the answer?"})
            await client.call_tool("test_tool_with_logging", {})
        assert calls.served == 2
    assert "forty-two" in str(sampled.content) and not sampled.is_error
    assert len(logs) == 3


async def test_a_cancelled_call_is_cancelled_downstream(tmp_path: Path) -> None:
    async with front(corpus_config(tmp_path)) as (url, calls), raw_session(url) as client:
        await client.hot(calls)
        answers: list[httpx2.Response] = []

        async def slow() -> None:
            answers.append(await client.call(1, "c__sleep", {"seconds": 30}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            await wait_for(lambda: calls.running > 0)
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
            assert (await client.post(cancel)).status_code == 202
        await wait_for((tmp_path / "cancelled.log").exists)
    (answer,) = answers
    # As the SDK ends a cancelled request's response on this era's wire; the client has stopped waiting.
    assert answer_of(answer)["error"]["code"] == -32800
    assert [r["error_kind"] for r in audit(tmp_path) if r["tool"] == "c__sleep"] == ["cancelled"]


async def test_a_client_that_disconnects_does_not_cancel_its_call(tmp_path: Path) -> None:
    # The spec: disconnection is not cancellation. The call runs on, and ends well in the audit log.
    async with front(corpus_config(tmp_path)) as (url, calls), raw_session(url) as client:
        await client.hot(calls)
        before = calls.served
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call, 1, "c__sleep", {"seconds": 1})
            await wait_for(lambda: calls.running > 0)  # in flight: now the client stops waiting
            tg.cancel_scope.cancel()
        response = await client.call(2, "c__case", {"name": "text"})  # the session goes on
        assert response.content == envelope(2, CASES["text"])
        await wait_for(lambda: any(r["tool"] == "c__sleep" for r in audit(tmp_path)))
        assert calls.served == before + 2
    assert not (tmp_path / "cancelled.log").exists()
    assert [r["success"] for r in audit(tmp_path) if r["tool"] == "c__sleep"] == [True]


async def test_a_deadline_ends_a_hot_call_with_an_error_result(tmp_path: Path) -> None:
    async with front(corpus_config(tmp_path, timeout=0.5)) as (url, calls), raw_session(url) as client:
        await client.hot(calls)
        response = await client.call(1, "c__sleep", {"seconds": 30})
        await wait_for((tmp_path / "cancelled.log").exists)
    result = answer_of(response)["result"]
    assert result["isError"] is True and "did not answer within 0.5 s" in result["content"][0]["text"]


async def test_a_server_killed_mid_call_gives_that_call_an_error(tmp_path: Path) -> None:
    env = {"FIXTURE_STATE_DIR": str(tmp_path)}
    config = write_config(tmp_path, {"c": {"command": sys.executable, "args": [FIXTURE_SERVER], "env": env}})
    async with front(config) as (url, calls), raw_session(url) as client:
        await client.hot(calls, "c__echo", {"text": "hi"})
        pid = json.loads((await client.call(1, "c__pid", {})).content)["result"]["content"][0]["text"]
        answers: list[httpx2.Response] = []

        async def slow() -> None:
            answers.append(await client.call(2, "c__sleep", {"seconds": 30}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            await wait_for(lambda: calls.running > 0)  # the call is in flight
            os.kill(int(pid), signal.SIGKILL)
        listed = await client.post({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
        assert listed.status_code == 200  # the gateway is up
    (answer,) = answers
    result = answer_of(answer)["result"]
    assert result["isError"] is True and "closed the connection" in result["content"][0]["text"]


async def test_calls_of_unknown_and_ended_sessions_get_the_sdks_404(tmp_path: Path) -> None:
    async with front(corpus_config(tmp_path)) as (url, calls), raw_session(url) as client:
        await client.hot(calls)
        before = calls.served
        response = await client.call(1, "c__case", {"name": "text"}, **{})
        assert content_type(response) == JSON and calls.served == before + 1
        unknown = await client.http.post(
            url,
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "c__case"}},
            headers={**client.headers, "Mcp-Session-Id": "0" * 32},
        )
        assert unknown.status_code == 404
        assert (await client.http.delete(url, headers=client.headers)).status_code == 200
        ended = await client.call(3, "c__case", {"name": "text"})
        assert ended.status_code == 404
        assert calls.served == before + 1
        await wait_for(lambda: calls.sessions == 0)  # forgotten with the session


async def test_a_2026_request_and_an_older_version_go_to_the_sdk(tmp_path: Path) -> None:
    async with front(corpus_config(tmp_path)) as (url, calls):
        async with raw_session(url) as client:
            await client.hot(calls)
            before = calls.served
            modern = await client.call(1, "c__case", {"name": "text"}, **{"Mcp-Protocol-Version": "2026-07-28"})
            assert calls.served == before and modern.status_code < 500
        async with Client(url, mode="auto") as modern_client:  # the Python SDK's default era
            result = await modern_client.call_tool("c__case", {"name": "spaced"})
            assert result.content[0] == mcp_types.TextContent(text="key order and spaces kept")
        assert calls.served == before
        async with raw_session(url, version="2025-06-18") as older:
            for n in range(5):
                response = await older.call(n, "c__case", {"name": "spaced"})
                assert content_type(response) == SSE  # the SDK sieves results per version
        assert calls.served == before


async def test_with_tracing_on_a_call_goes_to_the_sdk(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    async with front(corpus_config(tmp_path)) as (url, calls), raw_session(url) as client:
        await client.hot(calls)
        before = calls.served
        tracing.enable(TracerProvider())
        try:
            response = await client.call(1, "c__case", {"name": "spaced"})
        finally:
            tracing.disable()
        assert content_type(response) == SSE and calls.served == before
        assert content_type(await client.call(2, "c__case", {"name": "spaced"})) == JSON


async def test_a_session_isolated_server_gets_one_instance_per_http_session(tmp_path: Path) -> None:
    env = {"FIXTURE_STATE_DIR": str(tmp_path)}
    entry = {"command": sys.executable, "args": [FIXTURE_SERVER], "env": env, "isolation": "session"}
    async with front(write_config(tmp_path, {"c": entry})) as (url, calls):
        pids = []
        for _ in range(2):
            async with raw_session(url) as client:
                await client.hot(calls, "c__pid", {})
                response = await client.call(1, "c__pid", {})
                assert content_type(response) == JSON
                again = await client.call(2, "c__pid", {})
                assert content_type(again) == JSON
                pids.append(json.loads(response.content)["result"]["content"][0]["text"])
                assert json.loads(again.content)["result"]["content"][0]["text"] == pids[-1]
    assert pids[0] != pids[1]


_ids = st.one_of(st.integers(-(2**40), 2**40), st.text(max_size=8), st.none(), st.booleans(), st.floats())
_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
_params = st.fixed_dictionaries(
    {"name": st.sampled_from(["c__case", "c__sleep", "orchestrate", "nope", "c__progress"])},
    optional={"arguments": _values, "_meta": _values, "task": _values},
)
_bodies = st.one_of(
    st.tuples(_ids, _params, st.sampled_from(["tools/call", "tools/cal", "notifications/cancelled"])).map(
        lambda t: json.dumps({"jsonrpc": "2.0", "id": t[0], "method": t[2], "params": t[1]}).encode()
    ),
    st.binary(max_size=64),
    st.just(b'{"jsonrpc":"2.0","method":"tools/call","params":{"name":"c__case"},"id":'),
    st.just(b'[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"c__case"}}]'),
)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bodies=st.lists(_bodies, min_size=1, max_size=25))
def test_odd_bodies_get_one_answer_each_and_the_front_stays_up(
    tmp_path_factory: pytest.TempPathFactory, bodies: list[bytes]
) -> None:
    anyio.run(_odd_bodies, tmp_path_factory.mktemp("fuzz"), bodies)


async def _odd_bodies(tmp_path: Path, bodies: list[bytes]) -> None:
    async with front(corpus_config(tmp_path)) as (url, calls), raw_session(url) as client:
        await client.hot(calls)
        for body in bodies:
            if b'"c__sleep"' in body:
                body = body.replace(b'"c__sleep"', b'"c__case"')
            with anyio.fail_after(60):
                response = await client.post(body)
            assert response.status_code < 500, (body, response.text)
        response = await client.call("last", "c__case", {"name": "text"})
        assert response.content == envelope("last", CASES["text"])
