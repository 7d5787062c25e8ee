"""A loaded stream, as data: its graph, rings, node processes, wiring and log. Its nodes are
started, restarted and stopped by nodes.py (which also hands out its rings' reader records), its
shared-memory files are named by tatolab/_control/paths.py, and its remote links are wired by
wiring.py (which also shows it to the exposure rule as a possible source)."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tatolab._control.errors import Reason
from tatolab._graph import Graph, Link
from tatolab._runtime.stored.logs import StreamLog
from tatolab._runtime.processes.starter import ProcessStarter
from tatolab._runtime.processes.supervisor import NodeProcess

_instance_ids = itertools.count(1)


def link_key(link: Link) -> str:
    source = link["from"]
    origin = source.get("address") or f"{source['node']}/{source['port']}"
    return f"{origin}->{link['to']['node']}/{link['to']['port']}"


@dataclass
class OutputRing:
    """An output's ring and which of its reader records are handed out (nodes.claim_reader)."""

    base: str
    next_reader: int = 0
    released: list[int] = field(default_factory=list)  # tap records given back, reused first


@dataclass
class LinkWiring:
    """Where a wired link's counters live: its source ring and the reader record it uses."""

    base: str
    reader_index: int


@dataclass
class LoadedStream:
    name: str
    project: Path
    graph: Graph
    mode: str  # "attached" | "kept"
    env: dict[str, str] | None = None  # the loading command's environment (None: the runtime's own)
    sources: Path | None = None  # a kept stream's snapshot of the project's modules (None: the live files)
    instance: int = field(default_factory=lambda: next(_instance_ids))  # names its files: paths.loaded_stream_prefix
    nodes: dict[str, NodeProcess] = field(default_factory=dict)
    rings: dict[tuple[str, str], OutputRing] = field(default_factory=dict)
    wiring: dict[str, LinkWiring] = field(default_factory=dict)  # link_key -> its ring and reader record
    waiting: dict[str, Reason] = field(default_factory=dict)  # link_key -> why it is not wired yet
    remote_rings: dict[str, OutputRing] = field(default_factory=dict)  # link_key -> ring the relay fills (URL links)
    log: StreamLog | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    end_reason: Reason = field(default_factory=lambda: Reason(""))
    ended_by_runtime: bool = False
    started_ns: int = 0
    starter: ProcessStarter | None = None  # how its node processes start (None: the runtime's shared one)
    # live changes since it loaded (add_node, connect...: rules/changes.py), oldest first; a kept
    # stream's record never holds them, so after a restart it loads as recorded
    changes: list[dict[str, Any]] = field(default_factory=list)
