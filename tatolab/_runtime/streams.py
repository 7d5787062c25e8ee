"""A loaded stream: its rings, its node processes, and how it starts and stops."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tatolab._host import status
from tatolab._links import ring
from tatolab._runtime import paths
from tatolab._runtime.exposure import exposure_levels, set_level
from tatolab._runtime.feed import Feed
from tatolab._runtime.logs import StreamLog
from tatolab._runtime.starter import ProcessStarter
from tatolab._runtime.supervisor import NodeProcess
from tatolab._runtime import surfaces
from tatolab._runtime.surfaces import is_builtin, python_for

_instance_ids = itertools.count(1)
READY_POLL_S = 0.01


def link_key(link: dict[str, Any]) -> str:
    source = link["from"]
    origin = source.get("address") or f"{source['node']}/{source['port']}"
    return f"{origin}->{link['to']['node']}/{link['to']['port']}"


@dataclass
class OutputRing:
    base: str
    next_reader: int = 0
    released: list[int] = field(default_factory=list)  # tap records given back, reused first

    def claim_reader(self) -> int:
        if self.released:
            return self.released.pop()
        if self.next_reader >= ring.MAX_READERS:
            raise ring.RingError(f"{self.base} already has {ring.MAX_READERS} readers (links and taps)")
        index = self.next_reader
        self.next_reader += 1
        return index

    def release(self, index: int) -> None:
        """A tap ended: clear its record in the ring and let the next tap reuse the index."""
        try:
            ring.release_reader(self.base, index)
        except ring.RingError:
            return  # the stream stopped and its rings were reaped
        self.released.append(index)


@dataclass
class LinkWiring:
    """Where a wired link's counters live: its source ring and the reader record it uses."""

    base: str
    reader_index: int


@dataclass
class LoadedStream:
    name: str
    project: Path
    graph: dict[str, Any]
    mode: str  # "attached" | "kept"
    env: dict[str, str] | None = None  # the loading command's environment (None: the runtime's own)
    sources: Path | None = None  # a kept stream's snapshot of the project's modules (None: the live files)
    instance: int = field(default_factory=lambda: next(_instance_ids))
    nodes: dict[str, NodeProcess] = field(default_factory=dict)
    rings: dict[tuple[str, str], OutputRing] = field(default_factory=dict)
    wiring: dict[str, LinkWiring] = field(default_factory=dict)  # link_key -> its ring and reader record
    waiting: dict[str, str] = field(default_factory=dict)  # link_key -> why it is not wired yet
    log: StreamLog | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    end_reason: str = ""
    ended_by_runtime: bool = False
    started_ns: int = 0
    starter: ProcessStarter | None = None  # how its node processes start (None: the runtime's shared one)

    @property
    def shm_prefix(self) -> str:
        """Full path prefix of this stream's shared-memory files (in the user's own folder)."""
        return f"{paths.shm_namespace()}-{self.instance}+"

    def ring_base(self, node: str, port: str) -> str:
        return f"{self.shm_prefix}{node}+{port}"

    def status_path(self, node: str) -> str:
        # "#" is never in a URL-safe name, so this cannot meet a ring file
        return f"{self.shm_prefix}{node}#status"

    def start(self, python: Path) -> None:
        """Make every ring, then start every node at once (their processes start side by side)."""
        self.started_ns = time.monotonic_ns()
        self.log = self.log or StreamLog(self.name, self.project)
        specs: dict[str, dict[str, Any]] = {}
        for node in self.graph["nodes"]:
            outputs = {}
            for out in node["outputs"]:
                base = self.ring_base(node["name"], out["port"])
                ring.create_ring(base)
                self.rings[(node["name"], out["port"])] = OutputRing(base)
                outputs[out["port"]] = {"base": base}
            status.create(self.status_path(node["name"]))
            specs[node["name"]] = {
                "stream": self.name,
                "node": node["name"],
                "class": node["class"],
                "config": node.get("config") or {},
                "execution": node.get("execution", "reactive"),
                "interval_ms": node.get("interval_ms"),
                "watchdog_ms": node.get("watchdog_ms"),
                "memory_limit_mb": node.get("memory_limit_mb"),
                "status": self.status_path(node["name"]),
                "project": str(self.project),
                "sources": str(self.sources) if self.sources is not None else None,
                "inputs": {
                    port["port"]: {"delivery_profile": port["delivery_profile"], "links": []}
                    for port in node["inputs"]
                },
                "outputs": outputs,
                "surfaces": paths.surface_pool(),
                "builtin": is_builtin(node),
            }
        for link in self.graph["links"]:
            source = link["from"]
            if "address" in source:
                # a remote output: wired when exposure between streams lands
                self.waiting[link_key(link)] = "not wired yet"  # wiring.rewire decides, right after start
                continue
            out = self.rings[(source["node"], source["port"])]
            target = specs[link["to"]["node"]]["inputs"][link["to"]["port"]]
            wiring = LinkWiring(out.base, out.claim_reader())
            self.wiring[link_key(link)] = wiring
            target["links"].append(
                {"key": link_key(link), "base": out.base, "reader_index": wiring.reader_index}
            )
        surfaces.acquire()  # after everything that can fail: stop() gives it back
        for name, spec in specs.items():
            process = NodeProcess(stream=self.name, spec=spec, python=python_for(spec, python),
                                  project=self.project, log=self.log, env=self.env, starter=self.starter)
            self.nodes[name] = process
            process.start()

    async def restart_nodes(self, graph: dict[str, Any], names: list[str]) -> None:
        """Take ``graph`` (of the same shape: reload.same_shape) as this stream's, restarting only
        the nodes ``names`` from the code on disk now; the others, and every ring, stay as they are.
        Each named node's process ends before its successor starts."""
        entries = {node["name"]: node for node in graph["nodes"]}
        old = [self.nodes[name] for name in names]
        await asyncio.gather(*(node.stop() for node in old))
        self.graph = graph
        for previous in old:
            entry = entries[previous.name]
            spec = dict(previous.spec, config=entry.get("config") or {}, watchdog_ms=entry.get("watchdog_ms"),
                        memory_limit_mb=entry.get("memory_limit_mb"))
            process = NodeProcess(stream=self.name, spec=spec, python=previous.python, project=self.project,
                                  log=self.log, env=self.env, starter=self.starter)
            self.nodes[previous.name] = process
            process.start()

    async def wait_ready(self, timeout: float, since_ns: int | None = None) -> dict[str, Any]:
        """Wait until every node made its first ``process()`` call (a manual node: runs), the
        stream ended, or ``timeout``; says how long the start took (from ``since_ns``, else from
        the start of its nodes: compiling came before) and which nodes are not ready."""
        deadline = time.monotonic() + timeout
        while True:
            ready = {name: node.ready_ns() for name, node in self.nodes.items()}
            waiting = sorted(name for name, ns in ready.items() if not ns)
            if not waiting or self.ended.is_set() or time.monotonic() >= deadline:
                break
            await asyncio.sleep(READY_POLL_S)
        last = max((ns for ns in ready.values() if ns), default=0)
        began = since_ns if since_ns is not None else self.started_ns
        return {"start_ms": round((last - began) / 1e6, 1) if last else None,
                "ready": len(ready) - len(waiting), "not_ready": waiting}

    # -- as the source of other streams' remote links (see wiring.py) ----------------------

    @property
    def running(self) -> bool:
        return not self.ended.is_set()

    @property
    def state(self) -> str:
        return self.mode

    def has_output(self, node: str, port: str) -> bool:
        return (node, port) in self.rings

    def exposure(self, node: str, port: str) -> str:
        return exposure_levels(self.graph).get((node, port), "internal")

    def set_exposure(self, node: str, port: str, level: str) -> None:
        set_level(self.graph, node, port, level)

    # -- as the reader of remote links ------------------------------------------------------

    def remote_links(self) -> dict[str, dict[str, Any]]:
        return {link_key(link): link for link in self.graph["links"] if "address" in link["from"]}

    def bind_remote(self, key: str, wiring: LinkWiring) -> None:
        """Wire a remote link: the reading node opens the source's ring from now on."""
        link = self.remote_links()[key]
        to = link["to"]
        entry = {"key": key, "base": wiring.base, "reader_index": wiring.reader_index, "start": "now"}
        process = self.nodes[to["node"]]  # the compiler checked that the link's node exists
        links = process.spec["inputs"][to["port"]]["links"]
        links[:] = [existing for existing in links if existing["key"] != key] + [entry]  # a restart reads this
        process.send({"op": "add_link", "port": to["port"], "link": entry})
        self.wiring[key] = wiring
        self.waiting.pop(key, None)

    def unbind_remote(self, key: str, reason: str) -> LinkWiring | None:
        """Cut a remote link at once; it waits, with ``reason``, until it can be wired again."""
        wiring = self.wiring.pop(key, None)
        self.waiting[key] = reason
        to = self.remote_links()[key]["to"]
        process = self.nodes.get(to["node"])
        if wiring is not None and process is not None:
            links = process.spec["inputs"][to["port"]]["links"]
            links[:] = [existing for existing in links if existing["key"] != key]
            process.send({"op": "remove_link", "key": key})
        return wiring

    async def log_events(self, queue: Feed) -> Any:
        """Log records as events until the stream ends, then one ``ended`` event."""
        ended = asyncio.create_task(self.ended.wait())
        record: asyncio.Task | None = None
        try:
            while True:
                record = asyncio.create_task(queue.get())
                done, _ = await asyncio.wait({record, ended}, return_when=asyncio.FIRST_COMPLETED)
                if record in done:
                    yield {"event": "log", "record": record.result()}
                    continue
                record.cancel()
                while not queue.empty():
                    yield {"event": "log", "record": queue.get_nowait()}
                yield {"event": "ended", "reason": self.end_reason, "runtime_down": self.ended_by_runtime}
                return
        finally:
            ended.cancel()
            if record is not None:
                record.cancel()

    async def stop(self, reason: str, *, by_runtime: bool = False) -> None:
        self.ended_by_runtime = by_runtime
        await asyncio.gather(*(node.stop() for node in self.nodes.values()))
        ring.reap(self.shm_prefix)
        surfaces.release()
        self.end_reason = reason
        if self.log is not None:
            self.log.say(f"stream {self.name} stopped: {reason}")
        self.ended.set()
        if self.log is not None:
            self.log.close()
