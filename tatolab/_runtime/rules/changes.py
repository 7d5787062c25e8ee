"""Live changes to a running stream's graph: which are valid, and the graph after each (plain decisions).

Each function takes the stream's graph (as compiled, then changed live) and returns a new graph,
never changing the one it was given; a change that cannot be made raises a ControlError naming
the stream, node or port and the call that would work. The checks are ``stream_builder``'s:
URL-safe node names, one node per name, ports by name (an input is not an output), one link per
output and input pair (many outputs may feed one input: a fan-in), and a remote output by address.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from tatolab._graph import Graph, LinkEnd, Node
from tatolab._graph import Link as GraphLink
from tatolab._control.errors import ControlError, Fix
from tatolab._errors import AddressError
from tatolab._naming import format_address, parse_address, url_safe


@dataclass(frozen=True)
class Link:
    """A link as the compiled graph holds it, and its key (tatolab/_runtime/lifecycle/streams.py link_key)."""

    entry: GraphLink

    @property
    def remote(self) -> bool:
        return "address" in self.entry["from"]

    @property
    def source(self) -> str:
        source = self.entry["from"]
        return source.get("address") or f"{source['node']}/{source['port']}"

    @property
    def target(self) -> str:
        return f"{self.entry['to']['node']}/{self.entry['to']['port']}"


def _nodes(graph: Graph) -> dict[str, Node]:
    return {node["name"]: node for node in graph["nodes"]}


def _ports(node: Node, kind: str) -> list[str]:
    ports: list[Any] = node["inputs"] if kind == "inputs" else node["outputs"]
    return [port["port"] for port in ports]


def _listed(names: list[str]) -> str:
    return ", ".join(names) if names else "none"


def _unknown_node(stream: str, graph: Graph, name: str) -> ControlError:
    return ControlError(f"stream {stream} has no node {name}; its nodes: {_listed(sorted(_nodes(graph)))}",
                        code="no_node", details={"stream": stream, "node": name})


def checked_name(stream: str, graph: Graph, name: str, node_class: str | None = None) -> str:
    """``name`` for a new node: URL-safe (it is part of every address) and not taken."""
    try:
        safe = url_safe(name)
    except AddressError as exc:
        text = str(exc)
        raise ControlError(f"cannot add node {name!r} to stream {stream}: {text[:1].lower()}{text[1:]}",
                           code="bad_name", details={"stream": stream, "name": name}) from None
    if safe != name:
        raise ControlError(
            f"node name {name!r} is not URL-safe (it is part of every address of the node)", code="bad_name",
            fixes=[Fix("add_node", {"stream": stream, "name": safe, "node_class": node_class}, "add it as " + safe)],
            details={"stream": stream, "name": name, "safe": safe})
    if name in _nodes(graph):
        taken = _nodes(graph)[name]["class"]
        raise ControlError(
            f"stream {stream} already has a node named {name} ({taken}); give the new one another name",
            code="name_taken", fixes=[Fix("remove_node", {"stream": stream, "name": name}, "or remove that one first")],
            details={"stream": stream, "node": name})
    return name


def add_node(stream: str, graph: Graph, entry: Node) -> Graph:
    """The graph with the node ``entry`` (as ``stream_builder.add`` records it) added, unlinked."""
    checked_name(stream, graph, entry["name"])
    changed = copy.deepcopy(graph)
    changed["nodes"].append(copy.deepcopy(entry))
    return changed


def remove_node(stream: str, graph: Graph, name: str) -> tuple[Graph, list[Link]]:
    """The graph without node ``name``, its links and its outputs' exposures; and the links that went."""
    if name not in _nodes(graph):
        raise _unknown_node(stream, graph, name)
    changed = copy.deepcopy(graph)
    changed["nodes"] = [node for node in changed["nodes"] if node["name"] != name]
    kept: list[GraphLink] = []
    gone: list[GraphLink] = []
    for link in changed["links"]:
        touches = link["to"]["node"] == name or link["from"].get("node") == name
        (gone if touches else kept).append(link)
    changed["links"] = kept
    changed["exposures"] = [e for e in changed.get("exposures", []) if e["node"] != name]
    return changed, [Link(link) for link in gone]


def _split(text: str, what: str, stream: str) -> list[str]:
    parts = str(text).strip().strip("/").split("/")
    if any(not part for part in parts) or len(parts) not in (2, 3, 4):
        raise ControlError(
            f"{text!r} is not {what}: write <node>/<port> for stream {stream}'s own ports, or an address "
            "<stream>/<node>/<port>", code="bad_address", details={"stream": stream, "text": text})
    return parts


def _input_port(stream: str, graph: Graph, text: str) -> tuple[str, str]:
    """``node/port`` (or ``stream/node/port``) of one of ``stream``'s inputs."""
    parts = _split(text, "an input", stream)
    if len(parts) == 4:
        raise ControlError(f"{text} is on another machine: a link's input is a port of stream {stream}, "
                           "<node>/<port>", code="bad_address", details={"stream": stream, "text": text})
    if len(parts) == 3:
        if parts[0] != stream:
            raise ControlError(
                f"{text} is an input of stream {parts[0]}, not of {stream}: a stream reads others' outputs, "
                "and only its own inputs can be linked", code="other_stream", details={"stream": stream, "text": text})
        parts = parts[1:]
    node_name, port = parts
    nodes = _nodes(graph)
    if node_name not in nodes:
        raise _unknown_node(stream, graph, node_name)
    node = nodes[node_name]
    if port not in _ports(node, "inputs"):
        raise _no_port(stream, node, port, "input")
    return node_name, port


def _no_port(stream: str, node: Node, port: str, kind: str) -> ControlError:
    inputs, outputs = _ports(node, "inputs"), _ports(node, "outputs")
    where = f"node {node['name']} ({node['class']}) of stream {stream}"
    if port in (outputs if kind == "input" else inputs):
        other = "output" if kind == "input" else "input"
        text = f"{port} of {where} is an {other}, not an {kind}; a link goes from an output to an input"
    else:
        text = f"{where} has no {kind} named {port}; its inputs: {_listed(inputs)}; its outputs: {_listed(outputs)}"
    return ControlError(text, code="no_port", details={"stream": stream, "node": node["name"], "port": port,
                                                       "kind": kind, "inputs": inputs, "outputs": outputs})


def _source(stream: str, graph: Graph, text: str, machine: str) -> LinkEnd:
    """The link's ``from``: one of this stream's outputs (``node/port``, or its own address), or
    another stream's output by address (``remote_output``)."""
    parts = _split(text, "an output", stream)
    if len(parts) >= 3:
        try:
            address = parse_address("/".join(parts))
        except AddressError as exc:
            raise ControlError(f"stream {stream}: {exc}", code="bad_address") from None
        if address.stream != stream or address.machine not in (None, machine):
            return {"address": format_address(address)}  # read through exposure, as remote_output does
        parts = [address.node, address.port]
    node_name, port = parts
    nodes = _nodes(graph)
    if node_name not in nodes:
        raise _unknown_node(stream, graph, node_name)
    if port not in _ports(nodes[node_name], "outputs"):
        raise _no_port(stream, nodes[node_name], port, "output")
    return {"node": node_name, "port": port}


def connect(stream: str, graph: Graph, output: str, input: str, machine: str) -> tuple[Graph, Link]:
    """The graph with a link from ``output`` to ``input``, and the link."""
    source = _source(stream, graph, output, machine)
    node, port = _input_port(stream, graph, input)
    link: GraphLink = {"from": source, "to": {"node": node, "port": port}}
    if link in graph["links"]:
        shown = Link(link)
        raise ControlError(
            f"stream {stream}: {shown.source} is already connected to {shown.target}; an output writes to an "
            "input through one link", code="already_linked",
            fixes=[Fix("disconnect", {"stream": stream, "output": shown.source, "input": shown.target},
                       "remove that link")],
            details={"stream": stream, "output": shown.source, "input": shown.target})
    changed = copy.deepcopy(graph)
    changed["links"].append(link)
    return changed, Link(link)


def disconnect(stream: str, graph: Graph, output: str, input: str,
               machine: str) -> tuple[Graph, Link]:
    """The graph without the link from ``output`` to ``input``, and that link."""
    source = _source(stream, graph, output, machine)
    node, port = _input_port(stream, graph, input)
    link: GraphLink = {"from": source, "to": {"node": node, "port": port}}
    if link not in graph["links"]:
        into = [Link(existing).source for existing in graph["links"] if existing["to"] == link["to"]]
        raise ControlError(
            f"stream {stream} has no link from {Link(link).source} to {node}/{port}; what {node}/{port} reads: "
            f"{_listed(into)}", code="no_link", details={"stream": stream, "input": f"{node}/{port}", "reads": into})
    changed = copy.deepcopy(graph)
    changed["links"] = [existing for existing in changed["links"] if existing != link]
    return changed, Link(link)
