"""`tatolab foxglove`: the link that opens this machine's exposed outputs in the Foxglove app,
live (the Foxglove server starts on the first ask; foxglove/service.py)."""

from __future__ import annotations

from typing import TypedDict

from tatolab._control.errors import ControlError
from tatolab._runtime.ops import op
from tatolab._runtime.ops.addresses import exposed_output
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
        exposed_output(runtime, address, "foxglove", "so Foxglove is not shown it")
    await service.ensure()
    url, link = service.links()
    return {"url": url, "link": link, "port": service.port, "channels": sorted(service.outputs)}
