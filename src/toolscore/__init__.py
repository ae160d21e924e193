"""toolscore: an MCP gateway in front of many MCP servers.

The public API is re-exported here; modules starting with `_` are private. The names are
imported on first use (PEP 562), so `toolscore serve` and `import toolscore.config` load only
what they need: the engine and the gateway import the MCP SDK, which takes most of a second.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from toolscore._version import __version__ as __version__

if TYPE_CHECKING:
    from toolscore._engine import CallOutcome as CallOutcome
    from toolscore._engine import EngineSettings as EngineSettings
    from toolscore._engine import ExecutionContext as ExecutionContext
    from toolscore._engine import ExecutionPhase as ExecutionPhase
    from toolscore._engine import PostExecutionHook as PostExecutionHook
    from toolscore._engine import PreExecutionHook as PreExecutionHook
    from toolscore._engine import ToolExecutionEngine as ToolExecutionEngine
    from toolscore._engine import WrapHook as WrapHook
    from toolscore._gateway import Gateway as Gateway
    from toolscore._gateway import open_gateway as open_gateway
    from toolscore.audit.sinks import AuditRecord as AuditRecord
    from toolscore.audit.sinks import AuditSink as AuditSink
    from toolscore.audit.sinks import JsonlAuditSink as JsonlAuditSink
    from toolscore.audit.sinks import MemoryAuditSink as MemoryAuditSink
    from toolscore.audit.sinks import read_audit as read_audit
    from toolscore.config import Config as Config
    from toolscore.config import load_config as load_config
    from toolscore.config import parse_config as parse_config

__all__ = [
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

_HOMES = {
    "CallOutcome": "toolscore._engine",
    "EngineSettings": "toolscore._engine",
    "ExecutionContext": "toolscore._engine",
    "ExecutionPhase": "toolscore._engine",
    "PostExecutionHook": "toolscore._engine",
    "PreExecutionHook": "toolscore._engine",
    "ToolExecutionEngine": "toolscore._engine",
    "WrapHook": "toolscore._engine",
    "Gateway": "toolscore._gateway",
    "open_gateway": "toolscore._gateway",
    "AuditRecord": "toolscore.audit.sinks",
    "AuditSink": "toolscore.audit.sinks",
    "JsonlAuditSink": "toolscore.audit.sinks",
    "MemoryAuditSink": "toolscore.audit.sinks",
    "read_audit": "toolscore.audit.sinks",
    "Config": "toolscore.config",
    "load_config": "toolscore.config",
    "parse_config": "toolscore.config",
}
"""Where each public name lives."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'toolscore' has no attribute '{name}'")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # found once; later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
