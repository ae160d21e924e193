"""`downstream.asking`: a 2026-07-28 server's input-required rounds, answered by the client the request
is made for. The server is played by `send` (its answer to each retry); the client by a peer that
answers as a handshake-era client's back-channel would."""

from __future__ import annotations

from typing import Any

import mcp_types
import pytest

from toolscore.downstream.asking import MAX_QUESTIONS, MAX_ROUNDS, answered
from toolscore.errors import DownstreamProtocolError

pytestmark = pytest.mark.anyio

ELICIT = {
    "method": "elicitation/create",
    "params": {"mode": "form", "message": "Name?", "requestedSchema": {"type": "object", "properties": {}}},
}
ROOTS = {"method": "roots/list"}
DONE = {"content": [{"type": "text", "text": "done"}]}


class Client:
    """A client that answers every question, or refuses elicitation as one that did not declare it."""

    client = "one"
    parked = False

    def __init__(self, *, elicits: bool = True) -> None:
        self.elicits = elicits
        self.asked: list[str] = []

    async def elicit(self, server: str, params: mcp_types.ElicitRequestParams) -> Any:
        self.asked.append(params.message)
        if not self.elicits:
            return mcp_types.ErrorData(code=mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY, message="no elicitation")
        return mcp_types.ElicitResult(action="accept", content={"name": "Ada"})

    async def sample(self, server: str, params: Any) -> Any:
        raise AssertionError("not asked here")

    async def list_roots(self, server: str, params: Any = None) -> Any:
        self.asked.append("roots")
        return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri="file:///p")])


def asking(requests: dict[str, Any], state: str | None = "s") -> dict[str, Any]:
    return {"resultType": "input_required", "inputRequests": requests, **({"requestState": state} if state else {})}


async def test_each_round_is_answered_and_sent_back_with_the_servers_state() -> None:
    client = Client()
    sent: list[tuple[Any, Any]] = []
    rounds = iter([asking({"r": ROOTS}, "s2"), DONE])

    async def send(responses: Any, state: Any) -> dict[str, Any]:
        sent.append((responses, state))
        return next(rounds)

    result = await answered(asking({"n": ELICIT}, "s1"), peer=client, server="srv", send=send)  # type: ignore[arg-type]
    assert result == DONE
    assert client.asked == ["Name?", "roots"]
    assert sent[0] == ({"n": {"action": "accept", "content": {"name": "Ada"}}}, "s1")
    assert sent[1] == ({"r": {"roots": [{"uri": "file:///p"}]}}, "s2")


async def test_a_complete_result_is_returned_as_it_is() -> None:
    async def send(responses: Any, state: Any) -> dict[str, Any]:
        raise AssertionError("nothing to retry")

    assert await answered(DONE, peer=None, server="srv", send=send) == DONE


async def test_a_question_the_client_cannot_answer_ends_the_request_with_its_error() -> None:
    async def send(responses: Any, state: Any) -> dict[str, Any]:
        raise AssertionError("not retried")

    with pytest.raises(DownstreamProtocolError) as raised:
        await answered(asking({"n": ELICIT}), peer=Client(elicits=False), server="srv", send=send)  # type: ignore[arg-type]
    assert raised.value.for_the_client is not None  # -32021 reaches the client as a JSON-RPC error
    with pytest.raises(DownstreamProtocolError, match="no client request"):
        await answered(asking({"n": ELICIT}), peer=None, server="srv", send=send)


async def test_a_server_that_never_stops_asking_is_given_up_on() -> None:
    client = Client()
    count = 0

    async def send(responses: Any, state: Any) -> dict[str, Any]:
        nonlocal count
        count += 1
        return asking({"n": ELICIT})

    with pytest.raises(DownstreamProtocolError, match=f"after {MAX_ROUNDS} rounds"):
        await answered(asking({"n": ELICIT}), peer=client, server="srv", send=send)  # type: ignore[arg-type]
    assert count == MAX_ROUNDS


async def test_a_flood_of_questions_or_a_malformed_round_is_refused_before_asking() -> None:
    client = Client()

    async def send(responses: Any, state: Any) -> dict[str, Any]:
        raise AssertionError("not retried")

    flood = asking({f"q{i}": ELICIT for i in range(MAX_QUESTIONS + 1)})
    with pytest.raises(DownstreamProtocolError, match="questions in one round"):
        await answered(flood, peer=client, server="srv", send=send)  # type: ignore[arg-type]
    with pytest.raises(DownstreamProtocolError, match="malformed"):
        await answered(asking({"n": {"method": "nope"}}), peer=client, server="srv", send=send)  # type: ignore[arg-type]
    assert client.asked == []


async def test_a_round_that_asks_nothing_is_sent_again_with_its_state() -> None:
    states: list[Any] = []
    rounds = iter([asking({}, "working"), DONE])

    async def send(responses: Any, state: Any) -> dict[str, Any]:
        states.append((responses, state))
        return next(rounds)

    assert await answered(asking({}, "started"), peer=None, server="srv", send=send) == DONE
    assert states == [(None, "started"), (None, "working")]
