"""Links that read another runtime's output by its URL: the relay reads the broadcast into a ring
of the reading stream's own (made here), and the link reads that ring like any other. The relay's
thread tells each link's state; it is applied here, on the runtime's loop."""

from __future__ import annotations

import hashlib
import urllib.parse
from dataclasses import dataclass
from typing import Mapping

from tatolab._control import paths
from tatolab._control.errors import Reason
from tatolab._links import ring
from tatolab._runtime.lifecycle.nodes import claim_reader, release_reader
from tatolab._runtime.relay.tokens import redact
from tatolab._runtime.lifecycle.streams import LinkWiring, LoadedStream, OutputRing
from tatolab._runtime.lifecycle.wiring import bind_remote, unbind_remote, url_links

PullId = tuple[int, str]  # (the reading stream's instance, the link's key)
URL_RING_SLOTS = 1024  # a second of a 1 kHz output


@dataclass(frozen=True)
class Pull:
    id: PullId
    url: str  # without its fragment: what is dialled
    fingerprint: str | None  # the certificate's SHA-256 pinned by the URL's #sha256=...
    path: str  # the broadcast: <machine>/<stream>/<node>/<port>
    base: str  # the ring it is read into


def split_url(url: str) -> tuple[str, str | None, str]:
    """``url`` as (what is dialled, the pinned fingerprint or None, the broadcast's path)."""
    parts = urllib.parse.urlsplit(url)
    pinned = parts.fragment.partition("=")[2].lower() if parts.fragment.startswith("sha256=") else None
    return urllib.parse.urlunsplit(parts._replace(fragment="")), pinned, parts.path.strip("/")


def wanted_pulls(streams: Mapping[str, LoadedStream]) -> dict[PullId, Pull]:
    """Every URL link of every running stream, each with its ring (made now if new)."""
    found: dict[PullId, Pull] = {}
    for stream in streams.values():
        if stream.ended.is_set():
            continue
        for key, link in url_links(stream).items():
            out = stream.remote_rings.get(key)
            if out is None:
                # "%" is never in a node name, so this ring cannot meet an output's; named by its
                # link, so a link added or removed live never renames another's
                name = "%url-" + hashlib.sha1(key.encode()).hexdigest()[:12]
                base = paths.ring_base(paths.loaded_stream_prefix(stream.instance), name, "bags")
                # deeper than a local link's (128): the network hands bags over in bursts (a group held
                # up on the way, the relay's thread woken late), and a burst longer than the ring laps
                # an ordered reader that keeps up on average (a soak at load 10: 128 slots lost 223 bags
                # of 737,000 at 1 kHz, each counted)
                ring.create_ring(base, slot_count=URL_RING_SLOTS)
                out = stream.remote_rings[key] = OutputRing(base)
            dial, pinned, path = split_url(link["from"]["url"])
            found[(stream.instance, key)] = Pull((stream.instance, key), dial, pinned, path, out.base)
    return found


def set_state(streams: Mapping[str, LoadedStream], pull: Pull, waiting: str | None) -> None:
    """The relay reads ``pull`` now (``waiting`` None: the link is wired) or waits, and why."""
    stream = next((s for s in streams.values() if s.instance == pull.id[0]), None)
    key = pull.id[1]
    if stream is None or stream.ended.is_set() or key not in stream.remote_rings or key not in url_links(stream):
        return  # unloaded, or the link removed, meanwhile
    out = stream.remote_rings[key]
    bound = stream.wiring.get(key)
    if waiting is None:
        if bound is None:
            bind_remote(stream, key, LinkWiring(out.base, claim_reader(out)))
            _say(stream, f"link {key} wired to {redact(pull.url)}")
        return
    why = Reason(waiting)
    if bound is not None:
        unbind_remote(stream, key, why)
        release_reader(out, bound.reader_index)
        _say(stream, f"link {key} cut: {waiting}", "warning")
    elif stream.waiting.get(key) != why:
        stream.waiting[key] = why
        _say(stream, f"link {key} waiting: {waiting}", "warning")


def _say(stream: LoadedStream, message: str, level: str = "info") -> None:
    if stream.log is not None:
        stream.log.say(message, level=level)
