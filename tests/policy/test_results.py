"""What comes back: results over the limit are cut with a marker or refused, and secrets are redacted."""

from __future__ import annotations

from pathlib import Path

import mcp_types
import pytest

from tests.conftest import text
from tests.policy import config, context, policy_client, refused, route
from toolscore.errors import Rejected
from toolscore.policy.redact import REDACTED, Redactor
from toolscore.policy.results import ResultChecks, redacted, result_rules, truncated
from toolscore.policy.scope import resolve_scopes

pytestmark = pytest.mark.anyio

SECRET = "sk-proj-" + "a1b2c3d4" * 4


def result(*texts: str, structured: dict[str, object] | None = None) -> mcp_types.CallToolResult:
    blocks: list[mcp_types.ContentBlock] = [mcp_types.TextContent(text=t) for t in texts]
    return mcp_types.CallToolResult(content=blocks, structured_content=structured)


def texts(result: mcp_types.CallToolResult) -> list[str]:
    return [b.text for b in result.content if isinstance(b, mcp_types.TextContent)]


async def test_results_are_truncated_or_refused_over_the_limit(tmp_path: Path) -> None:
    async with policy_client(tmp_path, {"results": {"max_bytes": 100}}) as (client, _):
        cut = await client.call_tool("fx__large", {"size": 1000})
        assert not cut.is_error and text(cut).startswith("x" * 100)
        assert "truncated by toolscore: 900 more bytes" in text(cut)
    async with policy_client(tmp_path, {"results": {"max_bytes": 100, "on_exceed": "reject"}}) as (client, _):
        big = await client.call_tool("fx__large", {"size": 1000})
        assert refused(big, "results") and "the result is 1000 bytes" in text(big)


def test_truncation_shares_the_limit_across_blocks_and_keeps_other_blocks() -> None:
    image = mcp_types.ImageContent(data="aGVsbG8=", mime_type="image/png")
    whole = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text="abcdef"), image, mcp_types.TextContent(text="ghij")],
        structured_content={"all": "of it"},
    )
    cut = truncated(whole, 8)
    assert texts(cut) == ["abcdef", "gh\n…[truncated by toolscore: 2 more bytes]"]
    assert cut.content[1] == image
    assert cut.structured_content is None  # it would carry the whole result past the limit


def test_truncation_never_splits_a_character() -> None:
    assert texts(truncated(result("é" * 3), 3)) == ["é\n…[truncated by toolscore: 3 more bytes]"]
    assert texts(truncated(result("ab", "cd"), 2)) == ["ab", "\n…[truncated by toolscore: 2 more bytes]"]


def test_a_result_without_secrets_is_passed_on_as_it_is() -> None:
    clean = result("nothing to see", structured={"sum": 3})
    assert redacted(clean, Redactor()) is clean


def test_secrets_are_redacted_in_text_and_structured_content() -> None:
    leaky = result("public", f"key {SECRET}", structured={"token": SECRET, "n": 1})
    clean = redacted(leaky, Redactor())
    assert texts(clean) == ["public", f"key {REDACTED}"]
    assert clean.structured_content == {"token": REDACTED, "n": 1}
    assert redacted(result(structured={"k": SECRET}), Redactor()).structured_content == {"k": REDACTED}


async def test_each_server_gets_the_results_section_in_force_on_it() -> None:
    cfg = config({"results": {"redact": True}}, fx={"constraints": {"results": {"max_bytes": 5}}}, gx={})
    hook = result_rules(resolve_scopes(cfg))
    assert isinstance(hook, ResultChecks)
    long = result(f"{SECRET} and more")
    with_limit = await hook(context(route(cfg, "fx__echo")), long)
    assert texts(with_limit) == [f"sk-pr\n…[truncated by toolscore: {len(SECRET) + 4} more bytes]"]  # fx: its own
    assert texts(await hook(context(route(cfg, "gx__echo")), long)) == [f"{REDACTED} and more"]  # gx: global


async def test_refusal_names_the_size_and_the_limit() -> None:
    cfg = config({"results": {"max_bytes": 3, "on_exceed": "reject"}})
    hook = result_rules(resolve_scopes(cfg))
    assert hook is not None
    with pytest.raises(Rejected, match="the result is 4 bytes; the limit is 3"):
        await hook(context(route(cfg, "fx__echo")), result("ab", "cd"))
    assert texts(await hook(context(route(cfg, "fx__echo")), result("abc"))) == ["abc"]


async def test_a_result_with_a_lone_surrogate_is_measured_and_cut_not_a_crash() -> None:
    cfg = config({"results": {"max_bytes": 4}})
    hook = result_rules(resolve_scopes(cfg))
    assert hook is not None
    cut = texts(await hook(context(route(cfg, "fx__echo")), result("a\ud800bc")))
    assert cut == ["a\n…[truncated by toolscore: 2 more bytes]"]


def test_no_results_section_in_force_anywhere_means_no_hook() -> None:
    assert result_rules(resolve_scopes(config({}))) is None
    assert result_rules(resolve_scopes(config({}, fx={"constraints": {"results": {"redact": True}}}))) is not None
