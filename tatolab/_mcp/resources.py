"""Resources: the node catalog and each loaded stream's live graph, with change notifications.

A client is told when a stream is loaded or removed (resource list changed) and, for a graph it
subscribed to, when that graph's nodes, their states or its links change. Both eras of the
protocol are served: on a handshake-era session (``initialize``), a client that listed resources
hears of list changes and ``resources/subscribe`` subscribes; on a 2026-07-28 session both come
on a ``subscriptions/listen`` stream (the SDK's ListenHandler over ``bus``). One watcher asks the
runtime once every ``POLL_S`` once anyone listens (the runtime has no feed of changes to
subscribe to): one ``streams`` request, and a ``graph`` request per subscribed stream.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import sys
from typing import Any, Awaitable, Callable
from urllib.parse import quote, unquote

import mcp_types as types
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourcesListChanged, ResourceUpdated, ServerEvent

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
    """Lists and reads the resources; watches for changes once a client listens."""

    def __init__(self, ask: Ask) -> None:
        self.ask = ask
        self.session: Any = None  # a handshake-era session, once it listed, read or subscribed
        self.bus = InMemorySubscriptionBus()  # 2026-07-28 listen streams
        self.subscribed: dict[str, Any] = {}  # graph uri -> the shape last told
        self.holders: dict[str, int] = {}  # graph uri -> how many subscriptions hold it
        self.names: list[str] | None = None  # the streams last told of; None: nobody listens for that
        self.wake = asyncio.Event()

    def listening(self, session: Any) -> None:
        """A handshake-era session: changes are told on it from now on."""
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
        names = await self.stream_names() or []
        self.names = names
        return [catalog_resource(), *(graph_resource(name) for name in names)]

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

    def known(self, uri: str) -> None:
        if uri != CATALOG_URI and stream_of(uri) is None:
            raise LookupError(f"no resource {uri}; there are {CATALOG_URI} and {GRAPH_TEMPLATE}")

    async def hold(self, uris: builtins.list[str], *, list_changed: bool) -> None:  # builtins.: list is a method here
        """Watch ``uris`` (graphs; the catalog has nothing to tell) and, with ``list_changed``, the list."""
        if list_changed and self.names is None:
            self.names = await self.stream_names() or []
        for uri in uris:
            stream = stream_of(uri)
            if stream is None:
                continue
            if uri not in self.subscribed:
                self.subscribed[uri] = await self._shape(stream)
            self.holders[uri] = self.holders.get(uri, 0) + 1
        self.wake.set()

    def release(self, uris: builtins.list[str]) -> None:
        for uri in uris:
            held = self.holders.get(uri, 0) - 1
            if held <= 0:
                self.holders.pop(uri, None)
                self.subscribed.pop(uri, None)
            else:
                self.holders[uri] = held

    async def subscribe(self, uri: str) -> None:
        self.known(uri)
        if uri not in self.holders:  # subscribing twice is one subscription
            await self.hold([uri], list_changed=False)

    def unsubscribe(self, uri: str) -> None:
        if uri in self.holders:
            self.release([uri])

    async def _shape(self, stream: str) -> Any:
        try:
            (graph,) = await self.graphs(stream)
        except Exception:  # noqa: BLE001 - not loaded (or no runtime): that is its shape for now
            return None
        return shape(graph)

    async def watch(self) -> None:
        """Tell of changes, once every POLL_S once anyone listens (never before)."""
        await self.wake.wait()
        while True:
            await asyncio.sleep(POLL_S)
            try:
                await self.check()
            except Exception as exc:  # noqa: BLE001 - the client went away mid-notice: stop telling it
                print(f"tatolab mcp: cannot tell the client of a change ({exc}); no more notices", file=sys.stderr)
                self.session = None

    async def tell(self, event: ServerEvent) -> None:
        await self.bus.publish(event)
        if self.session is not None:
            if isinstance(event, ResourceUpdated):
                await self.session.send_resource_updated(event.uri)
            else:
                await self.session.send_resource_list_changed()

    async def check(self) -> None:
        if self.names is not None:
            names = await self.stream_names() or []  # no runtime: no streams
            if names != self.names:
                self.names = names
                await self.tell(ResourcesListChanged())
        for uri, told in list(self.subscribed.items()):
            now = await self._shape(stream_of(uri) or "")
            if now != told and uri in self.subscribed:
                self.subscribed[uri] = now
                await self.tell(ResourceUpdated(uri))
