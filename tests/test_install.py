"""`toolscore install` from install hints: idempotent, and failures are reported, not hidden."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from toolscore import parse_config
from toolscore._install import install_servers

pytestmark = pytest.mark.e2e  # they start processes


def config(tmp_path: Path, install: dict[str, Any]) -> Any:
    data = {"mcpServers": {"srv": {"command": "x", "install": install}, "plain": {"command": "y"}}}
    return parse_config(data, source=str(tmp_path / "servers.json"), env={})


def test_install_is_idempotent_and_reinstalls_when_the_hints_change(tmp_path: Path) -> None:
    marker = "${TOOLSCORE_SERVERS}/state/ran"
    hints = {"dirs": ["state/work"], "run": [[sys.executable, "-c", f"open('{marker}', 'a').write('x')"]]}
    first = install_servers(config(tmp_path, hints), log=lambda _: None)
    assert [(o.server, o.status) for o in first] == [("srv", "installed"), ("plain", "nothing to install")]
    prefix = tmp_path / ".toolscore" / "servers"
    assert (prefix / "state" / "work").is_dir() and (prefix / "state" / "ran").read_text() == "x"
    again = install_servers(config(tmp_path, hints), log=lambda _: None)
    assert again[0].status == "up to date" and (prefix / "state" / "ran").read_text() == "x"
    changed = install_servers(config(tmp_path, {**hints, "dirs": ["state/other"]}), log=lambda _: None)
    assert changed[0].status == "installed" and (prefix / "state" / "ran").read_text() == "xx"
    forced = install_servers(config(tmp_path, {**hints, "dirs": ["state/other"]}), force=True, log=lambda _: None)
    assert forced[0].status == "installed"


def test_a_failing_step_is_reported_with_its_output(tmp_path: Path) -> None:
    hints = {"run": [[sys.executable, "-c", "import sys; sys.exit('no wheel for you')"]]}
    (outcome, _) = install_servers(config(tmp_path, hints), log=lambda _: None)
    assert outcome.status == "failed" and "exited 1" in outcome.message and "no wheel for you" in outcome.message
    # Not stamped: the next run tries again.
    assert not (tmp_path / ".toolscore" / "servers" / ".installed" / "srv.json").exists()


def test_the_command_prints_a_table_and_fails_when_a_server_failed(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "ok": {"command": "x", "install": {"dirs": ["d"]}},
                    "bad": {"command": "x", "install": {"run": [["/nonexistent/tool"]]}},
                }
            }
        )
    )
    exe = str(Path(sys.executable).parent / "toolscore")
    proc = subprocess.run([exe, "install", "--config", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    rows = [line.split()[:2] for line in proc.stdout.splitlines()[1:3]]
    assert rows == [["ok", "installed"], ["bad", "failed"]]
    unknown = subprocess.run(
        [exe, "install", "nope", "--config", str(path)], capture_output=True, text=True, check=False
    )
    assert unknown.returncode == 2 and "not in the config: nope" in unknown.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="apt hints are installed only as root")
def test_apt_waits_for_a_package_lock_another_manager_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """apt-get fails at once on a held lock unless told to wait: the install tells it to, and says so."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (bin_dir / "dpkg").write_text("#!/bin/sh\nexit 1\n")  # nothing installed yet
    # An apt-get whose lock is held: it succeeds only when asked to wait for it.
    (bin_dir / "apt-get").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        'case "$*" in *DPkg::Lock::Timeout=*) exit 0;; esac\n'
        "echo 'E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt)' >&2\n"
        "exit 100\n"
    )
    for tool in ("dpkg", "apt-get"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    lines: list[str] = []
    (outcome, _) = install_servers(config(tmp_path, {"apt": ["some-lib"]}), log=lines.append)
    assert outcome.status == "installed", outcome.message
    assert calls.read_text().splitlines() == ["-o DPkg::Lock::Timeout=120 install -y --no-install-recommends some-lib"]
    assert any("waits up to 120 s" in line and "lock" in line for line in lines), lines
