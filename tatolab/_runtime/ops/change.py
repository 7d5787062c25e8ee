"""Changing a running stream's graph live: `add_node`, `remove_node`, `connect`, `disconnect`.

Each takes effect at once and touches nothing else: the other nodes keep their processes. The
change lasts while the stream runs; a kept stream's record keeps the graph from `run -d`, so after
a restart (of the runtime, or a stop and start) it loads as recorded, and `graph` says meanwhile
that it changed since recorded.
"""

from __future__ import annotations

import time
from typing import Any, TypedDict

from tatolab._control.errors import ControlError, Fix
from tatolab._graph import Node
from tatolab._links.ring import RingError
from tatolab._runtime.lifecycle import live
from tatolab._runtime.processes.compiler import project_python
from tatolab._runtime.lifecycle.describe import describe_node
from tatolab._runtime.machine import machine_name
from tatolab._runtime.ops import op
from tatolab._runtime.rules import changes
from tatolab._runtime.runtime import Runtime
from tatolab._runtime.lifecycle.streams import LoadedStream
from tatolab._runtime.processes.supervisor import NodeProcess

START_WAIT_S = 10.0  # add_node answers once the node runs, or after this long saying it still starts


class Port(TypedDict):
    port: str
    delivery_profile: str


class NodeAdded(TypedDict):
    stream: str
    node: str
    node_class: str
    inputs: list[Port]  # its input ports, for `connect`
    outputs: list[str]  # its output ports, for `connect` and `tap` (<stream>/<node>/<port>)
    pid: int | None  # its process
    state: str  # ready (made its first process() call), waiting (set up; no process() call yet: it waits for
    # bags on its inputs), starting (still importing or in setup() after START_WAIT_S: `graph` shows it), or
    # stopped (removed again meanwhile)
    start_ms: float | None  # from the request until ready (waiting: until set up)
    kept: bool  # a kept stream: the change is live only, and its record is as recorded
    changes: int  # live changes to the stream since it loaded


class NodeRemoved(TypedDict):
    stream: str
    node: str
    links: list[str]  # the links that went with it ("<output>-><node>/<port>")
    kept: bool
    changes: int


class Linked(TypedDict):
    stream: str
    link: str  # "<output>-><node>/<port>"
    state: str  # wired, or waiting (a remote output not readable yet: `graph` says why)
    reason: str | None  # why it waits
    why: dict[str, Any] | None  # the same, with the operations that fix it ({text, code, fixes, details})
    kept: bool
    changes: int


def _kept(stream: LoadedStream) -> bool:
    return stream.mode == "kept"


def _note(stream: LoadedStream, change: dict[str, Any], said: str) -> None:
    stream.changes.append(change)
    if stream.log is not None:
        tail = f"; a live change: kept stream {stream.name} loads as recorded after a restart" if _kept(stream) else ""
        stream.log.say(said + tail, node=change.get("node"), change=change["change"])


@op("add_node")
async def add_node(runtime: Runtime, stream: str, name: str, node_class: str,
                   config: dict[str, Any] | None = None) -> NodeAdded:
    """Add node ``name`` to running stream ``stream`` and start it in its own process, unlinked (link it with
    `connect`): ``node_class`` is a built-in's name (TestPatternSource) or module:Class importable from the
    stream's project .venv; ``config`` is checked against the node's config type. It answers once the node
    runs (its pid, and whether it is ready or waits for bags on its inputs); a node that fails to start is
    removed again and the answer is its error. The other nodes keep running. A live change: a kept stream
    loads as recorded after a restart."""
    asked_ns = time.monotonic_ns()
    loaded = runtime.running(stream)
    changes.checked_name(stream, loaded.graph, name, node_class)
    runtime.check_node_caps(stream, len(loaded.graph["nodes"]) + 1, adding=name)  # before describing it
    entry = await describe_node(loaded, name, node_class, config)  # in the project's .venv, before the lock

    async def change(target: LoadedStream) -> tuple[LoadedStream, NodeProcess]:
        graph = changes.add_node(stream, target.graph, entry)  # checked again: the graph may have changed meanwhile
        runtime.check_node_caps(stream, len(graph["nodes"]), adding=name)  # and the caps, under the lock
        runtime.check_cameras(stream, graph, replacing=target)  # a camera another stream holds is refused
        try:
            process = live.start_node(target, entry, project_python(target.project))
        except (OSError, RingError) as exc:  # shared memory full: nothing of it stays, the stream runs on
            raise ControlError(f"node {name} could not be added to stream {stream}: {exc}", code="not_started",
                               details={"stream": stream, "node": name}) from None
        target.graph = graph
        _note(target, {"change": "add_node", "node": name, "class": entry["class"]},
              f"node {name} ({entry['class']}) added to stream {stream}")
        return target, process

    target, process = await runtime.change_live(stream, change)
    start = await live.started(process, bool(entry["inputs"]), START_WAIT_S, asked_ns)  # outside the lock
    if start.state == "failed":
        await _take_back(runtime, target, process, entry, start.error or "")
    return {"stream": stream, "node": name, "node_class": entry["class"],
            "inputs": [{"port": p["port"], "delivery_profile": p["delivery_profile"]} for p in entry["inputs"]],
            "outputs": [p["port"] for p in entry["outputs"]], "pid": start.pid, "state": start.state,
            "start_ms": start.start_ms, "kept": _kept(target), "changes": len(target.changes)}


async def _take_back(runtime: Runtime, target: LoadedStream, process: NodeProcess, entry: Node,
                     error: str) -> None:
    """A node added live whose process ended while starting is removed again (the change did not take),
    and the refusal says why, in its log's words."""
    stream, name = target.name, entry["name"]

    async def change(now: LoadedStream) -> None:
        if now is not target or now.nodes.get(name) is not process:
            return  # removed, replaced or reloaded meanwhile
        keys = await _remove(runtime, now, name)
        added = {"change": "add_node", "node": name, "class": entry["class"]}
        if not keys and added in now.changes:  # nothing was made of it: the stream is as before
            now.changes.remove(added)
            if now.log is not None:
                now.log.say(f"node {name} removed again from stream {stream}: it failed to start", level="warning",
                            node=name)
        else:
            _note(now, {"change": "remove_node", "node": name},
                  f"node {name} removed again from stream {stream}: it failed to start")

    try:
        await runtime.change_live(stream, change)
    except ControlError:
        pass  # the stream stopped meanwhile, and the node with it
    raise ControlError(
        f"node {name} ({entry['class']}) failed to start in stream {stream}: {error}; it is removed again and "
        "the stream runs on as before: fix it and add it again", code="node_failed",
        fixes=[Fix("logs", {"stream": stream, "node": name}, "shows its traceback")],
        details={"stream": stream, "node": name, "class": entry["class"], "error": error})


async def _remove(runtime: Runtime, target: LoadedStream, name: str) -> list[str]:
    """Stop node ``name`` of ``target`` and remove it with its links; the links that went."""
    graph, gone = changes.remove_node(target.name, target.graph, name)
    for link in gone:
        live.cut(runtime.streams, target, link.entry)
    target.graph = graph
    process, rings = live.take_node(target, name)
    runtime.rewire()  # other streams reading its outputs are cut before its rings go
    await live.stop_node(target, name, process, rings)
    return [f"{link.source}->{link.target}" for link in gone]


@op("remove_node")
async def remove_node(runtime: Runtime, stream: str, name: str) -> NodeRemoved:
    """Stop node ``name`` of running stream ``stream`` and remove it with its links; the other nodes keep
    running. A live change: a kept stream loads as recorded after a restart."""
    async def change(target: LoadedStream) -> NodeRemoved:
        keys = await _remove(runtime, target, name)
        _note(target, {"change": "remove_node", "node": name},
              f"node {name} removed from stream {stream}" + (f" with its links {', '.join(keys)}" if keys else ""))
        return {"stream": stream, "node": name, "links": keys, "kept": _kept(target), "changes": len(target.changes)}

    return await runtime.change_live(stream, change)


@op("connect")
async def connect(runtime: Runtime, stream: str, output: str, input: str) -> Linked:
    """Link ``output`` to ``input`` (``<node>/<port>``) in running stream ``stream``, at once: ``output`` is
    ``<node>/<port>`` of the same stream, or another stream's output by address ``<stream>/<node>/<port>``
    (a remote output: it must be exposed). The input reads from now on. A live change: a kept stream loads
    as recorded after a restart."""
    async def change(target: LoadedStream) -> Linked:
        graph, link = changes.connect(stream, target.graph, output, input, machine_name())
        target.graph = graph
        if link.remote:
            live.waiting(target, link.entry)
            runtime.rewire()
        else:
            live.wire_local(target, link.entry)
        key = f"{link.source}->{link.target}"
        why = target.waiting.get(key)
        _note(target, {"change": "connect", "output": link.source, "input": link.target},
              f"link {key} added to stream {stream}")
        return {"stream": stream, "link": key, "state": "waiting" if why else "wired",
                "reason": why.text if why else None, "why": why.to_wire() if why and why.code else None,
                "kept": _kept(target), "changes": len(target.changes)}

    return await runtime.change_live(stream, change)


@op("disconnect")
async def disconnect(runtime: Runtime, stream: str, output: str, input: str) -> Linked:
    """Remove the link from ``output`` to ``input`` in running stream ``stream``, at once (the same
    arguments as `connect`). A live change: a kept stream loads as recorded after a restart."""
    async def change(target: LoadedStream) -> Linked:
        graph, link = changes.disconnect(stream, target.graph, output, input, machine_name())
        live.cut(runtime.streams, target, link.entry)
        target.graph = graph
        key = f"{link.source}->{link.target}"
        _note(target, {"change": "disconnect", "output": link.source, "input": link.target},
              f"link {key} removed from stream {stream}")
        return {"stream": stream, "link": key, "state": "removed", "reason": None, "why": None, "kept": _kept(target),
                "changes": len(target.changes)}

    return await runtime.change_live(stream, change)

