"""The SDK's package `__init__`s (`mcp`, `mcp.client`, `mcp.server`), loaded name by name.

Importing any SDK module runs its packages' `__init__`s first, and those import everything the
package offers: `mcp`'s imports `mcp.Client`, which imports the `MCPServer` framework, both HTTP
clients and the in-memory transport; `mcp.server`'s imports `MCPServer` too. A stdio gateway uses
none of them (docs/performance.md#cold-start-part-two: about 9 MB of its memory).
`lazy_sdk_packages()`, called by `toolscore serve` before the SDK's first import, puts in
`sys.modules` a module for each of these packages that imports a name from where the real
`__init__` would have (its `from X import Y` lines, read from its source) when the name is first
used: `from mcp import MCPError` then imports `mcp.shared.exceptions` alone, and
`import mcp.client.session` imports that module and what it imports, not all of `mcp.client`.

A package whose `__init__` does anything but import names (and set `__all__`) is left to load
as usual: a later SDK can only make this slower, never wrong. `tests/test_sdk_adapter.py` says
when that happens.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from types import ModuleType
from typing import Any

__all__ = ["LAZY_PACKAGES", "lazy_sdk_packages", "name_table"]

LAZY_PACKAGES = ("mcp", "mcp.client", "mcp.server")
"""The SDK packages whose `__init__` imports more than a stdio gateway uses."""

Table = dict[str, tuple[str, str | None]]
"""A package's names: name -> (module, attribute in it; None: the module itself)."""


def name_table(package: str) -> tuple[Table, list[str] | None] | None:
    """Where each name of `package`'s `__init__` comes from, and its `__all__`; None if the
    `__init__` does more than import names (or cannot be read)."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return None
    try:
        source = spec.loader.get_source(package)  # type: ignore[attr-defined]
        tree = ast.parse(source or "")
    except (AttributeError, ImportError, SyntaxError):
        return None
    table: Table = {}
    exported: list[str] | None = None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            source_module = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            for alias in node.names:
                if alias.name == "*":
                    return None
                if node.module is None:  # `from . import types`: a submodule
                    table[alias.asname or alias.name] = (f"{source_module}.{alias.name}", None)
                else:
                    table[alias.asname or alias.name] = (source_module, alias.name)
        elif isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]:
            try:
                exported = list(ast.literal_eval(node.value))
            except ValueError:
                return None
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):  # a docstring
            return None
    return table, exported


def _lazy_package(package: str) -> ModuleType | None:
    found = name_table(package)
    spec = importlib.util.find_spec(package)
    if found is None or spec is None:
        return None
    table, exported = found
    module = importlib.util.module_from_spec(spec)  # `__path__` set: submodules import as usual

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        where, attribute = table[name]
        value = importlib.import_module(where)
        if attribute is not None:
            value = getattr(value, attribute)
        setattr(module, name, value)  # the next use is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(module.__dict__) | set(table))

    module.__dict__.update(
        __getattr__=__getattr__, __dir__=__dir__, __all__=exported if exported is not None else list(table)
    )
    return module


def lazy_sdk_packages() -> list[str]:
    """Put the lazy `LAZY_PACKAGES` in `sys.modules`, unless the SDK is imported already; which were."""
    if "mcp" in sys.modules:
        return []
    made: list[str] = []
    for package in LAZY_PACKAGES:
        module = _lazy_package(package)
        if module is None:
            continue
        sys.modules[package] = module
        parent, _, child = package.rpartition(".")
        if parent in sys.modules:  # `import mcp.client` binds `mcp.client`, as the real import would
            setattr(sys.modules[parent], child, module)
        made.append(package)
    return made
