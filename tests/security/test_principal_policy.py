"""Per-principal rules through the real HTTP front: the principal comes from the token a request
carries, in both eras; a plan is refused whole, before any step, for the principal it breaks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import fixture_entry, http_client, http_gateway_process, text, write_config

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

# Fixed, not random: they appear in test ids, which every xdist worker must collect alike.
ALICE, BOB = "alice-0123456789abcdefghij", "bob-9876543210zyxwvutsrqpo"


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """alice may call only `fx__echo` and twice a minute; bob has the global rules."""
    tmp_path = tmp_path_factory.mktemp("principal-policy")
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {ALICE}\nbob {BOB}\n")
    tokens.chmod(0o600)
    settings = {
        "audit": {"path": ""},
        "log_dir": str(tmp_path / "logs"),
        "startup_grace_seconds": None,
        "http": {"token_file": str(tokens)},
    }
    principals = {"alice": {"tools": {"allow": ["fx__echo"]}, "quota": {"calls_per_minute": 2}}}
    config = write_config(
        tmp_path,
        {"fx": fixture_entry(tmp_path)},
        toolscore=settings,
        constraints={"enabled": True, "principals": principals},
    )
    with http_gateway_process(config, env={"TOOLSCORE_TOKEN": ""}) as base:
        yield base + "/mcp"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_token_decides_whose_rules_apply_to_a_list_a_call_and_a_plan(front: str, mode: str) -> None:
    async with http_client(front, ALICE, mode) as alice, http_client(front, BOB, mode) as bob:
        alice_sees = {t.name for t in (await alice.list_tools()).tools if t.name.startswith("fx__")}
        bob_sees = {t.name for t in (await bob.list_tools()).tools if t.name.startswith("fx__")}
        assert alice_sees == {"fx__echo"}, "each principal is shown what it may call"
        assert {"fx__echo", "fx__add"} <= bob_sees
        refused = await alice.call_tool("fx__add", {"a": 1, "b": 2})
        assert refused.is_error and "not among those allowed to alice" in text(refused), text(refused)
        assert '"sum": 3' in text(await bob.call_tool("fx__add", {"a": 1, "b": 2}))
        plan = '<fx><echo>{"text": "before"}</echo><add>{"a": 1, "b": 2}</add></fx>'
        whole = await alice.call_tool("orchestrate", {"plan": plan})
        assert whole.is_error and "not among those allowed to alice" in text(whole), text(whole)
        assert "before" not in text(whole), "no step ran"
        assert not (await bob.call_tool("orchestrate", {"plan": plan})).is_error


async def test_a_principals_quota_counts_its_calls_in_both_eras_together(front: str) -> None:
    # The quota is alice's, whichever era or session her calls come in: the third in a minute is refused.
    async with http_client(front, ALICE, "auto") as stateless, http_client(front, ALICE, "legacy") as session:
        answers = [await stateless.call_tool("fx__echo", {"text": "one"})]
        answers.append(await session.call_tool("fx__echo", {"text": "two"}))
        answers.append(await session.call_tool("fx__echo", {"text": "three"}))
    used = [a for a in answers if a.is_error]
    assert used and "alice's quota of 2 calls a minute is used" in text(used[-1]), [text(a) for a in answers]
