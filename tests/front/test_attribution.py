"""A server's requests back to its client go to the client whose call caused them, or to nobody.

Two front clients share one stdio server (`tests/fixtures/backchannel_server.py`): its `ask` tool
asks its client something back (sampling, elicitation, roots) or logs, with the caller's own text.
Nothing on a stdio wire says which call a server's request belongs to, so with calls of two
clients in flight the request is refused, naming why, and a log stays in the gateway's log:
before, each went to the newest caller, so client B's model read client A's text, B approved an
elicitation meant for A, and B's answer became A's result. One client with several calls in flight
still gets its requests.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client

from tests.conftest import FIXTURES, make_config, running_gateway, text
from toolscore._gateway import Gateway

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

SERVER = str(FIXTURES / "backchannel_server.py")
KINDS = ["sampling", "elicitation", "roots", "log"]


class FrontClient:
    """One client of the gateway, recording everything the servers asked it or told it."""

    def __init__(self, gw: Gateway, name: str) -> None:
        self.name = name
        self.seen: dict[str, list[str]] = defaultdict(list)
        self.client = Client(
            gw.server,
            mode="legacy",
            sampling_callback=self._sample,
            elicitation_callback=self._elicit,
            list_roots_callback=self._roots,
            logging_callback=self._log,
        )

    async def _sample(
        self, context: Any, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult:
        content = params.messages[0].content
        self.seen["sampling"].append(content.text if isinstance(content, mcp_types.TextContent) else "?")
        reply = mcp_types.TextContent(text=f"sampled by {self.name}")
        return mcp_types.CreateMessageResult(role="assistant", content=reply, model="m")

    async def _elicit(self, context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        self.seen["elicitation"].append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"ok": self.name == "A"})

    async def _roots(self, context: Any) -> mcp_types.ListRootsResult:
        self.seen["roots"].append("asked")
        return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri=f"file:///{self.name}")])  # type: ignore[arg-type]

    async def _log(self, params: mcp_types.LoggingMessageNotificationParams) -> None:
        self.seen["log"].append(str(params.data))

    def saw_text_of(self, other: str) -> bool:
        return any(f"{other}-secret" in item for items in self.seen.values() for item in items)


def _refused_or_own(results: dict[str, mcp_types.CallToolResult], clients: dict[str, FrontClient], what: str) -> None:
    """Each request was refused, saying why, or (once the other call had ended, so only its own was
    in flight) went to its own client; the first to arrive saw both calls in flight: refused."""
    refused = {name for name, result in results.items() if "several clients" in text(result)}
    assert refused, {name: text(result) for name, result in results.items()}
    for name in refused:
        assert 'isolation: "session"' in text(results[name])
    for name, client in clients.items():
        assert (name in refused) != bool(client.seen[what]), (name, client.seen[what], text(results[name]))


def _config(tmp_path: Path) -> Any:
    return make_config({"bc": {"command": sys.executable, "args": [SERVER], "timeout": 60}})


@pytest.mark.parametrize("what", KINDS)
async def test_calls_of_two_clients_in_flight_never_cross(tmp_path: Path, what: str) -> None:
    async with running_gateway(_config(tmp_path), tmp_path) as (gw, _):
        a, b = FrontClient(gw, "A"), FrontClient(gw, "B")
        results: dict[str, mcp_types.CallToolResult] = {}
        async with a.client as client_a, b.client as client_b:

            async def ask(name: str, client: Client) -> None:
                results[name] = await client.call_tool("bc__ask", {"what": what, "text": f"{name}-secret"})

            with anyio.fail_after(60):  # a hang detector
                async with anyio.create_task_group() as tg:
                    tg.start_soon(ask, "A", client_a)
                    tg.start_soon(ask, "B", client_b)
                    await client_a.call_tool("bc__release", {"count": 2})
        assert not a.saw_text_of("B") and not b.saw_text_of("A")
        if what == "log":
            assert text(results["A"]) == text(results["B"]) == "logged"
        else:
            _refused_or_own(results, {"A": a, "B": b}, what)


@pytest.mark.parametrize("what", KINDS)
async def test_one_clients_calls_in_flight_get_its_own_answers(tmp_path: Path, what: str) -> None:
    async with running_gateway(_config(tmp_path), tmp_path) as (gw, _):
        a = FrontClient(gw, "A")
        results: list[mcp_types.CallToolResult] = []
        async with a.client as client:
            await client.set_logging_level("info")

            async def ask(n: int) -> None:
                results.append(await client.call_tool("bc__ask", {"what": what, "text": f"A-secret {n}"}))

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(ask, 1)
                    tg.start_soon(ask, 2)
                    await client.call_tool("bc__release", {"count": 2})
        assert len(results) == 2 and not any(result.is_error for result in results), [text(r) for r in results]
        expected = {
            "sampling": "sampled by A",
            "elicitation": "accept {'ok': True}",
            "roots": "file:///A",
            "log": "logged",
        }[what]
        assert {text(result) for result in results} == {expected}
        if what == "log":
            await anyio.wait_all_tasks_blocked()
        assert len(a.seen[what]) == 2


def _plan(what: str) -> str:
    return f'<bc><ask>{{"what": "{what}", "text": "A-secret plan"}}</ask></bc>'


@pytest.mark.parametrize("what", ["sampling", "elicitation"])
async def test_a_plan_steps_requests_go_to_its_client(tmp_path: Path, what: str) -> None:
    """A plan step's call is its client's call: the server's request reaches that client."""
    async with running_gateway(_config(tmp_path), tmp_path) as (gw, _):
        a = FrontClient(gw, "A")
        answers: list[mcp_types.CallToolResult] = []
        async with a.client as client:

            async def run_plan() -> None:
                answers.append(await client.call_tool("orchestrate", {"plan": _plan(what)}))

            with anyio.fail_after(60):  # a hang detector
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run_plan)
                    await client.call_tool("bc__release", {"count": 1})
        assert a.seen[what] == ["A-secret plan"], text(answers[0])
        assert "refused" not in text(answers[0])


@pytest.mark.parametrize("what", ["sampling", "elicitation"])
async def test_a_plan_steps_requests_beside_another_clients_call_are_refused(tmp_path: Path, what: str) -> None:
    """Beside another client's call on the same instance, a plan step's request is refused, never
    handed to the other client (the step counts as its own client's call, not as nobody's)."""
    async with running_gateway(_config(tmp_path), tmp_path) as (gw, _):
        a, b = FrontClient(gw, "A"), FrontClient(gw, "B")
        results: dict[str, mcp_types.CallToolResult] = {}
        async with a.client as client_a, b.client as client_b:

            async def run_plan() -> None:
                results["A"] = await client_a.call_tool("orchestrate", {"plan": _plan(what)})

            async def ask_b() -> None:
                results["B"] = await client_b.call_tool("bc__ask", {"what": what, "text": "B-secret"})

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run_plan)
                    tg.start_soon(ask_b)
                    await client_b.call_tool("bc__release", {"count": 2})
        assert not b.saw_text_of("A") and not a.saw_text_of("B")
        _refused_or_own(results, {"A": a, "B": b}, what)
