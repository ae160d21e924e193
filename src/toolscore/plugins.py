"""Third-party constraint hooks, registered by Python entry point.

A plugin is a package that declares, in its `pyproject.toml`::

    [project.entry-points."toolscore.constraints"]
    max_text = "my_package.hooks:MaxText"

and is turned on in servers.json, in order::

    "constraints": {"enabled": true, "plugins": [
        {"name": "max_text", "mode": "enforce", "options": {"limit": 1000}}]}

The entry point is a factory (usually a class) called with the `options` object. What it returns
may define any of::

    async def pre(self, ctx: ExecutionContext) -> CallToolResult | None: ...
    async def wrap(self, ctx: ExecutionContext, call_next: CallNext) -> CallToolResult: ...
    async def post(self, ctx: ExecutionContext, result: CallToolResult) -> CallToolResult: ...

`pre` runs with the built-in rules, before the call: raise `toolscore.errors.Rejected` to refuse
it, return a result to answer in its place, or return None. `wrap` runs around the downstream
call, inside the built-in wraps (caching, timing, retries: `return await call_next(ctx)` makes
the call). `post` sees, and may replace, the result. A deliberate `Rejected` always refuses; any
*other* exception is a failure of the hook: in `enforce` mode it refuses the call (fail closed), in
`permissive` mode it is logged and the call goes on (fail open); a wrap's failure after it made the
call is the call's own. Plugins are loaded and composed once, at start-up.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

import mcp_types
import structlog

from toolscore._engine import CallNext, ExecutionContext, PostExecutionHook, PreExecutionHook, WrapHook
from toolscore.config import PluginConfig
from toolscore.errors import ConfigError, Rejected

__all__ = ["ENTRY_POINT_GROUP", "load_plugins"]

ENTRY_POINT_GROUP = "toolscore.constraints"
log = structlog.get_logger("toolscore.plugins")


def _failed(name: str, enforce: bool, exc: Exception) -> None:
    """A hook that broke: refuse the call (enforce), or log it and let the call go on (permissive)."""
    if enforce:
        raise Rejected(f"the check failed ({type(exc).__name__}: {exc})", hook=name) from exc
    log.warning("permissive plugin failed; the call goes on", plugin=name, error=repr(exc))


class _PluginPre:
    def __init__(self, name: str, plugin: Any, enforce: bool) -> None:
        self.name = name
        self._pre: PreExecutionHook = plugin.pre
        self._enforce = enforce

    async def __call__(self, ctx: ExecutionContext) -> mcp_types.CallToolResult | None:
        try:
            return await self._pre(ctx)
        except Rejected:
            raise
        except Exception as exc:
            _failed(self.name, self._enforce, exc)
            return None


class _PluginWrap:
    def __init__(self, name: str, plugin: Any, enforce: bool) -> None:
        self.name = name
        self._wrap: WrapHook = plugin.wrap
        self._enforce = enforce

    async def __call__(self, ctx: ExecutionContext, call_next: CallNext) -> mcp_types.CallToolResult:
        called = False

        async def proceed(inner: ExecutionContext) -> mcp_types.CallToolResult:
            nonlocal called
            called = True
            return await call_next(inner)

        try:
            return await self._wrap(ctx, proceed)
        except Rejected:
            raise
        except Exception as exc:
            if called:  # the downstream's own failure, or the plugin's after it: not the hook's to judge
                raise
            _failed(self.name, self._enforce, exc)
            return await call_next(ctx)


class _PluginPost:
    def __init__(self, name: str, plugin: Any, enforce: bool) -> None:
        self.name = name
        self._post: PostExecutionHook = plugin.post
        self._enforce = enforce

    async def __call__(self, ctx: ExecutionContext, result: mcp_types.CallToolResult) -> mcp_types.CallToolResult:
        try:
            return await self._post(ctx, result)
        except Rejected:
            raise
        except Exception as exc:
            _failed(self.name, self._enforce, exc)
            return result


def load_plugins(
    plugins: tuple[PluginConfig, ...], *, source: str | None = None
) -> tuple[list[PreExecutionHook], list[WrapHook], list[PostExecutionHook]]:
    """Load and wrap the configured plugins, in order.

    Raises:
        ConfigError: a plugin is not installed, fails to load, or defines neither hook.
    """
    if not plugins:
        return [], [], []  # reading every installed package's entry points takes milliseconds
    available = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    pre: list[PreExecutionHook] = []
    wrap: list[WrapHook] = []
    post: list[PostExecutionHook] = []
    for n, cfg in enumerate(plugins):
        field = f"constraints.plugins[{n}]"
        entry = available.get(cfg.name)
        if entry is None:
            installed = ", ".join(sorted(available)) or "none"
            raise ConfigError(
                f"no plugin '{cfg.name}' is installed (entry point group '{ENTRY_POINT_GROUP}'; "
                f"installed: {installed})",
                path=source,
                field=field,
            )
        try:
            plugin = entry.load()(dict(cfg.options))
        except Exception as exc:
            raise ConfigError(
                f"plugin '{cfg.name}' failed to load: {type(exc).__name__}: {exc}", path=source, field=field
            ) from exc
        enforce = cfg.mode == "enforce"
        if hasattr(plugin, "pre"):
            pre.append(_PluginPre(cfg.name, plugin, enforce))
        if hasattr(plugin, "wrap"):
            wrap.append(_PluginWrap(cfg.name, plugin, enforce))
        if hasattr(plugin, "post"):
            post.append(_PluginPost(cfg.name, plugin, enforce))
        if not any(hasattr(plugin, hook) for hook in ("pre", "wrap", "post")):
            raise ConfigError(f"plugin '{cfg.name}' defines none of pre(), wrap(), post()", path=source, field=field)
    return pre, wrap, post
