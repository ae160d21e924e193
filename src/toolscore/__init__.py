"""toolscore: an MCP gateway in front of many MCP servers.

The public API is re-exported here; modules starting with `_` are private.
"""

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
from toolscore._version import __version__ as __version__
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
