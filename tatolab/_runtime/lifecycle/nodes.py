"""A loaded stream's node processes: started from the stream's graph, restarted in part by a dev
reload, and stopped, each one supervised by a NodeProcess (supervisor.py). The stream itself
(streams.py) is the data they work on; the Runtime calls these under its load lock.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Literal, TypedDict

from tatolab._graph import Graph
from tatolab._control import paths
from tatolab._control.errors import Reason
from tatolab._control.words import render
from tatolab._host import spec as host_spec
from tatolab._host import status
from tatolab._links import ring
from tatolab._runtime import surfaces
from tatolab._runtime.stored.logs import StreamLog
from tatolab._runtime.lifecycle.streams import LinkWiring, LoadedStream, OutputRing, link_key
from tatolab._runtime.processes.supervisor import NodeProcess
from tatolab._runtime.rules.health import NodeState
from tatolab._runtime.surfaces import is_builtin, python_for

READY_POLL_S = 0.01


def claim_reader(out: OutputRing) -> int:
    """A reader record of ``out`` for a link or a tap; one given back is reused first."""
    if out.released:
        return out.released.pop()
    if out.next_reader >= ring.MAX_READERS:
        raise ring.RingError(f"{out.base} already has {ring.MAX_READERS} readers (links and taps)")
    index = out.next_reader
    out.next_reader += 1
    return index


def release_reader(out: OutputRing, index: int) -> None:
    """A tap or link ended: clear its record in the ring and let the next one reuse the index."""
    try:
        ring.release_reader(out.base, index)
    except ring.RingError:
        return  # the stream stopped and its rings were reaped
    out.released.append(index)


def start_nodes(stream: LoadedStream, python: Path) -> None:
    """Make every ring, then start every node at once (their processes start side by side)."""
    stream.started_ns = time.monotonic_ns()
    stream.log = stream.log or StreamLog(stream.name, stream.project)
    prefix = paths.loaded_stream_prefix(stream.instance)
    specs: dict[str, host_spec.HostSpec] = {}
    for node in stream.graph["nodes"]:
        outputs: dict[str, host_spec.OutputSpec] = {}
        for out in node["outputs"]:
            base = paths.ring_base(prefix, node["name"], out["port"])
            ring.create_ring(base)
            stream.rings[(node["name"], out["port"])] = OutputRing(base)
            outputs[out["port"]] = {"base": base}
        status.create(paths.status_file(prefix, node["name"]))
        specs[node["name"]] = host_spec.node_spec(
            stream.name, node, project=str(stream.project), status=paths.status_file(prefix, node["name"]),
            sources=str(stream.sources) if stream.sources is not None else None, outputs=outputs,
            surfaces=paths.surface_pool(), builtin=is_builtin(node))
    for link in stream.graph["links"]:
        source = link["from"]
        if "address" in source:
            # a remote output: wired when exposure between streams lands
            stream.waiting[link_key(link)] = Reason("not wired yet")  # wiring.rewire decides, right after start
            continue
        read = stream.rings[(source["node"], source["port"])]
        target = specs[link["to"]["node"]]["inputs"][link["to"]["port"]]
        wiring = LinkWiring(read.base, claim_reader(read))
        stream.wiring[link_key(link)] = wiring
        target["links"].append(
            {"key": link_key(link), "base": read.base, "reader_index": wiring.reader_index}
        )
    surfaces.acquire()  # after everything that can fail: stop_nodes gives it back
    for name, spec in specs.items():
        process = NodeProcess(stream=stream.name, spec=spec, python=python_for(spec, python), project=stream.project,
                              log=stream.log, env=stream.env, starter=stream.starter)
        stream.nodes[name] = process
        process.start()

async def restart_nodes(stream: LoadedStream, graph: Graph, names: list[str]) -> None:
    """Take ``graph`` (of the same shape: reload.same_shape) as this stream's, restarting only
    the nodes ``names`` from the code on disk now; the others, and every ring, stay as they are.
    Each named node's process ends before its successor starts."""
    entries = {node["name"]: node for node in graph["nodes"]}
    old = [stream.nodes[name] for name in names]
    await asyncio.gather(*(node.stop() for node in old))
    stream.graph = graph
    if stream.changes and stream.log is not None:
        stream.log.say(f"{dropped_changes(stream)}: this version is the stream function's graph", level="warning")
    stream.changes = []
    assert stream.log is not None  # start_nodes gave it one
    for previous in old:
        entry = entries[previous.name]
        spec = previous.spec.copy()
        spec["config"] = entry.get("config") or {}
        spec["watchdog_ms"] = entry.get("watchdog_ms")
        spec["memory_limit_mb"] = entry.get("memory_limit_mb")
        process = NodeProcess(stream=stream.name, spec=spec, python=previous.python, project=stream.project,
                              log=stream.log, env=stream.env, starter=stream.starter)
        stream.nodes[previous.name] = process
        process.start()

def dropped_changes(stream: LoadedStream) -> str:
    """What a log says when a stream's live changes end (a stop, a restart, a dev reload)."""
    listed = ", ".join(describe_change(c) for c in stream.changes)
    return f"the live changes to stream {stream.name} are dropped ({listed})"


def describe_change(change: dict[str, Any]) -> str:
    """One live change in words: `add_node probe`, `connect counter/counts->probe/numbers`."""
    if "node" in change:
        return f"{change['change']} {change['node']}"
    return f"{change['change']} {change.get('output')}->{change.get('input')}"


class _EndedKeys(TypedDict):
    event: Literal["ended"]
    reason: str  # in plain words
    runtime_down: bool  # the runtime itself is stopping


class Ended(_EndedKeys, total=False):
    why: dict[str, Any]  # the same, with the operation that ended it (a Reason: tatolab/_control/errors.py)


def ended_event(stream: LoadedStream) -> Ended:
    """What a watcher of ``stream`` (an attached terminal, dev) is told when it has ended."""
    event: Ended = {"event": "ended", "reason": stream.end_reason.text, "runtime_down": stream.ended_by_runtime}
    if stream.end_reason.code:
        event["why"] = stream.end_reason.to_wire()
    return event


async def wait_ready(stream: LoadedStream, timeout: float, since_ns: int | None = None) -> dict[str, Any]:
    """Wait until every node made its first ``process()`` call (a manual node: runs), the
    stream ended, or ``timeout``; says how long the start took (from ``since_ns``, else from
    the start of its nodes: compiling came before) and which nodes are not ready."""
    deadline = time.monotonic() + timeout
    while True:
        ready = {name: node.ready_ns() for name, node in stream.nodes.items()}
        failed = {name: node.last_error or "it cannot run" for name, node in stream.nodes.items()
                  if node.state is NodeState.FAILED}
        waiting = sorted(name for name, ns in ready.items() if not ns and name not in failed)
        if not waiting or stream.ended.is_set() or time.monotonic() >= deadline:
            break
        await asyncio.sleep(READY_POLL_S)
    last = max((ns for ns in ready.values() if ns), default=0)
    began = since_ns if since_ns is not None else stream.started_ns
    return {"start_ms": round((last - began) / 1e6, 1) if last else None,
            "ready": len(ready) - len(waiting) - len(failed), "not_ready": waiting, "failed": failed}


async def stop_nodes(stream: LoadedStream, reason: Reason | str, *, by_runtime: bool = False) -> None:
    """Stop every node, reap the stream's rings, and say it ended (what its watchers wait for)."""
    stream.ended_by_runtime = by_runtime
    await asyncio.gather(*(node.stop() for node in stream.nodes.values()))
    ring.reap(paths.loaded_stream_prefix(stream.instance))
    surfaces.release()
    stream.end_reason = reason if isinstance(reason, Reason) else Reason(reason)
    if stream.changes and stream.log is not None:
        again = "as recorded" if stream.mode == "kept" else "as its stream function builds it"
        stream.log.say(f"{dropped_changes(stream)}: it loads {again} when it starts again", level="warning")
    if stream.log is not None:  # a log is read by a person: the cause in the CLI's words, by the one renderer
        stream.log.say(f"stream {stream.name} stopped: {render(stream.end_reason)}")
    stream.ended.set()
    if stream.log is not None:
        stream.log.close()
