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
EXCHANGE_MAX_COUNT = 4


@dataclass(frozen=True)
class Tool:
    name: str
    op: str
    kind: str  # "observe", "manage" or "change" (a running graph)
    fixed: dict[str, Any] = field(default_factory=dict)  # arguments the tool always sends, hidden from the agent
    hidden: tuple[str, ...] = ()  # arguments left at the operation's default
    limits: dict[str, dict[str, Any]] = field(default_factory=dict)  # per argument: schema keywords to add
    note: str = ""  # what the tool does beyond the operation's description
    renamed: dict[str, str] = field(default_factory=dict)  # the tool's name of an argument -> the operation's
    own_words: bool = False  # the note is the whole description (the operation's is about something else)
    typed_answer: bool = False  # it answers the operation's answer as it is: its schema is the tool's output schema

    def op_args(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The tool's arguments under the operation's names."""
        return {self.renamed.get(name, name): value for name, value in arguments.items()}

    def tool_args(self, args: dict[str, Any]) -> dict[str, Any]:
        """The operation's arguments under the tool's names (a fix rendered as a tool call)."""
        back = {op_name: name for name, op_name in self.renamed.items()}
        return {back.get(name, name): value for name, value in args.items()}


TOOLS: tuple[Tool, ...] = (
    Tool("list_streams", "streams", "observe"),
    Tool("graph", "graph", "observe", typed_answer=True),
    Tool("slowest_paths", "slowest_paths", "observe", typed_answer=True,
         limits={"limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10}}),
    Tool("tap", "tap", "observe",
         limits={"count": {"type": "integer", "minimum": 1, "maximum": TAP_MAX_COUNT, "default": 5},
                 "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": TAP_MAX_TIMEOUT_S, "default": 5.0}},
         note=f"Here: at most {TAP_MAX_COUNT} bags (default 5) and {TAP_MAX_TIMEOUT_S:g} s (default 5); "
              "it returns the bags read and a summary line."),
    Tool("logs", "logs", "observe", fixed={"follow": False},
         limits={"tail": {"type": "integer", "minimum": 1, "maximum": LOGS_MAX, "default": 50}},
         note=f"Here: never follows; ``tail`` is at most {LOGS_MAX} (default 50)."),
    Tool("exchange", "exchange", "observe", hidden=("count",),
         limits={"timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": TAP_MAX_TIMEOUT_S, "default": 10.0},
                 "frames": {"type": "integer", "minimum": 1, "maximum": EXCHANGE_MAX_COUNT, "default": 1}},
         note=f"Look at the frames a video output carries: give ``address`` (``<stream>/<node>/<port>``) "
              f"for the newest frame its bags name (up to ``frames``, at most {EXCHANGE_MAX_COUNT}, default 1, "
              "each the newest when read, within ``timeout`` seconds), or ``surface_id`` (as `tap` shows it) for "
              "that one surface. Each frame comes back as a PNG image beside a line naming it.",
         own_words=True),
    Tool("run_stream", "load", "manage", hidden=("env",),
         limits={"mode": {"enum": ["kept", "attached"], "default": "kept"}},
         note="Here kept is the default: the runtime runs it until `stop_stream` or `remove_stream`, "
              "across restarts too; attached, it runs until this MCP session ends. ``project`` is a "
              "folder path (absolute, or relative to where `tatolab mcp` runs)."),
    Tool("stop_stream", "stop", "manage", renamed={"stream": "name"}),
    Tool("start_stream", "start", "manage", renamed={"stream": "name"}),
    Tool("remove_stream", "rm", "manage", renamed={"stream": "name"}),
    Tool("expose_port", "expose", "manage"),
    Tool("output_url", "url", "observe", hidden=("public", "expires", "prefix", "open"),
         note="Here: the owner's URL (its token reads this output alone; for this user on this machine)."),
    Tool("share_output", "url", "manage", fixed={"public": True}, hidden=("open",),
         note="Here: always mints a new public token for others (a capability: whoever holds the URL reads; "
              "`revoke_token` voids it)."),
    Tool("list_tokens", "token_list", "observe"),
    Tool("revoke_token", "token_revoke", "manage"),
    Tool("rotate_token_key", "token_rotate", "manage"),
    Tool("add_node", "add_node", "change"),
    Tool("connect", "connect", "change"),
    Tool("disconnect", "disconnect", "change"),
    Tool("remove_node", "remove_node", "change"),
    Tool("record_start", "record_start", "manage", fixed={"confined": True},
         note="Here ``out`` may also be relative to where `tatolab mcp` runs, and must be inside the project "
              "folder of a stream it records (or the folder the user set as TATOLAB_RECORDINGS for the runtime); "
              "an existing file is never overwritten (the answer's ``path`` is the name it got). It records "
              "until `record_stop` (or ``seconds``/``bags``); `graph` and `list_streams` show it meanwhile."),
    Tool("record_stop", "record_stop", "manage"),
    Tool("record_trigger", "record_trigger", "manage"),
    Tool("recordings", "recordings", "observe"),
    Tool("foxglove_link", "foxglove", "observe"),
)

BY_NAME = {tool.name: tool for tool in TOOLS}


def input_schema(tool: Tool, described: dict[str, Any]) -> dict[str, Any]:
    """The tool's JSON Schema: the operation's arguments, less the fixed and hidden ones, with the limits."""
    schema = copy.deepcopy(described["arguments"])
    properties: dict[str, Any] = schema.setdefault("properties", {})
    for name in (*tool.fixed, *tool.hidden):
        properties.pop(name, None)
    schema["required"] = [name for name in schema.get("required", []) if name in properties]
    if tool.renamed:
        back = {op_name: name for name, op_name in tool.renamed.items()}
        schema["properties"] = properties = {back.get(k, k): v for k, v in properties.items()}
        schema["required"] = [back.get(name, name) for name in schema["required"]]
    for name, keywords in tool.limits.items():
        properties[name] = dict(keywords)
    used = _used_defs(schema, described.get("$defs", {}))
    if used:
        schema["$defs"] = used
    schema["type"] = "object"
    return schema


def output_schema(tool: Tool, described: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON Schema of what the tool answers (the operation's answer: for ``graph`` and
    ``slowest_paths``, made from tatolab/_model/view.py), or None where the tool does not say (its
    answer is not the operation's typed object)."""
    if not tool.typed_answer:
        return None
    defs = described.get("$defs", {})
    result = described.get("result") or {}
    root = copy.deepcopy(defs.get(str(result.get("$ref", "")).removeprefix("#/$defs/"), result))
    if root.get("type") != "object":
        return None  # MCP takes an object's schema only
    used = _used_defs(root, defs)
    if used:
        root["$defs"] = used
    return root


def _used_defs(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """The ``$defs`` entries ``schema`` refers to, and those they refer to (the operation's $defs
    serve its arguments, its answer and its events together)."""
    used: dict[str, Any] = {}
    todo: list[Any] = [schema]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref.removeprefix("#/$defs/")
                if name in defs and name not in used:
                    used[name] = defs[name]
                    todo.append(defs[name])
            todo.extend(v for k, v in item.items() if k != "$defs")
        elif isinstance(item, list):
            todo.extend(item)
    return {name: defs[name] for name in defs if name in used}


def description(tool: Tool, described: dict[str, Any]) -> str:
    if tool.own_words:
        return tool.note.replace("``", "`")
    text = " ".join(described["description"].split()).replace("``", "`")
    for name, op_name in tool.renamed.items():
        text = text.replace(f"`{op_name}`", f"`{name}`")
    return f"{text} {tool.note.replace('``', '`')}".strip() if tool.note else text
