"""What the loop tells the model: the system prompt with the live catalog, stop sequences, reminders; pure."""

from __future__ import annotations

import json
from collections.abc import Sequence

import mcp_types

__all__ = ["STOP_SEQUENCES", "action_prompt", "reminder", "system_prompt", "task_message"]

STOP_SEQUENCES = ("<execute_tools />", "<execute_tools/>", "<execute_tools>", "</answer>")
"""Where a model's turn ends. `Final Answer:` is deliberately not one: stopping there would cut
off the answer that follows it, so the loop reads it to the end of the turn instead."""

_SYSTEM = """\
You are an agent that solves the user's task with tools, in turns. Each turn, think in \
<think>...</think>, then either call tools with an XML plan and end the turn with <execute_tools />, or \
give the final answer in <answer>...</answer>.
After <execute_tools /> you receive one <result> per call; continue from there. Every call you write runs \
as soon as its closing tag is written, at the same time as the others, unless it references an earlier \
result (${{id}}, ${{3}}): then it waits for that one. Put calls that must run in order in a \
<sequential>...</sequential> block.
A step with a goal that may need several actions: <step goal="what must be true">first calls</step>; \
you will be asked for the next action until you say the goal is met with <step_done />.

The plan language:
{contract}

Tools (server.tool: description; input schema):
{catalog}"""

_MAX_DESCRIPTION = 600
"""A tool description is cut to this many characters in the catalog: a downstream server's text
should not be able to crowd out the contract."""


def system_prompt(contract: str, tools: Sequence[tuple[str, str, mcp_types.Tool]]) -> str:
    """The system prompt: the plan contract (`orchestrate`'s description) and every tool as `server.tool`.

    Args:
        contract: The plan language summary, with the live shorthands and servers.
        tools: (server, tool name on that server, tool) for each routed tool.
    """
    lines = []
    for server, name, tool in tools:
        description = " ".join((tool.description or "").split())[:_MAX_DESCRIPTION]
        schema = json.dumps(tool.input_schema.get("properties", {}), separators=(",", ":"), ensure_ascii=False)
        lines.append(f"- {server}.{name}: {description} {schema}")
    return _SYSTEM.format(contract=contract, catalog="\n".join(lines) or "(none)")


def task_message(task: str) -> str:
    """The first user message."""
    return f"<task>\n{task}\n</task>"


def reminder() -> str:
    """Sent once when a turn has neither calls nor an answer."""
    return (
        "Your turn had no tool calls and no answer. Call tools and end with <execute_tools />, or give the "
        "final answer in <answer>...</answer>. A turn without either is taken as the answer."
    )


def action_prompt(goal: str, action: int, most: int) -> str:
    """Asks for the next action of a multi-action step, or for its end."""
    return (
        f'<step_check goal="{_attr(goal)}" actions_done="{action}" max_actions="{most}">Is the goal met? If it '
        "is, write <step_done /> (with <answer> if the whole task is done). If not, write the next action's "
        "calls and end with <execute_tools />.</step_check>"
    )


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
