"""The env file beside servers.json: its format, its mode, and how `${NAME}` reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolscore._envfile import format_env, parse_env, read_env_file
from toolscore.config import load_config
from toolscore.errors import ConfigError


def test_values_round_trip_whatever_they_hold() -> None:
    values = {"PLAIN": "abc=def#x", "SPACED": " padded ", "LINES": "one\ntwo", "QUOTE": '"q"', "EMPTY": ""}
    text = format_env(values, header="written by a test\nsecond line")
    assert text.startswith("# written by a test\n# second line\n")
    assert parse_env(text, source="x.env") == values


@pytest.mark.parametrize(
    ("text", "says"),
    [("no equals sign", "line 1: expected NAME=value"), ('# ok\nA="unclosed', "line 2: a value starting with")],
)
def test_a_malformed_line_names_the_file_and_line_never_the_value(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_env(text, source="servers.env")
    assert str(caught.value).startswith("servers.env: " + says)
    assert "unclosed" not in str(caught.value)


def test_a_file_open_to_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "servers.env"
    path.write_text("TOKEN=abc\n")
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="open to group or others \\(mode 644\\): chmod 600 it"):
        read_env_file(path)
    path.chmod(0o600)
    assert read_env_file(path) == {"TOKEN": "abc"}
    assert read_env_file(tmp_path / "absent.env") == {}


def test_a_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "servers.env"
    path.write_bytes(b"TOKEN=\xff\n")
    path.chmod(0o600)
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_env_file(path)


def test_servers_json_reads_references_from_its_env_file_and_the_environment_wins(tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"a": {"command": "a", "env": {"KEY": "${KEY}", "B": "${B}"}}}}))
    env_file = tmp_path / "servers.env"
    env_file.write_text("KEY=from-file\nB=from-file\n")
    env_file.chmod(0o600)
    assert load_config(config, env={"B": "from-env"}).servers["a"].env == {"KEY": "from-file", "B": "from-env"}
