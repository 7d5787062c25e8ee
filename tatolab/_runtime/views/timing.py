"""Where time goes: each link's bag age at read and each path's source-to-sink latency, for the graph.

The numbers come from the rings' latency files (tatolab/_links/latency.py), read at the moment of
the call. A path runs from the output a bag originated at (a source's, or any node's that wrote it
without reading anything in that call) to an input of a sink: a node none of whose outputs any
link reads, in any stream. Links between streams (``remote_output``) are followed, so a path may
start in another stream; its ``from`` and ``through`` then name that stream.
"""

from __future__ import annotations

from collections import deque
from typing import Any, cast

from tatolab._links import latency
from tatolab._links.shm import RingError
from tatolab._model.view import GraphView, SlowestLink, SlowestNode, SlowPath, StreamView
from tatolab._runtime.lifecycle.streams import link_key

NodeId = tuple[str, str]  # (stream, node)


class Topology:
    """Every loaded stream's rings and wired links, once per graph: whose output an origin id
    names, who reads which ring, and the way from one node to another."""

    def __init__(self, streams: dict[str, Any]) -> None:
        self.outputs: dict[str, tuple[str, str, str]] = {}  # ring base -> (stream, node, port)
        self.by_origin: dict[int, tuple[str, str, str]] = {}
        for name, stream in streams.items():
            for (node, port), ring in stream.rings.items():
                self.outputs[ring.base] = (name, node, port)
                self.by_origin[latency.origin_id(ring.base)] = (name, node, port)
        self.read_bases: set[str] = set()
        self.next: dict[NodeId, set[NodeId]] = {}
        for name, stream in streams.items():
            for link in stream.graph["links"]:
                wiring = stream.wiring.get(link_key(link))
                if wiring is None:
                    continue
                self.read_bases.add(wiring.base)
                source = self.outputs.get(wiring.base)
                if source is not None:
                    self.next.setdefault((source[0], source[1]), set()).add((name, link["to"]["node"]))
        self._cache: dict[str, dict[int, dict[str, Any]] | str] = {}

    def is_sink(self, stream: Any, node: str) -> bool:
        return not any(
            ring.base in self.read_bases for (owner, _port), ring in stream.rings.items() if owner == node
        )

    def route(self, start: NodeId, end: NodeId) -> list[NodeId] | None:
        """The nodes from ``start`` to ``end`` (both included) by the fewest links, or None."""
        before: dict[NodeId, NodeId | None] = {start: None}
        todo = deque([start])
        while todo:
            at = todo.popleft()
            if at == end:
                way = [at]
                while before[way[-1]] is not None:
                    way.append(before[way[-1]])  # type: ignore[arg-type]
                return way[::-1]
            for nxt in sorted(self.next.get(at, ())):
                if nxt not in before:
                    before[nxt] = at
                    todo.append(nxt)
        return None

    def histograms(self, base: str, indexes: list[int]) -> dict[int, dict[str, Any]] | str:
        """The raw histograms of reader records ``indexes`` of the ring at ``base``, or why they
        cannot be read (a text)."""
        key = f"{base}|{','.join(map(str, sorted(indexes)))}"
        if key not in self._cache:
            try:
                self._cache[key] = latency.read(base, indexes)
            except FileNotFoundError:
                self._cache[key] = "no latency file beside this link's ring (a ring made by an older runtime)"
            except (OSError, RingError, ValueError) as exc:
                self._cache[key] = f"its latency file cannot be read: {exc}"
        return self._cache[key]


def add_link_latency(entry: dict[str, Any], base: str, index: int, topology: Topology) -> dict[str, Any] | None:
    """Fill a wired link's ``latency`` (the last 10 s), ``latency_since_start`` and
    ``latency_resets``, or ``latency: null`` with ``latency_reason``; returns the raw record."""
    got = topology.histograms(base, [index])
    if isinstance(got, str) or index not in got:
        entry["latency"] = entry["latency_since_start"] = None
        entry["latency_reason"] = got if isinstance(got, str) else f"reader record {index} is out of range"
        return None
    record = got[index]
    entry["latency"] = latency.summary(record["window"])
    entry["latency_since_start"] = latency.summary(record["total"])
    entry["latency_resets"] = record["resets"]
    return record


def _name(stream: str, here: str, *parts: str) -> str:
    return "/".join(parts) if stream == here else "/".join((stream, *parts))


def stream_paths(stream: Any, records: dict[str, dict[str, Any]], topology: Topology) -> list[dict[str, Any]]:
    """The stream's paths: for every origin seen at an input of one of its sinks, one entry, the
    slowest (by p99 over the last 10 s) first. ``records``: link key -> its raw record."""
    here = stream.name
    grouped: dict[tuple[int, str, str], list[tuple[Any, Any, str]]] = {}
    for link in stream.graph["links"]:
        key = link_key(link)
        record = records.get(key)
        to = link["to"]
        if record is None or not topology.is_sink(stream, to["node"]):
            continue
        wiring = stream.wiring[key]
        for origin, (window, total) in record["paths"].items():
            grouped.setdefault((origin, to["node"], to["port"]), []).append((window, total, wiring.base))
    paths = []
    for (origin, node, port), seen in grouped.items():
        source = topology.by_origin.get(origin)
        entry: dict[str, Any] = {"from": None, "to": f"{node}/{port}", "through": []}
        if source is None:
            entry["from"] = None
            entry["from_reason"] = "an output no loaded stream has (removed, or its stream stopped)"
        else:
            o_stream, o_node, o_port = source
            entry["from"] = _name(o_stream, here, o_node, o_port)
            way: list[NodeId] = []
            for *_, base in seen:
                feeder = topology.outputs.get(base)
                if feeder is not None:
                    way = topology.route((o_stream, o_node), (feeder[0], feeder[1])) or []
                    break
            entry["through"] = [_name(s, here, n) for s, n in way[1:]]
        entry.update(latency.summary(*[w for w, _, _ in seen]))
        entry["since_start"] = latency.summary(*[t for _, t, _ in seen])
        paths.append(entry)
    paths.sort(key=lambda p: (-(p["p99_us"] or -1), p["to"], p["from"] or ""))
    return paths


def _slowest_node(stream: StreamView, on: set[str]) -> SlowestNode | None:
    """The node on a path (``on``: its nodes in this stream) whose process() calls took longest
    (p99 over the last 10 s), with its times; None when none has any."""
    timed = [(n, times) for n in stream.get("nodes", []) if n["name"] in on and (times := n.get("process")) and times["bags"]]
    if not timed:
        return None
    node, process = max(timed, key=lambda pair: pair[1]["p99_us"] or 0)
    wait = node.get("wait")
    return SlowestNode(node=node["name"], process_p50_us=process["p50_us"], process_p99_us=process["p99_us"],
                       wait_p50_us=wait["p50_us"] if wait else None)


def slowest(graph: GraphView, limit: int = 10) -> list[SlowPath]:
    """Every stream's paths, slowest (p99 over the last 10 s) first, each naming its stream, the
    link along it whose bags waited longest (p99 of read age), and the node along it whose
    process() calls took longest (p99)."""
    out: list[SlowPath] = []
    for stream in graph.get("streams", []):
        links = [(link, age) for link in stream.get("links", []) if (age := link.get("latency")) and age["bags"]]
        for path in stream.get("paths", []):
            if not path.get("bags"):
                continue
            # the links of this stream along the path: into a node on it, from a node on it or its origin
            on = {n for n in path["through"] if "/" not in n} | {path["to"].split("/")[0]}
            starts = on | {(path["from"] or "").split("/")[0]}
            along = [(link, age) for link, age in links if link["to"]["node"] in on
                     and (link["from"].get("node") in starts or "address" in link["from"])]
            worst = max(along, key=lambda pair: pair[1]["p99_us"] or 0, default=None)
            out.append(cast(SlowPath, {
                "stream": stream["name"], **path, "slowest_link": None if worst is None else
                SlowestLink(key=worst[0]["key"], p50_us=worst[1]["p50_us"], p99_us=worst[1]["p99_us"]),
                "slowest_node": _slowest_node(stream, on)}))
    out.sort(key=lambda p: -(p["p99_us"] or 0))
    return out[:limit]
