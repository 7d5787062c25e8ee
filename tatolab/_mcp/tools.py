"""Which operation each MCP tool calls, and how its schema differs from the operation's.

A tool's description and input schema come from the operation's own (the runtime's answer to
``operations``); here only what the agent should not set (a tap without end, following a log)
is fixed or bounded, so a call always returns.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

TAP_MAX_COUNT = 50
TAP_MAX_TIMEOUT_S = 30.0
LOGS_MAX = 500


@dataclass(frozen=True)
class Tool:
    name: str
    op: str
    kind: str  # "observe" or "manage"
    fixed: dict[str, Any] = field(default_factory=dict)  # arguments the tool always sends, hidden from the agent
    hidden: tuple[str, ...] = ()  # arguments left at the operation's default
    limits: dict[str, dict[str, Any]] = field(default_factory=dict)  # per argument: schema keywords to add
    note: str = ""  # what the tool does beyond the operation's description


TOOLS: tuple[Tool, ...] = (
    Tool("list_streams", "streams", "observe"),
    Tool("graph", "graph", "observe"),
    Tool("tap", "tap", "observe",
         limits={"count": {"type": "integer", "minimum": 1, "maximum": TAP_MAX_COUNT, "default": 5},
                 "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": TAP_MAX_TIMEOUT_S, "default": 5.0}},
         note=f"Here: at most {TAP_MAX_COUNT} bags (default 5) and {TAP_MAX_TIMEOUT_S:g} s (default 5); "
              "it returns the bags read and a summary line."),
    Tool("logs", "logs", "observe", fixed={"follow": False},
         limits={"tail": {"type": "integer", "minimum": 1, "maximum": LOGS_MAX, "default": 50}},
         note=f"Here: never follows; ``tail`` is at most {LOGS_MAX} (default 50)."),
    Tool("run_stream", "load", "manage", hidden=("env",),
         limits={"mode": {"enum": ["kept", "attached"], "default": "kept"}},
         note="Here kept is the default: the runtime runs it until `stop_stream` or `remove_stream`, "
              "across restarts too; attached, it runs until this MCP session ends. ``project`` is a "
              "folder path (absolute, or relative to where `tatolab mcp` runs)."),
    Tool("stop_stream", "stop", "manage"),
    Tool("start_stream", "start", "manage"),
    Tool("remove_stream", "rm", "manage"),
    Tool("expose_port", "expose", "manage"),
    Tool("output_url", "url", "observe"),
)

BY_NAME = {tool.name: tool for tool in TOOLS}


def input_schema(tool: Tool, described: dict[str, Any]) -> dict[str, Any]:
    """The tool's JSON Schema: the operation's arguments, less the fixed and hidden ones, with the limits."""
    schema = copy.deepcopy(described["arguments"])
    properties: dict[str, Any] = schema.setdefault("properties", {})
    for name in (*tool.fixed, *tool.hidden):
        properties.pop(name, None)
    schema["required"] = [name for name in schema.get("required", []) if name in properties]
    for name, keywords in tool.limits.items():
        properties[name] = dict(keywords)
    if "$defs" in described:
        schema["$defs"] = described["$defs"]
    schema["type"] = "object"
    return schema


def description(tool: Tool, described: dict[str, Any]) -> str:
    text = " ".join(described["description"].split()).replace("``", "`")
    return f"{text} {tool.note}".strip() if tool.note else text
