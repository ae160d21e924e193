"""The constraints in force on each server: the global sections, each one a server overrides replaced; pure.

The resolution is derived from `ServerConstraints`' own fields: a section added there overrides
its global namesake with no code here, and one without a global namesake of the same type is an
error as soon as this module is imported, never a setting silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from toolscore.config import Config, ConstraintsConfig, ServerConstraints

__all__ = ["ADDITIVE", "PerServer", "Scope", "check_overrides", "in_force", "resolve_scopes"]

T = TypeVar("T")
U = TypeVar("U")

ADDITIVE = frozenset({"tools"})
"""Sections a server's entry adds to the global ones instead of replacing them. Its `tools` rules
match downstream names, the global ones exposed names, and a call must pass both: replacing the
global deny list with a server's would let that server's entry lift a gateway-wide ban."""


@dataclass(frozen=True, slots=True)
class Scope:
    """The constraints in force on one server."""

    rules: ConstraintsConfig
    """The global sections, each one the server's entry sets replaced by its own (`ADDITIVE` ones excepted)."""
    own: ServerConstraints = field(default_factory=ServerConstraints)
    """The server's entry as written (empty for the gateway's own scope)."""


@dataclass(frozen=True, slots=True)
class PerServer(Generic[T]):
    """One value for the gateway's own tools (and any server not listed), and one per enabled server."""

    gateway: T
    servers: Mapping[str, T]

    def of(self, server: str | None) -> T:
        """The value for `server` (the gateway's for None or an unknown server)."""
        return self.gateway if server is None else self.servers.get(server, self.gateway)

    def map(self, fn: Callable[[T], U]) -> PerServer[U]:
        """`fn` applied to every value: compile a rule once per server."""
        return PerServer(fn(self.gateway), {name: fn(value) for name, value in self.servers.items()})


def in_force(constraints: ConstraintsConfig, own: ServerConstraints) -> ConstraintsConfig:
    """`constraints` with every section `own` sets replaced by it (`ADDITIVE` ones excepted)."""
    update = {name: value for name, value in own if value is not None and name not in ADDITIVE}
    return constraints.model_copy(update=update) if update else constraints


def resolve_scopes(config: Config) -> PerServer[Scope]:
    """The scope of the gateway and of every enabled server."""
    constraints = config.constraints
    return PerServer(
        Scope(constraints),
        {s.name: Scope(in_force(constraints, s.constraints), s.constraints) for s in config.enabled_servers},
    )


def check_overrides(
    server: type[ServerConstraints] = ServerConstraints, constraints: type[ConstraintsConfig] = ConstraintsConfig
) -> None:
    """Raise TypeError unless every per-server section overrides a global section of the same name and type."""
    sections = constraints.model_fields
    for name, override in server.model_fields.items():
        section = sections.get(name)
        if section is None or override.annotation != cast(Any, section.annotation) | None:
            raise TypeError(
                f"{server.__name__}.{name} must override a {constraints.__name__} section of the same name and "
                f"type: `{name}: <the section's type> | None = None`"
            )
    if ADDITIVE - server.model_fields.keys():
        raise TypeError(f"ADDITIVE names sections {server.__name__} does not have")


check_overrides()  # at import: a mismatch fails every test and every start, never a call
