"""The live graph that ``tatolab graph`` prints: a plain function over the runtime's state.

Counters come from the rings' shared memory at the moment of the call, never from a cache.
The shape is documented in docs/graph.md; bump ``GRAPH_VERSION`` when it changes incompatibly.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, cast

from tatolab import __version__
from tatolab._graph import Node
from tatolab._control.errors import Reason
from tatolab._links import ring
from tatolab._model.view import GraphView, StreamView, Surfaces
from tatolab._runtime.relay.tokens import redact
from tatolab._runtime.rules.exposure import exposure_levels
from tatolab._runtime.rules.health import NodeState, shown_state
from tatolab._runtime.machine import machine_name
from tatolab._runtime.lifecycle.streams import LoadedStream, link_key
from tatolab._runtime.surfaces import is_builtin, pool_stats, refusal_words, refused_pids
from tatolab._runtime.processes.supervisor import NodeProcess
from tatolab._runtime.views.timing import Topology, add_link_latency, stream_paths

GRAPH_VERSION = 1

CounterReader = Callable[[str], dict[str, Any]]


def _age_ms(then_ns: int, now_ns: int) -> float | None:
    return round((now_ns - then_ns) / 1e6, 1) if then_ns else None


def _read_all(stream: LoadedStream, read_counters: CounterReader) -> dict[tuple[str, str], dict[str, Any] | None]:
    return {key: _safe(read_counters, out.base) for key, out in stream.rings.items()}


def node_entry(node: Node, process: NodeProcess | None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": node["name"],
        "kind": node["class"],
        "doc": node.get("doc"),  # the node class's docstring: what an agent reads to know what it does
        "builtin": is_builtin(node),
        "execution": node.get("execution", "reactive"),
        "pid": None,
        "state": NodeState.STOPPED,
        "reason": None,
        "restarts": 0,
        "last_error": None,
        "hung": False,
        "busy_ms": None,
        "watchdog_ms": None,
        "memory_limit_mb": node.get("memory_limit_mb"),
        "hangs": 0,
        "memory_restarts": 0,
        "cpu_percent": None,
        "memory_bytes": None,
        "metrics": {},
        # the node's own times (tatolab/_host/status.py), over the last 10 s: each process() call,
        # and how long the bags handed to it waited inside the node after leaving their ring
        "process": None,
        "process_since_start": None,
        "wait": None,
    }
    if process is None:
        return entry
    busy = process.busy_ms()
    entry.update(
        pid=process.pid,
        state=process.state,
        restarts=process.restarts,
        last_error=process.last_error,
        busy_ms=None if busy is None else round(busy, 1),
        hung=busy is not None and process.watchdog_ms is not None and busy > process.watchdog_ms,
        watchdog_ms=process.watchdog_ms,
        hangs=process.hangs,
        memory_restarts=process.memory_restarts,
        metrics=dict(process.metrics),
        **process.usage(),
    )
    if process.status is not None:
        entry.update(process.status.timings())
    waiting = process.metrics.get("waiting")
    loading = process.metrics.get("loading")
    set_up = not loading or process.status is None or process.set_up_ns() != 0
    entry["state"] = shown_state(process.state, waiting, loading, set_up)
    if entry["state"] is NodeState.WAITING:
        entry["reason"] = waiting
    elif entry["state"] is NodeState.LOADING:
        entry["reason"] = f"loading {loading}"
    elif entry["state"] is NodeState.FAILED:
        entry["reason"] = process.last_error  # the one line it ended with
    return entry


def stream_entry(
    stream: LoadedStream, row: dict[str, Any], *, now_ns: int, read_counters: CounterReader = ring.read_counters,
    topology: Topology | None = None,
) -> dict[str, Any]:
    counters = _read_all(stream, read_counters)
    if topology is None:
        topology = Topology({stream.name: stream})
    records: dict[str, dict[str, Any]] = {}  # link key -> its reader's raw latency record
    levels = exposure_levels(stream.graph)
    link_readers: dict[str, set[int]] = {}
    for link_wiring in stream.wiring.values():
        link_readers.setdefault(link_wiring.base, set()).add(link_wiring.reader_index)

    nodes = []
    refused = refused_pids()
    for node in stream.graph["nodes"]:
        entry = node_entry(node, stream.nodes.get(node["name"]))
        if entry["pid"] is not None and entry["pid"] in refused:
            entry["surfaces"] = refusal_words()  # its frames are dropped: say so where an agent looks
        # read/dropped/bad: totals over the port's wired links (filled in below), so a
        # reading node's own entry shows what it lost, as the docs promise
        entry["inputs"] = [
            {"port": p["port"], "delivery_profile": p["delivery_profile"], "read": 0, "dropped": 0, "bad": 0,
             **({"spin_us": p["spin_us"]} if p.get("spin_us") else {})}  # its polling shows in the node's cpu_percent
            for p in node["inputs"]
        ]
        outputs = []
        for p in node["outputs"]:
            out = stream.rings.get((node["name"], p["port"]))
            live = counters.get((node["name"], p["port"]))
            port: dict[str, Any] = {
                "port": p["port"],
                "exposure": levels.get((node["name"], p["port"]), "internal"),
                "written": live["write_seq"] if live else None,
                "last_bag_ns": (live["last_write_ns"] or None) if live else None,
                "last_bag_age_ms": _age_ms(live["last_write_ns"], now_ns) if live else None,
                "taps": [],
            }
            if live and out is not None:
                wired = link_readers.get(out.base, set())
                port["taps"] = [
                    {"reader": r["index"], "read": r["read"], "dropped": r["dropped"]}
                    for r in live["readers"]
                    if r["active"] and r["index"] not in wired
                ]
            outputs.append(port)
        entry["outputs"] = outputs
        nodes.append(entry)

    profiles = {
        (node["name"], p["port"]): p["delivery_profile"] for node in stream.graph["nodes"] for p in node["inputs"]
    }
    links = []
    for link in stream.graph["links"]:
        key = link_key(link)
        to = link["to"]
        entry = {
            "key": key,
            "from": _shown(link["from"]),
            "to": dict(to),
            "delivery_profile": profiles.get((to["node"], to["port"])),
            "state": "waiting",
            "reason": None,
            "counters": None,
            "latency": None,  # bag age at read over the last 10 s, once wired (docs/graph.md)
            "latency_since_start": None,
        }
        wiring = stream.wiring.get(key)
        if wiring is None:
            why = stream.waiting.get(key) or Reason("not wired")
            entry["reason"] = why.text
            if why.code:  # its fix as an operation; the CLI words it into the reason
                entry["why"] = why.to_wire()
            links.append(entry)
            continue
        entry["state"] = "wired"
        reader_process = stream.nodes.get(to["node"])
        broken = reader_process.broken_links.get(key) if reader_process is not None else None
        if broken is not None:  # its reader stopped reading it: wired no more until the node restarts
            entry["state"], entry["reason"] = "broken", broken
        source = link["from"]
        live = counters.get((source["node"], source["port"])) if "node" in source else _safe(read_counters, wiring.base)
        if live is not None:
            reader = next((r for r in live["readers"] if r["index"] == wiring.reader_index), None) or {}
            entry["counters"] = {
                "written": live["write_seq"],
                "read": reader.get("read", 0),
                "dropped": reader.get("dropped", 0),
                "bad": reader.get("bad", 0),
                "behind": reader.get("behind"),
                "reader": wiring.reader_index,
                "reader_active": reader.get("active", False),
                "last_read_ns": reader.get("last_read_ns") or None,
                "last_bag_ns": live["last_write_ns"] or None,
                "last_bag_age_ms": _age_ms(live["last_write_ns"], now_ns),
            }
        record = add_link_latency(entry, wiring.base, wiring.reader_index, topology)
        if record is not None:
            records[key] = record
        links.append(entry)
    _sum_into_inputs(nodes, links)
    entry = {
        "name": row["name"],
        "state": row["state"],
        "project": row.get("project"),
        "nodes": nodes,
        "links": links,
        "paths": stream_paths(stream, records, topology),
        "changes": [_shown(change) for change in stream.changes],  # live changes since it loaded, oldest first
    }
    if stream.mode == "kept":  # its record holds the graph from `run -d`: a restart loads that one
        entry["changed_since_recorded"] = bool(stream.changes)
    return entry


def _shown(entry: Any) -> dict[str, Any]:
    """A link's source (or a change) as graph shows it: a URL's token left out (``?jwt=...``), as in
    the log; `tatolab url` is where a user asks for one."""
    return {k: redact(v) if isinstance(v, str) and "jwt=" in v else v for k, v in dict(entry).items()}


def _sum_into_inputs(nodes: list[dict[str, Any]], links: list[dict[str, Any]]) -> None:
    ports = {(node["name"], p["port"]): p for node in nodes for p in node["inputs"]}
    for link in links:
        port = ports.get((link["to"]["node"], link["to"]["port"]))
        if port is None or link["counters"] is None:
            continue
        for name in ("read", "dropped", "bad"):
            port[name] += link["counters"][name]


def _safe(read_counters: CounterReader, base: str) -> dict[str, Any] | None:
    try:
        return read_counters(base)
    except ring.RingError:
        return None  # reaped while we looked: the stream is stopping


def build_graph(
    streams: dict[str, LoadedStream],
    rows: list[dict[str, Any]],
    *,
    only: str | None = None,
    read_counters: CounterReader = ring.read_counters,
) -> GraphView:
    """The graph of every stream in ``rows`` (what ``tatolab streams`` lists), or only the one named ``only``.

    A stream listed but not loaded (a stopped or failed kept stream) appears with no nodes.
    """
    now_ns = time.monotonic_ns()
    topology = Topology(streams)
    entries = []
    for row in rows:
        if only is not None and row["name"] != only:
            continue
        loaded = streams.get(row["name"])
        if loaded is None:
            entries.append({**{k: row.get(k) for k in ("name", "state", "project")}, "reason": row.get("reason"),
                            **({"why": row["why"]} if "why" in row else {}), "nodes": [], "links": [], "paths": []})
        else:
            entries.append(stream_entry(loaded, row, now_ns=now_ns, read_counters=read_counters, topology=topology))
    return GraphView(  # its streams built as plain dicts above, in the model's shape (tests/test_model.py)
        version=GRAPH_VERSION,
        runtime={"name": machine_name(), "version": __version__, "pid": os.getpid()},
        now_ns=now_ns,
        surfaces=cast("Surfaces | None", pool_stats()),
        streams=cast("list[StreamView]", entries),
    )
