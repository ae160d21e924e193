"""An example toolscore constraint plugin.

Install it beside toolscore (`pip install ./docs/example_plugin`) and enable it in servers.json:

    "constraints": {"enabled": true,
                    "plugins": [{"name": "max_text", "mode": "enforce", "options": {"limit": 1000}}]}
"""

from __future__ import annotations

from typing import Any

import mcp_types

from toolscore import ExecutionContext
from toolscore.errors import Rejected


class MaxText:
    """Refuse calls with a string argument longer than `limit`; tag every result it lets through."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.limit = int(options.get("limit", 1000))
        self.fail = bool(options.get("fail", False))  # for the tests: make the hook itself break

    async def pre(self, ctx: ExecutionContext) -> mcp_types.CallToolResult | None:
        if self.fail:
            raise RuntimeError("the plugin broke")
        for name, value in ctx.arguments.items():
            if isinstance(value, str) and len(value) > self.limit:
                raise Rejected(f"argument '{name}' is longer than {self.limit} characters", hook="max_text")
        return None

    async def post(self, ctx: ExecutionContext, result: mcp_types.CallToolResult) -> mcp_types.CallToolResult:
        meta = dict(result.meta or {})
        meta["example/checked_by"] = "max_text"
        return result.model_copy(update={"meta": meta})
