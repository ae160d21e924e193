"""The model behind the loop: the front client's own (MCP sampling) or a configured endpoint (httpx2).

Each client takes the whole conversation and streams the reply's text to `on_text` as it arrives,
then returns the reply with its stop reason and token counts (estimated when the model reports
none). Sampling has no streaming in MCP: its reply arrives as one chunk.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import httpx2
import mcp_types
from mcp import MCPError

from toolscore._tokens import tokens_for_chars
from toolscore.errors import InputRequired, ToolscoreError

__all__ = [
    "MODEL_TURN",
    "AnthropicModel",
    "InputRequiredModel",
    "Message",
    "ModelClient",
    "ModelError",
    "ModelReply",
    "OpenAICompatibleModel",
    "SamplingModel",
    "SendRequest",
]

Role = Literal["user", "assistant"]
OnText = Callable[[str], Awaitable[None]]
_MAX_LINE = 1 << 20
"""One server-sent event line at most (1 Mi characters): a hostile endpoint cannot grow one forever."""


class ModelError(ToolscoreError):
    """The model could not be asked, or its answer was not understood."""

    kind = "model"


@dataclass(frozen=True, slots=True)
class Message:
    """One message of the conversation."""

    role: Role
    content: str


@dataclass(frozen=True, slots=True)
class ModelReply:
    """One finished model turn."""

    text: str
    stop_reason: str | None
    input_tokens: int
    output_tokens: int
    estimated: bool
    """True when the model reported no token counts and these are estimates."""


class ModelClient(Protocol):
    """Anything that can take a turn."""

    name: str

    async def reply(
        self, system: str, messages: Sequence[Message], *, stop: Sequence[str], max_tokens: int, on_text: OnText
    ) -> ModelReply:
        """The model's next turn; its text streams to `on_text` as it arrives.

        Raises:
            ModelError: the model could not be asked, or answered with an error.
        """
        ...


def _estimate(system: str, messages: Sequence[Message]) -> int:
    return tokens_for_chars(len(system) + sum(len(m.content) for m in messages))


SendRequest = Callable[[mcp_types.CreateMessageRequest], Awaitable[mcp_types.CreateMessageResult]]
"""Sends `sampling/createMessage` to the front client on the connection of the current call."""


def _sampling_request(
    system: str, messages: Sequence[Message], stop: Sequence[str], max_tokens: int
) -> mcp_types.CreateMessageRequest:
    params = mcp_types.CreateMessageRequestParams(
        messages=[
            mcp_types.SamplingMessage(role=m.role, content=mcp_types.TextContent(text=m.content)) for m in messages
        ],
        system_prompt=system,
        stop_sequences=list(stop),
        max_tokens=max_tokens,
        include_context="none",
    )
    return mcp_types.CreateMessageRequest(params=params)


async def _sampled(result: Any, system: str, messages: Sequence[Message], on_text: OnText) -> ModelReply:
    if not isinstance(result, mcp_types.CreateMessageResult):
        raise ModelError(f"the client answered the sampling request with {type(result).__name__}")
    content = result.content
    if not isinstance(content, mcp_types.TextContent):
        raise ModelError(f"the client's model answered with {content.type} content, not text")
    await on_text(content.text)
    return ModelReply(
        content.text,
        result.stop_reason,
        _estimate(system, messages),
        tokens_for_chars(len(content.text)),
        estimated=True,
    )


class SamplingModel:
    """The front client's own model, asked with `sampling/createMessage` (handshake era)."""

    name = "sampling"

    def __init__(self, send: SendRequest) -> None:
        self._send = send

    async def reply(
        self, system: str, messages: Sequence[Message], *, stop: Sequence[str], max_tokens: int, on_text: OnText
    ) -> ModelReply:
        try:
            result = await self._send(_sampling_request(system, messages, stop, max_tokens))
        except MCPError as exc:
            raise ModelError(f"the client's model did not answer: {exc.message}") from None
        return await _sampled(result, system, messages, on_text)


MODEL_TURN = "turn"
"""The key of the model's turn among a paused `delegate` call's input requests (and its answer)."""


class InputRequiredModel:
    """The front client's own model in the 2026-07-28 era, one turn per round trip.

    The server cannot send requests there: `reply` raises `InputRequired` with the sampling request,
    the tool call is answered with an input-required result carrying it, and the client retries
    the call with the model's answer, which the resumed loop gets as `supplied`.
    """

    name = "sampling"

    def __init__(self, supplied: Any = None) -> None:
        self._supplied = supplied

    async def reply(
        self, system: str, messages: Sequence[Message], *, stop: Sequence[str], max_tokens: int, on_text: OnText
    ) -> ModelReply:
        supplied, self._supplied = self._supplied, None
        if supplied is None:
            raise InputRequired({MODEL_TURN: _sampling_request(system, messages, stop, max_tokens)})
        return await _sampled(supplied, system, messages, on_text)


async def _events(response: httpx2.Response) -> Any:
    """The JSON payloads of a server-sent event stream (`data:` lines), until `[DONE]`.

    The stream is read to its end even after `[DONE]`: a response read whole lets the connection
    go back to the pool, and the next turn skips a new connection (measured: 1-3 ms a turn).
    """
    done = False
    async for line in _lines(response):
        if done or not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            continue
        try:
            yield json.loads(data)
        except ValueError:
            raise ModelError(f"the model endpoint sent an event that is not JSON: {data[:80]!r}") from None


async def _lines(response: httpx2.Response) -> Any:
    """The response's lines, refusing one longer than `_MAX_LINE` before it is all in memory."""
    pending = ""
    async for chunk in response.aiter_text():
        pending += chunk
        if "\n" in chunk:  # split only when a line ended: a line trickling in stays linear
            *lines, pending = pending.split("\n")
            for line in lines:
                yield line.removesuffix("\r")
        if len(pending) > _MAX_LINE:
            raise ModelError(f"the model endpoint sent an event line over {_MAX_LINE} characters")
    if pending:
        yield pending.removesuffix("\r")


async def _check(response: httpx2.Response) -> None:
    if response.status_code >= 400:
        body = (await response.aread())[:300].decode(errors="replace")
        raise ModelError(f"the model endpoint answered HTTP {response.status_code}: {body}")


class OpenAICompatibleModel:
    """`POST {url}/chat/completions` with `stream: true` (OpenAI, llama.cpp, vLLM, Ollama)."""

    name = "openai-compatible"

    def __init__(self, http: httpx2.AsyncClient, *, url: str, model: str, api_key: str | None) -> None:
        self._http = http
        base = url.rstrip("/")
        self._url = base if base.endswith("/chat/completions") else base + "/chat/completions"
        self._model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def reply(
        self, system: str, messages: Sequence[Message], *, stop: Sequence[str], max_tokens: int, on_text: OnText
    ) -> ModelReply:
        body = {
            "model": self._model,
            "messages": [{"role": "system", "content": system}]
            + [{"role": m.role, "content": m.content} for m in messages],
            # OpenAI itself takes at most 4 stop sequences: the loop's list fits.
            "stop": list(stop)[:4],
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        parts: list[str] = []
        finish: str | None = None
        usage: dict[str, Any] = {}
        try:
            async with self._http.stream("POST", self._url, json=body, headers=self._headers) as response:
                await _check(response)
                async for event in _events(response):
                    if isinstance(event.get("usage"), dict):
                        usage = event["usage"]
                    for choice in event.get("choices") or ():
                        delta = (choice.get("delta") or {}).get("content")
                        if isinstance(delta, str) and delta:
                            parts.append(delta)
                            await on_text(delta)
                        finish = choice.get("finish_reason") or finish
        except httpx2.HTTPError as exc:
            raise ModelError(f"the model endpoint {self._url} failed: {type(exc).__name__}: {exc}") from None
        text = "".join(parts)
        return _reply(text, finish, usage.get("prompt_tokens"), usage.get("completion_tokens"), system, messages)


class AnthropicModel:
    """`POST {url}/v1/messages` with `stream: true` (the Anthropic Messages API)."""

    name = "anthropic"

    def __init__(self, http: httpx2.AsyncClient, *, url: str, model: str, api_key: str | None) -> None:
        self._http = http
        base = url.rstrip("/")
        self._url = base if base.endswith("/v1/messages") else base + "/v1/messages"
        self._model = model
        self._headers = {"anthropic-version": "2023-06-01", **({"x-api-key": api_key} if api_key else {})}

    async def reply(
        self, system: str, messages: Sequence[Message], *, stop: Sequence[str], max_tokens: int, on_text: OnText
    ) -> ModelReply:
        body = {
            "model": self._model,
            "system": system,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "stop_sequences": list(stop),
            "max_tokens": max_tokens,
            "stream": True,
        }
        parts: list[str] = []
        finish: str | None = None
        tokens_in: int | None = None
        tokens_out: int | None = None
        try:
            async with self._http.stream("POST", self._url, json=body, headers=self._headers) as response:
                await _check(response)
                async for event in _events(response):
                    kind = event.get("type")
                    if kind == "message_start":
                        tokens_in = ((event.get("message") or {}).get("usage") or {}).get("input_tokens")
                    elif kind == "content_block_delta":
                        delta = (event.get("delta") or {}).get("text")
                        if isinstance(delta, str) and delta:
                            parts.append(delta)
                            await on_text(delta)
                    elif kind == "message_delta":
                        finish = (event.get("delta") or {}).get("stop_reason") or finish
                        tokens_out = (event.get("usage") or {}).get("output_tokens", tokens_out)
                    elif kind == "error":
                        raise ModelError(f"the model endpoint reported an error: {str(event.get('error'))[:300]}")
        except httpx2.HTTPError as exc:
            raise ModelError(f"the model endpoint {self._url} failed: {type(exc).__name__}: {exc}") from None
        return _reply("".join(parts), finish, tokens_in, tokens_out, system, messages)


def _reply(
    text: str, finish: str | None, tokens_in: Any, tokens_out: Any, system: str, messages: Sequence[Message]
) -> ModelReply:
    reported = isinstance(tokens_in, int) and isinstance(tokens_out, int)
    return ModelReply(
        text,
        finish,
        tokens_in if isinstance(tokens_in, int) else _estimate(system, messages),
        tokens_out if isinstance(tokens_out, int) else tokens_for_chars(len(text)),
        estimated=not reported,
    )
