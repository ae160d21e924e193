"""Two gateway replicas sharing a redis-server, with a token per principal: an episode moves
across replicas for its own principal, never to another one, in both eras.

Before, every stateless request was one caller (`principal:bearer`): a client holding another
token read a live episode on the other replica by its id; and a handshake-era session's episodes
were stored as "any connection's", so any client presenting the id read them there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import mcp_types
import pytest
import redis
from mcp import Client

from tests.conftest import fixture_entry, http_client, start_http_gateway, text, write_config
from tests.scaleout.conftest import Replica

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

# Fixed, not random: they appear in test ids, which every xdist worker must collect alike.
ALICE, BOB = "alice-0123456789abcdefghij", "bob-9876543210zyxwvutsrqpo"
SECRET_PLAN = '<fx><echo id="x">{"text": "alice\'s secret"}</echo></fx>'
READ_PLAN = '<fx><echo>{"text": "read: ${x.text}"}</echo></fx>'


def _replica(tmp_path: Path, redis_url: str, tokens: Path) -> Replica:
    tmp_path.mkdir(parents=True)
    settings = {
        "audit": {"path": str(tmp_path / "audit.jsonl")},
        "log_dir": str(tmp_path / "logs"),
        "startup_grace_seconds": None,
        "state": redis_url,
        "loop": {"episodes_db": ""},
        "http": {"token_file": str(tokens)},
    }
    config = write_config(tmp_path, {"fx": fixture_entry(tmp_path)}, toolscore=settings)
    proc, base = start_http_gateway(config, env={"TOOLSCORE_TOKEN": ""})
    return Replica(proc, base + "/mcp", tmp_path / "audit.jsonl")


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[tuple[Replica, Replica]]:
    redis.Redis.from_url(redis_url).flushdb()
    base = tmp_path_factory.mktemp("principals")
    tokens = base / "tokens"
    tokens.write_text(f"alice {ALICE}\nbob {BOB}\n")
    tokens.chmod(0o600)
    a, b = _replica(base / "a", redis_url, tokens), _replica(base / "b", redis_url, tokens)
    yield a, b
    a.stop()
    b.stop()


async def _orchestrate(session: Client, plan: str, episode: str | None = None) -> mcp_types.CallToolResult:
    arguments = {"plan": plan} if episode is None else {"plan": plan, "episode": episode}
    return await session.call_tool("orchestrate", arguments)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_episode_id_from_one_principal_is_not_readable_by_another_on_the_other_replica(
    replicas: tuple[Replica, Replica], mode: str
) -> None:
    # auto: each request stands alone, only its token says whose episode it may read; legacy: a
    # session, whose caller on the other replica is a new connection of the same principal.
    a, b = replicas
    async with http_client(a.url, ALICE, mode) as alice_on_a:
        first = await _orchestrate(alice_on_a, SECRET_PLAN)
        assert first.structured_content is not None, text(first)
        episode = first.structured_content["episode"]
        async with http_client(b.url, BOB, mode) as bob_on_b:  # the episode is live on a, in Redis for b
            stolen = await _orchestrate(bob_on_b, READ_PLAN, episode)
            assert stolen.is_error and "unknown or has expired" in text(stolen), text(stolen)
            assert "secret" not in text(stolen)
        async with http_client(b.url, ALICE, mode) as alice_on_b:  # alice herself, on the other replica
            own = await _orchestrate(alice_on_b, READ_PLAN, episode)
            assert "read: alice's secret" in text(own), text(own)
