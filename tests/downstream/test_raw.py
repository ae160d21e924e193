"""What the hot path reads of a result it keeps as bytes: the same figures the models give, or a refusal."""

from __future__ import annotations

import json
from typing import Any

import mcp_types
import pytest

from toolscore._tokens import result_tokens, tokens_for_chars
from toolscore.downstream.raw import read_result

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
