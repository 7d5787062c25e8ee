"""`tatolab expose`: change who may read an output of a running (or kept) stream."""

from __future__ import annotations

from typing import Literal, TypedDict

from tatolab._graph import Graph
from tatolab._runtime.runtime import Runtime
from tatolab._runtime.rules.exposure import set_level
from tatolab._runtime.lifecycle.wiring import remote_links
from tatolab._control.words import UNREACHABLE
from tatolab._runtime.ops import op
from tatolab._runtime.ops.addresses import local_address, no_output
from tatolab._runtime.stored.records import KeptRecord
from tatolab._errors import AddressError
from tatolab._naming import format_address, parse_address


class Exposed(TypedDict):
    address: str
    level: str
    kept: bool  # recorded in the kept stream's record too
    cut: list[str]  # streams whose links to it were cut
    reachable: bool  # public: whether anything outside this machine can reach it (a public address or joined relay)


@op("expose")
async def expose(runtime: Runtime, address: str, level: Literal["internal", "private", "public"] = "private") -> Exposed:
    """Change who may read the output at ``address`` (``<stream>/<node>/<port>``): internal (its own
    stream), private (every stream on this machine) or public; links that may no longer read it are cut."""
    where = local_address(address, "expose")
    short = format_address(where._replace(machine=None))
    stream = runtime.streams.get(where.stream)
    record = runtime.kept.holder(where.stream)
    record = record if isinstance(record, KeptRecord) else None
    if stream is not None and record is not None and str(stream.project) != record.project:
        record = None  # the record belongs to another project's stream of that name
    if stream is not None:
        graph = stream.graph
    elif record is not None:
        graph = record.graph
    else:
        raise runtime.unknown(where.stream)
    outputs = _outputs(graph)
    if (where.node, where.port) not in outputs:
        raise no_output(where.stream, where, outputs, graph)

    if stream is not None:
        set_level(stream.graph, where.node, where.port, level)
    recorded = record is not None and (where.node, where.port) in _outputs(record.graph)
    if record is not None and recorded:  # (an output of a node added live is not in the record)
        set_level(record.graph, where.node, where.port, level)  # wins over the stream function's across restarts
        runtime.kept.store.save(record)
    before = _readers_of(runtime, short)
    runtime.rewire()
    cut = sorted(before - _readers_of(runtime, short))
    if stream is not None and stream.log is not None:
        stream.log.say(f"{short} is now {level}" + (f"; cut: {', '.join(cut)}" if cut else ""))
    reachable = runtime.relay is not None and runtime.relay.reachable()
    if level == "public" and not reachable and stream is not None and stream.log is not None:
        stream.log.say(f"{short}: {UNREACHABLE}", level="warning")
    return {"address": short, "level": level, "kept": recorded, "cut": cut, "reachable": reachable}


def _outputs(graph: Graph) -> set[tuple[str, str]]:
    return {(n["name"], p["port"]) for n in graph["nodes"] for p in n["outputs"]}


def _readers_of(runtime: Runtime, address: str) -> set[str]:
    """The streams whose remote links read ``address`` right now."""
    readers = set()
    for stream in runtime.streams.values():
        for key, link in remote_links(stream).items():
            if key in stream.wiring and _same(link["from"]["address"], address):
                readers.add(stream.name)
    return readers


def _same(text: str, address: str) -> bool:
    try:
        return format_address(parse_address(text)._replace(machine=None)) == address
    except AddressError:
        return False
