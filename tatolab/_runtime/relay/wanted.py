"""What the relay should serve: every exposed output of every running stream, as plain values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import msgspec

from tatolab._links.ring import RingError, newest_bag
from tatolab._runtime.rules.exposure import exposure_levels
from tatolab._runtime.lifecycle.streams import LoadedStream, OutputRing
from tatolab._runtime.relay.video import is_video_bag

TRACK = "bags"  # the track of bags of an output's broadcast: each bag one frame, msgpack as the ring holds it
# a video output's broadcast also carries its frames as H.264 in the moq-dev media format: this
# track, described by the broadcast's catalog (catalog.json), as moq-dev's players expect
VIDEO_TRACK = "video"


@dataclass(frozen=True)
class Serve:
    """One exposed output: its broadcast path (its full address) and where its bags are."""

    path: str  # <machine>/<stream>/<node>/<port>
    level: str  # private | public
    out: OutputRing
    # its bags name frames, so it is also served as H.264, at their size: the relay decides by
    # looking at them (``carried``; serve.py), not by the port's name or who wrote the node
    video: bool = False
    size: tuple[int, int] = (1280, 720)

    @property
    def public(self) -> bool:
        return self.level == "public"


def wanted(streams: Mapping[str, LoadedStream], machine: str) -> dict[str, Serve]:
    """Each exposed output of a running stream, by its broadcast path."""
    found: dict[str, Serve] = {}
    for stream in streams.values():
        if stream.ended.is_set():
            continue
        for (node, port), level in exposure_levels(stream.graph).items():
            out = stream.rings.get((node, port))
            if out is not None and level in ("private", "public"):
                path = f"{machine}/{stream.name}/{node}/{port}"
                found[path] = Serve(path, level, out)
    return found


def carried(base: str) -> tuple[int, int] | bool | None:
    """What an output's ring carries, told by its newest bag, whatever wrote it and whatever its
    port is called: a frame's (width, height) when the bag names a frame (a video output: a
    built-in's, a GlslPixelEffect's ``video_out``, a Python node writing ``VideoFrame``s), False for
    any other bag, None while no bag was written (or the ring is gone)."""
    try:
        payload = newest_bag(base)
    except RingError:
        return None
    if payload is None:
        return None
    try:
        bag = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError:
        return False
    if not is_video_bag(bag):
        return False
    width, height = bag.get("width"), bag.get("height")
    if isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0:
        return width, height
    return False
