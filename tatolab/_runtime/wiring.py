"""Wiring remote links as streams come and go: whichever loads first, links wire themselves.

The reading stream owns the link: it claims a reader record on the source's ring and its
node opens that ring. Nothing in the source stream changes, so either side can stop,
change and restart without touching the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from tatolab._host import spec as host_spec
from tatolab._host.spec import LinkSpec
from tatolab._links.ring import RingError
from tatolab._runtime.rules.exposure import SourceView, resolve
from tatolab._runtime.streams import LinkWiring, LoadedStream
from tatolab._errors import AddressError
from tatolab._sdk.naming import parse_address


@dataclass
class NotLoaded:
    """A kept stream that is stopped or failed: it exists, but nothing can be read from it."""

    state: str
    running: bool = False

    def has_output(self, node: str, port: str) -> bool:
        return False

    def exposure(self, node: str, port: str) -> str:
        return "internal"


def rewire(streams: dict[str, LoadedStream], not_loaded: Iterable[dict[str, Any]], machine: str) -> None:
    """Bring every remote link of every loaded stream in line with what its source allows now."""
    sources: dict[str, SourceView] = {row["name"]: NotLoaded(row["state"]) for row in not_loaded}
    sources.update(streams)
    for reader in streams.values():
        for key, link in reader.remote_links().items():
            _rewire_link(reader, key, link, streams, sources, machine)


def _rewire_link(reader: LoadedStream, key: str, link: dict[str, Any], streams: dict[str, LoadedStream],
                 sources: dict[str, SourceView], machine: str) -> None:
    say = _sayer(reader)
    try:
        address = parse_address(link["from"]["address"])
    except AddressError as exc:
        reader.waiting[key] = str(exc)
        return
    decision = resolve(address, machine, sources)
    bound = reader.wiring.get(key)
    if decision.wired:
        source = streams[address.stream]
        ring = source.rings[(address.node, address.port)]
        if bound is not None and bound.base == ring.base:
            return  # already reading this very ring
        if bound is not None:
            _release(streams, unbind_remote(reader, key, "rewiring"))
        try:
            index = ring.claim_reader()
        except RingError as exc:
            reader.waiting[key] = str(exc)
            say(f"link {key} waiting: {exc}", level="warning")
            return
        bind_remote(reader, key, LinkWiring(ring.base, index))
        say(f"link {key} wired to {source.name} (project {source.project})")
        return
    if bound is not None:
        _release(streams, unbind_remote(reader, key, decision.reason or "waiting"))
        say(f"link {key} cut: {decision.reason}", level="warning")
    elif reader.waiting.get(key) != decision.reason:
        reader.waiting[key] = decision.reason or "waiting"
        say(f"link {key} waiting: {decision.reason}", level="warning")


def release_remote(streams: dict[str, LoadedStream], reader: LoadedStream) -> None:
    """An unloaded reader gives back the reader records its remote links held on other streams' rings."""
    for key in reader.remote_links():
        _release(streams, reader.wiring.pop(key, None))


def _release(streams: dict[str, LoadedStream], wiring: LinkWiring | None) -> None:
    """Give the reader record back to the source ring, if that source is still loaded."""
    if wiring is None:
        return
    for stream in streams.values():
        for ring in stream.rings.values():
            if ring.base == wiring.base:
                ring.release(wiring.reader_index)
                return


def _sayer(stream: LoadedStream) -> Callable[..., None]:
    def say(message: str, level: str = "info") -> None:
        if stream.log is not None:
            stream.log.say(message, level=level)

    return say


def bind_remote(reader: LoadedStream, key: str, wiring: LinkWiring) -> None:
    """Wire a remote link: the reading node opens the source's ring from now on."""
    link = reader.remote_links()[key]
    to = link["to"]
    entry: LinkSpec = {"key": key, "base": wiring.base, "reader_index": wiring.reader_index, "start": "now"}
    process = reader.nodes[to["node"]]  # the compiler checked that the link's node exists
    links = process.spec["inputs"][to["port"]]["links"]
    links[:] = [existing for existing in links if existing["key"] != key] + [entry]  # a restart reads this
    process.send(host_spec.add_link(to["port"], entry))
    reader.wiring[key] = wiring
    reader.waiting.pop(key, None)

def unbind_remote(reader: LoadedStream, key: str, reason: str) -> LinkWiring | None:
    """Cut a remote link at once; it waits, with ``reason``, until it can be wired again."""
    wiring = reader.wiring.pop(key, None)
    reader.waiting[key] = reason
    to = reader.remote_links()[key]["to"]
    process = reader.nodes.get(to["node"])
    if wiring is not None and process is not None:
        links = process.spec["inputs"][to["port"]]["links"]
        links[:] = [existing for existing in links if existing["key"] != key]
        process.send(host_spec.remove_link(key))
    return wiring
