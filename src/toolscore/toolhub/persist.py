"""The ToolHub's learned scores across restarts: a file in the state directory, or Redis.

Loaded once when the gateway opens, saved when it closes and, while it runs, every
`toolhub.save_seconds` when a score changed (`saved_while_open`), so a gateway killed outright
loses at most that much of what it learned. With `toolscore.state` set, every
replica reads and writes one Redis hash (`toolhub:scores`, tool -> JSON), each writing only the
tools it scored since it started, so replicas add up instead of overwriting each other; else a
JSON file (`toolhub.scores_path`, default `<state dir>/toolhub-scores.json`), merged on save with
what another gateway process on the same machine saved meanwhile (the newer score of a tool wins).

Nothing here stops the gateway: a file or Redis that cannot be read or written is logged and
the board starts empty or stays unsaved. The file is read through `O_NOFOLLOW` (a symlink put in
its place is refused), capped in size, written to a temporary file and renamed (mode 600).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import structlog

from toolscore.config import Config, state_dir
from toolscore.toolhub.scoring import FORGET_AFTER_SECONDS, Scoreboard, ToolScore

if TYPE_CHECKING:
    from toolscore.state.redis_store import RedisState

__all__ = ["MAX_FILE_BYTES", "FileScores", "RedisScores", "ScoreStore", "saved_while_open", "score_store"]

MAX_FILE_BYTES = 4 * 1024 * 1024
"""A scores file larger than this is not read (ten thousand tools take well under 2 MB)."""
log = structlog.get_logger("toolscore.toolhub")


class ScoreStore(Protocol):
    """Where a scoreboard is kept between runs."""

    where: str
    """For logs and docs: the file or the Redis key."""

    async def load_into(self, board: Scoreboard) -> int:
        """Restore the saved scores onto `board`; how many were taken (0 when none or unreadable)."""
        ...

    async def save_from(self, board: Scoreboard) -> None:
        """Save `board`'s scores (never raises)."""
        ...


def score_store(config: Config, state: RedisState | None) -> ScoreStore | None:
    """Where the config keeps the scores: Redis with shared state, else the scores file; None when off."""
    settings = config.settings.toolhub
    if not settings.persist_scores:
        return None
    if state is not None:
        return RedisScores(state)
    path = Path(settings.scores_path).expanduser() if settings.scores_path else state_dir() / "toolhub-scores.json"
    return FileScores(path)


@asynccontextmanager
async def saved_while_open(store: ScoreStore | None, board: Scoreboard, every: float) -> AsyncIterator[None]:
    """While open: `board` saved into `store` every `every` seconds when a score changed since the
    last save (the final save, at the stop, is the gateway's)."""
    if store is None:
        yield
        return

    async def keep_saving() -> None:
        while True:
            await anyio.sleep(every)
            if board.changed:
                await store.save_from(board)  # never raises: a failure is logged, the next round tries again

    async with anyio.create_task_group() as tg:
        tg.start_soon(keep_saving)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()


class FileScores:
    """The scores as one JSON object in a file: `{"version": 1, "scores": {tool: score}}`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = str(path)

    def read(self) -> dict[str, Any]:
        """The saved scores by tool, or {} (a missing file; a damaged or hostile one is logged)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.warning("toolhub scores not read", path=self.where, error=exc.strerror or str(exc))
            return {}
        with os.fdopen(fd, "rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            log.warning("toolhub scores not read", path=self.where, error=f"larger than {MAX_FILE_BYTES} bytes")
            return {}
        try:
            value = json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError; RecursionError: nesting
            log.warning("toolhub scores not read", path=self.where, error=f"not JSON: {str(exc)[:200]}")
            return {}
        scores = value.get("scores") if isinstance(value, dict) else None
        if not isinstance(scores, dict):
            log.warning("toolhub scores not read", path=self.where, error="no `scores` object")
            return {}
        return scores

    def write(self, scores: Mapping[str, Any]) -> None:
        """Merge `scores` into the file (per tool, the newer wins) in one rename."""
        merged = self.read()
        for tool, score in scores.items():
            held = ToolScore.from_saved(merged.get(tool))
            if held is None or held.at <= score["at"]:
                merged[tool] = score
        text = json.dumps({"version": 1, "scores": merged}, separators=(",", ":"), sort_keys=True)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, temp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                file.write(text)
            os.replace(temp, self.path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise

    async def load_into(self, board: Scoreboard) -> int:
        """Restore the file's scores onto `board`."""
        return board.restore(await anyio.to_thread.run_sync(self.read))

    async def save_from(self, board: Scoreboard) -> None:
        """Save every score of `board` into the file; a failure is logged."""
        scores = board.snapshot()
        if not scores:
            return
        try:
            await anyio.to_thread.run_sync(self.write, scores)
        except OSError as exc:
            log.warning("toolhub scores not saved", path=self.where, error=exc.strerror or str(exc))


class RedisScores:
    """The scores in the shared Redis: one hash, every replica's tools, expiring a week after the last save."""

    def __init__(self, state: RedisState) -> None:
        self._state = state
        self.where = f"{state.prefix}toolhub:scores"

    async def load_into(self, board: Scoreboard) -> int:
        """Restore every replica's saved scores onto `board`."""
        saved = await self._state.read_scores()
        decoded: dict[str, Any] = {}
        for tool, raw in saved.items():
            try:
                decoded[tool] = json.loads(raw)
            except (ValueError, RecursionError):
                continue
        return board.restore(decoded)

    async def save_from(self, board: Scoreboard) -> None:
        """Save the scores this replica changed since it started (Redis errors are logged)."""
        scores = board.snapshot(changed_only=True)
        if scores:
            encoded = {tool: json.dumps(score, separators=(",", ":")) for tool, score in scores.items()}
            await self._state.write_scores(encoded, FORGET_AFTER_SECONDS)
