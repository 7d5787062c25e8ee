"""Live changes carried out on a running stream: a node's process started or stopped, a link wired
or cut, each touching nothing else (the other nodes keep their processes and rings).

Which change is valid and what the graph becomes is rules/changes.py's; the Runtime calls these
under its load lock (Runtime.change_live). A remote link added live is wired by wiring.rewire,
like any other.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

from tatolab._control import paths
from tatolab._control.errors import Reason
from tatolab._graph import Link, Node
from tatolab._host import spec as host_spec
from tatolab._host import status
from tatolab._links import ring
from tatolab._runtime.lifecycle.nodes import READY_POLL_S, claim_reader
from tatolab._runtime.rules.health import NodeState
from tatolab._runtime.lifecycle.streams import LinkWiring, LoadedStream, OutputRing, link_key
from tatolab._runtime.lifecycle.wiring import bind, give_back, unbind
from tatolab._runtime.processes.supervisor import NodeProcess
from tatolab._runtime.surfaces import is_builtin, python_for


def start_node(stream: LoadedStream, entry: Node, project_python: Path) -> NodeProcess:
    """Make the rings of node ``entry`` (already in ``stream.graph``) and start its process, unlinked."""
    prefix = paths.loaded_stream_prefix(stream.instance)
    name = entry["name"]
    outputs: dict[str, host_spec.OutputSpec] = {}
    made: list[str] = []
    try:
        for out in entry["outputs"]:
            base = paths.ring_base(prefix, name, out["port"])
            ring.create_ring(base)
            made.append(base)
            outputs[out["port"]] = {"base": base}
        status_path = paths.status_file(prefix, name)
        _unlink(status_path)  # a node of that name removed earlier left none, but a crash might have
        status.create(status_path)
    except BaseException:
        for base in made:
            ring.remove_ring(base)
        raise
    for port, spec_out in outputs.items():
        stream.rings[(name, port)] = OutputRing(spec_out["base"])
    spec = host_spec.node_spec(
        stream.name, entry, project=str(stream.project), status=status_path,
        sources=str(stream.sources) if stream.sources is not None else None, outputs=outputs,
        surfaces=paths.surface_pool(), builtin=is_builtin(entry))
    assert stream.log is not None
    process = NodeProcess(stream=stream.name, spec=spec, python=python_for(spec, project_python),
                          project=stream.project, log=stream.log, env=stream.env, starter=stream.starter)
    stream.nodes[name] = process
    process.start()
    return process


@dataclass(frozen=True)
class Start:
    """How a node added live started: ``state`` is ready (it made its first ``process()`` call),
    waiting (set up, waiting for bags on its inputs), starting (still importing or in ``setup()``
    when the wait ended), failed (its process ended: ``error`` is its log's last error) or stopped
    (removed meanwhile)."""

    pid: int | None
    state: str
    start_ms: float | None  # from ``since_ns`` until ready (or set up, when waiting)
    error: str | None = None


async def started(process: NodeProcess, has_inputs: bool, timeout: float, since_ns: int) -> Start:
    """Wait until the node of ``process`` (just started) is ready, or set up and waiting for its inputs,
    or its process ended, or ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        if process.crash_streak or process.restarts or process.state == NodeState.FAILED:  # with its last error
            return Start(process.pid, "failed", None, process.last_error or "its process ended")
        if process.state == NodeState.STOPPED:  # removed (or its stream stopped) meanwhile
            return Start(None, "stopped", None)
        ready, set_up = process.ready_ns(), process.set_up_ns()
        late = time.monotonic() >= deadline
        if ready or (set_up and (has_inputs or late)):
            return Start(process.pid, "ready" if ready else "waiting",
                         round(max(0, (ready or set_up) - since_ns) / 1e6, 1))
        if late:
            return Start(process.pid, "starting", None)
        await asyncio.sleep(READY_POLL_S)


def take_node(stream: LoadedStream, name: str) -> tuple[NodeProcess | None, list[str]]:
    """Take node ``name`` out of ``stream`` (its process and rings), for ``stop_node`` to end them."""
    process = stream.nodes.pop(name, None)
    gone = [key for key in stream.rings if key[0] == name]
    return process, [stream.rings.pop(key).base for key in gone]


async def stop_node(stream: LoadedStream, name: str, process: NodeProcess | None, bases: list[str]) -> None:
    """Stop a node taken out of ``stream`` and remove its rings and status file (its links are cut already)."""
    if process is not None:
        await process.stop()
    for base in bases:
        ring.remove_ring(base)
    _unlink(paths.status_file(paths.loaded_stream_prefix(stream.instance), name))


def wire_local(stream: LoadedStream, link: Link) -> None:
    """Wire a link between two nodes of ``stream``: its input reads the output from now on."""
    source = link["from"]
    out = stream.rings[(source["node"], source["port"])]
    bind(stream, link_key(link), link["to"], LinkWiring(out.base, claim_reader(out)))


def cut(streams: dict[str, LoadedStream], stream: LoadedStream, link: Link) -> None:
    """Cut one of ``stream``'s links at once, local or remote, giving its reader record back."""
    key = link_key(link)
    stream.waiting.pop(key, None)
    give_back(streams, unbind(stream, key, link["to"]))


def waiting(stream: LoadedStream, link: Link) -> None:
    """A remote link added live waits until wiring.rewire decides (right after the change)."""
    stream.waiting[link_key(link)] = Reason("not wired yet")


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
