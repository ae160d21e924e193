"""Calls in flight on the stdio hot path (`front.fast`), against `toolscore serve`: cancelled,
timed out, sharing an id, their server killed, and random traffic that gets one answer per request.

The machinery is tests/front/line_client.py's, shared with tests/front/test_fast.py.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURE_SERVER, write_config
from tests.fixtures.corpus_server import CASES
from tests.front.line_client import (
    Launch,
    appears,
    audit,
    corpus_config,
    gateway,
    result_bytes,
)

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


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
