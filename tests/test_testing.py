"""`toolscore.testing`: in-process servers behind a real gateway, and the recording hook."""

from __future__ import annotations

import mcp_types
import pytest
import structlog
from mcp import Client

from toolscore.testing import FakeDownstream, RecordingHook, memory_config, running_gateway

pytestmark = pytest.mark.anyio

TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def fake() -> FakeDownstream:
    server = FakeDownstream("fx")

    @server.tool(schema=TEXT, annotations=mcp_types.ToolAnnotations(read_only_hint=True))
    async def echo(text: str) -> str:
        """Say it back."""
        return text

    @server.tool(schema={"type": "object", "properties": {"a": {"type": "integer"}}})
    def double(a: int) -> dict[str, int]:
        return {"value": 2 * a}

    return server


async def test_a_fake_downstream_is_a_real_server_behind_the_gateway() -> None:
    server = fake()
    async with running_gateway({"fx": server}) as (gateway, audit), Client(gateway.server, mode="legacy") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["fx__echo"].description == "Say it back." and tools["fx__echo"].annotations is not None
        echoed = await client.call_tool("fx__echo", {"text": "hi"})
        doubled = await client.call_tool("fx__double", {"a": 21})
        refused = await client.call_tool("fx__echo", {"text": 7})
    assert echoed.content[0].text == "hi"  # type: ignore[union-attr]
    assert doubled.structured_content == {"value": 42}
    assert refused.is_error  # validated by the engine: never reached the fake
    assert server.calls == [("echo", {"text": "hi"}), ("double", {"a": 21})]
    assert [r.tool for r in audit.records] == ["fx__echo", "fx__double", "fx__echo"]


async def test_the_recording_hook_sees_every_phase_in_order() -> None:
    hook = RecordingHook()
    config = memory_config(["fx"], constraints={"enabled": True})
    async with running_gateway(
        {"fx": fake()}, config=config, pre_hooks=[hook], wrap_hooks=[hook], post_hooks=[hook]
    ) as (
        gateway,
        _,
    ):
        await gateway.engine.execute("fx__echo", {"text": "x"})
    assert hook.events == [
        ("pre_execution", "fx__echo"),
        ("execution", "fx__echo"),
        ("returned", "fx__echo"),
        ("post_execution", "fx__echo"),
    ]


def test_captured_logs_sees_a_logger_the_gateway_already_cached() -> None:
    """`structlog.testing.capture_logs` misses a logger used before it (cache_logger_on_first_use):
    what a test captured depended on the tests before it."""
    from toolscore._logging import configure_logging
    from toolscore.testing import captured_logs

    before = structlog.get_config()
    saved = list(before["processors"])
    configure_logging("info")
    try:
        logger = structlog.get_logger("toolscore.test-cache")
        logger.info("first use caches the logger")
        with captured_logs() as logs:
            logger.warning("seen", n=1)
    finally:
        before["processors"][:] = saved
        structlog.configure(**before)
    assert [(e["event"], e["n"]) for e in logs] == [("seen", 1)]


def test_captured_logs_sees_a_logger_cached_before_logging_was_set_up_again() -> None:
    """Each in-process CLI run sets logging up: a logger cached under an earlier set-up was missed."""
    from toolscore._logging import configure_logging
    from toolscore.testing import captured_logs

    before = structlog.get_config()
    saved = list(before["processors"])
    configure_logging("info")
    try:
        logger = structlog.get_logger("toolscore.test-again")
        logger.info("first use caches the logger")
        configure_logging("info")
        with captured_logs() as logs:
            logger.warning("seen", n=2)
    finally:
        before["processors"][:] = saved
        structlog.configure(**before)
    assert [(e["event"], e["n"]) for e in logs] == [("seen", 2)]
