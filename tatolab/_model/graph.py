"""The compiled graph: its shape, and the one decode that checks a graph read back (a kept record).

What a stream function builds (_sdk/builder.py), what ``python -m tatolab._compile`` prints, and
what the runtime loads, changes (its rules), keeps (stored/records.py) and shows. On the wire and
on disk it is plain JSON.

Why TypedDicts and not Structs: the runtime indexes graphs as dicts in some 130 places across 28
modules (``node["name"]``, ``graph.get("exposures")``, ``dict(link["to"])``), copies them with
``copy.deepcopy``, writes them as JSON and hands them to node processes. A TypedDict is a dict at
run time, so none of that changes, while msgspec still validates it (``msgspec.convert``) and
describes it (``msgspec.json.schema``) from the same declarations. Keys an older graph may lack
(``builtin``, ``watchdog_ms``, ``exposures``, ...) are the optional ones; the required ones are
those starting a stream relies on.

``check_graph`` is the decode: msgspec checks the types (each error reworded to name the node,
port or link and what is wrong), then what a type cannot say: node names unique and valid file
names, a class ``module:Class``, port names that are never a path, links whose ends are ports of
those nodes, exposures of outputs that exist.
"""

from __future__ import annotations

import re
import typing
from typing import Any, Literal, TypedDict

import msgspec

from tatolab._errors import AddressError
from tatolab._naming import url_safe

Delivery = Literal["newest", "ordered"]
Level = Literal["private", "public"]  # an output not listed is internal: only its own stream reads it
Execution = Literal["reactive", "continuous", "thread", "manual"]


AudioFormat = Literal["s16", "f32"]


class Audio(TypedDict, total=False):
    """The audio shape an input reads (``@node.input(audio=...)``); the node host checks it is whole
    (tatolab/_sdk/audio.py's AudioShape.parse, naming the input) before it shapes blocks to it."""

    sample_rate: int
    channels: int
    format: AudioFormat
    window_ms: float


class _InputKeys(TypedDict):
    port: str
    delivery_profile: Delivery


class InputPort(_InputKeys, total=False):
    audio: Audio  # the audio shape the input reads
    spin_us: float  # how long the input's reader polls its links before sleeping (@node.input(spin_us=...))


class OutputPort(TypedDict):
    port: str


# "class" and "from" are Python keywords: these keys are spelled the functional way
_NodeKeys = TypedDict("_NodeKeys", {
    "name": str,
    "class": str,  # module:Qualname, what the node host imports (a built-in's: tatolab._builtins.<module>:<Class>)
    "inputs": list[InputPort],
    "outputs": list[OutputPort],
})


class Node(_NodeKeys, total=False):
    doc: str | None
    config: dict[str, Any] | None
    execution: Execution
    interval_ms: int | float | None
    builtin: bool  # run by the runtime's own interpreter
    watchdog_ms: int | float
    memory_limit_mb: int | float


class LinkEnd(TypedDict, total=False):
    """A link's end: ``node`` and ``port`` of this stream, or (a source only) an ``address``."""

    node: str
    port: str
    address: str  # a link's source in another stream: stream/node/port, or machine/stream/node/port
    url: str  # where that machine serves it (MoQ), when the stream function gave one


Link = TypedDict("Link", {"from": LinkEnd, "to": LinkEnd})


class Exposure(TypedDict):
    node: str
    port: str
    level: Level


class _GraphKeys(TypedDict):
    nodes: list[Node]
    links: list[Link]


class Graph(_GraphKeys, total=False):
    version: int
    stream: str
    function: str
    module: str
    doc: str | None
    exposures: list[Exposure]


class GraphProblem(ValueError):
    """What makes a graph impossible to start (a hand edit, another version): the text reads after
    "its graph", e.g. ``links to cam/in, which is not an input of its nodes``."""


def is_stream_name(name: str) -> bool:
    """Stream, node and port names are URL-safe, and become file names; anything else (``../x``) is not one."""
    try:
        return url_safe(name) == name
    except AddressError:
        return False


def check_graph(data: object) -> Graph:
    """``data`` as a Graph (the same dict: nothing is added or dropped), or GraphProblem naming
    the node, port or link at fault and what is wrong with it."""
    try:
        msgspec.convert(data, Graph)
    except msgspec.ValidationError as exc:
        raise GraphProblem(_worded(str(exc), data)) from None
    graph = typing.cast(Graph, data)
    problem = _meaning_problem(graph)
    if problem:
        raise GraphProblem(problem)
    return graph


def check_node(data: object) -> Node:
    """``data`` as one graph's Node (the same dict), or GraphProblem naming it and what is wrong
    with it, worded as of a graph holding only that node."""
    return check_graph({"nodes": [data], "links": []})["nodes"][0]


def graph_problem(data: object) -> str | None:
    """Why ``data`` cannot start as a graph, or None."""
    try:
        check_graph(data)
    except GraphProblem as exc:
        return str(exc)
    return None


Ports = set[tuple[str, str]]  # (node, port)


def _meaning_problem(graph: Graph) -> str | None:
    """What the types cannot say: names, and ends that name ports of these nodes."""
    inputs: Ports = set()
    outputs: Ports = set()
    names: set[str] = set()
    for node in graph["nodes"]:
        problem = _node_problem(node, names, inputs, outputs)
        if problem:
            return problem
    return _link_problem(graph, inputs, outputs)


def _node_problem(node: Node, names: set[str], inputs: Ports, outputs: Ports) -> str | None:
    """What is wrong with ``node`` beside the nodes and ports seen before it (which it joins)."""
    name = node["name"]
    if not is_stream_name(name):
        return f"has a node named {name!r}, which is not a node name (lowercase letters, digits and -._~)"
    if name in names:
        return f"has two nodes named {name}"
    names.add(name)
    module, _, qualname = node["class"].partition(":")
    if not module or not qualname:
        return f"gives node {name} the class {node['class']!r}, which is not module:Class"
    for kind, ports, listed in (("input", inputs, node["inputs"]), ("output", outputs, node["outputs"])):
        for port in listed:
            if not is_stream_name(port["port"]):  # port names become file names: never a path
                return f"gives node {name} a port named {port['port']!r}, which is not a port name"
            if (name, port["port"]) in ports:
                return f"gives node {name} two {kind}s named {port['port']}"
            ports.add((name, port["port"]))
    return None


def _link_problem(graph: Graph, inputs: Ports, outputs: Ports) -> str | None:
    """A link or exposure whose end is not a port of the graph's nodes."""
    for number, link in enumerate(graph["links"], 1):
        source, target = link["from"], link["to"]
        if (target.get("node"), target.get("port")) not in inputs:
            return f"links to {_end(target)}, which is not an input of its nodes"
        if "address" in source:
            continue
        if "node" not in source or "port" not in source:
            return f"has a link (number {number}, to {_end(target)}) from no node and port, nor an address"
        if (source["node"], source["port"]) not in outputs:
            return f"links from {_end(source)}, which is not an output of its nodes"
    for exposure in graph.get("exposures", []):
        if (exposure["node"], exposure["port"]) not in outputs:
            return f"exposes {exposure['node']}/{exposure['port']}, which is not an output of its nodes"
    return None


def _end(end: LinkEnd) -> str:
    return end.get("address") or f"{end.get('node')}/{end.get('port')}"


# How msgspec words a problem: "Expected `str`, got `int` - at `$.nodes[0].class`",
# "Object missing required field `outputs` - at `$.nodes[1]`", "Invalid enum value 'fast' - at ..."
_AT = re.compile(r"\.([A-Za-z_]\w*)|\[(\d+)\]")
_TYPES = {"str": "text", "int": "a whole number", "float": "a number", "bool": "true or false", "null": "null",
          "object": "an object", "array": "a list"}
_KEYS = {"class": "class (module:Class)", "inputs": "list of inputs", "outputs": "list of outputs",
         "nodes": "node list", "links": "link list", "delivery_profile": "delivery profile (newest or ordered)",
         "from": "source (from)", "to": "target (to)", "level": "level (private or public)",
         "sample_rate": "sample rate", "channels": "number of channels", "window_ms": "window in ms"}
_CHOICES = {"delivery_profile": Delivery, "level": Level, "execution": Execution, "format": AudioFormat}


def _worded(message: str, data: object) -> str:
    text, _, where = message.partition(" - at `")
    steps: list[str | int] = [key if key else int(index) for key, index in _AT.findall(where.rstrip("`"))]
    missing = re.fullmatch(r"Object missing required field `(\w+)`", text)
    if missing:
        field = missing.group(1)
        return f"gives {_subject(steps, data)} no {_KEYS.get(field, field)}" if steps else f"has no {_KEYS.get(field, field)}"
    wrong = re.fullmatch(r"Expected `(.+)`, got `(\w+)`", text)
    if wrong:
        expected = " or ".join(_TYPES.get(t, t) for t in wrong.group(1).split(" | "))
        got = _TYPES.get(wrong.group(2), wrong.group(2))
        if not steps:
            return f"is {got}, not {expected}"
        *owner, last = steps
        if isinstance(last, int):
            return f"has {_subject(steps, data)} that is {got}, not {expected}"
        what = _KEYS.get(last, last)
        return f"gives {_subject(owner, data)} {_a(what)} that is {got}, not {expected}"
    enum = re.fullmatch(r"Invalid enum value (.+)", text)
    if enum and steps and isinstance(steps[-1], str):
        *owner, last = steps
        choices = " or ".join(typing.get_args(_CHOICES[last])) if last in _CHOICES else "another value"
        return f"gives {_subject(owner, data)} the {str(last).replace('_', ' ')} {enum.group(1)}, which is not {choices}"
    return f"does not fit the graph's shape: {text[0].lower()}{text[1:]}" + (f" (at {where.rstrip('`')})" if where else "")


def _a(word: str) -> str:
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def _subject(steps: list[str | int], data: object) -> str:
    """The part of the graph at ``steps`` in words: "node cam", "input cam/in", "link number 2 (a/out->b/in)"."""
    if not steps:
        return "the graph"
    at: Any = data
    path: list[Any] = []
    for step in steps:
        try:
            at = at[step]
        except (KeyError, IndexError, TypeError):
            at = None
        path.append(at)

    def name(value: Any, key: str) -> str | None:
        found = value.get(key) if isinstance(value, dict) else None
        return found if isinstance(found, str) else None

    top = steps[0]
    if top == "nodes" and len(steps) >= 2:
        node = name(path[1], "name") or f"number {int(steps[1]) + 1}"
        if len(steps) >= 4 and steps[2] in ("inputs", "outputs"):
            kind = "input" if steps[2] == "inputs" else "output"
            port = name(path[3], "port")
            return f"{kind} {node}/{port}" if port else f"{kind} number {int(steps[3]) + 1} of node {node}"
        return f"node {node}"
    if top in ("links", "exposures") and len(steps) >= 2:
        kind = "link" if top == "links" else "exposure"
        subject = f"{_a(kind)} (number {int(steps[1]) + 1})"
        if len(steps) >= 3 and steps[2] in ("from", "to"):
            return f"the {'source' if steps[2] == 'from' else 'target'} of {subject}"
        return subject
    return f"its {_KEYS.get(str(top), str(top))}"
