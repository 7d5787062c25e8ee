"""``exchange``: where the frames an output names live, for the CLI to save them as PNGs.

The runtime only hands out bags and the pool's path: the CLI leases each frame and encodes it
in its own process, so no frame work runs on the runtime's loop."""

from __future__ import annotations

from typing import AsyncGenerator, Literal, TypedDict

from tatolab._control import paths
from tatolab._control.errors import ControlError
from tatolab._control.operations import Events
from tatolab._runtime.ops import op
from tatolab._runtime.ops.inspect import Bag, TapEnd, Tapping, tap
from tatolab._runtime.runtime import Runtime
from tatolab._surfaces.pool import SurfaceError, parse_id


class Surface(TypedDict):
    pool: str  # the surface pool's control file (its slots' pixels beside it)
    surface_id: str


class Exchanging(TypedDict):
    event: Literal["tapping"]
    address: str
    profile: str
    reader: int
    pool: str


@op("exchange")
async def exchange(
    runtime: Runtime,
    address: str | None = None,
    surface_id: str | None = None,
    count: int | None = None,
    timeout: float | None = 10.0,
) -> Surface | Events[Exchanging | Bag | TapEnd, Exchanging | Bag | TapEnd]:
    """Where to read frames from, to save them: with ``surface_id``, the pool that surface lives in;
    with ``address``, the bags the video output there writes (newest each time, up to ``count`` or
    ``timeout`` seconds), its first event naming the pool. The caller leases each frame itself."""
    if surface_id is not None:
        try:
            parse_id(surface_id)
        except SurfaceError as exc:
            raise ControlError(str(exc), code="bad_value", details={"argument": "surface_id"}) from None
        return {"pool": paths.surface_pool(), "surface_id": surface_id}
    if address is None:
        raise ControlError("exchange needs an output's address (<stream>/<node>/<port>) or a surface id",
                           code="bad_arguments")
    events = await tap(runtime, address, count=count, timeout=timeout, profile="newest")
    return _with_pool(events)


async def _with_pool(events: Events[Tapping | Bag | TapEnd, Tapping | Bag | TapEnd],
                     ) -> AsyncGenerator[Exchanging | Bag | TapEnd, None]:
    try:
        async for event in events:
            if event["event"] == "tapping":
                yield {"event": "tapping", "address": event["address"], "profile": event["profile"],
                       "reader": event["reader"], "pool": paths.surface_pool()}
            else:
                yield event
    finally:
        await events.aclose()
