"""A real `redis-server` on a free loopback port, and gateway replicas sharing it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fixture_entry, free_port, start_http_gateway, write_config

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway redis-server (no persistence) for the module."""
    if not os.path.exists(REDIS_SERVER):
        pytest.skip("redis-server is not installed (scripts/setup installs it as root: apt-get install redis-server)")
    port = free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    import redis

    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 60  # a hang detector: redis starts in milliseconds when idle
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise
            time.sleep(0.05)
    client.close()
    yield url
    proc.terminate()
    proc.wait(timeout=60)


@dataclass
class Replica:
    """One `toolscore serve --transport http` process."""

    proc: subprocess.Popen[bytes]
    url: str
    audit: Path

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)


def start_replica(tmp_path: Path, redis_url: str, *, constraints: dict[str, Any] | None = None) -> Replica:
    """A gateway over the fixture server, its state in `redis_url`, its own audit file and logs."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    settings = {
        "audit": {"path": str(tmp_path / "audit.jsonl"), "stream": True},
        "log_dir": str(tmp_path / "logs"),
        "startup_grace_seconds": None,
        "state": redis_url,
        "loop": {"episodes_db": ""},
    }
    sections: dict[str, Any] = {"toolscore": settings}
    if constraints is not None:
        sections["constraints"] = constraints
    path = write_config(tmp_path, {"fx": fixture_entry(tmp_path)}, **sections)
    proc, base = start_http_gateway(path)
    return Replica(proc, base + "/mcp", tmp_path / "audit.jsonl")
