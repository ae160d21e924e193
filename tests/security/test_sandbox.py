"""The shipped sandbox (servers.json's `microsandbox`, through the real gateway) holds when the
gateway runs as root: nothing runs as host root, root-only files stay unreadable, /tmp and the
work dir have quotas, RAM is bounded by a memory cgroup; and `scripts/sandbox-launch` itself
bridges only what it is asked to, closes what it inherited, and works for a non-root caller."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import running_gateway, text, wait_for
from toolscore import Gateway, load_config
from toolscore.config import Config, ServerConfig

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

ROOT = Path(__file__).parents[2]
LAUNCHER = ROOT / "scripts" / "sandbox-launch"
NOBODY = 65534
MiB = 1024**2
GiB = 1024**3

requires_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the gateway's case this guards)")


def shipped_sandbox() -> Config:
    """The shipped servers.json with only its `microsandbox` entry."""
    config = load_config(ROOT / "servers.json")
    return config.model_copy(update={"servers": {"microsandbox": config.servers["microsandbox"]}})


requires_sandbox = pytest.mark.skipif(
    not (shipped_sandbox().servers_prefix / ".installed" / "microsandbox.json").exists(),
    reason="run ./scripts/setup (toolscore install) to install the shipped servers",
)


def entry() -> ServerConfig:
    return shipped_sandbox().servers["microsandbox"]


def memory_limit_in_config() -> int | None:
    """The entry's `--memory` for sandbox-launch, in bytes (None: it sets none)."""
    args = list(entry().args)
    if "--memory" not in args:
        return None
    size = args[args.index("--memory") + 1]
    units = {"k": 1024, "m": MiB, "g": GiB}
    return int(size[:-1]) * units[size[-1].lower()] if size[-1].isalpha() else int(size)


def host_ram() -> int:
    line = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal:"))
    return int(line.split()[1]) * 1024


def inside_path(host_dir: str) -> str:
    """Where the entry mounts `host_dir` inside the sandbox (the argument after the source)."""
    args = list(entry().args)
    return args[args.index(host_dir) + 1]


def memory_cgroup_writable() -> bool:
    if os.access("/sys/fs/cgroup/memory", os.W_OK):
        return True
    for base in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
        control = base / "cgroup.subtree_control"
        if os.access(base, os.W_OK) and control.exists() and "memory" in control.read_text().split():
            return True
    return False


def memory_cgroup(pid: int) -> Path | None:
    """The memory cgroup of `pid` that has a limit below the host's RAM (v1 or v2), if any."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        candidates = []
        if "memory" in controllers.split(","):
            candidates.append(Path("/sys/fs/cgroup/memory" + path) / "memory.limit_in_bytes")
        elif controllers == "":
            candidates += [Path(base + path) / "memory.max" for base in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")]
        for limit in candidates:
            if limit.exists() and limit.read_text().strip().isdigit() and int(limit.read_text()) < host_ram():
                return limit.parent
    return None


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with running_gateway(shipped_sandbox(), tmp_path) as (gw, _):
        yield gw


async def run_code(client: Client, code: str) -> dict[str, Any]:
    result = await client.call_tool("microsandbox__repl_run_code", {"params": {"code": code}})
    assert not result.is_error, text(result)
    return json.loads(text(result))


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (read from the host's /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def repl_pids(gateway: Gateway | None = None) -> list[int]:
    """The REPL server process(es) below this test.

    With a gateway: only those of the clients' own instances, not the one that lists the tools.
    """
    boot = gateway.hub.downstreams["microsandbox"].pid if gateway is not None else None
    listing = set(descendants(boot)) if boot is not None else set()
    return [pid for pid in descendants(os.getpid()) if pid not in listing and is_repl(pid)]


def is_reaper(pid: int) -> bool:
    """The gateway's reaper above each stdio server (its arguments name the server too)."""
    try:
        return b"_reaper.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def sandbox_tree(repl: int) -> list[int]:
    """The process the gateway started for the REPL (the launcher, become bwrap; below the gateway's
    reaper) and all below it."""
    top = repl
    while parent(top) != os.getpid() and not is_reaper(parent(top)):
        top = parent(top)
    return [top, *descendants(top)]


def status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


FILL = """
import json, os
def fill(folder, total={total}, chunk=8 * 2**20, per_file=48 * 2**20):
    block, written, names = b"x" * chunk, 0, []
    try:
        while written < total:
            names.append(os.path.join(folder, f"fill-{{len(names)}}"))
            with open(names[-1], "wb", buffering=0) as f:
                for _ in range(per_file // chunk):
                    f.write(block)
                    written += chunk
                    if written >= total:
                        break
        return written, 0
    except OSError as exc:
        return written, exc.errno
    finally:
        for name in names:
            os.remove(name)
print(json.dumps([fill(folder) for folder in {folders!r}]))
"""


# --- through the gateway, as servers.json ships it ---------------------------------------------


@requires_sandbox
async def test_root_only_host_files_are_not_readable(sandbox: Gateway) -> None:
    code = (
        "import os\nout = {}\n"
        "for p in ('/etc/shadow', '/etc/gshadow'):\n"
        "    try:\n        open(p).read(1)\n        out[p] = 'READ'\n"
        "    except OSError as exc:\n        out[p] = type(exc).__name__\n"
        "print(out)"
    )
    async with Client(sandbox.server, mode="legacy") as client:
        out = await run_code(client, code)
    assert "READ" not in out["stdout"], out  # absent (FileNotFoundError) or refused


@requires_sandbox
@requires_root
async def test_a_root_only_file_in_a_mounted_directory_is_not_readable(sandbox: Gateway) -> None:
    wheelhouse = shipped_sandbox().servers_prefix / "wheelhouse"
    secret = wheelhouse / f".toolscore-test-{uuid.uuid4().hex}"
    secret.write_text("root only")
    secret.chmod(0o600)
    try:
        where = f"{inside_path(str(wheelhouse))}/{secret.name}"
        code = (
            f"import os\nprint(os.path.exists({where!r}))\n"
            f"try:\n    print(open({where!r}).read())\nexcept OSError as exc:\n    print(type(exc).__name__)"
        )
        async with Client(sandbox.server, mode="legacy") as client:
            out = await run_code(client, code)
    finally:
        secret.unlink()
    assert out["stdout"] == "True\nPermissionError\n", out  # seen, as nobody sees it: not as root


@requires_sandbox
async def test_the_sandboxed_server_is_not_root_on_the_host(sandbox: Gateway) -> None:
    async with Client(sandbox.server, mode="legacy") as client:
        out = await run_code(client, "import os; print(os.getuid(), os.getgid(), os.getgroups())")
        assert out["stdout"] == f"{NOBODY} {NOBODY} []\n"
        (repl,) = repl_pids(sandbox)
        tree = sandbox_tree(repl)
        assert len(tree) >= 3, tree  # bwrap, bwrap's init in the sandbox, the REPL
        for pid in tree:
            seen = status(pid)
            assert "0" not in seen["Uid"].split() and "0" not in seen["Gid"].split(), seen
            assert seen["CapEff"] == "0000000000000000" and seen["NoNewPrivs"] == "1", seen
            if os.geteuid() == 0:  # the launcher became nobody before starting bwrap
                assert seen["Uid"].split() == [str(NOBODY)] * 4, seen
            assert set(seen["Groups"].split()) <= {str(NOBODY)}, seen


@requires_sandbox
async def test_tmp_the_work_dir_and_dev_shm_have_quotas(sandbox: Gateway) -> None:
    folders = ["/tmp", "/tmp/work", "/dev/shm"]
    async with Client(sandbox.server, mode="legacy") as client:
        out = await run_code(client, FILL.format(total=300 * MiB, folders=folders))
        again = await run_code(
            client, "open('/tmp/work/ok.txt', 'w').write('fine'); print(open('/tmp/work/ok.txt').read())"
        )
    results = dict(zip(folders, json.loads(out["stdout"]), strict=True))
    quotas = {"/tmp": 64 * MiB, "/tmp/work": 256 * MiB, "/dev/shm": 16 * MiB}
    for folder, (written, err) in results.items():
        assert err in (errno.ENOSPC, errno.EDQUOT), (folder, written, err)
        assert written <= quotas[folder], (folder, written)
    assert again["stdout"] == "fine\n"  # the space came back when the files went


@requires_sandbox
async def test_the_root_etc_and_dev_are_read_only(sandbox: Gateway) -> None:
    code = (
        "import os\nout = []\n"
        "for p in ('/toolscore-test', '/etc/toolscore-test', '/etc/passwd', '/dev/toolscore-test'):\n"
        "    try:\n        open(p, 'a').close()\n        out.append('WROTE ' + p)\n"
        "    except OSError as exc:\n        out.append(exc.strerror)\n"
        "print(out, sorted(os.listdir('/etc')))"
    )
    async with Client(sandbox.server, mode="legacy") as client:
        out = await run_code(client, code)
    assert "WROTE" not in out["stdout"], out
    assert "shadow" not in out["stdout"] and "'passwd'" in out["stdout"], out  # a short /etc of its own


@requires_sandbox
async def test_the_sandbox_is_in_a_memory_cgroup_that_its_tmpfs_is_charged_to(sandbox: Gateway) -> None:
    if not memory_cgroup_writable():
        pytest.skip("no writable memory cgroup on this machine: the limit cannot be enforced here")
    async with Client(sandbox.server, mode="legacy") as client:
        await run_code(client, "print(1)")
        (pid,) = repl_pids(sandbox)
        cgroup = memory_cgroup(pid)
        assert cgroup is not None, "the sandbox is in no memory cgroup with a limit below the host's RAM"
        limit_file, usage_file = (
            ("memory.limit_in_bytes", "memory.usage_in_bytes")
            if (cgroup / "memory.limit_in_bytes").exists()
            else ("memory.max", "memory.current")
        )
        assert int((cgroup / limit_file).read_text()) == memory_limit_in_config()
        before = int((cgroup / usage_file).read_text())
        await run_code(client, "for i in range(3): open(f'/tmp/work/f{i}', 'wb').write(b'x' * 40 * 2**20)")
        during = int((cgroup / usage_file).read_text())
        await run_code(client, "import os\nfor i in range(3): os.remove(f'/tmp/work/f{i}')")
    assert during - before >= 110 * MiB, (before, during)  # the work dir's 120 MB are the sandbox's RAM


@requires_sandbox
async def test_a_process_over_the_memory_limit_is_killed_and_the_repl_goes_on(sandbox: Gateway) -> None:
    if not memory_cgroup_writable():
        pytest.skip("no writable memory cgroup on this machine: the limit cannot be enforced here")
    over = (memory_limit_in_config() or GiB) + 256 * MiB  # under the 2 GB address-space limit
    code = (
        "import os, signal\npid = os.fork()\n"
        "if pid == 0:\n"
        "    open('/proc/self/oom_score_adj', 'w').write('1000')  # the one to go\n"
        f"    x = bytearray({over})\n    os._exit(0)\n"
        "_, st = os.waitpid(pid, 0)\n"
        "print(os.WIFSIGNALED(st) and os.WTERMSIG(st) == signal.SIGKILL)"
    )
    async with Client(sandbox.server, mode="legacy") as client:
        out = await run_code(client, code)
        after = await run_code(client, "print('still alive')")
    assert out["stdout"] == "True\n", out
    assert after["stdout"] == "still alive\n"


# --- the launcher itself ------------------------------------------------------------------------

AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
BWRAP_MIN = [
    "/usr/bin/bwrap", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
    "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/",
    "--unshare-all", "--uid", str(NOBODY), "--gid", str(NOBODY), "--die-with-parent", "--",
]  # fmt: skip


@pytest.fixture
def private_tree(tmp_path: Path) -> Path:
    """`<tmp>/private` (0700, like /root) holding `shared/` with a public and a root-only file."""
    shared = tmp_path / "private" / "shared"
    shared.mkdir(parents=True)
    (tmp_path / "private").chmod(0o700)
    shared.chmod(0o755)
    (shared / "hello.txt").write_text("hello\n")
    (shared / "hello.txt").chmod(0o644)
    (shared / "secret.txt").write_text("root only\n")
    (shared / "secret.txt").chmod(0o600)
    return shared


@requires_root
def test_the_launcher_bridges_a_directory_nobody_cannot_enter_and_hands_on_no_descriptor(
    private_tree: Path,
) -> None:
    leaked = os.open("/", os.O_RDONLY | os.O_DIRECTORY)  # a host directory the caller left open
    script = (
        "cat /data/hello.txt; cat /data/secret.txt 2>/dev/null || echo refused; id -u; "
        'for f in /proc/self/fd/*; do [ -d "$f" ] && echo "open directory $f"; done; cat /etc/passwd'
    )
    try:
        proc = subprocess.run(
            [str(LAUNCHER), "--ro", str(private_tree), "/data", "--file", "/etc/passwd", "nobody:x:65534:65534::/:",
             "--", *BWRAP_MIN, "/bin/sh", "-c", script],
            pass_fds=[leaked], capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(leaked)
    assert proc.stdout == f"hello\nrefused\n{NOBODY}\nnobody:x:65534:65534::/:\n", proc.stderr
    assert not list(Path("/proc").glob("[0-9]*/root/data")), "no staging mount is left on the host"


@requires_root
def test_a_non_root_launcher_names_the_path_it_cannot_reach(private_tree: Path) -> None:
    proc = subprocess.run(
        [*AS_NOBODY, str(LAUNCHER), "--ro", str(private_tree), "/data", "--", *BWRAP_MIN, "/bin/true"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and str(private_tree) in proc.stderr, proc.stderr
    assert f"uid {NOBODY}" in proc.stderr


@requires_sandbox
async def test_the_shipped_sandbox_works_for_a_non_root_launcher() -> None:
    cfg = entry()
    assert cfg.command is not None
    argv = [*AS_NOBODY, cfg.command, *cfg.args] if os.geteuid() == 0 else [cfg.command, *cfg.args]
    venv = str(shipped_sandbox().servers_prefix / "venvs" / "microsandbox")
    reach = [*AS_NOBODY, "test", "-r", venv, "-a", "-x", venv] if os.geteuid() == 0 else ["test", "-r", venv]
    if (await anyio.run_process(reach, check=False)).returncode != 0:
        # The install lies under a directory this user cannot enter: one clear line, not a crash.
        proc = await anyio.run_process(argv, check=False, stdin=subprocess.DEVNULL)
        assert proc.returncode == 1 and b"not reachable by uid" in proc.stderr, proc.stderr
        return
    params = StdioServerParameters(command=argv[0], args=argv[1:])
    async with Client(params, mode="legacy") as client:
        result = await client.call_tool(
            "repl_run_code",
            {"params": {"code": "import os, pwd; print(os.getuid(), pwd.getpwuid(os.getuid()).pw_name, "
                                "os.path.exists('/etc/shadow'))"}},
        )  # fmt: skip
        assert json.loads(text(result))["stdout"] == f"{NOBODY} nobody False\n"
        filled = await client.call_tool(
            "repl_run_code", {"params": {"code": FILL.format(total=100 * MiB, folders=["/tmp"])}}
        )
        [(written, err)] = json.loads(json.loads(text(filled))["stdout"])
        assert err == errno.ENOSPC and written <= 64 * MiB
        installed = await client.call_tool("repl_install_package", {"params": {"package": "six"}})
        assert json.loads(text(installed))["status"] == "ok", text(installed)
        used = await client.call_tool("repl_run_code", {"params": {"code": "import six; print(six.__name__)"}})
        assert json.loads(text(used))["stdout"] == "six\n"


# --- one sandbox per client ---------------------------------------------------------------------


@requires_sandbox
async def test_clients_cannot_see_each_others_sessions(sandbox: Gateway) -> None:
    async with Client(sandbox.server, mode="legacy") as alice, Client(sandbox.server, mode="legacy") as bob:
        mine = await run_code(alice, "secret = 'alice only'")
        session = mine["session_id"]
        listed = await bob.call_tool("microsandbox__repl_list_sessions", {})
        assert session not in text(listed)
        peek = await bob.call_tool(
            "microsandbox__repl_get_variable", {"params": {"session_id": session, "name": "secret"}}
        )
        assert "alice only" not in text(peek)
        theirs = await bob.call_tool(
            "microsandbox__repl_run_code", {"params": {"code": "print(globals().get('secret'))", "session_id": session}}
        )
        assert json.loads(text(theirs))["stdout"] == "None\n"
        again = await alice.call_tool(
            "microsandbox__repl_run_code", {"params": {"code": "print(secret)", "session_id": session}}
        )
        assert json.loads(text(again))["stdout"] == "alice only\n"


@requires_sandbox
async def test_a_wedged_repl_is_killed_from_outside_within_its_timeout(tmp_path: Path) -> None:
    config = shipped_sandbox()
    quick = config.model_copy(
        # 10 s: the first calls start a sandbox each, which a busy machine may take seconds over.
        update={"servers": {"microsandbox": config.servers["microsandbox"].model_copy(update={"timeout": 10.0})}}
    )
    # Wedged asleep, not spinning: the same kill from outside, without 10 s of a core burnt.
    wedge = (
        "import signal, time\nsignal.alarm(0)\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
        "while True:\n    time.sleep(60)"
    )
    async with (
        running_gateway(quick, tmp_path) as (gw, _),
        Client(gw.server, mode="legacy") as alice,
        Client(gw.server, mode="legacy") as bob,
    ):
        kept = await run_code(alice, "x = 41")
        await run_code(bob, "print(1)")
        before = set(repl_pids(gw))
        assert len(before) == 2
        with anyio.fail_after(60):  # a hang detector: only the 10 s deadline ends the wedged code
            result = await bob.call_tool("microsandbox__repl_run_code", {"params": {"code": wedge}})
        assert result.is_error and "did not answer within 10 s" in text(result)
        # Bob's REPL is killed at its deadline (the bound only detects a hang: the idle limit that
        # would otherwise end it is minutes away).
        await wait_for(lambda: not before <= set(repl_pids(gw)))
        # Alice's sandbox never noticed; Bob gets a fresh one on his next call.
        after = await alice.call_tool(
            "microsandbox__repl_run_code", {"params": {"code": "print(x + 1)", "session_id": kept["session_id"]}}
        )
        assert json.loads(text(after))["stdout"] == "42\n"
        for _ in range(100):  # while it restarts, calls say so
            fresh = await bob.call_tool("microsandbox__repl_run_code", {"params": {"code": "print(2)"}})
            if not fresh.is_error:
                break
            await anyio.sleep(0.2)
        assert json.loads(text(fresh))["stdout"] == "2\n"


@requires_sandbox
def test_a_busy_sandbox_dies_with_a_killed_gateway(tmp_path: Path) -> None:
    cfg = entry()
    config = {"mcpServers": {"microsandbox": {"command": cfg.command, "args": list(cfg.args), "isolation": "session"}}}
    (tmp_path / "servers.json").write_text(json.dumps(config))
    toolscore = Path(os.environ.get("VIRTUAL_ENV", sys.prefix)) / "bin" / "toolscore"
    gateway = subprocess.Popen(
        [str(toolscore), "serve", "--config", str(tmp_path / "servers.json")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert gateway.stdin is not None and gateway.stdout is not None

    def send(message: dict[str, Any]) -> None:
        assert gateway.stdin is not None
        gateway.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        gateway.stdin.flush()

    try:
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
        send({"id": 1, "method": "initialize", "params": params})
        assert json.loads(gateway.stdout.readline())["id"] == 1
        send({"method": "notifications/initialized"})
        # User code that ignores the REPL's alarm and never reads stdin again: only a kill stops it.
        spin = "import signal\nsignal.alarm(0)\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass"
        send({"id": 2, "method": "tools/call", "params": {"name": "microsandbox__repl_run_code",
                                                          "arguments": {"params": {"code": spin}}}})  # fmt: skip
        # Two sandboxes start here (bwrap, a Python REPL each): on a machine busy with the rest of
        # the suite that took over 20 s once. The loop ends as soon as both run.
        deadline = time.monotonic() + 120  # a hang detector
        tree: list[int] = []
        while time.monotonic() < deadline and sum(1 for p in descendants(gateway.pid) if is_repl(p)) < 2:
            time.sleep(0.1)  # the listing instance and this client's own
        tree = descendants(gateway.pid)
        assert sum(1 for p in tree if is_repl(p)) == 2, tree
        time.sleep(0.5)  # the call is now spinning
        gateway.kill()
        gateway.wait()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and [p for p in tree if running(p)]:
            time.sleep(0.1)
        assert not [p for p in tree if running(p)], "processes outlived the gateway"
    finally:
        if gateway.poll() is None:
            gateway.kill()
        gateway.wait()  # reaped: no ResourceWarning lands on the next test
        gateway.stdin.close()
        gateway.stdout.close()


def is_repl(pid: int) -> bool:
    """Python running the REPL server. The gateway's reaper names the server in its arguments too,
    and so do the launcher, setpriv, prlimit and bwrap until each execs the next: counting by
    "mcp-python-repl in the arguments" once took a launcher on its way for a REPL."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    runs_python = Path(os.fsdecode(argv[0])).name.startswith("python")
    return runs_python and len(argv) > 1 and argv[1].endswith(b"/mcp-python-repl")


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for init, which may not reap it soon)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
