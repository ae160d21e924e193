"""Path confinement: every path in the arguments, in any shape, must resolve under the roots, and goes on pinned.

The shapes a model can hide a path in, over real traffic, are in tests/security/test_policy_bypass.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import mcp_types
import pytest

from tests.conftest import text
from tests.policy import config, policy_client, refused, route
from toolscore.policy.paths import Confinement, PathViolation, names_path, roots_of_uris
from toolscore.policy.scope import resolve_scopes
from toolscore.policy.static import compile_rules, violations

pytestmark = pytest.mark.anyio


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A root holding `sub/`, a link `link` to a directory outside it, and that directory."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", root / "link")
    return root


def confine(root: Path, arguments: Any, *path_keys: str, skip: Any = None) -> tuple[Any, list[PathViolation]]:
    """Confine `arguments` under `root`, with `path_keys` (and the usual words) naming path arguments."""
    confinement = Confinement((os.path.realpath(root),), skip=skip)
    return confinement.apply(arguments, lambda key: key in path_keys or names_path(key))


def reasons(found: list[PathViolation]) -> list[str]:
    return [f"{v.where}: {v.reason}" for v in found]


async def test_paths_must_resolve_inside_the_roots(tmp_path: Path, root: Path) -> None:
    constraints = {"arguments": {"paths": {"arguments": ["path"], "roots": [str(root)]}}}
    async with policy_client(tmp_path, constraints) as (client, _):
        assert not (await client.call_tool("fx__touch", {"path": str(root / "sub" / "ok")})).is_error
        for path in [str(root / ".." / "outside" / "dotdot"), str(root / "link" / "via-link"), "relative/x"]:
            result = await client.call_tool("fx__touch", {"path": path})
            assert refused(result, "paths"), path
    assert (root / "sub" / "ok").exists()
    assert list((tmp_path / "outside").iterdir()) == []


def test_keys_name_paths_by_their_last_word_in_any_case_style_or_by_a_configured_glob() -> None:
    for key in ("path", "paths", "file_path", "sourcePath", "output-dir", "CWD", "inputFiles", "HTMLFile"):
        assert names_path(key), key
    for key in ("pathology", "text", "profile", "dirt", "uri"):
        assert not names_path(key), key
    assert names_path("Target", ["tar*"]) and names_path("to", ["FROM", "TO"])
    assert not names_path("target", ["targets"])


def test_a_path_inside_a_root_goes_on_as_its_real_path(root: Path) -> None:
    inside = str(root / "sub" / ".." / "sub" / "f")
    pinned, found = confine(root, {"path": inside, "text": "/etc/passwd"})
    assert found == []
    assert pinned == {"path": os.path.realpath(root / "sub" / "f"), "text": "/etc/passwd"}  # text names no path


def test_paths_escaping_through_dotdot_or_a_symlink_are_refused(root: Path) -> None:
    _, found = confine(root, {"paths": [str(root / ".." / "outside"), str(root / "link" / "x"), str(root)]})
    assert [v.where for v in found] == ["paths[0]", "paths[1]"]
    assert all("is outside the allowed roots" in v.reason for v in found)


def test_relative_paths_home_paths_and_nul_are_refused(root: Path) -> None:
    _, found = confine(root, {"a": {"path": "sub/x"}, "dir": "~/x", "file": str(root) + "/x\0y"})
    assert [v.where for v in found] == ["a.path", "dir", "file"]
    assert found[0].reason.startswith("must be an absolute path under")
    assert found[2].reason == "a path must not contain NUL"


def test_anything_but_a_string_under_a_path_key_is_refused_not_guessed_at(root: Path) -> None:
    _, found = confine(root, {"path": 7, "files": [None, True], "spec": {"dir": {"nested": 1.5}}})
    assert reasons(found) == [
        "path: must be a path string, not int",
        "files[0]: must be a path string, not NoneType",
        "files[1]: must be a path string, not bool",
        "spec.dir.nested: must be a path string, not float",
    ]


def test_file_uris_anywhere_are_paths_and_go_on_pinned(root: Path) -> None:
    inside = (root / "sub" / "a b").as_uri()
    pinned, found = confine(root, {"text": inside, "list": [f"FILE://localhost{root}/sub/c"]})
    assert found == []
    real = os.path.realpath(root / "sub")
    assert pinned == {"text": f"file://{real}/a%20b", "list": [f"file://{real}/c"]}
    _, found = confine(root, {"text": "file://evil.example/etc/passwd", "x": (root.parent / "outside").as_uri()})
    assert reasons(found)[0] == "text: file URI on another host (evil.example) is not allowed"
    assert "is outside the allowed roots" in found[1].reason


def test_values_nested_too_deep_to_check_are_refused(root: Path) -> None:
    deep: Any = "x"
    for _ in range(70):
        deep = [deep]
    _, found = confine(root, {"text": deep})
    assert len(found) == 1 and found[0].reason == "nested too deep to check"


def test_strings_the_caller_skips_are_left_for_later(root: Path) -> None:
    pinned, found = confine(root, {"path": "${a.path}"}, skip=lambda s: s.startswith("${"))
    assert (pinned, found) == ({"path": "${a.path}"}, [])


def test_path_arguments_can_be_named_globally_per_tool_and_by_the_tools_schema(root: Path) -> None:
    paths = {"roots": [str(root)], "arguments": ["spec"], "tools": {"fx__ec*": ["text"]}}
    cfg = config({"arguments": {"paths": paths}})
    rules = compile_rules(resolve_scopes(cfg).of("fx"))

    def where(tool: str, arguments: dict[str, Any]) -> list[str]:
        return [reason for _, reason in violations(route(cfg, tool), arguments, rules, plan=False)[0]]

    assert len(where("fx__echo", {"text": "/etc/passwd"})) == 1  # `text` is a path in fx__echo only
    assert where("fx__counter", {"key": "/etc/passwd"}) == []
    assert len(where("fx__read", {"spec": {"source": "/etc/passwd"}})) == 1  # listed for every tool
    assert len(where("fx__read", {"location": "/etc/passwd"})) == 1  # `format: path` in the schema


async def test_the_roots_entry_client_confines_paths_to_the_calling_clients_own_roots(tmp_path: Path) -> None:
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir()
    theirs.mkdir()

    async def list_roots(context: Any) -> mcp_types.ListRootsResult:
        return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri=mine.as_uri())])  # type: ignore[arg-type]

    constraints = {"arguments": {"paths": {"roots": ["client"]}}}
    async with policy_client(tmp_path, constraints, list_roots_callback=list_roots) as (client, _):
        assert not (await client.call_tool("fx__touch", {"path": str(mine / "ok")})).is_error
        assert refused(await client.call_tool("fx__touch", {"path": str(theirs / "no")}), "paths")
    async with policy_client(tmp_path, constraints) as (rootless, _):
        result = await rootless.call_tool("fx__touch", {"path": str(mine / "no")})
        assert refused(result, "paths") and "the client declared no roots" in text(result)
    assert [p.name for p in mine.iterdir()] == ["ok"] and list(theirs.iterdir()) == []


def test_only_local_file_uris_are_roots() -> None:
    uris = ["file:///srv/a", "file://localhost/srv/b", "file://elsewhere/srv/c", "https://x/srv/d", "file:rel"]
    assert roots_of_uris(uris) == (os.path.realpath("/srv/a"), os.path.realpath("/srv/b"))
