"""`tatolab url`: where an exposed output is served over MoQ, and the certificate to pin."""

from __future__ import annotations

from typing import TypedDict

from tatolab._control.errors import ControlError, Fix
from tatolab._runtime.machine import machine_name
from tatolab._runtime.ops import op
from tatolab._runtime.ops.addresses import local_address, no_output
from tatolab._runtime.relay.wanted import TRACK
from tatolab._runtime.rules.exposure import exposure_levels
from tatolab._runtime.runtime import Runtime


class Url(TypedDict):
    address: str  # <machine>/<stream>/<node>/<port>: the broadcast's path
    url: str
    fingerprint: str  # SHA-256 of the relay's certificate, hex (WebTransport serverCertificateHashes)
    level: str
    track: str  # the broadcast's track of bags, one msgpack frame per bag
    viewer: str  # the viewer page (loopback), showing this output


@op("url")
async def url(runtime: Runtime, address: str) -> Url:
    """The MoQ URL of the exposed output at ``address`` (``<stream>/<node>/<port>``), and the
    SHA-256 fingerprint of the certificate it is served with."""
    where = local_address(address, "url")
    stream = runtime.streams.get(where.stream)
    if stream is None:
        raise runtime.unknown(where.stream)
    if (where.node, where.port) not in stream.rings:
        raise no_output(stream.name, where, stream.rings)
    short = f"{where.stream}/{where.node}/{where.port}"
    level = exposure_levels(stream.graph).get((where.node, where.port), "internal")
    if level == "internal":
        raise ControlError(f"{short} is internal, so it has no URL; expose it first", code="internal",
                           fixes=[Fix("expose", {"address": short}, "serves it on this machine")])
    if runtime.relay is None:
        raise ControlError("this runtime serves no MoQ relay")
    path = f"{machine_name()}/{short}"
    return {"address": path, "url": runtime.relay.url(path, level), "fingerprint": runtime.relay.fingerprint(),
            "level": level, "track": TRACK, "viewer": runtime.relay.viewer(path)}
