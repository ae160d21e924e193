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
