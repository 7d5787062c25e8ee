"""A refusal's fixes as MCP tool calls (``remove_stream(stream="cam")``), beside the CLI's words.

The runtime names each fix as an operation with arguments (tatolab/_control/errors.py); the CLI
words them as commands (tatolab/_control/words.py), and here they become calls of the tool that
runs that operation, under the tool's names for the arguments. A fix with no tool (``sdk``) stays
in the CLI's words only.
"""

from __future__ import annotations

import json
from typing import Any

from tatolab._control.errors import ControlError, Fix
from tatolab._mcp.tools import TOOLS, Tool

CHOOSE = "…"  # an argument the caller chooses (the fix's value is None)


def _tool_for(op: str) -> Tool | None:
    return next((tool for tool in TOOLS if tool.op == op), None)


def tool_call(fix: Fix) -> dict[str, Any] | None:
    """``{"tool", "arguments", "does", "call"}`` for ``fix``, or None when no tool runs its operation."""
    tool = _tool_for(fix.op)
    if tool is None:
        return None
    arguments = tool.tool_args(fix.args)
    shown = ", ".join(f"{name}={CHOOSE if value is None else json.dumps(value)}" for name, value in arguments.items())
    return {"tool": tool.name, "arguments": arguments, "does": fix.does, "call": f"{tool.name}({shown})"}


def tool_calls(error: ControlError) -> list[dict[str, Any]]:
    return [call for call in map(tool_call, error.fixes) if call is not None]


def in_words(calls: list[dict[str, Any]]) -> str:
    """fixes as tool calls: remove_stream(stream="cam") (remove it first); run_stream(name=…) (...)"""
    return "fixes as tool calls: " + "; ".join(
        f"{call['call']} ({call['does']})" if call["does"] else call["call"] for call in calls)
