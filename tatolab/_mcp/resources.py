"""Resources: the node catalog and each loaded stream's live graph, with change notifications.

A client that lists resources is told when a stream is loaded or removed (list changed); one
that subscribes to a graph is told when that graph's shape or its nodes' states change. Both come
from one watcher that asks the runtime once every ``POLL_S`` while someone listens (the runtime
has no feed of changes to subscribe to): one ``streams`` request, and a ``graph`` request per
subscribed stream.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable, Callable
from urllib.parse import quote, unquote

import mcp_types as types

from tatolab._mcp.catalog import catalog

CATALOG_URI = "tatolab://catalog"
GRAPH_PREFIX = "tatolab://streams/"
GRAPH_SUFFIX = "/graph"
GRAPH_TEMPLATE = GRAPH_PREFIX + "{stream}" + GRAPH_SUFFIX
POLL_S = 1.0

Ask = Callable[[str, dict[str, Any]], Awaitable[Any]]  # an operation's answer, or Failed


def graph_uri(stream: str) -> str:
    return GRAPH_PREFIX + quote(stream, safe="") + GRAPH_SUFFIX


def stream_of(uri: str) -> str | None:
    if uri.startswith(GRAPH_PREFIX) and uri.endswith(GRAPH_SUFFIX):
        name = uri[len(GRAPH_PREFIX):-len(GRAPH_SUFFIX)]
        return unquote(name) if name and "/" not in name else None
    return None


def catalog_resource() -> types.Resource:
    return types.Resource(
        uri=CATALOG_URI, name="node catalog", mime_type="application/json",
        description="Every built-in node (description, config JSON Schema, ports) and the Python nodes the "
                    "loaded streams use (docstrings, ports): what `add_node` can add.")


def graph_resource(stream: str) -> types.Resource:
    return types.Resource(
        uri=graph_uri(stream), name=f"{stream} graph", mime_type="application/json",
        description=f"The live graph of stream {stream}: nodes with their states, links and counters "
                    "(as the `graph` tool returns it). Subscribe to hear when its nodes' states change.")


def shape(graph: dict[str, Any]) -> Any:
    """What a graph subscriber is told about: the nodes, their states and processes, the links
    (not the counters, which change with every bag)."""
    return (graph.get("state"),
            sorted((n["name"], n.get("kind"), n.get("state"), n.get("pid"), n.get("restarts")) for n in graph["nodes"]),
            sorted(json.dumps(link, sort_keys=True) for link in
                   ({k: v for k, v in link.items() if k in ("from", "to", "delivery_profile")}
                    for link in graph.get("links", []))))


class Resources:
    """Lists and reads the resources; watches for changes while a client listens."""

    def __init__(self, ask: Ask) -> None:
        self.ask = ask
        self.session: Any = None  # the client's session, once it listed, read or subscribed
        self.subscribed: dict[str, Any] = {}  # graph uri -> the shape last told
        self.names: list[str] | None = None  # the streams last listed to the client
        self.wake = asyncio.Event()

    def listening(self, session: Any) -> None:
        self.session = session
        self.wake.set()

    async def stream_names(self) -> list[str] | None:
        try:
            answer = await self.ask("streams", {})
        except Exception:  # noqa: BLE001 - no runtime (or it went away): nothing to list
            return None
        return sorted(row["name"] for row in answer["streams"])

    async def graphs(self, stream: str | None = None) -> list[dict[str, Any]]:
        answer = await self.ask("graph", {"stream": stream} if stream else {})
        return answer["streams"]

    async def list(self) -> list[types.Resource]:
        names = await self.stream_names()
        self.names = names or []
        return [catalog_resource(), *(graph_resource(name) for name in names or [])]

    async def read(self, uri: str) -> dict[str, Any]:
        """The resource's JSON; raises Failed (the tools' errors) for a stream not loaded or no runtime."""
        if uri == CATALOG_URI:
            try:
                graphs: list[dict[str, Any]] | None = await self.graphs()
            except Exception:  # noqa: BLE001 - no runtime: the built-ins are still worth reading
                graphs = None
            return catalog(graphs)
        stream = stream_of(uri)
        if stream is None:
            raise LookupError(f"no resource {uri}; there are {CATALOG_URI} and {GRAPH_TEMPLATE}")
        (graph,) = await self.graphs(stream)
        return graph

    async def subscribe(self, uri: str) -> None:
        stream = stream_of(uri)
        if stream is None and uri != CATALOG_URI:
            raise LookupError(f"no resource {uri}; there are {CATALOG_URI} and {GRAPH_TEMPLATE}")
        if stream is not None:
            self.subscribed[uri] = await self._shape(stream)

    def unsubscribe(self, uri: str) -> None:
        self.subscribed.pop(uri, None)

    async def _shape(self, stream: str) -> Any:
        try:
            (graph,) = await self.graphs(stream)
        except Exception:  # noqa: BLE001 - not loaded (or no runtime): that is its shape for now
            return None
        return shape(graph)

    async def watch(self) -> None:
        """Tell the client of changes, once every POLL_S while it listens (never before)."""
        await self.wake.wait()
        while True:
            await asyncio.sleep(POLL_S)
            await self.check()

    async def check(self) -> None:
        if self.names is not None:
            names = await self.stream_names() or []  # no runtime: no streams
            if names != self.names:
                self.names = names
                await self.session.send_resource_list_changed()
        for uri, told in list(self.subscribed.items()):
            now = await self._shape(stream_of(uri) or "")
            if now != told and uri in self.subscribed:
                self.subscribed[uri] = now
                await self.session.send_resource_updated(uri)
