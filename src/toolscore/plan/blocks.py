"""The block table: every block tag of the plan language, what it takes and how it runs.

Theory of operation. A block is a tag that holds plan items and decides how they run. Each kind
is one `BlockSpec` in `SPECS`, and the other modules ask the table instead of naming kinds:

- the parser (`parse.py`) knows a block tag by `BlockKind` and reads its attributes with the spec's
  `attributes` (plus `id` and `timeout`, which every block takes): each is a small value parser
  (`Duration`, `Flag`, `IntRange`, `Choice`) that says what is wrong with a bad value;
- the checker (`check.py`) applies the spec's `children` rule: `ordered` children run one after
  another, so a later child may reference an earlier one; `concurrent` and `alternatives` children
  may not reference each other, and a block of alternatives needs at least one, at most
  `max_alternatives`;
- the runner (`run.py`) applies the block's `timeout`, then awaits the spec's `run` strategy with
  the checked block, a `run_child(child, deadline) -> Status` callback (which keeps the step
  records and tells a timeout from a cancellation) and the effective deadline. A strategy decides
  the order: it awaits children in turn, or starts them in one task group and cancels the rest
  once its outcome is decided (`_concurrently`). The runner then asks `value` what `${block_id}`
  sees and, when the block failed, writes a `<result block=…>` line from `failure` (None: its
  failed steps already say it all);
- the `orchestrate` tool's description lists every spec's `summary`.

So a new block tag is one `BlockKind` member and one spec here (CONTRIBUTING.md walks through
one). The v2 tags in `V2_KINDS` are refused as `unsupported` until they get a spec.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio

from toolscore.plan.nodes import Block, CheckedBlock, CheckedCall, CheckedCapability, CheckedNode, Status

if TYPE_CHECKING:
    from toolscore.config import Shorthand

__all__ = [
    "COMMON_ATTRIBUTES",
    "SPECS",
    "V2_KINDS",
    "Attribute",
    "BadValue",
    "BlockKind",
    "BlockSpec",
    "Choice",
    "Duration",
    "Flag",
    "Ident",
    "IntRange",
    "RunChild",
    "either",
    "option",
    "shorthand_table",
]


class BlockKind(StrEnum):
    """The block tags, in the order the `orchestrate` tool's description lists them."""

    PARALLEL = "parallel"
    SEQUENTIAL = "sequential"
    RACE = "race"
    FALLBACK = "fallback"


V2_KINDS = frozenset({"dag", "if", "else", "foreach"})
"""Block tags of plan language v2: reserved, refused as `unsupported`."""


def either(words: Iterable[str]) -> str:
    """`a, b or c`."""
    items = list(words)
    return ", ".join(items[:-1]) + " or " + items[-1] if len(items) > 1 else "".join(items)


# -- attribute values -----------------------------------------------------------------------------


class BadValue(ValueError):
    """An attribute value that does not parse; the parser makes it a plan problem."""

    def __init__(self, message: str, *, code: str = "bad_attribute") -> None:
        self.code = code
        super().__init__(message)


class Attribute(Protocol):
    """How one attribute's value is read; `default` is what an element without it gets."""

    @property
    def default(self) -> Any: ...

    def parse(self, raw: str, key: str) -> Any:
        """The value of `key="raw"`.

        Raises:
            BadValue: what is wrong with it, in words a model can act on.
        """
        ...


_ID_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_DURATION_RE = re.compile(r"^\s*+(\d{1,18}+(?:\.\d{1,18}+)?)\s*+(ms|s|m)?\s*+$")
_MAX_ATTR_DIGITS = 9


@dataclass(frozen=True, slots=True)
class Ident:
    """A name for references: `[A-Za-z_][A-Za-z0-9_]{0,63}`."""

    default: None = None

    def parse(self, raw: str, key: str) -> str:
        if not _ID_RE.match(raw):
            raise BadValue(f"{key}='{raw}' must match [A-Za-z_][A-Za-z0-9_]{{0,63}}", code="bad_id")
        return raw


@dataclass(frozen=True, slots=True)
class Duration:
    """Seconds, written `500ms`, `20s` (or `20`) or `2m`."""

    default: float | None = None

    def parse(self, raw: str, key: str) -> float:
        match = _DURATION_RE.match(raw)
        seconds = None
        if match is not None:
            number, unit = float(match.group(1)), match.group(2) or "s"
            seconds = number / 1000 if unit == "ms" else number * 60 if unit == "m" else number
        if seconds is None or seconds <= 0:
            raise BadValue(f"{key}='{raw}': write a duration like 500ms, 20s or 2m")
        return seconds


@dataclass(frozen=True, slots=True)
class Flag:
    """`true` or `false`, in any case."""

    default: bool

    def parse(self, raw: str, key: str) -> bool:
        value = {"true": True, "false": False}.get(raw.strip().lower())
        if value is None:
            raise BadValue(f"{key}='{raw}': use true or false")
        return value


@dataclass(frozen=True, slots=True)
class IntRange:
    """A whole number from `low` to `high`."""

    low: int
    high: int
    default: int | None = None

    def parse(self, raw: str, key: str) -> int:
        digits = raw.strip()
        # isdecimal, not isdigit: "²" is a digit that int() refuses. Bounded: int() is quadratic.
        number = int(digits) if digits.isdecimal() and len(digits) <= _MAX_ATTR_DIGITS else None
        if number is None or not self.low <= number <= self.high:
            raise BadValue(f"{key}='{raw}': use a whole number from {self.low} to {self.high}")
        return number


@dataclass(frozen=True, slots=True)
class Choice:
    """One of `values`; the first is the default. Values starting with `v2_prefix` are refused as
    `unsupported` (plan language v2), the rest as `bad_attribute`."""

    values: tuple[str, ...]
    v2_prefix: str | None = None

    @property
    def default(self) -> str:
        return self.values[0]

    def parse(self, raw: str, key: str) -> str:
        if self.v2_prefix is not None and raw.startswith(self.v2_prefix):
            raise BadValue(f"{key} '{self.v2_prefix}k' is plan language v2 and not available yet", code="unsupported")
        if raw not in self.values:
            raise BadValue(f"{key}='{raw}': use {either(repr(v) for v in self.values)}")
        return raw


COMMON_ATTRIBUTES: Mapping[str, Attribute] = {"id": Ident(), "timeout": Duration()}
"""What every block takes: a name for references, and a deadline for the whole block."""


# -- running --------------------------------------------------------------------------------------

RunChild = Callable[[CheckedNode, float], Awaitable[Status]]
"""Runs one child under an effective deadline (`anyio.current_time()` based) to its status."""
Strategy = Callable[[CheckedBlock, RunChild, float], Awaitable[Status]]
ChildValue = tuple[str | None, dict[str, Any] | None]
"""A child's id and value record (None: it has none, e.g. it never ran)."""
ValueOf = Callable[[Sequence[ChildValue], Status], dict[str, Any] | None]


def option(block: Block, key: str) -> Any:
    """A block's attribute `key`: as written, else its kind's default."""
    if key in block.options:
        return block.options[key]
    return SPECS[block.kind].attributes[key].default


def _continues(child: CheckedNode) -> bool:
    """A call whose failure does not fail its sequence (`on_error="continue"`)."""
    return isinstance(child, CheckedCall | CheckedCapability) and child.node.on_error == "continue"


async def _concurrently(
    children: Sequence[CheckedNode],
    run_child: RunChild,
    deadline: float,
    *,
    decides: Callable[[Status], bool],
    limit: int | None = None,
) -> list[Status]:
    """Start every child (at most `limit` at once); the first status that `decides` cancels the rest.

    Returns the statuses of the children that finished, in the order they did.
    """
    statuses: list[Status] = []
    limiter = anyio.CapacityLimiter(limit) if limit else None
    async with anyio.create_task_group() as tg:

        async def child_task(child: CheckedNode) -> None:
            if limiter is not None:
                async with limiter:
                    status = await run_child(child, deadline)
            else:
                status = await run_child(child, deadline)
            statuses.append(status)
            if decides(status):
                tg.cancel_scope.cancel()

        for child in children:
            tg.start_soon(child_task, child)
    return statuses


async def _in_order(node: CheckedBlock, run_child: RunChild, deadline: float) -> Status:
    """One after another; after a failure the rest are skipped, unless `stop_on_error` is false or
    the failed call said `on_error="continue"` (which also leaves the block `ok`)."""
    status: Status = "ok"
    for child in node.children:
        child_status = await run_child(child, deadline)
        if child_status != "ok" and not _continues(child):
            status = "timeout" if child_status == "timeout" else "error"
            if option(node.block, "stop_on_error"):
                break
    return status


async def _together(node: CheckedBlock, run_child: RunChild, deadline: float) -> Status:
    """All at once (at most `max_concurrency`); `fail_fast` cancels the rest at the first failure."""
    fail_fast = option(node.block, "policy") == "fail_fast"
    statuses = await _concurrently(
        node.children,
        run_child,
        deadline,
        decides=lambda status: fail_fast and status != "ok",
        limit=option(node.block, "max_concurrency"),
    )
    finished = len(statuses) == len(node.children) and all(status == "ok" for status in statuses)
    return "ok" if finished else "error"


async def _first_success(node: CheckedBlock, run_child: RunChild, deadline: float) -> Status:
    """All at once; the first `ok` wins and the others are cancelled."""
    statuses = await _concurrently(node.children, run_child, deadline, decides=lambda status: status == "ok")
    return "ok" if "ok" in statuses else "error"


async def _in_turn(node: CheckedBlock, run_child: RunChild, deadline: float) -> Status:
    """Alternatives one at a time until one is `ok`; the rest are skipped."""
    for child in node.children:
        if await run_child(child, deadline) == "ok":
            return "ok"
    return "error"


def _last(values: Sequence[ChildValue], status: Status) -> dict[str, Any] | None:
    return values[-1][1] if values else None


def _winner(values: Sequence[ChildValue], status: Status) -> dict[str, Any] | None:
    return next((value for _, value in values if value is not None and value["status"] == "ok"), None)


def _combined(values: Sequence[ChildValue], status: Status) -> dict[str, Any]:
    """The children's JSON, keyed by their ids (an array if some have none), as one record."""
    if all(ident for ident, _ in values):
        combined: Any = {ident: (value or {}).get("json") for ident, value in values}
    else:
        combined = [(value or {}).get("json") for _, value in values]
    return {
        "status": status,
        "text": json.dumps(combined, ensure_ascii=False, separators=(",", ":")),
        "json": combined,
        "error": None,
        "ms": 0,
        "attempts": 1,
        "server": None,
        "tool": "parallel",
    }


# -- the table ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BlockSpec:
    """Everything about one block tag."""

    kind: BlockKind
    summary: str
    """How the `orchestrate` tool's description shows it."""
    children: Literal["ordered", "concurrent", "alternatives"]
    """Whether a child may reference an earlier sibling (`ordered`) or none (the others, where
    `alternatives` also need at least one child and at most `max_alternatives`)."""
    run: Strategy
    value: ValueOf
    """What `${block_id}` sees, from its children's values and its status."""
    failure: str | None
    """The `<result block=…>` line of a failed block; None: none (its failed steps say it)."""
    attributes: Mapping[str, Attribute] = field(default_factory=dict)
    """Its own attributes, beside `COMMON_ATTRIBUTES`."""


SPECS: Mapping[BlockKind, BlockSpec] = {
    spec.kind: spec
    for spec in (
        BlockSpec(
            BlockKind.PARALLEL,
            "<parallel>",
            "concurrent",
            _together,
            _combined,
            failure="some steps failed",
            attributes={"max_concurrency": IntRange(1, 64), "policy": Choice(("all", "fail_fast"), "quorum:")},
        ),
        BlockSpec(
            BlockKind.SEQUENTIAL,
            '<sequential stop_on_error="true">',
            "ordered",
            _in_order,
            _last,
            failure=None,
            attributes={"stop_on_error": Flag(default=True)},
        ),
        BlockSpec(
            BlockKind.RACE,
            "<race> (first success wins)",
            "alternatives",
            _first_success,
            _winner,
            failure="every alternative failed",
        ),
        BlockSpec(
            BlockKind.FALLBACK,
            "<fallback> (in order until one succeeds)",
            "alternatives",
            _in_turn,
            _winner,
            failure="every alternative failed",
        ),
    )
}


def shorthand_table(servers: Sequence[tuple[str, tuple[Shorthand, ...]]]) -> dict[str, tuple[str, Shorthand]]:
    """tag -> (server, binding) from the configured servers (first server wins a tag)."""
    table: dict[str, tuple[str, Shorthand]] = {}
    for server, bindings in servers:
        for binding in bindings:
            assert binding.tag is not None
            table.setdefault(binding.tag, (server, binding))
    return table
