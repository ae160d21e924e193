"""The express lane (`front.express`): plain passthrough calls sent from the front's reader and
answered from the server's, checked against the hot path they would otherwise take.

A call with a `_meta` member (even an empty one) takes the hot path, so sending the same call
with and without it compares the two paths on one gateway.
"""

from __future__ import annotations

import json
import select
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import fixture_entry, write_config
from tests.fixtures.corpus_server import CASES
from tests.front.line_client import LineClient, appears, audit, corpus_config, gateway_in_process, result_bytes
from toolscore.front.express import ExpressLane

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

# What differs between two records of the same call: when, which, and how long.
_PER_CALL = {"time", "call_id", "request_id", "duration_ms", "estimated_tokens", "prev"}  # prev: the audit chain link


async def _lane(client: LineClient) -> ExpressLane:
    """The client's lane, once the SDK has handled the end of its handshake."""
    assert client.fast is not None
    with anyio.fail_after(60):
        while client.fast.lane is None:  # noqa: ASYNC110 - nothing to wait on but the attribute
            await anyio.sleep(0.01)
    return client.fast.lane


def _steady(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in _PER_CALL}


async def test_the_lane_answers_and_audits_as_the_hot_path_does(tmp_path: Path) -> None:
    config = corpus_config(tmp_path)
    data = json.loads(config.read_text())
    data["mcpServers"]["c"]["timeout"] = 0.5
    config.write_text(json.dumps(data))
    calls: list[tuple[str, dict[str, Any]]] = [
        *(("c__case", {"name": name}) for name in CASES),
        ("c__rpc_error", {}),  # the server's JSON-RPC error: a tool error naming it
        ("c__sleep", {"seconds": 30}),  # past the deadline: the timeout's error, the server told
    ]
    async with gateway_in_process(config) as client:
        lane = await _lane(client)
        for n, (name, arguments) in enumerate(calls):
            express = await client.call(2 * n, name, arguments)
            hot = await client.call(2 * n + 1, name, arguments, _meta={})
            assert result_bytes(express, 2 * n) == result_bytes(hot, 2 * n + 1), name
        assert lane.sent == len(calls) and not len(lane)
        await appears(tmp_path / "cancelled.log")
    records = audit(tmp_path)
    assert len(records) == 2 * len(calls)
    for express_record, hot_record in zip(records[::2], records[1::2], strict=True):
        assert _steady(express_record) == _steady(hot_record)
    assert records[-2]["error_kind"] == "timeout" and "did not answer within 0.5 s" in records[-2]["error"]
    withdrawn = [json.loads(line) for line in (tmp_path / "cancelled.log").read_text().splitlines()]
    assert len(withdrawn) == 2 and all(sent.startswith("toolscore.") for sent in withdrawn)


async def test_a_cancelled_express_call_gets_no_answer(tmp_path: Path) -> None:
    async with gateway_in_process(corpus_config(tmp_path)) as client:
        lane = await _lane(client)
        await client.start(1, "c__sleep", {"seconds": 30})
        with anyio.fail_after(60):
            while not len(lane):  # noqa: ASYNC110 - nothing to wait on but the table
                await anyio.sleep(0.01)
        await client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
        assert result_bytes(await client.call(2, "c__case", {"name": "text"}), 2) == CASES["text"]
        await appears(tmp_path / "cancelled.log")
        assert lane.sent == 2
    assert client.other == []
    assert [r["error_kind"] for r in audit(tmp_path) if r["tool"] == "c__sleep"] == ["cancelled"]


async def test_a_client_gone_mid_call_has_its_express_calls_withdrawn(tmp_path: Path) -> None:
    async with gateway_in_process(corpus_config(tmp_path)) as client:
        lane = await _lane(client)
        for n in range(3):
            await client.start(n, "c__sleep", {"seconds": 30})
        with anyio.fail_after(60):
            while len(lane) < 3:  # noqa: ASYNC110 - nothing to wait on but the table
                await anyio.sleep(0.01)
    # The client's end of input closed the front: every call is audited, and its server told.
    assert [r["error_kind"] for r in audit(tmp_path)] == ["cancelled"] * 3
    await appears(tmp_path / "cancelled.log")


async def test_calls_ended_before_they_are_sent_are_answered_on_the_lane_as_on_the_hot_path(tmp_path: Path) -> None:
    # Arguments the schema refuses, and a call over its caller's cap: the same phases end both
    # lanes' calls, with the same words and the same audit record.
    config = corpus_config(tmp_path)
    data = json.loads(config.read_text())
    data.setdefault("toolscore", {})["max_calls_in_flight"] = 1
    config.write_text(json.dumps(data))
    async with gateway_in_process(config) as client:
        lane = await _lane(client)
        express = await client.call(1, "c__case", {"name": 7})
        hot = await client.call(2, "c__case", {"name": 7}, _meta={})
        assert result_bytes(express, 1) == result_bytes(hot, 2)
        assert json.loads(express)["result"]["isError"] is True
        await client.start(3, "c__sleep", {"seconds": 30})  # holds the caller's one slot
        with anyio.fail_after(60):
            while not len(lane):  # noqa: ASYNC110 - nothing to wait on but the table
                await anyio.sleep(0.01)
        over = await client.call(4, "c__case", {"name": "text"})
        over_hot = await client.call(5, "c__case", {"name": "text"}, _meta={})
        assert result_bytes(over, 4) == result_bytes(over_hot, 5)
        assert "max_calls_in_flight" in json.loads(over)["result"]["content"][0]["text"]
        assert lane.sent == 1  # only the call that went to the server
        await client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}})
    records = [r for r in audit(tmp_path) if r["tool"] == "c__case"]
    assert len(records) == 4
    assert _steady(records[0]) == _steady(records[1]) and records[0]["error_kind"] == "invalid_arguments"
    assert _steady(records[2]) == _steady(records[3]) and records[2]["error_kind"] == "rejected"


async def test_calls_the_lane_cannot_vouch_for_take_the_hot_path(tmp_path: Path) -> None:
    servers = {"c": json.loads(corpus_config(tmp_path).read_text())["mcpServers"]["c"]}
    servers["iso"] = fixture_entry(tmp_path, isolation="session")
    async with gateway_in_process(write_config(tmp_path, servers)) as client:
        lane = await _lane(client)
        progress = await client.call(1, "c__progress", {"steps": 1}, _meta={"progressToken": "t"})
        assert result_bytes(progress, 1) == CASES["text"]
        invalid = json.loads(await client.call(2, "c__case", {"name": 7}))["result"]
        assert invalid["isError"] is True and "name" in invalid["content"][0]["text"]
        isolated = json.loads(await client.call(3, "iso__echo", {"text": "hi"}))["result"]
        assert isolated["content"][0]["text"] == "hi"
        # A request longer than the server's pipe takes whole at once: the hot path writes it.
        long = await client.call(4, "c__sleep", {"seconds": 0, "padding": "x" * select.PIPE_BUF})
        assert result_bytes(long, 4) == CASES["text"]
        assert lane.sent == 0


async def test_hooks_close_the_lane(tmp_path: Path) -> None:
    config = corpus_config(tmp_path, constraints={"enabled": True, "tools": {"deny": ["c__nothing"]}})
    async with gateway_in_process(config) as client:
        assert result_bytes(await client.call(1, "c__case", {"name": "text"}), 1) == CASES["text"]
        assert client.fast is not None and client.fast.lane is None  # the handshake is handled: no lane
