"""Wiring remote links as streams come and go: whichever loads first, links wire themselves.

The reading stream owns the link: it claims a reader record on the source's ring and its
node opens that ring. Nothing in the source stream changes, so either side can stop,
change and restart without touching the other.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from tatolab._control.errors import Reason
from tatolab._control.words import render
from tatolab._host import spec as host_spec
from tatolab._host.spec import LinkSpec
from tatolab._links.ring import RingError
from tatolab._runtime.lifecycle.nodes import claim_reader, release_reader
from tatolab._runtime.rules.exposure import Source, SourceView, exposure_levels, resolve
from tatolab._runtime.lifecycle.streams import LinkWiring, LoadedStream, link_key
from tatolab._errors import AddressError
from tatolab._graph import Link, LinkEnd
from tatolab._naming import parse_address


def as_source(stream: LoadedStream) -> Source:
    """What the exposure rule needs to know of ``stream`` as the source of a link."""
    levels = exposure_levels(stream.graph)
    return Source(stream.mode, not stream.ended.is_set(), {output: levels.get(output) for output in stream.rings})


def remote_links(stream: LoadedStream) -> dict[str, Link]:
    """The links of ``stream`` that read another stream's output on this machine, by key."""
    return {link_key(link): link for link in stream.graph["links"]
            if "address" in link["from"] and "url" not in link["from"]}


def url_links(stream: LoadedStream) -> dict[str, Link]:
    """The links of ``stream`` that read an output over MoQ, by its URL (the relay wires them)."""
    return {link_key(link): link for link in stream.graph["links"] if "url" in link["from"]}


def _link(stream: LoadedStream, key: str) -> Link:
    return next(link for link in stream.graph["links"] if link_key(link) == key)


def rewire(streams: dict[str, LoadedStream], not_loaded: Iterable[dict[str, Any]], machine: str) -> None:
    """Bring every remote link of every loaded stream in line with what its source allows now."""
    # a kept stream that is stopped or failed exists, but nothing can be read from it
    sources: dict[str, SourceView] = {row["name"]: Source(row["state"]) for row in not_loaded}
    sources.update({name: as_source(stream) for name, stream in streams.items()})
    for reader in streams.values():
        for key, link in remote_links(reader).items():
            _rewire_link(reader, key, link, streams, sources, machine)


def _rewire_link(reader: LoadedStream, key: str, link: Link, streams: dict[str, LoadedStream],
                 sources: dict[str, SourceView], machine: str) -> None:
    say = _sayer(reader)
    try:
        address = parse_address(link["from"]["address"])
    except AddressError as exc:
        reader.waiting[key] = Reason(str(exc))
        return
    decision = resolve(address, machine, sources)
    bound = reader.wiring.get(key)
    if decision.wired:
        source = streams[address.stream]
        ring = source.rings[(address.node, address.port)]
        if bound is not None and bound.base == ring.base:
            return  # already reading this very ring
        if bound is not None:
            give_back(streams, unbind_remote(reader, key, Reason("rewiring")))
        try:
            index = claim_reader(ring)
        except RingError as exc:
            reader.waiting[key] = Reason(str(exc))
            say(f"link {key} waiting: {exc}", level="warning")
            return
        bind_remote(reader, key, LinkWiring(ring.base, index))
        say(f"link {key} wired to {source.name} (project {source.project})")
        return
    if bound is not None:
        why = decision.reason or Reason("waiting")
        give_back(streams, unbind_remote(reader, key, why))
        say(f"link {key} cut: {render(why)}", level="warning")  # a log, read by a person: the fix in words
    elif reader.waiting.get(key) != decision.reason:
        why = decision.reason or Reason("waiting")
        reader.waiting[key] = why
        say(f"link {key} waiting: {render(why)}", level="warning")


def release_remote(streams: dict[str, LoadedStream], reader: LoadedStream) -> None:
    """An unloaded reader gives back the reader records its remote links held on other streams' rings."""
    for key in url_links(reader):
        reader.wiring.pop(key, None)  # its ring is the reader's own: it goes with the stream
    for key in remote_links(reader):
        give_back(streams, reader.wiring.pop(key, None))


def give_back(streams: dict[str, LoadedStream], wiring: LinkWiring | None) -> None:
    """Give a cut link's reader record back to its source ring, if that source is still loaded."""
    if wiring is None:
        return
    for stream in streams.values():
        for ring in stream.rings.values():
            if ring.base == wiring.base:
                release_reader(ring, wiring.reader_index)
                return


def _sayer(stream: LoadedStream) -> Callable[..., None]:
    def say(message: str, level: str = "info") -> None:
        if stream.log is not None:
            stream.log.say(message, level=level)

    return say


def bind_remote(reader: LoadedStream, key: str, wiring: LinkWiring) -> None:
    """Wire a remote link: the reading node opens the source's ring from now on."""
    bind(reader, key, _link(reader, key)["to"], wiring)  # the compiler checked that the link's node exists


def unbind_remote(reader: LoadedStream, key: str, reason: Reason) -> LinkWiring | None:
    """Cut a remote link at once; it waits, with ``reason``, until it can be wired again."""
    wiring = unbind(reader, key, _link(reader, key)["to"])
    reader.waiting[key] = reason
    return wiring


def bind(reader: LoadedStream, key: str, to: LinkEnd, wiring: LinkWiring) -> None:
    """Link ``key`` into input ``to`` of ``reader``: its node reads ``wiring``'s ring from now on, and so does
    its next process (a restart reads its spec)."""
    entry: LinkSpec = {"key": key, "base": wiring.base, "reader_index": wiring.reader_index, "start": "now"}
    process = reader.nodes[to["node"]]
    links = process.spec["inputs"][to["port"]]["links"]
    links[:] = [existing for existing in links if existing["key"] != key] + [entry]
    process.send(host_spec.add_link(to["port"], entry))
    reader.wiring[key] = wiring
    reader.waiting.pop(key, None)


def unbind(reader: LoadedStream, key: str, to: LinkEnd) -> LinkWiring | None:
    """Take link ``key`` out of input ``to`` of ``reader`` at once (its node, if still there, stops reading
    it); the reader record it held, for ``give_back``, or None where it was not wired."""
    wiring = reader.wiring.pop(key, None)
    process = reader.nodes.get(to["node"])
    if process is not None:
        links = process.spec["inputs"][to["port"]]["links"]
        links[:] = [existing for existing in links if existing["key"] != key]
        if wiring is not None:
            process.send(host_spec.remove_link(key))
    return wiring
