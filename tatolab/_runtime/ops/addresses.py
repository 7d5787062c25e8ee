"""Reading an address given to an operation (`tap`, `expose`, `url`, `foxglove`): one wording for each problem."""

from __future__ import annotations

from typing import Iterable

from tatolab._control.errors import ControlError, Fix
from tatolab._runtime.machine import machine_name
from tatolab._errors import AddressError
from tatolab._graph import Graph
from tatolab._runtime.rules.exposure import exposure_levels
from tatolab._runtime.runtime import Runtime
from tatolab._naming import Address, format_address, parse_address


def local_address(address: str, command: str) -> Address:
    """``address`` parsed, with its machine part (if any) checked to be this machine."""
    try:
        where = parse_address(address)
    except AddressError as exc:
        raise ControlError(str(exc)) from None
    here = machine_name()
    if where.machine is not None and where.machine != here:
        short = format_address(where._replace(machine=None))
        raise ControlError(
            f"{address} is on machine {where.machine}, and {command} works on this machine ({here})",
            code="on_another_machine", fixes=[Fix(command, {"address": short}, f"on {where.machine}")],
            details={"op": command, "address": address, "machine": where.machine, "here": here, "local": short},
        )
    return where


def no_output(stream: str, where: Address, outputs: Iterable[tuple[str, str]],
              graph: Graph | None = None) -> ControlError:
    known = ", ".join(f"{stream}/{node}/{port}" for node, port in sorted(outputs)) or "none"
    nodes = graph.get("nodes", []) if graph is not None else []
    inputs = {(node["name"], port["port"]) for node in nodes for port in node["inputs"]}
    if (where.node, where.port) in inputs:
        return ControlError(f"{where.port} of node {where.node} of stream {stream} is an input, not an output: "
                            f"an address names an output; its outputs: {known}", code="no_output",
                            details={"stream": stream, "node": where.node, "port": where.port})
    return ControlError(f"stream {stream} has no output {where.node}/{where.port}; its outputs: {known}",
                        code="no_output", details={"stream": stream, "node": where.node, "port": where.port})


def exposed_output(runtime: Runtime, address: str, command: str, internal: str) -> tuple[str, str]:
    """The exposed output ``address`` names on this machine, as ``<stream>/<node>/<port>``, and its
    level (private or public); refused naming the fix when its stream does not run here, it is no
    output of that stream, or it is internal (``internal`` says what that denies: "so it has no URL")."""
    where = local_address(address, command)
    stream = runtime.streams.get(where.stream)
    if stream is None:
        raise runtime.unknown(where.stream)
    if (where.node, where.port) not in stream.rings:
        raise no_output(stream.name, where, stream.rings, stream.graph)
    short = f"{where.stream}/{where.node}/{where.port}"
    level = exposure_levels(stream.graph).get((where.node, where.port), "internal")
    if level == "internal":
        raise ControlError(f"{short} is internal, {internal}; expose it first", code="internal",
                           fixes=[Fix("expose", {"address": short}, "serves it on this machine")])
    return short, level
