"""What the runtime tells a node host, one JSON line each on the host's stdin: first its
``HostSpec``, then control messages (``Stop``, ``AddLink``, ``RemoveLink``).

One type for both sides: the runtime builds these (tatolab/_runtime/lifecycle/streams.py, supervisor.py,
wiring), the node host reads them (main.py, runner.py). docs/architecture.md shows them beside
the compiled graph they come from.
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypedDict, Union

import msgspec

from tatolab._graph import InputPort, Node
from tatolab._model.graph import Audio

# How a node host's process ends when its node can never run (CannotRun, a config that does not
# fit): the runtime marks the node failed and does not restart it.
EXIT_CANNOT_RUN = 4


class LinkSpec(TypedDict, total=False):
    key: str  # the graph's link key: "<node>/<port>-><node>/<port>" (or "<address>->...")
    base: str  # the source output's ring
    reader_index: int  # the reader record this link reads through
    start: Literal["beginning", "now"]  # a remote link wired later reads from now on


class _InputSpec(TypedDict):
    delivery_profile: Literal["newest", "ordered"]
    links: list[LinkSpec]


class InputSpec(_InputSpec, total=False):
    audio: Audio  # the audio blocks this input receives, shaped by the host (tatolab/_host/audio.py)
    spin_us: float  # its readers poll this long before sleeping (@node.input(spin_us=...))


class OutputSpec(TypedDict):
    base: str  # the ring this output writes


HostSpec = TypedDict("HostSpec", {
    "stream": str,
    "node": str,
    "class": str,  # module:Qualname (tatolab/_classpath.py)
    "config": dict[str, Any],
    "execution": Literal["reactive", "continuous", "thread", "manual"],
    "interval_ms": Union[float, None],
    "watchdog_ms": Union[float, None],
    "memory_limit_mb": Union[float, None],
    "status": Union[str, None],  # the status file the runtime's watchdog reads (status.py)
    "project": str,
    "sources": Union[str, None],  # a kept stream's copy of the project's modules
    "inputs": dict[str, InputSpec],
    "outputs": dict[str, OutputSpec],
    "surfaces": Union[str, None],  # the runtime's surface pool, where VideoFrame finds frames
    "builtin": bool,  # a built-in node: the runtime's own code, run by the runtime's interpreter
})


def node_spec(stream: str, node: Node, *, project: str, status: str | None, sources: str | None,
              outputs: dict[str, OutputSpec], surfaces: str | None = None, builtin: bool = False) -> HostSpec:
    """The spec of ``node`` (its entry in the compiled graph), its inputs not linked yet."""
    return HostSpec({
        "stream": stream,
        "node": node["name"],
        "class": node["class"],
        "config": node.get("config") or {},
        "execution": node.get("execution", "reactive"),
        "interval_ms": node.get("interval_ms"),
        "watchdog_ms": node.get("watchdog_ms"),
        "memory_limit_mb": node.get("memory_limit_mb"),
        "status": status,
        "project": project,
        "sources": sources,
        "inputs": {port["port"]: _input(port) for port in node["inputs"]},
        "outputs": outputs,
        "surfaces": surfaces,
        "builtin": builtin,
    })


def _input(port: InputPort) -> InputSpec:
    spec = InputSpec(delivery_profile=port["delivery_profile"], links=[])
    if port.get("audio"):
        spec["audio"] = port["audio"]
    if port.get("spin_us"):
        spec["spin_us"] = port["spin_us"]
    return spec


class Stop(TypedDict):
    op: Literal["stop"]  # run teardown and exit (closing stdin says the same)


class AddLink(TypedDict):
    op: Literal["add_link"]
    port: str
    link: LinkSpec


class RemoveLink(TypedDict):
    op: Literal["remove_link"]
    key: str


Message = Union[Stop, AddLink, RemoveLink]
STOP: Stop = {"op": "stop"}


def add_link(port: str, link: LinkSpec) -> AddLink:
    return {"op": "add_link", "port": port, "link": link}


def remove_link(key: str) -> RemoveLink:
    return {"op": "remove_link", "key": key}


def encode(message: HostSpec | Message) -> bytes:
    return (json.dumps(message) + "\n").encode()


def read_spec(line: bytes | str) -> HostSpec | Stop:
    """The first line a host reads: its spec, or ``Stop`` (asked to end before it began)."""
    data = json.loads(line) if line.strip() else STOP
    if data.get("op") == "stop":
        return STOP
    return msgspec.convert(data, HostSpec)  # a spec from another version says which field does not fit
