"""What `tatolab exchange` and the MCP ``exchange`` tool share: the frame a tapped bag names,
and a frame's pixels as PNG rows (copied, so the surface goes back before the slow encode)."""

from __future__ import annotations

from typing import Any

from tatolab._surfaces import png
from tatolab._surfaces import pool as surfaces
from tatolab._surfaces.frame import VideoFrame


class NotVideo(ValueError):
    """A bag, or a frame, that exchange cannot make a picture of; the text says what it holds."""


def frame_in(bag: Any, address: str) -> VideoFrame | None:
    """The frame ``bag`` (tapped from ``address``) names, leased; None when its surface was reused
    before it could be read (the next bag is newer anyway)."""
    if not isinstance(bag, dict) or "surface_id" not in bag:
        keys = ", ".join(sorted(bag)) if isinstance(bag, dict) else type(bag).__name__
        raise NotVideo(f"{address} carries no video: its bags name no surface_id (they hold: {keys})")
    try:
        return VideoFrame.open(bag)
    except surfaces.SurfaceError:
        return None


def png_rows(frame: VideoFrame, verb: str) -> bytes:
    """The frame's filtered PNG rows; the frame is released either way. ``verb``: what exchange
    does with frames here (saves, shows), for the refusal of one that is not rgba8."""
    try:
        if frame.format != "rgba8":
            raise NotVideo(f"frame {frame.surface_id} is {frame.format}; exchange {verb} rgba8 frames")
        return png.rows(frame.width, frame.height, frame._memory())
    finally:
        frame.release()
