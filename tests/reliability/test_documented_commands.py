"""Every command line shown in README.md and docs/ is found, and falls in a group a test file runs.

tests/reliability/documented.py reads the commands and runs one; the files
tests/reliability/test_documented_<group>.py run each group's (one worker runs a whole file).
"""

from __future__ import annotations

from pathlib import Path

from tests.reliability.documented import COMMANDS, GROUPS, _shell_lines, commands_of, group


def test_the_docs_show_commands_and_the_extraction_sees_them() -> None:
    commands = [c for _, c in COMMANDS]
    assert "toolscore check --json" in commands and "toolscore check" in commands
    assert "toolscore audit stats --since 1h --server fx --json" in commands
    assert any(c.startswith("toolscore serve --transport http --host 0.0.0.0 --token-file token") for c in commands)
    assert _shell_lines("a \\\n  b  # note\n# only a comment\n$ c") == ["a b", "c"]


def test_every_command_is_in_one_group_and_every_group_has_its_test_file() -> None:
    assert sorted(c for name in GROUPS for c in commands_of(name)) == sorted(COMMANDS)
    assert all(commands_of(name) for name in GROUPS)
    assert group("toolscore serve --transport http --port 8765") == "serve"
    assert group("TOOLSCORE_TOKEN=x toolscore serve --transport http --allow-host h") == "serve_exposed"
    assert group("toolscore audit tail -n 20 -f") == "audit" and group("toolscore call t") == "calls"
    files = {path.stem for path in Path(__file__).parent.glob("test_documented_*.py")}
    assert {f"test_documented_{name}" for name in GROUPS} <= files
