"""servers.json parsing: shapes of different clients, expansion, and errors naming file and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolscore.config import default_config_path, load_config, parse_config
from toolscore.errors import ConfigError
from toolscore.testing import captured_logs


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_claude_desktop_shape_with_toolscore_options() -> None:
    cfg = parse_config(
        {
            "mcpServers": {
                "files": {"command": "mcp-files", "args": ["/srv"], "env": {"K": "v"}, "timeout": 5, "prefix": "fs"},
                "web": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer t"}},
                "old": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
            },
            "toolscore": {"separator": "_", "default_timeout": 7},
        },
        env={},
    )
    assert [s.transport for s in cfg.servers.values()] == ["stdio", "http", "sse"]
    assert cfg.server_timeout("files") == 5
    assert cfg.server_timeout("web") == 7
    assert cfg.servers["files"].prefix == "fs"
    assert cfg.settings.separator == "_"


def test_vscode_servers_key_and_claude_code_stdio_type() -> None:
    cfg = parse_config({"servers": {"a": {"type": "stdio", "command": "x"}}, "inputs": []}, env={})
    assert cfg.servers["a"].transport == "stdio"


def test_other_clients_keys_in_an_entry_are_tolerated() -> None:
    cfg = parse_config({"mcpServers": {"a": {"command": "x", "envFile": ".env", "alwaysAllow": ["t"]}}}, env={})
    assert cfg.servers["a"].command == "x"


def test_variables_expand_with_defaults_and_the_config_dir(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "mcpServers": {
                "a": {"command": "${TOOLSCORE_CONFIG_DIR}/bin/x", "args": ["${ROOT}", "${MISSING:-fallback}"]}
            }
        },
    )
    cfg = load_config(path, env={"ROOT": "/data"})
    assert cfg.servers["a"].command == f"{tmp_path.resolve()}/bin/x"
    assert cfg.servers["a"].args == ("/data", "fallback")


def test_variables_expand_inside_constraints_too(tmp_path: Path) -> None:
    """The README says "everywhere": `${TOOLSCORE_CONFIG_DIR}/docs` was kept as written, so every path
    call was refused, with nothing said at load."""
    paths = {"roots": ["${TOOLSCORE_CONFIG_DIR}/docs", "${DATA:-/srv}/x"]}
    path = write(tmp_path, {"mcpServers": {}, "constraints": {"enabled": True, "arguments": {"paths": paths}}})
    cfg = load_config(path, env={})
    assert cfg.constraints.arguments.paths is not None
    assert cfg.constraints.arguments.paths.roots == (f"{tmp_path.resolve()}/docs", "/srv/x")
    unset = write(tmp_path, {"mcpServers": {}, "constraints": {"arguments": {"paths": {"roots": ["${NOPE}"]}}}})
    with pytest.raises(ConfigError) as err:
        load_config(unset, env={})
    assert "constraints.arguments.paths.roots[0]" in str(err.value) and "NOPE" in str(err.value)


def test_an_unset_variable_names_the_file_field_and_variable(tmp_path: Path) -> None:
    path = write(tmp_path, {"mcpServers": {"a": {"command": "x", "env": {"KEY": "${API_KEY}"}}}})
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    message = str(err.value)
    assert str(path) in message
    assert "mcpServers.a.env.KEY" in message
    assert "API_KEY" in message


def test_a_disabled_server_may_name_unset_variables() -> None:
    cfg = parse_config({"mcpServers": {"a": {"command": "${NOPE}", "disabled": True}}}, env={})
    assert cfg.enabled_servers == []


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"mcpServers": {"a": {"args": []}}}, "mcpServers.a", "either 'command'"),
        ({"mcpServers": {"a": {"command": "x", "url": "http://h"}}}, "mcpServers.a", "both 'command' and 'url'"),
        ({"mcpServers": {"a": {"command": "x", "timeout": -1}}}, "mcpServers.a.timeout", "greater than 0"),
        ({"mcpServers": {"a": {"command": "x", "args": "not-a-list"}}}, "mcpServers.a.args", "tuple"),
        ({"mcpServers": {"a": {"command": "x", "tools": {"alow": ["*"]}}}}, "mcpServers.a.tools.alow", "not permitted"),
        (
            {"mcpServers": {"a": {"command": "x", "tools": {"allow": "read_*"}}}},
            "mcpServers.a.tools.allow",
            "a list of tool names or globs",
        ),
        ({"mcpServers": {}, "constraints": {"tools": {"deny": "x"}}}, "constraints.tools.deny", "a list of tool names"),
        ({"mcpServers": {"a": {"type": "http", "command": "x"}}}, "mcpServers.a", "needs 'url'"),
        (
            {"mcpServers": {"a": {"type": "sse", "url": "http://h/sse", "era": "2026-07-28"}}},
            "mcpServers.a",
            "not spoken over SSE",
        ),
        ({"mcpServers": {"a": {"command": "x", "era": "2025"}}}, "mcpServers.a.era", "2026-07-28"),
        ({"mcpServers": {"a": "x"}}, "mcpServers.a", "must be an object"),
        ({"mcpServers": {}, "toolscore": {"separater": "_"}}, "toolscore.separater", "not permitted"),
        ({"mcpServers": {}, "toolscore": {"separator": "::"}}, "toolscore.separator", "pattern"),
        ({"mcpServers": {}, "constraints": {"enabled": "maybe"}}, "constraints.enabled", "boolean"),
        ({"mcpServers": [], "x": 1}, "mcpServers", "must be an object"),
    ],
)
def test_invalid_config_names_the_file_and_field(tmp_path: Path, data: object, field: str, words: str) -> None:
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert str(err.value).startswith(f"{path}: {field}: ")
    assert words in str(err.value)


def test_broken_json_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, '{"mcpServers": {\n  "a": {"command": "x",}\n}}')
    with pytest.raises(ConfigError, match=r"not valid JSON: .* line 2 column"):
        load_config(path)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_config(tmp_path / "nope.json")


def test_secrets_are_masked_in_repr() -> None:
    cfg = parse_config(
        {"mcpServers": {"a": {"type": "http", "url": "http://h/mcp", "headers": {"Authorization": "Bearer s3cret"}}}},
        env={},
    )
    assert "s3cret" not in repr(cfg.servers["a"])
    assert "Authorization" in repr(cfg.servers["a"])


def test_default_config_prefers_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert default_config_path(tmp_path) == tmp_path / "xdg" / "toolscore" / "servers.json"
    write(tmp_path, {"mcpServers": {}})
    assert default_config_path(tmp_path) == tmp_path / "servers.json"


def test_an_unknown_key_in_a_server_entry_is_named_with_a_suggestion(tmp_path: Path) -> None:
    """`"timout": 5` was ignored without a word: the server ran with the default deadline."""
    path = write(tmp_path, {"mcpServers": {"a": {"command": "x", "timout": 5, "alwaysAllow": ["t"]}}})
    with captured_logs() as logs:
        cfg = load_config(path, env={})
    assert cfg.servers["a"].timeout is None  # not guessed: still ignored, but said
    warned = [e for e in logs if e["event"].startswith("unknown key")]
    assert [(e["server"], e["key"], e["did_you_mean"]) for e in warned] == [("a", "timout", "timeout")]
    assert warned[0]["file"] == str(path)
