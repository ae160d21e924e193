"""A downstream on one 2026-07-28 connection, serving handshake-era clients as well as 2026-07-28 ones.

The conformance fixture runs as a stdio subprocess that speaks only 2026-07-28 (`--modern-only`: it
answers `initialize` with -32022), with no `era` key, or as the ordinary fixture with `"era":
"2026-07-28"`. The gateway then holds one connection to it, in that era. A handshake-era client's
call that the server answers with an input-required result has its questions asked over that
client's back-channel, and the gateway retries the call with the answers, round after round; a
2026-07-28 client's call is relayed as it is, the server's rounds going back to it unchanged.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client, MCPError
from mcp.client.session import IncomingMessage

from tests.conftest import FIXTURES, free_port, make_config, running_gateway, wait_until_answering
from toolscore import Gateway, MemoryAuditSink
from toolscore._sdk import send_as_client
from toolscore.downstream.catalog import namespaced_uri
from toolscore.downstream.connection import ServerState
from toolscore.downstream.tasks import TASKS_EXTENSION

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

CONFORMANCE = str(FIXTURES / "conformance_server.py")


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def _modern_only(**extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [CONFORMANCE, "--modern-only", "--extras"], **extra}


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The fixture speaking only 2026-07-28 over streamable HTTP; its URL."""
    port = free_port()
    errlog = tmp_path_factory.mktemp("http") / "stderr.txt"
    with errlog.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, CONFORMANCE, "--http", str(port), "--modern-only"], stdout=sink, stderr=sink
        )
    try:
        wait_until_answering(f"http://127.0.0.1:{port}/", proc, errlog=Path(errlog))
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@pytest.fixture(scope="module")
async def gateway(
    tmp_path_factory: pytest.TempPathFactory, http_server: str
) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    config = make_config(
        {
            "m": _modern_only(),
            "deny": _modern_only(sampling="deny", timeout=2),
            "both": {"command": sys.executable, "args": [CONFORMANCE], "era": "2026-07-28"},
            "old": _modern_only(era="handshake", connect_timeout=30),
            "web": {"url": http_server},
        }
    )
    async with running_gateway(config, tmp_path_factory.mktemp("modern")) as running:
        yield running


def text(result: mcp_types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    return block.text


async def elicit(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
    return mcp_types.ElicitResult(action="accept", content={"name": "Ada", "ok": True, "confirm": True})


async def sample(context: Any, params: mcp_types.CreateMessageRequestParams) -> mcp_types.CreateMessageResult:
    return mcp_types.CreateMessageResult(role="assistant", content=mcp_types.TextContent(text="Paris"), model="m")


async def roots(context: Any) -> mcp_types.ListRootsResult:
    return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri="file:///work/project")])


def hanging(asked: anyio.Event) -> Any:
    """A client callback (elicitation or roots) that notes it was asked and never answers."""

    async def callback(*_: Any) -> Any:
        asked.set()
        await anyio.sleep_forever()

    return callback


def handshake_client(gw: Gateway, **callbacks: Any) -> Client:
    return Client(gw.server, mode="legacy", **callbacks)


async def test_a_server_that_speaks_only_2026_07_28_gets_one_connection_in_that_era(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, _ = gateway
    m = gw.hub.downstreams["m"]
    assert m.state is ServerState.UP and m.protocol_version == "2026-07-28"
    assert m.status().protocol_version == "2026-07-28"  # `toolscore check --json` shows it
    # No second connection: both kinds of client are served on this one.
    assert m.era_for("2025-11-25") == "2026-07-28" and m.modern_version is None
    assert any(tool.name == "test_input_required_result_elicitation" for tool in m.tools)
    both = gw.hub.downstreams["both"]  # a server of both eras, its entry asking for the new one
    assert both.state is ServerState.UP and both.protocol_version == "2026-07-28"


async def test_an_entry_kept_to_the_handshake_era_says_why_the_server_is_down(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, _ = gateway
    old = gw.hub.downstreams["old"]
    assert old.state is not ServerState.UP
    assert old.error is not None and "2026-07-28" in old.error, old.error


async def test_a_handshake_era_clients_questions_go_by_back_channel(gateway: tuple[Gateway, MemoryAuditSink]) -> None:
    gw, sink = gateway
    asked: list[str] = []

    async def noting_elicit(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        asked.append(params.message)
        return await elicit(context, params)

    callbacks = {"elicitation_callback": noting_elicit, "sampling_callback": sample, "list_roots_callback": roots}
    async with handshake_client(gw, **callbacks) as client:
        assert client.protocol_version == "2025-11-25"
        assert text(await client.call_tool("m__test_input_required_result_elicitation")) == "Hello, Ada!"
        assert asked == ["What is your name?"]
        assert text(await client.call_tool("m__test_input_required_result_sampling")) == "LLM answered: Paris"
        assert text(await client.call_tool("m__test_input_required_result_list_roots")) == (
            "Roots: file:///work/project"
        )
        # Three questions in one round, then two rounds with the server's evolving state.
        several = text(await client.call_tool("m__test_input_required_result_multiple_inputs"))
        assert "Ada" in several and "Paris" in several and "file:///work/project" in several, several
        assert text(await client.call_tool("m__test_input_required_result_request_state")).startswith("state-ok")
        prompt = await client.get_prompt("m__test_input_required_result_prompt")
        assert prompt.messages
        # The same on the entry that asked for the era.
        assert text(await client.call_tool("both__test_input_required_result_elicitation")) == "Hello, Ada!"
    calls = [r for r in sink.records if r.tool == "m__test_input_required_result_elicitation"]
    assert calls and calls[-1].success  # one audit record for the whole call, its rounds included


async def test_a_question_the_client_cannot_answer_ends_the_call_with_its_error(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, _ = gateway
    async with handshake_client(gw) as client:  # no elicitation capability declared
        with pytest.raises(MCPError) as raised:
            await client.call_tool("m__test_input_required_result_elicitation")
        assert raised.value.error.code == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY
        assert "elicitation" in raised.value.error.message
        # The connection and the server carry on.
        assert text(await client.call_tool("m__test_simple_text")) == "This is a simple text response for testing."
    async with handshake_client(gw, sampling_callback=sample) as client:  # `sampling: deny`
        result = await client.call_tool("deny__test_input_required_result_sampling")
        assert result.is_error and "sampling" in text(result).lower(), text(result)


async def test_a_client_that_never_answers_is_bounded_by_the_calls_deadline(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, _ = gateway
    answering = anyio.Event()
    async with handshake_client(gw, elicitation_callback=hanging(answering)) as client:
        with anyio.fail_after(60):  # a hang detector; the server's deadline is 2 s
            result = await client.call_tool("deny__test_input_required_result_elicitation")
        assert answering.is_set()
        assert result.is_error and "did not answer within 2 s" in text(result), text(result)
        # The server holds nothing of the abandoned request: the next call is served.
        assert text(await client.call_tool("deny__test_simple_text")) == "This is a simple text response for testing."


async def test_a_client_that_cancels_while_asked_ends_the_call_and_the_server_serves_on(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, sink = gateway
    asked = anyio.Event()
    before = len([r for r in sink.records if r.tool == "m__test_input_required_result_elicitation"])
    async with handshake_client(gw, elicitation_callback=hanging(asked)) as client:
        with anyio.fail_after(30):  # a hang detector, under the server's deadline (the default 60 s)
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "m__test_input_required_result_elicitation")
                await asked.wait()
                tg.cancel_scope.cancel()  # the client gives up: the SDK sends notifications/cancelled
            # The gateway ends the call (its audit record) and the server serves the next one.
            while len([r for r in sink.records if r.tool == "m__test_input_required_result_elicitation"]) == before:  # noqa: ASYNC110 - the sink has no event to wait on
                await anyio.sleep(0.05)
        assert text(await client.call_tool("m__test_simple_text")) == "This is a simple text response for testing."
    ended = [r for r in sink.records if r.tool == "m__test_input_required_result_elicitation"][before:]
    assert len(ended) == 1 and not ended[0].success, ended


async def test_a_client_that_disconnects_while_asked_ends_the_call(gateway: tuple[Gateway, MemoryAuditSink]) -> None:
    gw, sink = gateway
    asked = anyio.Event()
    tool = "m__test_input_required_result_list_roots"

    before = len([r for r in sink.records if r.tool == tool])
    with anyio.fail_after(30):  # a hang detector, under the server's deadline (the default 60 s)
        async with anyio.create_task_group() as tg:

            async def call_and_leave() -> None:
                async with handshake_client(gw, list_roots_callback=hanging(asked)) as client:
                    await client.call_tool(tool)

            tg.start_soon(call_and_leave)
            await asked.wait()
            tg.cancel_scope.cancel()  # the client's connection closes with its question unanswered
        while len([r for r in sink.records if r.tool == tool]) == before:  # noqa: ASYNC110 - the sink has no event to wait on
            await anyio.sleep(0.05)
    ended = [r for r in sink.records if r.tool == tool][before:]
    assert len(ended) == 1 and not ended[0].success, ended
    async with handshake_client(gw, list_roots_callback=roots) as client:  # the server serves on
        assert text(await client.call_tool(tool)) == "Roots: file:///work/project"


async def test_a_plan_step_asks_its_own_client(gateway: tuple[Gateway, MemoryAuditSink]) -> None:
    gw, _ = gateway
    plan = "<m><test_input_required_result_elicitation>{}</test_input_required_result_elicitation></m>"
    async with handshake_client(gw, elicitation_callback=elicit) as client:
        result = await client.call_tool("orchestrate", {"plan": plan})
    assert "Hello, Ada!" in text(result), text(result)


async def test_a_2026_07_28_client_gets_the_servers_own_rounds(gateway: tuple[Gateway, MemoryAuditSink]) -> None:
    gw, _ = gateway
    tool = "m__test_input_required_result_elicitation"
    async with Client(gw.server, elicitation_callback=elicit) as client:
        assert client.protocol_version == "2026-07-28"
        first = await client.session.call_tool(tool, {}, allow_input_required=True)
        assert isinstance(first, mcp_types.InputRequiredResult) and first.input_requests
        assert list(first.input_requests) == ["user_name"]  # the server's key, not one the gateway gave
        assert first.request_state is None  # nothing of the gateway's own: the server keeps no state here
        # The server seals its own state: a tampered one is its error, passed on as such.
        sealed = "m__test_input_required_result_request_state"
        asking = await client.session.call_tool(sealed, {}, allow_input_required=True)
        assert isinstance(asking, mcp_types.InputRequiredResult) and asking.request_state and asking.input_requests
        answers = {key: mcp_types.ElicitResult(action="accept", content={"ok": True}) for key in asking.input_requests}
        with pytest.raises(MCPError):
            await client.session.call_tool(
                sealed,
                {},
                input_responses=answers,
                request_state=asking.request_state[:-4] + "AAAA",
                allow_input_required=True,
            )
        assert text(await client.call_tool(tool)) == "Hello, Ada!"


async def test_logs_reach_a_handshake_era_client_at_the_level_it_set(gateway: tuple[Gateway, MemoryAuditSink]) -> None:
    gw, _ = gateway
    logs: list[mcp_types.LoggingMessageNotificationParams] = []

    async def on_log(params: mcp_types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async with handshake_client(gw, logging_callback=on_log) as client:
        await client.set_logging_level("info")
        result = await client.call_tool("m__test_tool_with_logging")
        assert not result.is_error
    assert len(logs) == 3 and all(entry.level == "info" for entry in logs), logs


async def test_a_subscribed_resource_update_reaches_a_handshake_era_client(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, _ = gateway
    updated = anyio.Event()
    seen: list[str] = []

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            seen.append(str(message.params.uri))
            updated.set()

    uri = "test://static-text"
    catalog = gw.hub.catalog
    shown = namespaced_uri("m", uri) if "m" in catalog.namespaced else uri
    assert shown in {str(r.uri) for r in catalog.listed_resources()}
    async with handshake_client(gw, message_handler=on_message) as client:
        await client.subscribe_resource(shown)
        # The listen stream is opened anew with the URI: touch until the update comes through.
        with anyio.fail_after(60):  # a hang detector
            while not updated.is_set():
                await client.call_tool("m__test_touch_resource", {"uri": uri})
                with anyio.move_on_after(0.5):
                    await updated.wait()
    assert seen and all(u == shown for u in seen)


async def test_a_server_reached_by_url_that_speaks_only_2026_07_28_is_served_the_same_way(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, _ = gateway
    web = gw.hub.downstreams["web"]
    assert web.state is ServerState.UP and web.protocol_version == "2026-07-28", web.error
    async with handshake_client(gw, elicitation_callback=elicit) as client:
        assert text(await client.call_tool("web__test_input_required_result_elicitation")) == "Hello, Ada!"
        # The argument the tool mirrors into a header reaches the server in it (the server checks it).
        assert text(await client.call_tool("web__test_header_param", {"region": "eu-west"})) == "region=eu-west"
    async with Client(gw.server, elicitation_callback=elicit) as client:
        assert text(await client.call_tool("web__test_input_required_result_elicitation")) == "Hello, Ada!"
        assert text(await client.call_tool("web__test_header_param", {"region": "us"})) == "region=us"


WITH_TASKS: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}


async def ask(client: Client, method: str, params: dict[str, Any], capabilities: dict[str, Any]) -> dict[str, Any]:
    return await send_as_client(client, method, params, capabilities=capabilities, log_level=None)


async def test_a_servers_own_extension_task_is_relayed_to_a_2026_07_28_client(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, sink = gateway
    call = {"name": "m__test_task_job", "arguments": {"n": 4}}
    async with Client(gw.server) as client:
        assert TASKS_EXTENSION in (client.server_capabilities.extensions or {})
        created = await ask(client, "tools/call", call, WITH_TASKS)
        assert created["resultType"] == "task" and created["status"] == "working", created
        task_id = created["taskId"]
        # Shown under an id nobody can guess (clients that share a caller must not reach each
        # other's tasks by counting), not the server's `job-N`.
        assert not task_id.startswith("job-") and len(task_id) >= 16, task_id
        # Polled through the gateway, the server's own task; the fixture completes it at the second poll.
        first = await ask(client, "tasks/get", {"taskId": task_id}, WITH_TASKS)
        assert first["taskId"] == task_id and first["status"] == "working", first
        done = await ask(client, "tasks/get", {"taskId": task_id}, WITH_TASKS)
        assert done["status"] == "completed" and done["result"]["content"][0]["text"] == "counted to 4", done
        # Cancelled through the gateway: the server's status says so.
        other = (await ask(client, "tools/call", call, WITH_TASKS))["taskId"]
        await ask(client, "tasks/cancel", {"taskId": other}, WITH_TASKS)
        assert (await ask(client, "tasks/get", {"taskId": other}, WITH_TASKS))["status"] == "cancelled"
        # An id the client was not given stays unknown, and the extension must be declared.
        with pytest.raises(MCPError) as unknown:
            await ask(client, "tasks/get", {"taskId": "job-999"}, WITH_TASKS)
        assert unknown.value.error.code == mcp_types.INVALID_PARAMS
        with pytest.raises(MCPError) as undeclared:
            await ask(client, "tasks/get", {"taskId": task_id}, {})
        assert undeclared.value.error.code == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY
        # Without the extension the server answers the call whole.
        whole = await ask(client, "tools/call", call, {})
        assert whole.get("resultType") == "complete" and whole["content"][0]["text"] == "counted to 4", whole
    async with handshake_client(gw) as client:
        assert text(await client.call_tool("m__test_task_job", {"n": 2})) == "counted to 2"
        # A task nobody asked for (the gateway declares no extension on its own requests) is an error.
        unasked = await client.call_tool("m__test_task_unasked")
        assert unasked.is_error and "did not ask for" in text(unasked), text(unasked)
    records = [r for r in sink.records if r.tool == "m__test_task_job"]
    assert records and any(r.error_kind == "task" for r in records)


async def test_a_restarted_server_is_connected_in_its_era_again_without_the_handshake_first(
    gateway: tuple[Gateway, MemoryAuditSink],
) -> None:
    gw, _ = gateway
    m = gw.hub.downstreams["m"]
    before = m.connects
    assert m._asked_era() == "2026-07-28"  # found to speak only that era: `initialize` is not tried again
    m.restart("a test restarts it")
    async with handshake_client(gw, elicitation_callback=elicit) as client:
        # The call waits for the new connection (within its deadline) and is answered on it.
        assert text(await client.call_tool("m__test_input_required_result_elicitation")) == "Hello, Ada!"
    assert m.connects == before + 1 and m.protocol_version == "2026-07-28"
