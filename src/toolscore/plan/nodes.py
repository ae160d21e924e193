"""A plan as frozen trees: what the parser read from a turn, and what the checker made of it; pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    # For annotations only: the block table builds on these nodes, and the parser's modules need
    # not import the tool registry.
    import mcp_types

    from toolscore.downstream.registry import Route
    from toolscore.errors import PlanProblem
    from toolscore.plan.blocks import BlockKind
    from toolscore.plan.refs import Ref
    from toolscore.scope import CallScope

__all__ = [
    "READ_TOOL",
    "ArgsSpec",
    "Block",
    "CallNode",
    "CheckedBlock",
    "CheckedCall",
    "CheckedCapability",
    "CheckedNode",
    "CheckedPlan",
    "CheckedStep",
    "Node",
    "ParsedTurn",
    "PlanPolicy",
    "ResourceReader",
    "Status",
]

Status = Literal["ok", "error", "timeout", "cancelled", "skipped", "ref_error"]
"""How a step or a block ended."""

PlanPolicy = Callable[["CheckedPlan", "str | None"], "list[PlanProblem]"]
"""What policy says of a whole checked plan for its caller, before any step runs (`Policy.plan_problems`)."""

READ_TOOL = "resources/read"
"""The tool a plan reads a resource by (`<call tool="resources/read">URI</call>`): the pseudo-tool
`resources/read` of the server that owns the URI, as a client's read is (`downstream/reads.py`)."""


class ResourceReader(Protocol):
    """What plans need to read resources (`toolscore.downstream.reads.ResourceReads` is one)."""

    def owner(self, uri: str) -> tuple[str, str] | None:
        """The server a public URI belongs to and its own URI for it; None if no server owns it."""
        ...

    def route(self, server: str) -> Route | None:
        """The pseudo-tool `resources/read` of `server`; None where it serves no resources."""
        ...

    async def read(self, server: str, uri: str, what: str, scope: CallScope) -> mcp_types.CallToolResult:
        """The read of `uri` (the server's own) as a tool result of embedded resources (public URIs)."""
        ...


@dataclass(frozen=True, slots=True)
class ArgsSpec:
    """A call's arguments as written, before they are bound to the tool's schema."""

    kind: Literal["empty", "json", "args", "text", "elements", "parameters", "invalid"]
    value: Any = None
    """`json`: the object; `args`: a dict of the <arg> values; `text`: the primary parameter's text;
    `elements`: child elements by name (`<echo><text>hi</text></echo>`), as text; `parameters`:
    `<invoke>`'s `<parameter name=...>` values by name, as text; `invalid`: none, the arguments were
    reported as a problem."""
    raw: str = ""
    """`elements`: the content as written, for the message if they are no parameters."""


@dataclass(frozen=True, slots=True)
class CallNode:
    """One tool call: explicit (`<call>`, a server block's child) or a shorthand."""

    step: int
    tag: str
    line: int
    args: ArgsSpec
    server: str | None = None
    """Given by `<call server=>` or the enclosing server block; None for a shorthand."""
    tool: str | None = None
    shorthand: str | None = None
    public: str | None = None
    """A tool named as clients see it (`<call tool="fx__echo">`, `<tool_call>`), not yet resolved."""
    id: str | None = None
    timeout: float | None = None
    retries: int = 0
    on_error: Literal["skip_dependents", "continue"] = "skip_dependents"
    idempotent: bool = False
    capability: str | None = None
    """`<call capability="search">`: the ToolHub picks the tools (no server or tool is named)."""


@dataclass(frozen=True, slots=True)
class Block:
    """A control block; the turn itself is an implicit `sequential`."""

    kind: BlockKind
    children: tuple[Node, ...]
    line: int = 1
    id: str | None = None
    timeout: float | None = None
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """The kind's own attributes as written (`stop_on_error`, `policy`...); the rest have their
    defaults (`blocks.option` reads either)."""


Node = CallNode | Block


@dataclass(frozen=True, slots=True)
class ParsedTurn:
    """What one model turn said."""

    root: Block
    calls: tuple[CallNode, ...]
    thoughts: tuple[str, ...] = ()
    answer: str | None = None
    warnings: tuple[str, ...] = ()
    depth: int = 0
    problems: tuple[PlanProblem, ...] = ()
    """Problems found while parsing, when the parser was asked to collect them (`parse_turn`)."""


@dataclass(frozen=True, slots=True)
class CheckedCall:
    """A call ready to run: routed, its arguments bound and valid, its references visible."""

    node: CallNode
    route: Route
    arguments: dict[str, Any]
    refs: tuple[Ref, ...]
    reads: bool = False
    """A resource read (`READ_TOOL`): `arguments["uri"]` is read from `route.server`."""

    @property
    def step(self) -> int:
        return self.node.step


@dataclass(frozen=True, slots=True)
class CheckedCapability:
    """A capability step ready to run: its arguments, references, and the candidates it would try."""

    node: CallNode
    capability: str
    arguments: dict[str, Any]
    refs: tuple[Ref, ...]
    candidates: tuple[str, ...]
    """The tools offering the capability, best first, when the plan was checked (the run re-ranks)."""

    @property
    def step(self) -> int:
        return self.node.step


@dataclass(frozen=True, slots=True)
class CheckedBlock:
    """A block whose children are checked."""

    block: Block
    children: tuple[CheckedNode, ...]


CheckedStep = CheckedCall | CheckedCapability
CheckedNode = CheckedCall | CheckedCapability | CheckedBlock


@dataclass(frozen=True, slots=True)
class CheckedPlan:
    """A turn that passed every static check."""

    root: CheckedBlock
    calls: tuple[CheckedCall, ...]
    ids: Mapping[str, int | Block] = field(default_factory=dict)
    """This turn's ids: a call's id maps to its step number, a block's to the block."""
    warnings: tuple[str, ...] = ()
    """Repairs the checker made (e.g. `{{x}}` read as `${x}`)."""
    capabilities: tuple[CheckedCapability, ...] = ()
    """The capability steps (`calls` holds the steps routed to one tool)."""

    @property
    def steps(self) -> tuple[CheckedStep, ...]:
        """Every step, routed or capability, in step order."""
        return tuple(sorted((*self.calls, *self.capabilities), key=lambda c: c.step))
