"""The compiled graph, as types: what a stream function builds (_sdk/builder.py), what
``python -m tatolab._compile`` prints, and what the runtime loads, changes (its rules), keeps
(records.py) and shows. On the wire and on disk it is plain JSON; these say which keys it has.

Every key is optional to the type checker (``total=False``): a graph read back from a record
is checked by ``records.graph_problem`` before anything indexes it, and older graphs lack keys
newer ones carry (``builtin``, ``watchdog_ms``, ``exposures``).
"""

from __future__ import annotations

from typing import Any, TypedDict


class InputPort(TypedDict, total=False):
    port: str
    delivery_profile: str  # "newest" | "ordered"
    audio: dict[str, Any]  # the audio shape the input reads: sample_rate, channels, format, window_ms
    spin_us: float  # how long the input's reader polls its links before sleeping (@node.input(spin_us=...))


class OutputPort(TypedDict, total=False):
    port: str


# "class" and "from" are Python keywords: these two are spelled the functional way
Node = TypedDict("Node", {
    "name": str,
    "class": str,  # module:Qualname, what the node host imports (a built-in's: tatolab._builtins.<module>:<Class>)
    "doc": "str | None",
    "config": "dict[str, Any] | None",
    "execution": str,  # "reactive" | "continuous" | "thread" | "manual"
    "interval_ms": "int | float | None",
    "inputs": "list[InputPort]",
    "outputs": "list[OutputPort]",
    "builtin": bool,  # run by the runtime's own interpreter
    "watchdog_ms": "int | float",
    "memory_limit_mb": "int | float",
}, total=False)


class LinkEnd(TypedDict, total=False):
    node: str
    port: str
    address: str  # a link's source in another stream: stream/node/port, or machine/stream/node/port
    url: str  # where that machine serves it (MoQ), when the stream function gave one


Link = TypedDict("Link", {"from": LinkEnd, "to": LinkEnd}, total=False)


class Exposure(TypedDict, total=False):
    node: str
    port: str
    level: str  # "private" | "public"


class Graph(TypedDict, total=False):
    version: int
    stream: str
    function: str
    module: str
    doc: str | None
    nodes: list[Node]
    links: list[Link]
    exposures: list[Exposure]
