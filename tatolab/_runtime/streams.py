"""A loaded stream, as data: its graph, rings, node processes, wiring and log, and the names of
its shared-memory files. Its nodes are started, restarted and stopped by nodes.py."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tatolab._links import ring
from tatolab._control import paths
from tatolab._runtime.rules.exposure import exposure_levels, set_level
from tatolab._runtime.logs import StreamLog
from tatolab._runtime.starter import ProcessStarter
from tatolab._runtime.supervisor import NodeProcess

_instance_ids = itertools.count(1)


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
        return paths.stream_shm_prefix(paths.shm_namespace(), self.instance)

    def ring_base(self, node: str, port: str) -> str:
        return paths.ring_base(self.shm_prefix, node, port)

    def status_path(self, node: str) -> str:
        return paths.status_file(self.shm_prefix, node)

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
