"""Third-party constraint hooks: the docs' example plugin, installed under its entry point, over real traffic."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import memory_gateway, text
from tests.policy import policy_client, refused
from toolscore.errors import ConfigError

pytestmark = pytest.mark.anyio

EXAMPLE_PLUGIN = Path(__file__).parents[2] / "docs" / "example_plugin"


@pytest.fixture
def example_plugin_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Register the docs' example plugin under its entry point, as `pip install` would."""
    site = tmp_path / "site"
    dist = site / "toolscore_example_plugin-0.1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toolscore-example-plugin\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[toolscore.constraints]\nmax_text = toolscore_example_plugin:MaxText\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(EXAMPLE_PLUGIN))


@pytest.mark.usefixtures("example_plugin_installed")
async def test_an_enforcing_plugin_refuses_and_tags_results(tmp_path: Path) -> None:
    plugins = [{"name": "max_text", "mode": "enforce", "options": {"limit": 5}}]
    async with policy_client(tmp_path, {"plugins": plugins}) as (client, sink):
        ok = await client.call_tool("fx__echo", {"text": "short"})
        assert not ok.is_error and ok.meta == {"example/checked_by": "max_text"}
        too_long = await client.call_tool("fx__counter", {"key": "too long"})
        assert refused(too_long, "max_text") and "argument 'key' is longer than 5" in text(too_long)
    assert not (tmp_path / "count-too long").exists()
    assert sink.records[1].violations == ("max_text: argument 'key' is longer than 5 characters",)


@pytest.mark.usefixtures("example_plugin_installed")
@pytest.mark.parametrize(("mode", "refuses"), [("enforce", True), ("permissive", False)])
async def test_a_failing_plugin_fails_closed_or_open_by_mode(tmp_path: Path, mode: str, refuses: bool) -> None:
    plugins = [{"name": "max_text", "mode": mode, "options": {"fail": True}}]
    async with policy_client(tmp_path, {"plugins": plugins}) as (client, _):
        result = await client.call_tool("fx__counter", {"key": "k"})
    assert result.is_error is refuses
    assert (tmp_path / "count-k").exists() is not refuses
    if refuses:
        assert "the check failed (RuntimeError: the plugin broke)" in text(result)


@pytest.mark.usefixtures("example_plugin_installed")
async def test_a_plugins_output_still_passes_the_built_in_result_rules(tmp_path: Path) -> None:
    plugins = [{"name": "max_text", "options": {"limit": 10_000}}]
    async with policy_client(tmp_path, {"plugins": plugins, "results": {"max_bytes": 10}}) as (client, _):
        result = await client.call_tool("fx__large", {"size": 50})
    assert result.meta == {"example/checked_by": "max_text"}
    assert text(result).startswith("x" * 10 + "\n…[truncated")


async def test_a_plugin_that_is_not_installed_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"constraints.plugins\[0\]: no plugin 'nope' is installed"):
        async with memory_gateway(tmp_path, constraints={"enabled": True, "plugins": [{"name": "nope"}]}):
            pass
