"""Every command line shown in README.md and docs/ runs, and exits as documented: the machinery.

Commands are read from the Markdown itself, so a newly documented one is covered without editing
these files: every line of a ```bash / ```sh / ```console block, and every inline `toolscore ...`
code span (the usage synopses of the command table). A synopsis runs twice: with its optional
`[...]` parts left out, and with all of them in (the first of `a|b`, placeholders filled in).
Each runs in a temporary folder whose `./servers.json` holds the fixture server, with its own
HOME and state folder. A command that serves until stopped is started, checked (it answers) and
stopped with SIGTERM, and must then exit 0. Those that cannot run here are in `EXEMPT`, with why.

The commands fall in `GROUPS` (`group`), each run by a test file of its own
(tests/reliability/test_documented_<group>.py): one worker runs a whole file (`--dist loadfile`),
and together they took four minutes on one. test_documented_commands.py checks the extraction
and that every group has its file.
"""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from tests.conftest import fixture_entry, free_port

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BIN = Path(sys.executable).parent

EXEMPT = {
    "./scripts/run": "sets the project up first (installs packages and servers from the network)",
    "./scripts/test": "runs the whole suite, this test included",
    "./scripts/setup": "installs packages and servers from the network",
    "scripts/conformance": "installs and runs the npm conformance suite (network, minutes)",
    "mcp-inspector": "a separate client (npm), not part of toolscore",
    ".venv/bin/python -m pytest": "runs the whole suite, this test included",
    ".venv/bin/python benchmarks/": "a benchmark of minutes, for a quiet machine",
    "toolscore audit stats --shared": "reads the Redis audit stream of a replicated deployment (a network service)",
    "toolscore audit verify out.jsonl --shared": "reads the Redis audit stream of a replicated deployment",
    "toolscore pins list --shared": "reads the pins a replicated deployment keeps in Redis (a network service)",
}
"""Command prefixes that are not run, and why."""

EXPECTED_EXIT = {
    "toolscore trajectories export": (1, "no trajectory file"),
    "toolscore audit stats --since 1h --server fx --principal": (1, "no call of that principal"),
    "toolscore audit verify out.jsonl": (1, "no audit file at out.jsonl"),
    # The moving-in commands read a client's file, which this clean HOME does not have.
    "toolscore import --from claude-desktop": (2, "claude_desktop_config.json"),
    "toolscore import": (2, "--from"),
    "toolscore register --undo --client claude-desktop": (2, "no backup"),
    "toolscore doctor": (1, ""),  # no client here starts toolscore (said on stdout)
    "toolscore pins approve": (1, "no pin to approve"),
}
"""Command prefixes that exit non-zero here, as documented: (status, what stderr says)."""

PLACEHOLDERS = {
    "TOOL": "fx__echo",
    "JSON": '\'{"text": "hi"}\'',
    "NAME": "fx",
    "TAG": "search",
    "N": "5",
    "FILE": "out.jsonl",
    "PATH": "audit.jsonl",
    "ISO": "2026-01-01T00:00:00",
    "…": "a-token-of-enough-length-0123456789",
}
VALUES = {"--host": "127.0.0.1", "--port": "0", "--server": "fx", "--since": "1h", "-o": "out.jsonl"}
"""Values for options a synopsis shows bare (`[--server]`)."""

_FENCE = re.compile(r"^ *```(\w*)\n(.*?)^ *```", re.MULTILINE | re.DOTALL)
_INLINE = re.compile(r"`(toolscore [^`]+)`")
_OPTIONAL = re.compile(r"\[([^\[\]]*)\]")


def _shell_lines(block: str) -> list[str]:
    """Commands of a shell block: comments dropped, continuation lines joined."""
    commands, current = [], ""
    for raw in block.splitlines():
        line = raw.split("  #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        current += line[:-1] + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            commands.append(" ".join(current.split()).removeprefix("$ "))
            current = ""
    return commands


def _fill(text: str) -> str:
    text = text.replace("…", PLACEHOLDERS["…"])
    words = []
    for word in text.replace("\\|", "|").split():
        if word == "...":
            continue
        words.append(PLACEHOLDERS.get(word, word))
    return " ".join(words)


def _variants(synopsis: str) -> list[str]:
    """Without its optional parts, and with all of them."""
    synopsis = synopsis.replace("\\|", "|")
    bare = _fill(_OPTIONAL.sub("", synopsis))

    def included(match: re.Match[str]) -> str:
        words = match.group(1).split("|")[0].split()
        if not words or words[0] in ("SERVER",):
            return ""  # `[SERVER ...]`: every server is the default
        if len(words) == 1 and words[0] in VALUES:
            words.append(VALUES[words[0]])
        return " ".join(words)

    full = _fill(_OPTIONAL.sub(included, synopsis))
    return list(dict.fromkeys([bare, full]))


def documented() -> list[tuple[str, str]]:
    """(where, command) for every command line shown in the docs."""
    found: dict[str, str] = {}
    for doc in DOCS:
        text = doc.read_text()
        where = doc.relative_to(ROOT).as_posix()
        for match in _FENCE.finditer(text):
            if match.group(1) in ("bash", "sh", "console", "shell"):
                for line in _shell_lines(match.group(2)):
                    for command in _variants(line) if "[" in line or "…" in line else [line]:
                        found.setdefault(command, where)
        for match in _INLINE.finditer(text):
            for command in _variants(match.group(1)):
                found.setdefault(command, where)
    return sorted((where, command) for command, where in found.items())


COMMANDS = documented()

GROUPS = ("serve", "serve_exposed", "audit", "calls", "others")
"""What a command does: serves until stopped (`toolscore serve`; on a loopback address, or exposed
beyond it with a token, Host names or TLS), reports on an audit log
(`toolscore audit`), starts the configured servers and calls them (`tools`, `check`, `call`), or
anything else (set-up, client files, pins, the commands that are not run)."""


def group(command: str) -> str:
    """The group of a documented command, and so the test file that runs it."""
    if "toolscore serve" in command:
        exposed = any(option in command for option in ("--host 0.0.0.0", "--allow-host", "--token-file"))
        return "serve_exposed" if exposed else "serve"
    if command.startswith("toolscore audit"):
        return "audit"
    if command.startswith(("toolscore tools", "toolscore check", "toolscore call")):
        return "calls"
    return "others"


def commands_of(name: str) -> list[tuple[str, str]]:
    """(where, command) of every documented command in group `name`."""
    assert name in GROUPS, name
    return [(where, command) for where, command in COMMANDS if group(command) == name]


def make_workdir(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    config = {
        "mcpServers": {"fx": {**fixture_entry(tmp_path), "capabilities": ["search"]}},
        "toolscore": {"audit": {"path": str(tmp_path / "audit.jsonl")}, "log_dir": str(state / "logs")},
    }
    (tmp_path / "servers.json").write_text(json.dumps(config))
    (tmp_path / "token").write_text("a-token-of-enough-length-0123456789\n")
    (tmp_path / "token").chmod(0o600)
    return tmp_path


def environment(workdir: Path) -> dict[str, str]:
    return {
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(workdir),
        "XDG_STATE_HOME": str(workdir / "state"),
        "XDG_CONFIG_HOME": str(workdir / "config"),
        "LANG": "C.UTF-8",
    }


def _self_signed(workdir: Path) -> None:
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"),
            *("-keyout", str(workdir / "privkey.pem"), "-out", str(workdir / "fullchain.pem")),
        ],
        check=True,
        capture_output=True,
    )


def _serves(command: str) -> bool:
    return "toolscore serve" in command or _follows(command)


def _follows(command: str) -> bool:
    """`audit tail -f`: it runs until the user stops it with Ctrl-C."""
    return "audit tail" in command and " -f" in command


def _wait_http(proc: subprocess.Popen[bytes], command: str, port: int, scheme: str) -> None:
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, f"{command!r} exited {proc.returncode}"
        try:
            assert httpx2.get(f"{scheme}://127.0.0.1:{port}/mcp", timeout=10, verify=False).status_code < 500
            return
        except httpx2.TransportError:
            assert time.monotonic() < deadline, f"{command!r} did not start serving"
            time.sleep(0.2)


def _wait_stdio(proc: subprocess.Popen[bytes], command: str) -> None:
    """An MCP client's first request over stdin gets its answer on stdout."""
    assert proc.stdin is not None and proc.stdout is not None
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "docs", "version": "0"}},
    }
    proc.stdin.write(json.dumps(initialize).encode() + b"\n")
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    assert ready, f"{command!r} did not answer initialize"
    assert json.loads(proc.stdout.readline())["result"]["serverInfo"]["name"] == "toolscore"


_SIGINT_DEFAULT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])"
)


def _run_serving(command: str, workdir: Path, env: dict[str, str]) -> None:
    """Start it, see it answer, SIGTERM it: it must exit 0."""
    argv = shlex.split(command)
    assignments = {}
    while argv and re.fullmatch(r"[A-Z_]+=.*", argv[0]):
        key, _, value = argv.pop(0).partition("=")
        assignments[key] = value
    http = "--transport" in argv and argv[argv.index("--transport") + 1] == "http"
    port = free_port()
    if http:
        argv = [a for i, a in enumerate(argv) if a != "--port" and (i == 0 or argv[i - 1] != "--port")]
        argv += ["--port", str(port)]
    if "--tls-cert" in argv:
        _self_signed(workdir)
    if _follows(command):
        # Started as a terminal starts it, with Ctrl-C's SIGINT at its default: a pytest-xdist
        # worker ignores SIGINT, a child inherits that, and `tail -f` then ran until killed.
        argv = [sys.executable, "-c", _SIGINT_DEFAULT, *argv]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    proc = subprocess.Popen(argv, cwd=workdir, env={**env, **assignments}, **pipes)  # type: ignore[call-overload]
    try:
        if http:
            _wait_http(proc, command, port, "https" if "--tls-cert" in argv else "http")
        elif _follows(command):
            # Up once it has printed the record already there (a fixed sleep lost to a slow start).
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            assert ready and proc.stdout.readline(), f"{command!r} printed nothing"
            assert proc.poll() is None, f"{command!r} exited {proc.returncode}"
        else:
            _wait_stdio(proc, command)
        proc.send_signal(signal.SIGINT if _follows(command) else signal.SIGTERM)
        _, err = proc.communicate(timeout=120)  # a hang detector: a loaded machine may take its time
        assert proc.returncode == 0, f"{command!r} ended with {proc.returncode}: {err.decode()[-2000:]}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def run(where: str, command: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Run a documented command in a folder set up in `tmp_path`; it exits as documented."""
    if reason := next((why for prefix, why in EXEMPT.items() if command.startswith(prefix)), None):
        pytest.skip(f"{where}: not run here: {reason}")
    workdir = make_workdir(tmp_path)
    env = environment(workdir)
    if command.startswith("toolscore audit"):  # something to report on
        shutil.copyfile(request.getfixturevalue("audited"), workdir / "audit.jsonl")
    if _serves(command):
        _run_serving(command, workdir, env)
        return
    done = subprocess.run(["bash", "-c", command], cwd=workdir, env=env, capture_output=True, timeout=120)
    status, says = next(((s, w) for prefix, (s, w) in EXPECTED_EXIT.items() if command.startswith(prefix)), (0, ""))
    err = done.stderr.decode(errors="replace")
    assert done.returncode == status, f"{where}: {command!r} exited {done.returncode}: {err[-2000:]}"
    assert says in err and "Traceback" not in err, err[-2000:]
