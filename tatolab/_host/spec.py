"""What the runtime tells a node host, one JSON line each on the host's stdin: first its
``HostSpec``, then control messages (``Stop``, ``AddLink``, ``RemoveLink``).

One type for both sides, declared in tatolab/_model/host.py with the decode that checks it: the
runtime builds these (tatolab/_runtime/lifecycle/streams.py, supervisor.py, wiring), the node host
reads them (main.py, runner.py). docs/architecture.md shows them beside
the compiled graph they come from.
"""

from __future__ import annotations

from tatolab._graph import InputPort, Node
from tatolab._model.host import (EXIT_CANNOT_RUN, STOP, AddLink, HostSpec, InputSpec, LinkSpec, Message,
                                 OutputSpec, RemoveLink, SpecProblem, Stop, encode, read_message, read_spec)

__all__ = ["EXIT_CANNOT_RUN", "STOP", "AddLink", "HostSpec", "InputSpec", "LinkSpec", "Message", "OutputSpec",
           "RemoveLink", "SpecProblem", "Stop", "encode", "read_message", "read_spec", "node_spec", "add_link",
           "remove_link"]


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


def add_link(port: str, link: LinkSpec) -> AddLink:
    return {"op": "add_link", "port": port, "link": link}


def remove_link(key: str) -> RemoveLink:
    return {"op": "remove_link", "key": key}
