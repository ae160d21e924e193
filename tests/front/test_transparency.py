"""Resources, prompts, completion, logs, sampling and elicitation through the gateway.

A real client against the real front; the downstreams are the conformance fixture run as stdio
subprocesses (`--extras` adds a tool that announces a resource update and a resource whose read
kills the server).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client, MCPError

from tests.conftest import FIXTURES, make_config, running_gateway, wait_for
from toolscore import Gateway, MemoryAuditSink

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

CONFORMANCE = str(FIXTURES / "conformance_server.py")


def entry(**extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [CONFORMANCE, "--extras"], **extra}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def pair(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    """Two copies of one server: every URI and prompt name clashes but for the namespace."""
    config = make_config({"a": entry(), "b": entry()})
    async with running_gateway(config, tmp_path_factory.mktemp("pair")) as running:
        yield running


def texts(result: mcp_types.ReadResourceResult) -> list[str]:
    return [c.text for c in result.contents if isinstance(c, mcp_types.TextResourceContents)]


async def test_clashing_uris_and_prompt_names_are_namespaced_and_routed_back(
    pair: tuple[Gateway, MemoryAuditSink],
) -> None:
    gateway, sink = pair
    async with Client(gateway.server, mode="legacy") as client:
        caps = client.server_capabilities
        assert caps.resources is not None and caps.resources.subscribe
        assert caps.prompts is not None and caps.completions is not None and caps.logging is not None

        uris = {str(r.uri) for r in (await client.list_resources()).resources}
        assert {"toolscore://a/test://static-text", "toolscore://b/test://static-text"} <= uris
        read = await client.read_resource("toolscore://b/test://static-text")
        assert texts(read) == ["This is the content of the static text resource."]
        assert [str(c.uri) for c in read.contents] == ["toolscore://b/test://static-text"]
        assert sink.records[-1].tool == "resources/read" and sink.records[-1].server == "b"

        templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
        assert sorted(templates) == [
            "toolscore://a/test://template/{id}/data",
            "toolscore://b/test://template/{id}/data",
        ]
        data = await client.read_resource("toolscore://a/test://template/42/data")
        assert '"id": "42"' in texts(data)[0]

        names = {p.name for p in (await client.list_prompts()).prompts}
        assert {"a__test_simple_prompt", "b__test_simple_prompt"} <= names
        got = await client.get_prompt("b__test_prompt_with_arguments", {"arg1": "x", "arg2": "y"})
        first = got.messages[0].content
        assert isinstance(first, mcp_types.TextContent) and "arg1='x'" in first.text

        with pytest.raises(MCPError, match="missing required arguments: arg2"):
            await client.get_prompt("a__test_prompt_with_arguments", {"arg1": "x"})
        with pytest.raises(MCPError) as unknown:
            await client.read_resource("toolscore://a/test://nowhere")
        assert unknown.value.code == mcp_types.INVALID_PARAMS  # the server's own error, passed on
        with pytest.raises(MCPError, match="Resource not found"):
            await client.read_resource("toolscore://nobody/test://static-text")


async def test_a_raw_uri_expanded_from_a_prefixed_servers_template_reaches_it(tmp_path: Path) -> None:
    # What a client following a tool result's resource link sends: the server's own URI.
    config = make_config({"a": entry()})
    async with running_gateway(config, tmp_path) as (gateway, _), Client(gateway.server, mode="legacy") as client:
        read = await client.read_resource("test://template/42/data")
        assert '"id": "42"' in texts(read)[0]
        assert [str(c.uri) for c in read.contents] == ["toolscore://a/test://template/42/data"]


async def test_completion_is_routed_to_the_owner_of_the_prompt_or_template(
    pair: tuple[Gateway, MemoryAuditSink],
) -> None:
    gateway, _ = pair
    async with Client(gateway.server, mode="legacy") as client:
        prompt = mcp_types.PromptReference(name="a__test_prompt_with_arguments")
        done = await client.complete(prompt, {"name": "arg1", "value": ""})
        assert isinstance(done.completion.values, list)
        template = mcp_types.ResourceTemplateReference(uri="toolscore://b/test://template/{id}/data")
        await client.complete(template, {"name": "id", "value": "1"})
        with pytest.raises(MCPError, match="Unknown prompt"):
            await client.complete(mcp_types.PromptReference(name="zz__nope"), {"name": "x", "value": ""})


async def test_a_sampling_request_is_answered_by_the_calling_client(pair: tuple[Gateway, MemoryAuditSink]) -> None:
    gateway, _ = pair
    asked: list[mcp_types.CreateMessageRequestParams] = []

    async def sample(context: Any, params: mcp_types.CreateMessageRequestParams) -> mcp_types.CreateMessageResult:
        asked.append(params)
        return mcp_types.CreateMessageResult(
            role="assistant", content=mcp_types.TextContent(text="forty-two"), model="test-model"
        )

    async with Client(gateway.server, mode="legacy", sampling_callback=sample) as client:
        result = await client.call_tool("a__test_sampling", {"prompt": "the answer?"})
    assert not result.is_error
    assert len(asked) == 1
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent) and "forty-two" in block.text


async def test_a_client_without_sampling_gives_the_downstream_a_clear_error(
    pair: tuple[Gateway, MemoryAuditSink],
) -> None:
    gateway, _ = pair
    async with Client(gateway.server, mode="legacy") as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("a__test_sampling", {"prompt": "the answer?"})
    assert refused.value.code == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert "did not declare the 'sampling' capability" in refused.value.message


async def test_a_declined_elicitation_reaches_the_downstream_as_declined(
    pair: tuple[Gateway, MemoryAuditSink],
) -> None:
    gateway, _ = pair
    questions: list[str] = []

    async def elicit(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        questions.append(params.message)
        return mcp_types.ElicitResult(action="decline")

    async with Client(gateway.server, mode="legacy", elicitation_callback=elicit) as client:
        result = await client.call_tool("b__test_elicitation", {"message": "Your name?"})
    assert questions == ["Your name?"]
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent) and "decline" in block.text


async def test_log_messages_are_tagged_with_their_server_and_filtered_by_level(
    pair: tuple[Gateway, MemoryAuditSink],
) -> None:
    gateway, _ = pair
    logs: list[mcp_types.LoggingMessageNotificationParams] = []

    async def on_log(params: mcp_types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async with Client(gateway.server, mode="legacy", logging_callback=on_log) as client:
        await client.set_logging_level("warning")
        await client.call_tool("a__test_tool_with_logging", {})
        assert logs == []  # info messages, below this client's level
        await client.set_logging_level("debug")
        await client.call_tool("b__test_tool_with_logging", {})
        await wait_for(lambda: len(logs) >= 2)
    assert {log.logger for log in logs} == {"b/toolscore-conformance-fixture"}
    assert [log.data for log in logs][:2] == ["Tool execution started", "Tool processing data"]


async def test_a_subscription_survives_a_downstream_restart(pair: tuple[Gateway, MemoryAuditSink]) -> None:
    gateway, _ = pair
    updates: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            updates.append(str(message.params.uri))

    uri = "toolscore://a/test://watched-resource"
    async with Client(gateway.server, mode="legacy", message_handler=on_message) as client:
        await client.subscribe_resource(uri)
        downstream = gateway.hub.downstreams["a"]
        connects = downstream.connects
        downstream.restart("test: restart")
        await wait_for(lambda: downstream.connects > connects and downstream.unavailable_reason() is None, 30)
        touched = await client.call_tool("a__test_touch_resource", {"uri": "test://watched-resource"})
        assert not touched.is_error and "updated" in str(touched.content[0])
        await wait_for(lambda: updates == [uri])
        await client.unsubscribe_resource(uri)
        untouched = await client.call_tool("a__test_touch_resource", {"uri": "test://watched-resource"})
        assert "not subscribed" in str(untouched.content[0])


async def test_a_downstream_that_dies_during_a_read(tmp_path: Path) -> None:
    config = make_config({"solo": entry(prefix="")})
    async with running_gateway(config, tmp_path) as (gateway, sink), Client(gateway.server, mode="legacy") as client:
        with pytest.raises(MCPError, match="Server 'solo' closed the connection during the read"):
            await client.read_resource("test://crash")
        assert sink.records[-1].error_kind == "unavailable"
        downstream = gateway.hub.downstreams["solo"]
        await wait_for(lambda: downstream.connects > 1 and "solo" not in gateway.hub.catalog.down, 30)
        # Unprefixed: the server's URIs are exposed as they are.
        read = await client.read_resource("test://static-text")
        assert [str(c.uri) for c in read.contents] == ["test://static-text"]
