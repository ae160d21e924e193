"""What the hot path reads of a result it keeps as bytes: the same figures the models give, or a refusal."""

from __future__ import annotations

import json
import os
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import MCPError

from toolscore._lines import LineWriter
from toolscore._tokens import result_tokens, tokens_for_chars
from toolscore.downstream.raw import RawChannel, RawResult, read_result

BIG = "x" * 300_001


def _result(*content: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"content": list(content), **extra}


KEPT = {
    "plain ascii": _result({"type": "text", "text": BIG}),
    "escapes": _result({"type": "text", "text": 'a "quoted"\n\\ line\t' * 1000}),
    "non-ascii": _result({"type": "text", "text": "héllo wörld 🎉 " * 100}),
    "image": _result({"type": "image", "data": "aGVsbG8=" * 50, "mimeType": "image/png"}),
    "audio": _result({"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}),
    "resource text": _result({"type": "resource", "resource": {"uri": "file:///a", "text": "é\u2028x"}}),
    "resource blob": _result({"type": "resource", "resource": {"uri": "file:///b", "blob": "AAAA"}}),
    "empty text": _result({"type": "text", "text": ""}),
    "structured only": _result(structuredContent={"a": [1, 2, {"b": "c"}]}),
    "error": _result({"type": "text", "text": "no"}, isError=True),
    "several": _result({"type": "text", "text": "a"}, {"type": "text", "text": "é" * 7}),
}


@pytest.mark.parametrize("case", KEPT)
def test_a_kept_result_counts_what_the_models_count(case: str) -> None:
    # Escaped or not, as a server may write it: a string's count must not depend on the spelling.
    # (structuredContent counts as written: compact here, as the models' count dumps it.)
    spellings = [json.dumps(KEPT[case], ensure_ascii=ascii, separators=(",", ":")) for ascii in (True, False)]
    for data in (text.encode() for text in spellings):
        kept = read_result(data)
        assert kept is not None, case
        model = mcp_types.CallToolResult.model_validate_json(data)
        assert tokens_for_chars(kept.chars) == result_tokens(model), case
        assert kept.is_error == model.is_error
        assert kept.data is data


REFUSED = {
    "null text": b'{"content":[{"type":"text","text":null}]}',
    "number text": b'{"content":[{"type":"text","text":5}]}',
    "no text": b'{"content":[{"type":"text"}]}',
    "image without mimeType": b'{"content":[{"type":"image","data":"AA=="}]}',
    "resource with text and blob": b'{"content":[{"type":"resource","resource":{"uri":"a","text":"x","blob":"AA"}}]}',
    "lone surrogate": b'{"content":[{"type":"text","text":"\\ud800"}]}',
    "invalid utf-8": b'{"content":[{"type":"text","text":"\xff"}]}',
    "unknown block": b'{"content":[{"type":"video","text":"x"}]}',
    "server stamp": b'{"content":[],"_meta":{"' + mcp_types.SERVER_INFO_META_KEY.encode() + b'":{"name":"s"}}}',
}


@pytest.mark.parametrize("case", REFUSED)
def test_what_the_fast_reading_cannot_vouch_for_goes_to_the_models(case: str) -> None:
    assert read_result(REFUSED[case]) is None


@pytest.mark.parametrize(
    ("data", "bare"),
    [
        (b'{"content":[]}', True),
        (b'{"content":[],"_meta":{"k":1}}', False),
        (b'{"content":[],"_meta":null}', False),
        (b'{"content":[],"resultType":"complete"}', False),
    ],
)
def test_a_result_is_bare_without_meta_or_result_type(data: bytes, bare: bool) -> None:
    # What the 2026-07-28 hot path splices after the last member must not repeat one (`front.http_modern`).
    kept = read_result(data)
    assert kept is not None and kept.bare is bare


def test_the_server_stamp_is_looked_for_in_meta_only() -> None:
    # The stamp's key inside a tool's text is the tool's business, not a reason to decode.
    data = json.dumps(_result({"type": "text", "text": mcp_types.SERVER_INFO_META_KEY})).encode()
    assert read_result(data) is not None


@pytest.mark.parametrize(
    "result",
    [
        _result({"type": "text", "text": "one"}, {"type": "text", "text": 'two \u00e9 \\ "q"'}),
        _result({"type": "image", "data": "aGk=", "mimeType": "image/png"}, {"type": "text", "text": "after"}),
        _result(
            {"type": "resource", "resource": {"uri": "file:///a", "text": "inside"}},
            structuredContent={"a": [1, 2.5, None, True], "b": {"c": "\u2603"}},
        ),
        _result(structuredContent={"n": 10**30}),
        _result({"type": "text", "text": "failed"}, isError=True),
    ],
)
def test_a_plan_step_reads_from_the_bytes_what_it_reads_from_the_model(result: dict[str, Any]) -> None:
    raw = read_result(json.dumps(result).encode())
    assert raw is not None
    model = raw.model()
    text = "\n".join(b.text for b in model.content if isinstance(b, mcp_types.TextContent))
    assert raw.readable() == (text, model.structured_content)


def test_a_result_only_the_models_can_read_is_left_to_them() -> None:
    # A list as structured content: the SDK's model takes it, the plan step then reads the model.
    raw = read_result(json.dumps(_result({"type": "text", "text": "x"}, structuredContent=[1, 2])).encode())
    assert raw is not None and raw.readable() is None


async def _answered(line_for: Any) -> RawResult | mcp_types.CallToolResult | Exception | None:
    """A call on a `RawChannel` over a real pipe, answered with the line `line_for(request_id)`;
    None: the channel left the line to the SDK (the call was then cancelled)."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    channel = RawChannel(LineWriter(write_fd), "s")
    outcome: list[RawResult | mcp_types.CallToolResult | Exception] = []

    async def call() -> None:
        try:
            outcome.append(await channel.call("echo", {"text": "hi"}, progress=None))
        except Exception as exc:  # the outcome under test
            outcome.append(exc)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(5):
                await anyio.wait_readable(read_fd)
            request = json.loads(os.read(read_fd, 1 << 16))
            line = line_for(request["id"])
            assert channel.claims(line)
            if not await channel.deliver(line):
                tg.cancel_scope.cancel()
    finally:
        os.close(read_fd)
        os.close(write_fd)
    return outcome[0] if outcome else None


def _id(request_id: str) -> bytes:
    return json.dumps(request_id).encode()


def _line(request_id: str, result: bytes, head: bytes = b'{"jsonrpc":"2.0","id":', end: bytes = b"}") -> bytes:
    return head + _id(request_id) + b',"result":' + result + end


@pytest.mark.anyio
@pytest.mark.parametrize("case", ["plain ascii", "escapes", "non-ascii", "structured only", "error"])
async def test_an_answer_in_the_sdks_order_is_kept_as_its_result_bytes(case: str) -> None:
    # Read in one pass over the result (the head and the last brace compared as bytes): the same
    # bytes, count and flag as the envelope's decoder and `read_result` give.
    result = json.dumps(KEPT[case], separators=(",", ":")).encode()
    kept = await _answered(lambda request_id: _line(request_id, result))
    assert isinstance(kept, RawResult)
    assert kept.data == result
    assert kept == read_result(result)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "line_for",
    [
        # Another member after the result: the envelope's decoder reads the line whole.
        pytest.param(lambda i: _line(i, b'{"content":[]}', end=b',"error":{"code":1,"message":"m"}}'), id="tail"),
        pytest.param(lambda i: _line(i, b'{"content":[]}', end=b',"id":"other"}'), id="id again"),
        # Members in another order, spaces: not the SDK's spelling, decoded as before.
        pytest.param(lambda i: b'{"result":{"content":[]},"jsonrpc":"2.0","id":%b}' % _id(i), id="order"),
        pytest.param(lambda i: _line(i, b'{"content":[]}', head=b'{"jsonrpc": "2.0", "id": '), id="spaces"),
        pytest.param(lambda i: _line(i, b'{"content":[]}', end=b"} "), id="trailing space"),
    ],
)
async def test_an_answer_in_another_spelling_is_read_by_the_envelopes_decoder(line_for: Any) -> None:
    outcome = await _answered(line_for)
    line = line_for("x")
    if b'"error"' in line:
        assert isinstance(outcome, MCPError)
    elif b'"other"' in line:  # the last `id` is the one read, as before: not this call's answer
        assert outcome is None
    else:
        assert isinstance(outcome, RawResult) and outcome.data == b'{"content":[]}'


@pytest.mark.anyio
async def test_a_result_the_fast_reading_refuses_in_the_sdks_order_goes_to_the_models() -> None:
    # A 2026-era server's stamp: valid, but only the models take it out.
    outcome = await _answered(lambda request_id: _line(request_id, REFUSED["server stamp"]))
    assert isinstance(outcome, mcp_types.CallToolResult)
    assert outcome.meta is not None
