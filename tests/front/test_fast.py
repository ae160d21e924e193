"""The stdio hot path for `tools/call` (`front.fast`, `downstream.raw`), against `toolscore serve`.

A client that speaks JSON-RPC lines by hand sees the exact bytes the gateway writes: a result the
downstream wrote in a shape the SDK would re-serialise must reach it byte for byte. Where the fast
path must not run (an older protocol version, result rules, tracing), the same case comes back
re-encoded, which shows which path answered.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters

from tests.conftest import FIXTURE_SERVER, TOOLSCORE, fixture_entry, wait_for, write_config
from tests.fixtures.corpus_server import CASES, ENVELOPES
from toolscore import load_config, open_gateway
from toolscore._lines import LineWriter, read_lines
from toolscore.front.fast import FastCalls
from toolscore.front.stdio import stdio_transport

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

CORPUS_SERVER = str(Path(__file__).parent.parent / "fixtures" / "corpus_server.py")
LATEST = "2025-11-25"
_LIMIT = 64 << 20


class LineClient:
    """A JSON-RPC client over the gateway's stdin/stdout that keeps every line as bytes."""

    def __init__(self, write: Callable[[bytes], Awaitable[object]], lines: AsyncIterator[bytes]) -> None:
        self._write = write
        self._lines = lines
        self.other: list[bytes] = []
        """Lines read while waiting for an answer (notifications, other answers)."""
        self.fast: FastCalls | None = None
        """The front's hot path, when the gateway runs in this process."""

    async def send(self, message: dict[str, Any] | bytes) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        await self._write(data + b"\n")

    async def line(self) -> bytes:
        return await anext(self._lines)

    async def answer(self, request_id: int | str) -> bytes:
        """The answer line for `request_id`; what came before it is kept in `other`."""
        with anyio.fail_after(60):
            while True:
                line = await self.line()
                if json.loads(line).get("id") == request_id and "method" not in json.loads(line):
                    return line
                self.other.append(line)

    async def start(self, request_id: int | str, name: str, arguments: dict[str, Any], **params: Any) -> None:
        """Send a `tools/call` without waiting for its answer."""
        request = {"name": name, "arguments": arguments, **params}
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": request})

    async def call(self, request_id: int | str, name: str, arguments: dict[str, Any], **params: Any) -> bytes:
        await self.start(request_id, name, arguments, **params)
        return await self.answer(request_id)

    async def handshake(self, version: str, capabilities: dict[str, Any] | None = None) -> None:
        hello = {
            "protocolVersion": version,
            "capabilities": capabilities or {},
            "clientInfo": {"name": "lines", "version": "1"},
        }
        await self.send({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": hello})
        await self.answer("init")
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})


async def _receive_lines(stream: BufferedByteReceiveStream) -> AsyncIterator[bytes]:
    while True:
        yield await stream.receive_until(b"\n", _LIMIT)


@asynccontextmanager
async def gateway(
    config: Path, *, version: str = LATEST, capabilities: dict[str, Any] | None = None
) -> AsyncIterator[LineClient]:
    """`toolscore serve` as a client starts it."""
    process = await anyio.open_process([TOOLSCORE, "serve", "--config", str(config)], stderr=sys.stderr)
    async with process:
        assert process.stdin is not None and process.stdout is not None
        client = LineClient(process.stdin.send, _receive_lines(BufferedByteReceiveStream(process.stdout)))
        await client.handshake(version, capabilities)
        try:
            yield client
        finally:
            await process.stdin.aclose()
            with anyio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
            await process.wait()


@asynccontextmanager
async def gateway_in_process(
    config: Path, *, version: str = LATEST, capabilities: dict[str, Any] | None = None, hot: bool = True
) -> AsyncIterator[LineClient]:
    """The same front on a pair of pipes in this process (its servers are still subprocesses);
    `hot=False`: without the hot path, every request the SDK's."""
    server_in, client_out = os.pipe()
    client_in, server_out = os.pipe()
    os.set_blocking(client_out, False)
    os.set_blocking(client_in, False)
    ended = anyio.Event()
    async with open_gateway(load_config(config)) as gw, anyio.create_task_group() as tg:
        await gw.hub.wait_started()

        async def serve() -> None:
            async with stdio_transport(server_in, server_out, fast=gw.server.fast if hot else None) as (read, write):
                await gw.server.run(read, write, gw.server.create_initialization_options())
            ended.set()

        tg.start_soon(serve)
        lines = (line async for line in read_lines(client_in, _LIMIT) if isinstance(line, bytes))
        client = LineClient(LineWriter(client_out).write, lines)
        client.fast = gw.server.fast
        await client.handshake(version, capabilities)
        try:
            yield client
        finally:
            os.close(client_out)  # end of input: the front ends, as on stdin EOF
            with anyio.move_on_after(10):
                await ended.wait()
            tg.cancel_scope.cancel()
    for fd in (server_in, server_out, client_in):
        os.close(fd)


Launch = Callable[..., AbstractAsyncContextManager[LineClient]]


@pytest.fixture(params=["process", "in-process"])
def launch(request: pytest.FixtureRequest) -> Launch:
    """`toolscore serve` as a client runs it, and the same front in this process (measured by coverage)."""
    return gateway if request.param == "process" else gateway_in_process


def corpus_config(tmp_path: Path, **sections: Any) -> Path:
    env = {"CORPUS_LOG": str(tmp_path / "cancelled.log")}
    servers = {"c": {"command": sys.executable, "args": [CORPUS_SERVER], "env": env}}
    return write_config(tmp_path, servers, **sections)


def result_bytes(line: bytes, request_id: int) -> bytes:
    """The `result` of an answer the gateway wrote in its own envelope."""
    head = b'{"jsonrpc":"2.0","id":' + str(request_id).encode() + b',"result":'
    assert line.startswith(head) and line.endswith(b"}"), line[:200]
    return line[len(head) : -1]


async def appears(path: Path) -> None:
    """Wait for a file another process writes."""
    with anyio.fail_after(60):
        while not path.exists():  # noqa: ASYNC110 - nothing to wait on but the file system
            await anyio.sleep(0.05)


def audit(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]


async def test_every_corpus_result_reaches_the_client_byte_for_byte(tmp_path: Path, launch: Launch) -> None:
    async with launch(corpus_config(tmp_path)) as client:
        n = 0
        for envelope in ENVELOPES:
            for name, expected in CASES.items():
                n += 1
                line = await client.call(n, "c__case", {"name": name, "envelope": envelope})
                assert result_bytes(line, n) == expected, (name, envelope)
                json.loads(line)  # and the envelope around them is JSON
        n += 1  # a tool with an outputSchema: the structured result is not re-checked or rebuilt
        assert result_bytes(await client.call(n, "c__with_schema", {}), n) == CASES["structured"]
    records = [r for r in audit(tmp_path) if r["tool"] == "c__case"]
    assert len(records) == len(ENVELOPES) * len(CASES)
    assert {r["success"] for r in records if r["argument_names"]} == {True, False}  # the isError case counts
    large = next(r for r in records if r["actual_tokens"] > 1_000_000)
    arguments = len(json.dumps({"name": "large", "envelope": "compact"}, separators=(",", ":")))
    assert large["actual_tokens"] == -(-5 * (1 << 20) // 4) + -(-arguments // 4)  # 5 MiB of text, and the arguments


async def test_an_older_protocol_version_gets_the_sdks_reencoded_result(tmp_path: Path, launch: Launch) -> None:
    # The SDK sieves results per version; bytes negotiated at another version are not passed on.
    async with launch(corpus_config(tmp_path), version="2025-06-18") as client:
        line = await client.call(1, "c__case", {"name": "spaced"})
        assert result_bytes(line, 1) != CASES["spaced"]
        assert json.loads(line)["result"]["content"] == json.loads(CASES["spaced"])["content"]


async def test_result_rules_make_the_call_take_the_model_path(tmp_path: Path, launch: Launch) -> None:
    constraints = {"enabled": True, "results": {"redact": True, "redact_patterns": ["caf\u00e9"]}}
    async with launch(corpus_config(tmp_path, constraints=constraints)) as client:
        line = await client.call(1, "c__case", {"name": "unicode"})
    text = json.loads(line)["result"]["content"][0]["text"]
    assert "caf\u00e9" not in text and "\U0001f600" in text  # redacted: the rule saw the result
    assert b'"resultType"' not in line  # dumped as the SDK does for this version (2026-07-28 has it)


async def test_progress_reaches_the_client_before_the_answer(tmp_path: Path, launch: Launch) -> None:
    async with launch(corpus_config(tmp_path)) as client:
        line = await client.call(7, "c__progress", {"steps": 3}, _meta={"progressToken": "tok"})
        assert result_bytes(line, 7) == CASES["text"]
        notes = [json.loads(other) for other in client.other]
    assert [(n["method"], n["params"]["progressToken"], n["params"]["progress"]) for n in notes] == [
        ("notifications/progress", "tok", 1),
        ("notifications/progress", "tok", 2),
        ("notifications/progress", "tok", 3),
    ]


async def test_a_cancelled_call_gets_no_answer_and_is_cancelled_downstream(tmp_path: Path, launch: Launch) -> None:
    async with launch(corpus_config(tmp_path)) as client:
        await client.start(1, "c__sleep", {"seconds": 30})
        await appears(tmp_path / "cancelled.log.sleeping")  # the call is at the server
        await client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
        line = await client.call(2, "c__case", {"name": "text"})  # the next call is answered; 1 never is
        assert result_bytes(line, 2) == CASES["text"]
        await appears(tmp_path / "cancelled.log")
    assert client.other == []
    sent = json.loads((tmp_path / "cancelled.log").read_text().splitlines()[0])
    assert isinstance(sent, str) and sent.startswith("toolscore.")  # the gateway's own id space
    assert [r["error_kind"] for r in audit(tmp_path) if r["tool"] == "c__sleep"] == ["cancelled"]


@pytest.mark.parametrize("meta", [False, True], ids=["express", "hot"])
async def test_calls_that_share_an_id_in_flight_are_each_answered(tmp_path: Path, launch: Launch, meta: bool) -> None:
    """A client that reuses an id while its call is out (a bug, or an attack) gets an answer to each
    call, and the gateway goes on: the first takes the fast path, the others the SDK's."""
    params: dict[str, Any] = {"name": "c__sleep", "arguments": {"seconds": 0.3}} | ({"_meta": {}} if meta else {})
    request = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}).encode()
    async with launch(corpus_config(tmp_path)) as client:
        await client.send(b"\n".join([request] * 3))  # one write: all three are read before any is answered
        answers = [json.loads(await client.answer(7)) for _ in range(3)]
        line = await client.call(8, "c__case", {"name": "text"})
    # The SDK's answers are its own encoding of the same result (it writes `isError: false`).
    assert [a["result"]["content"] for a in answers] == [json.loads(CASES["text"])["content"]] * 3
    assert result_bytes(line, 8) == CASES["text"]


async def test_a_call_cancelled_before_a_worker_starts_it_never_runs(tmp_path: Path, launch: Launch) -> None:
    """The call and its cancellation in one read: the hot path's call is in flight from the moment
    it is read, so the cancellation finds it, and it is neither sent to the server nor answered."""
    params = {"name": "c__sleep", "arguments": {"seconds": 0.2}, "_meta": {}}  # `_meta`: the hot path's
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    async with launch(corpus_config(tmp_path)) as client:
        await client.send(json.dumps(call).encode() + b"\n" + json.dumps(cancel).encode())
        await anyio.sleep(0.5)  # past the sleep: an answer to 1 would have come by now
        line = await client.call(2, "c__case", {"name": "text"})
    assert client.other == []
    assert result_bytes(line, 2) == CASES["text"]
    assert [r["tool"] for r in audit(tmp_path)] == ["c__case"]


async def test_a_deadline_cancels_the_call_downstream(tmp_path: Path, launch: Launch) -> None:
    config = corpus_config(tmp_path)
    data = json.loads(config.read_text())
    data["mcpServers"]["c"]["timeout"] = 0.5
    config.write_text(json.dumps(data))
    async with launch(config) as client:
        line = await client.call(1, "c__sleep", {"seconds": 30})
        await appears(tmp_path / "cancelled.log")
    answer = json.loads(line)["result"]
    assert answer["isError"] is True and "did not answer within 0.5 s" in answer["content"][0]["text"]


async def test_a_server_killed_mid_call_gives_that_call_an_error(tmp_path: Path) -> None:
    servers = {"fx": {"command": sys.executable, "args": [FIXTURE_SERVER], "env": {"FIXTURE_STATE_DIR": str(tmp_path)}}}
    async with gateway(write_config(tmp_path, servers)) as client:
        pid = json.loads(await client.call(1, "fx__pid", {}))["result"]["content"][0]["text"]
        await client.start(2, "fx__sleep", {"seconds": 600, "tag": "mid"})
        await appears(tmp_path / "sleeping-mid")  # the call is at the server
        os.kill(int(pid), signal.SIGKILL)
        answer = json.loads(await client.answer(2))["result"]
    assert answer["isError"] is True and "closed the connection" in answer["content"][0]["text"]


async def test_a_json_rpc_error_from_the_server_becomes_a_tool_error(tmp_path: Path, launch: Launch) -> None:
    async with launch(corpus_config(tmp_path)) as client:
        line = await client.call(1, "c__rpc_error", {})
    answer = json.loads(line)["result"]
    assert answer["isError"] is True
    assert "answered the call to 'rpc_error' with an error: no tool rpc_error here (code -32602)" in str(answer)


_ids = st.one_of(
    st.integers(-(2**40), 2**40),
    st.text(max_size=8),
    st.none(),
    st.booleans(),
    st.floats(),
    st.lists(st.integers(), max_size=2),
)
_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
_params = st.fixed_dictionaries(
    {"name": st.sampled_from(["c__case", "c__with_schema", "orchestrate", "nope", "c__progress"])},
    optional={"arguments": _values, "_meta": _values, "task": _values},
)


_batches = st.lists(st.tuples(_ids, _params, st.sampled_from(["tools/call", "tools/cal", "TOOLS/CALL"])), max_size=40)


@pytest.mark.parametrize("examples", [pytest.param(3, id="short"), pytest.param(25, id="long", marks=pytest.mark.soak)])
def test_random_traffic_gets_exactly_one_answer_per_request(
    tmp_path_factory: pytest.TempPathFactory, examples: int
) -> None:
    # Each example starts a gateway and its server: the short run's examples differ from run to
    # run, the `soak` run (CI) draws more.
    @settings(max_examples=examples, deadline=None)
    @given(batch=_batches)
    def answered_once(batch: list[Any]) -> None:
        anyio.run(_random_traffic, tmp_path_factory.mktemp("fuzz"), batch)

    answered_once()


async def _random_traffic(tmp_path: Path, batch: list[Any]) -> None:
    async with gateway(corpus_config(tmp_path)) as client:
        expected: dict[str, int] = {}
        for n, (request_id, params, method) in enumerate(batch):
            message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
            if request_id is not None:
                message["id"] = request_id
            if isinstance(params.get("arguments"), dict) and params["name"] == "c__case":
                params["arguments"] = {"name": "text"}
            await client.send(json.dumps(message).encode())
            if request_id is not None:
                key = json.dumps(request_id)
                expected[key] = expected.get(key, 0) + 1
            if n % 4 == 0:
                await client.send(
                    b'{"jsonrpc":"2.0","method":"tools/call","params":{"name":"c__case"},"id":'
                )  # cut short
        await client.send({"jsonrpc": "2.0", "id": "last", "method": "ping"})
        await client.answer("last")

        def answers() -> dict[str, int]:
            counts: dict[str, int] = {}
            for line in client.other:
                message = json.loads(line)
                if "method" not in message:
                    key = json.dumps(message.get("id"))
                    counts[key] = counts.get(key, 0) + 1
            return counts

        # Every request with a valid id is answered once; invalid ids and cut lines get id-less
        # errors. A call may still be running after the ping: wait for each answer (the bound only
        # detects a hang), then a second ping round trip lets an answer sent twice show.
        unique = {
            key
            for key, count in expected.items()
            if count == 1 and isinstance(json.loads(key), str | int) and not isinstance(json.loads(key), bool)
        }
        with anyio.fail_after(60):
            while not unique <= answers().keys():
                client.other.append(await client.line())
        await client.send({"jsonrpc": "2.0", "id": "flush", "method": "ping"})
        await client.answer("flush")
    counts = answers()
    for key in unique:
        assert counts[key] == 1, (key, client.other)


async def test_sampling_elicitation_and_logs_of_a_fast_call_reach_the_client(tmp_path: Path) -> None:
    # The downstream's requests during a call go to the client through the context the fast path made.
    conformance = str(Path(__file__).parent.parent / "fixtures" / "conformance_server.py")
    servers = {"cf": {"command": sys.executable, "args": [conformance], "prefix": ""}}
    config = write_config(tmp_path, servers)
    logs: list[str] = []

    async def sample(context: Any, params: mcp_types.CreateMessageRequestParams) -> mcp_types.CreateMessageResult:
        return mcp_types.CreateMessageResult(
            role="assistant", content=mcp_types.TextContent(text="forty-two"), model="test-model"
        )

    async def elicit(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        return mcp_types.ElicitResult(action="decline")

    async def log(params: mcp_types.LoggingMessageNotificationParams) -> None:
        logs.append(str(params.data))

    params = StdioServerParameters(command=TOOLSCORE, args=["serve", "--config", str(config)])
    async with Client(
        params, mode="legacy", sampling_callback=sample, elicitation_callback=elicit, logging_callback=log
    ) as client:
        sampled = await client.call_tool("test_sampling", {"prompt": "the answer?"})
        declined = await client.call_tool("test_elicitation", {"message": "name?"})
        await client.call_tool("test_tool_with_logging", {})
    assert "forty-two" in str(sampled.content)
    assert not sampled.is_error and not declined.is_error and "decline" in str(declined.content)
    assert len(logs) == 3


async def test_a_destructive_call_asks_the_user_through_the_fast_path(tmp_path: Path, launch: Launch) -> None:
    # The gateway's own question (policy `destructive: confirm`) goes to the client tied to the call.
    constraints = {"enabled": True, "destructive": "confirm"}
    config = write_config(tmp_path, {"fx": fixture_entry(tmp_path)}, constraints=constraints)
    async with launch(config, capabilities={"elicitation": {}}) as client:
        answers = {"yes": {"action": "accept", "content": {"confirm": True}}, "no": {"action": "decline"}}
        results = {}
        for n, (key, answer) in enumerate(answers.items(), 1):
            await client.start(n, "fx__delete", {"key": key})
            question = json.loads(await client.line())
            assert question["method"] == "elicitation/create" and "fx__delete" in question["params"]["message"]
            await client.send({"jsonrpc": "2.0", "id": question["id"], "result": answer})
            results[key] = json.loads(await client.answer(n))["result"]
    assert not results["yes"].get("isError") and (tmp_path / "deleted-yes").exists()
    assert results["no"]["isError"] is True and not (tmp_path / "deleted-no").exists()


async def test_a_plan_takes_the_hot_path_and_answers_as_the_sdk_path_does(tmp_path: Path) -> None:
    # Only the request and the answer skip the models: the plan runs as on the SDK path, and its
    # answer has the same bytes but for its ids and timings.
    config = write_config(tmp_path, {"fx": fixture_entry(tmp_path, env={"FIXTURE_EXTRA_TOOLS": "hold"})})
    plan = (
        '<fx><hold>{"text": "first"}</hold></fx>'
        '<parallel><fx><echo>{"text": "a"}</echo></fx><fx><add>{"a": 1, "b": 2}</add></fx></parallel>'
        "<execute_tools />"
    )
    answers: list[bytes] = []
    for hot in (True, False):
        async with gateway_in_process(config, hot=hot) as client:
            assert client.fast is not None
            await client.start(1, "orchestrate", {"plan": plan})
            await wait_for((tmp_path / "held-first").exists)  # the first step holds: the plan is running
            assert bool(client.fast._running) == hot  # on the hot path, or not
            (tmp_path / "release-first").write_text("go")
            answers.append(_steady(result_bytes(await client.answer(1), 1)))
        (tmp_path / "held-first").unlink()
        (tmp_path / "release-first").unlink()
    assert b"<result" in answers[0] and b'{\\"sum\\": 3}' in answers[0]
    assert answers[0] == answers[1]


def _steady(data: bytes) -> bytes:
    """A plan's answer without what differs between two runs: episode and plan ids, milliseconds."""
    data = re.sub(rb'(episode id=\\"|"episode":"|"plan_id":")[0-9a-f]+', rb"\1ID", data)
    return re.sub(rb'(ms=\\"|"ms":)[0-9.]+', rb"\g<1>0", data)
