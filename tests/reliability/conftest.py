"""The audit log the documented `toolscore audit` commands report on (tests/reliability/documented.py)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.fixtures.fixture_server import build_server
from toolscore import open_gateway, testing


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An audit log with one call in it, made once per module: the `toolscore audit` commands
    report on a copy. Asked for by name by those commands alone (`documented.run`).

    The call is what `toolscore call fx__echo` makes (the engine, the gateway's JSONL sink), over
    the fixture server in this process: the commands read the log, how it was made is not theirs
    to test (test_documented_calls.py runs `toolscore call`)."""
    workdir = tmp_path_factory.mktemp("audited")
    path = workdir / "audit.jsonl"
    config = testing.memory_config({"fx": {"capabilities": ["search"]}}, toolscore={"audit": {"path": str(path)}})

    async def call() -> None:
        async with open_gateway(config, memory_servers={"fx": build_server(workdir)}) as gw:
            result = (await gw.engine.execute("fx__echo", {"text": "x"})).result
            assert result is not None and not result.is_error, result

    with pytest.MonkeyPatch.context() as env:
        env.setenv("XDG_STATE_HOME", str(workdir / "state"))  # what the gateway saves stays here
        anyio.run(call)
    assert path.read_text().count("\n") == 1
    return path
