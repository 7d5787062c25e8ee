"""``@stream``, ``StreamBuilder`` and the references it hands out for ports."""

from __future__ import annotations

import dataclasses
import enum
import re
import urllib.parse
from typing import Any, Callable, TypeVar, cast

from tatolab._errors import AddressError, GraphError
from tatolab._graph import Graph, Link, LinkEnd, Node
from tatolab._naming import Address, format_address, parse_address, url_safe
from tatolab._sdk.nodes import describe_node, node_spec, plain_config

Fn = TypeVar("Fn", bound=Callable[..., Any])

_STREAM_ATTR = "__tatolab_stream__"


def stream(function: Fn) -> Fn:
    """Mark a function as a stream. It receives a ``StreamBuilder`` and describes the graph, once."""
    if not callable(function) or isinstance(function, type):
        raise GraphError(
            f"@stream decorates a function, like `def bars(stream_builder: StreamBuilder) -> None:`, not {function!r}."
        )
    setattr(function, _STREAM_ATTR, True)
    return function


def is_stream(obj: Any) -> bool:
    return callable(obj) and getattr(obj, _STREAM_ATTR, False) is True


class Exposure(enum.Enum):
    """Who can read an output: only its stream, other streams on this machine, or other machines too."""

    INTERNAL = "internal"
    PRIVATE = "private"
    PUBLIC = "public"


@dataclasses.dataclass(frozen=True)
class OutputRef:
    """An output port of a node in this stream, from ``handle.output(port)``."""

    node: str
    port: str

    def __str__(self) -> str:
        return f"{self.node}/{self.port}"


@dataclasses.dataclass(frozen=True)
class InputRef:
    """An input port of a node in this stream, from ``handle.input(port)``."""

    node: str
    port: str

    def __str__(self) -> str:
        return f"{self.node}/{self.port}"


@dataclasses.dataclass(frozen=True)
class RemoteOutputRef:
    """An exposed output of another stream, from ``stream_builder.remote_output(address)``, or
    of another machine's runtime, from ``stream_builder.remote_output(url)``."""

    address: Address
    url: str | None = None  # https://<host>:<port>/<machine>/<stream>/<node>/<port>[#sha256=<fingerprint>]

    def __str__(self) -> str:
        return format_address(self.address)


def remote_url(url: str) -> RemoteOutputRef:
    """An output served over MoQ at ``url``: its path is the output's full address."""
    parts = urllib.parse.urlsplit(url)
    pinned = parts.fragment
    if not parts.hostname or (pinned and not re.fullmatch(r"sha256=[0-9a-fA-F]{64}", pinned)):
        raise AddressError(
            f"{url!r} is not an output's URL. Use the URL `tatolab url <stream>/<node>/<port>` prints on the "
            "machine that serves it: https://<host>:<port>/<machine>/<stream>/<node>/<port>, with "
            "#sha256=<fingerprint> to pin its certificate."
        )
    address = parse_address(parts.path)
    if address.machine is None:
        raise AddressError(
            f"{url!r}: the URL's path must be the output's full address, <machine>/<stream>/<node>/<port>, "
            "as `tatolab url` prints it."
        )
    return RemoteOutputRef(address, url)


class NodeHandle:
    """A node added to a stream. ``.output(port)`` and ``.input(port)`` name its ports for ``connect``."""

    def __init__(self, builder: StreamBuilder, name: str, cls: type, *, stands_in: bool = False) -> None:
        self._builder = builder
        self._cls = cls
        self._stands_in = stands_in  # a recording in this node's place: its one output answers to any name
        self.name = name
        spec = node_spec(cls)
        self._inputs = {p.name: p for p in spec.inputs}
        self._outputs = {p.name: p for p in spec.outputs}

    def output(self, port: str) -> OutputRef:
        return OutputRef(self.name, self._port(port, "output"))

    def input(self, port: str) -> InputRef:
        return InputRef(self.name, self._port(port, "input"))

    def _port(self, port: str, kind: str) -> str:
        ports, other = (self._outputs, self._inputs) if kind == "output" else (self._inputs, self._outputs)
        try:
            key = url_safe(port)
        except AddressError:
            key = None
        if key in ports:
            return key
        if self._stands_in and kind == "output":
            return next(iter(ports))
        cls_name = self._cls.__qualname__
        owner = f"Node '{self.name}' ({cls_name}) in stream '{self._builder.name}'"
        if key in other:
            swap = "input" if kind == "output" else "output"
            raise GraphError(
                f"{owner}: {port!r} is an {swap}, not an {kind}. Use {self.name}.{swap}({port!r})."
            )
        raise GraphError(
            f"{owner} has no {kind} named {port!r}. "
            f"Its outputs: {_list(self._outputs)}. Its inputs: {_list(self._inputs)}."
        )

    def __repr__(self) -> str:
        return f"<NodeHandle {self.name!r} {self._cls.__qualname__}>"


def _list(ports: dict[str, Any]) -> str:
    return ", ".join(ports) if ports else "(none)"


STAND_INS_ENV = "TATOLABTEST_STAND_INS"  # not TATOLAB_*: those never reach a stream


def _stand_ins() -> dict[str, Any]:
    """``{node name: McapSource config}``: recordings a test puts in place of nodes (run_with_recording)."""
    import json
    import os

    text = os.environ.get(STAND_INS_ENV)
    return json.loads(text) if text else {}


class StreamBuilder:
    """What a ``@stream`` function receives: ``add`` nodes, ``connect`` their ports, ``expose`` outputs."""

    def __init__(self, name: str = "stream") -> None:
        self.name = name
        self._nodes: dict[str, Node] = {}
        self._classes: dict[str, type] = {}
        self._links: list[Link] = []
        self._exposures: dict[tuple[str, str], Exposure] = {}
        self._stand_ins = _stand_ins()

    def add(self, node: type, config: Any = None, name: str | None = None) -> NodeHandle:
        """Add a node to the stream. ``config`` is checked against the node's config type now."""
        spec = node_spec(node)
        node_name = url_safe(name if name is not None else spec.class_name.rsplit(".", 1)[-1])
        if node_name in self._nodes:
            existing = self._classes[node_name].__qualname__
            raise GraphError(
                f"Stream '{self.name}' already has a node named '{node_name}' ({existing}). "
                f"Pass name= to add() to tell them apart, e.g. "
                f"add({spec.class_name}, name=\"{node_name}-2\")."
            )
        stands_in = node_name in self._stand_ins
        if stands_in:  # a test put a recording in this node's place (tatolab.stream.run_with_recording)
            from tatolab._sdk.builtins.recording import McapSource

            node, config, spec = McapSource, self._stand_ins[node_name], node_spec(McapSource)
        checked = plain_config(node, config, node=node_name)
        entry = {"name": node_name, **describe_node(node), "config": checked}
        # Keep the documented key order: name, class, doc, config, execution, ...
        self._nodes[node_name] = cast(Node, {  # (the keys are Node's, in the documented order)
            key: entry[key]
            for key in ("name", "class", "doc", "config", "execution", "interval_ms", "inputs", "outputs")
        })
        for key in ("builtin", "watchdog_ms", "memory_limit_mb"):  # only when the node sets them
            if key in entry:
                self._nodes[node_name][key] = entry[key]
        self._classes[node_name] = node
        return NodeHandle(self, node_name, node, stands_in=stands_in)

    def connect(self, output: OutputRef | RemoteOutputRef, input: InputRef) -> None:
        """Link an output (of this stream, or ``remote_output(...)``) to an input of this stream."""
        if isinstance(output, InputRef) and isinstance(input, (OutputRef, RemoteOutputRef)):
            raise GraphError(
                f"Stream '{self.name}': connect() takes the output first, then the input, "
                f"but got the input {output} first and the output {input} second. Swap the two arguments."
            )
        if not isinstance(output, (OutputRef, RemoteOutputRef)):
            raise GraphError(
                f"Stream '{self.name}': connect()'s first argument must be an output, such as "
                f"source.output(\"frames\") or stream_builder.remote_output(\"stream/node/port\"), not {output!r}."
            )
        if not isinstance(input, InputRef):
            raise GraphError(
                f"Stream '{self.name}': connect()'s second argument must be an input, such as "
                f"detector.input(\"frames\"), not {input!r}."
            )
        self._check_ours(input.node)
        if isinstance(output, OutputRef):
            self._check_ours(output.node)
            source: LinkEnd = {"node": output.node, "port": output.port}
        else:
            source = {"address": format_address(output.address)}
            if output.url is not None:
                source["url"] = output.url
        link: Link = {"from": source, "to": {"node": input.node, "port": input.port}}
        if link in self._links:
            raise GraphError(f"Stream '{self.name}': {output} is already connected to {input}.")
        self._links.append(link)

    def expose(self, output: OutputRef, level: Exposure = Exposure.PRIVATE) -> None:
        """Let other streams (PRIVATE) or other machines too (PUBLIC) read ``output`` at its address."""
        if not isinstance(output, OutputRef):
            raise GraphError(
                f"Stream '{self.name}': expose() takes an output of this stream, such as "
                f"detector.output(\"motion\"), not {output!r}."
            )
        if not isinstance(level, Exposure):
            try:
                level = Exposure(str(level).lower())
            except ValueError:
                raise GraphError(
                    f"Stream '{self.name}': {level!r} is not an exposure level; "
                    "use Exposure.PRIVATE or Exposure.PUBLIC."
                ) from None
        self._check_ours(output.node)
        if level is Exposure.INTERNAL:
            self._exposures.pop((output.node, output.port), None)
        else:
            self._exposures[(output.node, output.port)] = level

    def remote_output(self, address: str) -> RemoteOutputRef:
        """An exposed output of another stream, by address: ``stream/node/port`` or ``machine/stream/node/port``;
        or of another runtime, by the URL ``tatolab url`` prints there (``https://...``)."""
        try:
            if isinstance(address, str) and address.strip().lower().startswith("https://"):
                return remote_url(address.strip())
            return RemoteOutputRef(parse_address(address))
        except AddressError as exc:
            raise GraphError(f"Stream '{self.name}': remote_output(): {exc}") from None

    def _check_ours(self, node_name: str) -> None:
        if node_name not in self._nodes:
            raise GraphError(
                f"Stream '{self.name}' has no node named '{node_name}'; "
                "connect ports of nodes added with this stream_builder."
            )

    # Read by tatolab._compile.
    def _graph(self) -> Graph:
        unused = sorted(set(self._stand_ins) - set(self._nodes))
        if unused:
            raise GraphError(f"stream '{self.name}' has no node named {', '.join(unused)} to replay a recording in "
                             f"place of; its nodes: {_list(self._nodes)}")
        return {
            "nodes": list(self._nodes.values()),
            "links": [link.copy() for link in self._links],
            "exposures": [
                {"node": node, "port": port, "level": "public" if level is Exposure.PUBLIC else "private"}
                for (node, port), level in self._exposures.items()
            ],
        }

    def _node_classes(self) -> dict[str, type]:
        return dict(self._classes)
