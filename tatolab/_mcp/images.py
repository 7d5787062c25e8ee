"""The ``exchange`` tool: frames a video output carries (or one surface), as PNG images an agent
can look at. Like `tatolab exchange`, this process leases each frame and encodes it; the runtime
only names the bags and the pool."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from tatolab._control.client import AsyncClient
from tatolab._surfaces import png
from tatolab._surfaces.exchange import NotVideo, frame_in, png_rows
from tatolab._surfaces import pool as surfaces
from tatolab._surfaces.frame import VideoFrame
from tatolab._words import counted


class NoFrame(Exception):
    """No frame could be had; the text says why and what to do."""


async def png_of(frame: VideoFrame) -> bytes:
    try:
        filtered = png_rows(frame, "shows")
    except NotVideo as exc:
        raise NoFrame(str(exc)) from None
    return await asyncio.to_thread(png.encode, frame.width, frame.height, filtered)


def image(data: bytes, frame: dict[str, Any]) -> dict[str, Any]:
    return {"png_base64": base64.b64encode(data).decode("ascii"), **frame}


async def by_id(client: AsyncClient, answer: dict[str, Any]) -> list[dict[str, Any]]:
    surfaces.configure(answer["pool"])
    surface_id = answer["surface_id"]
    try:
        frame = VideoFrame.open(surface_id)
    except surfaces.SurfaceError as exc:
        raise NoFrame(f"error: {exc}. `tap` on <stream>/<node>/<port> with count 1 shows a current surface_id") from None
    shown = {"surface_id": surface_id, "width": frame.width, "height": frame.height, "timestamp_ns": frame.timestamp_ns}
    return [image(await png_of(frame), shown)]


async def from_output(client: AsyncClient, opened: dict[str, Any], frames: int, timeout: float) -> list[dict[str, Any]]:
    """Up to ``frames`` frames from the output ``opened`` names; a frame reused before it was read
    does not count (the next bag is newer anyway)."""
    name = opened["address"]
    surfaces.configure(opened["pool"])
    got: list[dict[str, Any]] = []
    stale = 0
    async for event in client.events():
        kind = event.get("event")
        if kind == "bag":
            try:
                frame = frame_in(event["bag"], name)
            except NotVideo as exc:
                raise NoFrame(f"error: {exc}. `tap` shows them") from None
            if frame is None:
                stale += 1
                continue
            shown = {"address": name, "surface_id": frame.surface_id, "width": frame.width, "height": frame.height,
                     "timestamp_ns": frame.timestamp_ns}
            got.append(image(await png_of(frame), shown))
            if len(got) >= frames:
                return got
        elif kind == "end":
            break
    if got:
        return got
    why = f"; {counted(stale, 'frame')} had been reused before they could be read" if stale else ""
    raise NoFrame(f"error: no frame from {name} in {timeout:g} s{why}. `graph` shows whether its node is running "
                  "and writing")
