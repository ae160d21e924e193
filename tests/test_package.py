"""The package's shape: the public API is pinned, and the pure core does no I/O."""

from __future__ import annotations

import ast
from pathlib import Path

import toolscore

SRC = Path(toolscore.__file__).parent
PURE = [
    "config.py",
    "errors.py",
    "_glob.py",
    "_json.py",
    "_redact.py",
    "_naming.py",
    "_tokens.py",
    "_envfile.py",
    "audit/chain.py",
    "audit/sinks.py",
    "clients/entries.py",
    "clients/jsonc.py",
    "clients/locations.py",
    "clients/merge.py",
    "clients/toml_tables.py",
    "downstream/breaker.py",
    "downstream/caching.py",
    "downstream/skills.py",
    "downstream/catalog.py",
    "downstream/registry.py",
    "loop/contract.py",
    "loop/limits.py",
    "loop/scan.py",
    "loop/stops.py",
    "plan/approval.py",
    "plan/check.py",
    "plan/lex.py",
    "plan/nodes.py",
    "plan/parse.py",
    "plan/refs.py",
    "plan/transcript.py",
    "plan/values.py",
    "policy/paths.py",
    "policy/redact.py",
    "policy/scope.py",
    "telemetry/metrics.py",
    "toolhub/capabilities.py",
    "toolhub/catalog.py",
    "toolhub/mapping.py",
    "toolhub/scoring.py",
    "toolhub/search.py",
    "toolhub/synonyms.py",
    "toolhub/synthesis.py",
    "toolhub/text.py",
    "trust/poison.py",
    "trust/verdict.py",
]


def test_the_public_api_is_exactly_this() -> None:
    assert toolscore.__all__ == [
        "AuditRecord",
        "AuditSink",
        "CallOutcome",
        "Config",
        "EngineSettings",
        "ExecutionContext",
        "ExecutionPhase",
        "Gateway",
        "JsonlAuditSink",
        "MemoryAuditSink",
        "PostExecutionHook",
        "PreExecutionHook",
        "ToolExecutionEngine",
        "WrapHook",
        "__version__",
        "load_config",
        "open_gateway",
        "parse_config",
        "read_audit",
    ]
    assert all(hasattr(toolscore, name) for name in toolscore.__all__)


def test_the_pure_core_imports_neither_the_event_loop_nor_the_sdk() -> None:
    for name in PURE:
        tree = ast.parse((SRC / name).read_text())
        imported = {
            alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        } | {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not imported & {"anyio", "mcp", "httpx2", "asyncio"}, name


def test_nothing_in_the_package_prints_to_stdout() -> None:
    # On stdio, stdout is the JSON-RPC channel; only the CLI's own commands print.
    for path in SRC.rglob("*.py"):
        if path.name == "cli.py" or "deepsearch" in path.parts:
            continue
        calls = [
            n
            for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print"
        ]
        assert calls == [], path.name
