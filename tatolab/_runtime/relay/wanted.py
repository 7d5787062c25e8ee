"""What the relay should serve: every exposed output of every running stream, as plain values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from tatolab._runtime.rules.exposure import exposure_levels
from tatolab._runtime.streams import LoadedStream, OutputRing

TRACK = "bags"  # the one track of an output's broadcast: each bag one frame, msgpack as the ring holds it


@dataclass(frozen=True)
class Serve:
    """One exposed output: its broadcast path (its full address) and where its bags are."""

    path: str  # <machine>/<stream>/<node>/<port>
    level: str  # private | public
    out: OutputRing

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
