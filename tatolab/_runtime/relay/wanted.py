"""What the relay should serve: every exposed output of every running stream, as plain values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from tatolab._runtime.rules.exposure import exposure_levels
from tatolab._runtime.lifecycle.streams import LoadedStream, OutputRing
from tatolab._runtime.surfaces import is_builtin

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
    video: bool = False  # its bags name frames: also served as H.264
    size: tuple[int, int] = (1280, 720)  # a video output's frame size as its node's config says (else a guess)

    @property
    def public(self) -> bool:
        return self.level == "public"


def wanted(streams: Mapping[str, LoadedStream], machine: str) -> dict[str, Serve]:
    """Each exposed output of a running stream, by its broadcast path."""
    found: dict[str, Serve] = {}
    for stream in streams.values():
        if stream.ended.is_set():
            continue
        nodes = {n.get("name"): n for n in stream.graph.get("nodes", [])}
        for (node, port), level in exposure_levels(stream.graph).items():
            out = stream.rings.get((node, port))
            if out is not None and level in ("private", "public"):
                path = f"{machine}/{stream.name}/{node}/{port}"
                spec = nodes.get(node, {})
                found[path] = Serve(path, level, out, is_video(spec, port), configured_size(stream.graph, node))
    return found


def configured_size(graph: dict, node: str) -> tuple[int, int]:
    """The frame size a video node's config asks for, or else the one of the node its frames come
    from (a pixel effect keeps its input's size); 1280x720 when none says. A wrong guess only
    misstates the catalog's coded size: each keyframe carries the real one (avc3)."""
    nodes = {n.get("name"): n for n in graph.get("nodes", [])}
    seen: set[str] = set()
    while node in nodes and node not in seen:
        seen.add(node)
        config = nodes[node].get("config") or {}
        width, height = config.get("width"), config.get("height")
        if isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0:
            return width, height
        upstream = [link["from"].get("node") for link in graph.get("links", [])
                    if link.get("to", {}).get("node") == node and link.get("to", {}).get("port") == "video"]
        node = upstream[0] if len(upstream) == 1 else ""
    return 1280, 720


def is_video(node: dict, port: str) -> bool:
    """Whether ``port`` of ``node`` carries video bags: a built-in's ``video`` output does."""
    return port == "video" and is_builtin(node) and any(o.get("port") == port for o in node.get("outputs", []))
