"""`tatolab foxglove`: the link that opens this machine's exposed outputs in the Foxglove app,
live (the Foxglove server starts on the first ask; foxglove/service.py)."""

from __future__ import annotations

from typing import TypedDict

from tatolab._control.errors import ControlError, Fix
from tatolab._runtime.ops import op
from tatolab._runtime.ops.addresses import local_address, no_output
from tatolab._runtime.rules.exposure import exposure_levels
from tatolab._runtime.runtime import Runtime


class FoxgloveLink(TypedDict):
    url: str  # ws://127.0.0.1:<port>/?token=...: what the app's "Foxglove WebSocket" connection opens
    link: str  # the Foxglove app's link that opens that connection
    port: int
    channels: list[str]  # the exposed outputs served, <stream>/<node>/<port>


@op("foxglove")
async def foxglove(runtime: Runtime, addresses: list[str] | None = None) -> FoxgloveLink:
    """The link that opens this machine's exposed outputs in the Foxglove app, live: plain bags
    as JSON (with an inferred schema), frames as foxglove.CompressedVideo (H.264, encoded only
    while someone watches) or foxglove.RawImage (up to 640x360), audio as foxglove.RawAudio, each
    message at its bag's origin time. Starts serving (on loopback) if it was not. ``addresses``
    (``<stream>/<node>/<port>``): outputs that must be among them (each is checked to be exposed).
    The URL carries a token: only its holder connects; share it like a password."""
    service = runtime.foxglove
    if service is None:
        raise ControlError("this runtime serves no Foxglove connection")
    for address in addresses or []:
        where = local_address(address, "foxglove")
        stream = runtime.streams.get(where.stream)
        if stream is None:
            raise runtime.unknown(where.stream)
        if (where.node, where.port) not in stream.rings:
            raise no_output(stream.name, where, stream.rings)
        short = f"{where.stream}/{where.node}/{where.port}"
        if exposure_levels(stream.graph).get((where.node, where.port), "internal") == "internal":
            raise ControlError(f"{short} is internal, so Foxglove is not shown it; expose it first",
                               code="internal", fixes=[Fix("expose", {"address": short}, "serves it on this machine")])
    await service.ensure()
    url, link = service.links()
    return {"url": url, "link": link, "port": service.port, "channels": sorted(service.outputs)}
