"""Seeing inside: the live graph and tapping an output."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncGenerator, Literal, TypedDict


from tatolab import _bags
from tatolab._control.errors import ControlError
from tatolab._control.operations import Events
from tatolab._links.aio import AsyncRingReader
from tatolab._links.ring import RingError, RingReader
from tatolab._model.view import GraphView, SlowestPaths
from tatolab._runtime.views.graph import build_graph
from tatolab._runtime.views.timing import slowest
from tatolab._runtime.lifecycle.nodes import claim_reader, release_reader
from tatolab._runtime.relay.relay import Relay
from tatolab._runtime.runtime import Runtime
from tatolab._runtime.ops import op
from tatolab._runtime.ops.addresses import local_address, no_output
from tatolab._runtime.lifecycle.streams import LoadedStream, OutputRing

HEX_PREVIEW_BYTES = 16
MAX_LIST_ITEMS = 32
MAX_TEXT_CHARS = 200


def _row(runtime: Runtime, name: str) -> dict[str, Any]:
    for row in runtime.list_streams():
        if row["name"] == name:
            return row
    raise runtime.unknown(name)


@op("graph")
async def graph(runtime: Runtime, stream: str | None = None) -> GraphView:
    """The live graph of every stream, or of ``stream``: nodes, links and their counters (docs/graph.md)."""
    rows = runtime.list_streams()
    if stream is not None:
        _row(runtime, stream)
    graph = build_graph(runtime.streams, rows, only=stream)
    if runtime.relay is not None:
        add_network(graph, runtime.relay)
        add_url_missed(graph, runtime, runtime.relay)
    add_recordings(graph, runtime)
    add_foxglove(graph, runtime)
    return graph


def add_url_missed(graph: GraphView, runtime: Runtime, relay: Relay) -> None:
    """A URL link's bags the relay it reads never handed over (it fell behind, or a group came
    late), counted in its ``dropped`` as a ring's are, and on their own as ``network_missed``."""
    for entry in graph["streams"]:
        stream = runtime.streams.get(entry["name"])
        if stream is None:
            continue
        inputs = {(node["name"], p["port"]): p for node in entry["nodes"] for p in node.get("inputs", [])}
        for link in entry["links"]:
            if "url" not in link["from"]:
                continue
            missed = link["network_missed"] = relay.missed((stream.instance, link["key"]))
            if missed and link["counters"] is not None:
                link["counters"]["dropped"] += missed
                port = inputs.get((link["to"]["node"], link["to"]["port"]))
                if port is not None:
                    port["dropped"] += missed


def add_foxglove(graph: GraphView, runtime: Runtime) -> None:
    """Whether the Foxglove server runs (and its port); the reader records lent to it marked as its own."""
    service = runtime.foxglove
    if service is None:
        return
    graph["runtime"]["foxglove"] = {"serving": service.port is not None, "port": service.port}
    lent = {(address, index) for address, index in service.lent}
    for entry in graph["streams"]:
        for node in entry["nodes"]:
            for port in node.get("outputs", []):
                for tap in port["taps"]:
                    if (f"{entry['name']}/{node['name']}/{port['port']}", tap["reader"]) in lent:
                        tap["foxglove"] = True


def add_recordings(graph: GraphView, runtime: Runtime) -> None:
    """The recordings in progress, and on each output a recording reads, its reader marked as the recording's."""
    live = [r for r in runtime.recordings.values() if r.state != "ended"]
    graph["recordings"] = [r.row() for r in live]
    readers = {(reading.address, reading.index): r.id for r in live for reading in r.readings}
    for entry in graph["streams"]:
        for node in entry["nodes"]:
            for port in node.get("outputs", []):
                for tap in port["taps"]:
                    rid = readers.get((f"{entry['name']}/{node['name']}/{port['port']}", tap["reader"]))
                    if rid is not None:
                        tap["recording"] = rid


@op("slowest_paths")
async def slowest_paths(runtime: Runtime, stream: str | None = None, limit: int = 10) -> SlowestPaths:
    """What is late, and where: every stream's (or ``stream``'s) source-to-sink paths, slowest first by
    p99 over the last 10 s, each with ``from``, ``to``, ``through``, ``p50_us``, ``p90_us``, ``p99_us``,
    ``max_us``, ``bags``, its ``slowest_link`` (the link along it whose bags waited longest before
    they were read) and its ``slowest_node`` (the node along it whose process() calls took longest:
    ``node``, ``process_p50_us``, ``process_p99_us``, ``wait_p50_us``). At most ``limit`` paths
    (docs/graph.md, "Where time goes")."""
    if limit < 1:
        raise ControlError(f"slowest_paths: limit must be at least 1, got {limit}", code="bad_arguments")
    rows = runtime.list_streams()
    if stream is not None:
        _row(runtime, stream)
    return {"paths": slowest(build_graph(runtime.streams, rows, only=stream), limit)}


def add_network(graph: GraphView, relay: Relay) -> None:
    """Each exposed output's network readers and what was sent to them; the relay's own reader
    record is the network's, not a tap."""
    machine = graph["runtime"]["name"]
    problem = relay.problem
    graph["runtime"]["relay"] = {"serving": problem is None, "port": relay.port, **({"why": problem} if problem else {})}
    for entry in graph["streams"]:
        for node in entry["nodes"]:
            for port in node.get("outputs", []):
                if port["exposure"] == "internal":
                    continue
                path = f"{machine}/{entry['name']}/{node['name']}/{port['port']}"
                port["network"] = relay.network(path)
                index = relay.reader_index(path)
                port["taps"] = [tap for tap in port["taps"] if tap["reader"] != index]


def preview(value: Any) -> Any:
    """A bag made fit for one JSON line: bytes as length plus a short hex preview, long things cut."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        return {"$bytes": len(data), "hex": data[:HEX_PREVIEW_BYTES].hex()}
    if isinstance(value, dict):
        return {str(k): preview(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [preview(v) for v in value[:MAX_LIST_ITEMS]]
        if len(value) > MAX_LIST_ITEMS:
            items.append({"$more": len(value) - MAX_LIST_ITEMS})
        return items
    if isinstance(value, str) and len(value) > MAX_TEXT_CHARS:
        return value[:MAX_TEXT_CHARS] + f"... ({len(value)} chars)"
    return value


def describe_bag(payload: bytes) -> Any:
    try:
        return preview(_bags.decode(payload))
    except (ValueError, RecursionError):
        return preview(payload)  # not msgpack (or nested too deep to show): the raw bytes


def _find_output(runtime: Runtime, address: str) -> tuple[LoadedStream, OutputRing, str]:
    where = local_address(address, "tap")
    stream = runtime.streams.get(where.stream)
    if stream is None:
        raise ControlError(f"no stream named {where.stream} is running; running streams: {', '.join(sorted(runtime.streams)) or 'none'}")
    out = stream.rings.get((where.node, where.port))
    if out is None:
        raise no_output(stream.name, where, stream.rings, stream.graph)
    return stream, out, f"{stream.name}/{where.node}/{where.port}"


class Tapping(TypedDict):
    event: Literal["tapping"]
    address: str
    profile: str
    reader: int


class Bag(TypedDict):
    event: Literal["bag"]
    n: int
    ts_ns: int
    size: int
    bag: Any  # the bag made fit for one JSON line (bytes as length and a hex preview)


class _TapEnd(TypedDict):
    event: Literal["end"]
    got: int
    reason: Literal["count", "timeout", "stream stopped", "error"]
    dropped: int


class TapEnd(_TapEnd, total=False):
    error: str  # reason error: what stopped the reading


@op("tap")
async def tap(
    runtime: Runtime,
    address: str,
    count: int | None = None,
    timeout: float | None = 10.0,
    profile: Literal["newest", "ordered"] = "newest",
) -> Events[Tapping | Bag | TapEnd, Tapping | Bag | TapEnd]:
    """Read the bags the output at ``address`` writes, without slowing it: ``newest`` the latest each
    time (skipping), ``ordered`` every bag in order until lapped; until ``count`` bags or ``timeout``
    seconds (None: no limit). It reads through a reader record of its own, released when it ends."""
    if count is not None and count < 1:
        raise ControlError(f"count must be 1 or more, not {count}", code="bad_value", details={"argument": "count"})
    stream, out, name = _find_output(runtime, address)
    try:
        index = claim_reader(out)
    except RingError as exc:
        raise ControlError(f"cannot tap {name}: {exc}") from None
    try:
        reader = RingReader(out.base, index, profile, start="now")
    except RingError as exc:
        release_reader(out, index)
        raise ControlError(f"cannot tap {name}: {exc}") from None
    # The server starts the iterator at once, so its finally always releases the record.
    return _tap(stream, out, index, reader, name, count, timeout)


async def _tap(
    stream: LoadedStream,
    out: OutputRing,
    index: int,
    reader: RingReader,
    name: str,
    count: int | None,
    timeout: float | None,
) -> AsyncGenerator[Tapping | Bag | TapEnd, None]:
    """Read ``out`` through a reader record of its own, released however the tap ends.

    The ring is read on the reader's own thread (AsyncRingReader), never on the event loop."""
    loop = asyncio.get_running_loop()
    bags = AsyncRingReader(reader)
    released = False

    async def release() -> None:
        nonlocal released
        if not released:
            released = True
            await bags.close()
            release_reader(out, index)

    try:
        yield {"event": "tapping", "address": name, "profile": reader.profile, "reader": index}
        got = 0
        deadline = loop.time() + timeout if timeout else None
        reason: Literal["count", "timeout", "stream stopped", "error"] = "count"
        error = None
        while count is None or got < count:
            if stream.ended.is_set():
                reason = "stream stopped"
                break
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                reason = "timeout"
                break
            try:
                item = await bags.next(left, describe_bag)
            except RingError as exc:
                reason, error = "error", f"stopped reading {name}: {exc}"
                break
            if item is None:
                continue
            bag, size, publish_ns = item
            got += 1
            yield {"event": "bag", "n": got, "ts_ns": publish_ns, "size": size, "bag": bag}
        end: TapEnd = {"event": "end", "got": got, "reason": reason, "dropped": bags.dropped}
        if error:
            end["error"] = error
        await release()  # before the end is told, so a `graph` right after no longer lists the tap
        yield end
    finally:
        await release()
