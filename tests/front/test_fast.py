"""The stdio hot path for `tools/call` (`front.fast`, `downstream.raw`), against `toolscore serve`.

A client that speaks JSON-RPC lines by hand sees the exact bytes the gateway writes: a result the
downstream wrote in a shape the SDK would re-serialise must reach it byte for byte. Where the fast
path must not run (an older protocol version, result rules, tracing), the same case comes back
re-encoded, which shows which path answered. Calls in flight (cancelled, timed out, sharing an
id, their server killed, random traffic) are in tests/front/test_fast_flight.py, which one worker
runs beside this file; the client and the gateways are tests/front/line_client.py's.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import TOOLSCORE, fixture_entry, wait_for, write_config
from tests.fixtures.corpus_server import CASES, ENVELOPES
from tests.front.line_client import (
    Launch,
    audit,
    corpus_config,
    gateway_in_process,
    result_bytes,
)

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


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


async def test_a_json_rpc_error_from_the_server_becomes_a_tool_error(tmp_path: Path, launch: Launch) -> None:
    async with launch(corpus_config(tmp_path)) as client:
        line = await client.call(1, "c__rpc_error", {})
    answer = json.loads(line)["result"]
    assert answer["isError"] is True
    assert "answered the call to 'rpc_error' with an error: no tool rpc_error here (code -32602)" in str(answer)


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
