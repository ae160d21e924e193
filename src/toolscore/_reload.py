"""Live reload of servers.json: what may change while the gateway runs, and the watch on the file.

The gateway reads its config again when the file or its env file (`servers.env`) changes (polled:
size, modification time and contents' hash) or on SIGHUP, and puts a valid one in force
(`Gateway.reload`): servers added, removed or changed, `constraints`, and the `toolscore` settings
that can change live. An invalid file keeps the running config. The settings of `RESTART_ONLY`
stay as they were until the next start (the listening side, where state and audit records go, how
names are made): a warning names each one that differs.
"""

from __future__ import annotations

import hashlib
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import structlog
from anyio.abc import TaskStatus

from toolscore._envfile import env_file_for
from toolscore.config import Config
from toolscore.downstream.hub import ConfigChanges

if TYPE_CHECKING:
    from toolscore._gateway import Gateway

__all__ = ["RESTART_ONLY", "Reloaded", "effective", "watch_config", "watching"]

log = structlog.get_logger("toolscore.reload")

RESTART_ONLY = (
    "separator",
    "log_dir",
    "audit",
    "http",
    "model",
    "loop",
    "state",
    "state_prefix",
    "max_request_bytes",
    "max_result_bytes",
    "reload",
    "results_ttl_seconds",
    "results_max_bytes",
)
"""`toolscore` settings a running gateway keeps until it restarts: the transport, listening port
and tokens (`http`), where state, logs and audit records go, the names every client already has
(`separator`), the agent loop's model, and the message size caps its connections were opened with."""

_POLL_SECONDS = 1.0
_MAX_CONFIG_BYTES = 16 * 1024 * 1024
"""A file larger than this is not hashed on every poll (its size and time still are)."""


@dataclass(frozen=True)
class Reloaded:
    """What a reload put in force."""

    changes: ConfigChanges
    """Servers added, removed and changed."""
    restart_only: list[str]
    """Settings that differ in the file and stay as they were until the next start."""
    rules: bool
    """Whether `constraints` or live `toolscore` settings changed."""


def effective(running: Config, loaded: Config) -> tuple[Config, list[str]]:
    """The config to put in force: `loaded`, with the settings of `RESTART_ONLY` kept as `running`
    has them; and the names of those that differ (`toolscore.<name>`)."""
    kept = [name for name in RESTART_ONLY if getattr(running.settings, name) != getattr(loaded.settings, name)]
    if not kept:
        return loaded, []
    settings = loaded.settings.model_copy(update={name: getattr(running.settings, name) for name in kept})
    return loaded.model_copy(update={"settings": settings}), [f"toolscore.{name}" for name in kept]


def _fingerprint(path: Path) -> tuple[int, int, bytes] | None:
    """What says the file changed: size, modification time and a hash of its bytes (None: unreadable)."""
    try:
        stat = path.stat()
        digest = b""
        if stat.st_size <= _MAX_CONFIG_BYTES:
            digest = hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns, digest


def _fingerprints(paths: tuple[Path, ...]) -> tuple[tuple[int, int, bytes] | None, ...]:
    return tuple(_fingerprint(p) for p in paths)


async def watch_config(
    path: Path,
    reload: Callable[[], Awaitable[object]],
    *,
    poll_seconds: float = _POLL_SECONDS,
    hangup: bool = True,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Call `reload` whenever the file at `path` changes, and on SIGHUP (`hangup`, where the platform
    has it and this is the main thread); runs until cancelled. A reload that fails is logged.
    Started (`task_status`) once it knows the file as it is now: a change after that is seen."""
    async with anyio.create_task_group() as tg:
        if hangup and sys.platform != "win32":
            tg.start_soon(_on_hangup, reload)
        # The config and its env file (`${VAR}` values kept beside it): a change of either reloads.
        files = (path, env_file_for(path))
        seen = await anyio.to_thread.run_sync(_fingerprints, files)
        task_status.started()
        while True:
            await anyio.sleep(poll_seconds)
            now = await anyio.to_thread.run_sync(_fingerprints, files)
            if now[0] is None or now == seen:
                continue  # a config being replaced is missing for a moment: wait for the new one
            seen = now
            await _reload(reload, "the file changed")


async def _on_hangup(reload: Callable[[], Awaitable[object]]) -> None:
    try:
        signals = anyio.open_signal_receiver(signal.SIGHUP)
    except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or no signals here
        return
    with signals as received:
        async for _ in received:
            await _reload(reload, "SIGHUP")


async def _reload(reload: Callable[[], Awaitable[object]], why: str) -> None:
    log.info("reloading the config", why=why)
    try:
        await reload()
    except Exception:  # a bug in a reload must not end the gateway: the running config stays
        log.exception("config reload failed; the running one stays")


@asynccontextmanager
async def watching(gateway: Gateway) -> AsyncIterator[None]:
    """While the body runs, reload `gateway`'s config whenever its file changes or on SIGHUP (when
    `toolscore.reload` is on and the config came from a file)."""
    path = gateway.config.path
    if path is None or not gateway.config.settings.reload:
        yield
        return
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_config, path, gateway.reload, name="config:watch")
        try:
            yield
        finally:
            tg.cancel_scope.cancel()
