"""The configured-endpoint clients against loopback servers: Anthropic's stream shape, and failures."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import httpx2
import pytest

from tests.conftest import loopback_http
from tests.fixtures.scripted_model import scripted_model
from toolscore.loop.models import AnthropicModel, Message, ModelError, OpenAICompatibleModel

pytestmark = pytest.mark.anyio


class Anthropic(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, Any]]] = []
    events: ClassVar[list[dict[str, Any]]] = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 11}}},
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "<answer>he"}},
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "llo"}},
        {"type": "message_delta", "delta": {"stop_reason": "stop_sequence"}, "usage": {"output_tokens": 3}},
        {"type": "message_stop"},
    ]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "key": self.headers.get("x-api-key"), **body})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in type(self).events:
            self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())


class Broken(BaseHTTPRequestHandler):
    status = 500
    body = b'{"error": "overloaded"}'

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)


class NotJson(Broken):
    status = 200
    body = b"data: {not json\n\n"


async def test_anthropic_stream() -> None:
    chunks: list[str] = []

    async def on_text(delta: str) -> None:
        chunks.append(delta)

    with loopback_http(Anthropic) as url:
        async with httpx2.AsyncClient() as http:
            model = AnthropicModel(http, url=url, model="m", api_key="secret")
            reply = await model.reply(
                "sys", [Message("user", "hi")], stop=["</answer>"], max_tokens=50, on_text=on_text
            )
    assert chunks == ["<answer>he", "llo"]
    assert (reply.text, reply.stop_reason, reply.input_tokens, reply.output_tokens) == (
        "<answer>hello",
        "stop_sequence",
        11,
        3,
    )
    assert not reply.estimated
    sent = Anthropic.seen[-1]
    assert sent["path"] == "/v1/messages" and sent["key"] == "secret" and sent["system"] == "sys"
    assert sent["stop_sequences"] == ["</answer>"] and sent["stream"] is True


async def test_openai_usage_and_stop() -> None:
    async def ignore(delta: str) -> None:
        pass

    with scripted_model(["<answer>x</answer> trailing"]) as server:
        async with httpx2.AsyncClient() as http:
            model = OpenAICompatibleModel(http, url=server.url, model="m", api_key=None)
            reply = await model.reply("s", [Message("user", "u")], stop=["</answer>"], max_tokens=9, on_text=ignore)
    assert reply.text == "<answer>x" and reply.stop_reason == "stop" and not reply.estimated
    assert server.requests[0]["max_tokens"] == 9


@pytest.mark.parametrize(("handler", "message"), [(Broken, "HTTP 500"), (NotJson, "not JSON")])
async def test_endpoint_failures_are_model_errors(handler: type[BaseHTTPRequestHandler], message: str) -> None:
    async def ignore(delta: str) -> None:
        pass

    with loopback_http(handler) as url:
        async with httpx2.AsyncClient() as http:
            for model in (
                OpenAICompatibleModel(http, url=url, model="m", api_key="k"),
                AnthropicModel(http, url=url, model="m", api_key="k"),
            ):
                with pytest.raises(ModelError, match=message):
                    await model.reply("s", [Message("user", "u")], stop=[], max_tokens=5, on_text=ignore)


async def test_unreachable_endpoint_is_a_model_error() -> None:
    async def ignore(delta: str) -> None:
        pass

    async with httpx2.AsyncClient() as http:
        model = OpenAICompatibleModel(http, url="http://127.0.0.1:9/v1", model="m", api_key=None)
        with pytest.raises(ModelError, match="failed"):
            await model.reply("s", [Message("user", "u")], stop=[], max_tokens=5, on_text=ignore)


class EndlessLine(Broken):
    status = 200
    body = b"data: " + b"x" * (2 << 20)


async def test_an_endless_event_line_is_refused() -> None:
    async def ignore(delta: str) -> None:
        pass

    with loopback_http(EndlessLine) as url:
        async with httpx2.AsyncClient() as http:
            model = OpenAICompatibleModel(http, url=url, model="m", api_key=None)
            with pytest.raises(ModelError, match="over 1048576"):
                await model.reply("s", [Message("user", "u")], stop=[], max_tokens=5, on_text=ignore)
