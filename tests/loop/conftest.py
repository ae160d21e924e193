"""Shared by the loop tests: a gateway whose `delegate` uses a scripted model on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.conftest import memory_gateway
from toolscore import Gateway, MemoryAuditSink


def loop_sections(tmp_path: Path, url: str | None, **loop: Any) -> dict[str, Any]:
    """The `toolscore` section: the scripted model (if any), trajectories and episodes under tmp_path."""
    settings: dict[str, Any] = {
        "loop": {
            "trajectories": str(tmp_path / "trajectories.jsonl"),
            "episodes_db": str(tmp_path / "episodes.sqlite3"),
            **loop,
        }
    }
    if url is not None:
        settings["model"] = {"provider": "openai-compatible", "url": url, "model": "scripted", "api_key": "k"}
    return {"toolscore": settings}


@asynccontextmanager
async def loop_gateway(tmp_path: Path, url: str | None, **loop: Any) -> AsyncIterator[tuple[Gateway, MemoryAuditSink]]:
    async with memory_gateway(tmp_path, **loop_sections(tmp_path, url, **loop)) as pair:
        yield pair
